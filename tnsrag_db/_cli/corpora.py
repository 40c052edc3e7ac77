"""``tnsrag corpora``, ``stats``, ``delete``, ``drop`` and ``export``: looking after corpora.

Thin commands over :mod:`tnsrag_db.admin` and :class:`~tnsrag_db._store.store.Store`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from datetime import timedelta
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import click

from tnsrag_db._cli._common import db_options, emit, handle_errors, natural_key, parse_pairs, plural
from tnsrag_db._cli._confirm import confirm_destruction, yes_option
from tnsrag_db._cli._schema import open_existing
from tnsrag_db._errors import ConnectionLostError, ValidationError
from tnsrag_db._store.filters import filter_sql
from tnsrag_db._store.store import Store
from tnsrag_db.admin import SpaceInfo, corpus_stats, empty_filter_notes, export_corpus, list_corpora, require_corpus
from tnsrag_db.admin.export import lost_mid_export

__all__ = ["corpora", "delete", "drop", "export", "stats"]


def _open(url: str | None, schema: str, corpus: str) -> Store:
    """A store on an existing schema: these commands never create one (see :mod:`tnsrag_db._cli._schema`)."""
    return open_existing(url, schema, corpus)


def human_size(n: int) -> str:
    """``n`` bytes as ``12.3 MB`` (powers of 1,024)."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _space_text(space: SpaceInfo) -> str:
    index = {"hnsw": "HNSW index", "building": "HNSW index building", "invalid": "invalid HNSW index (rebuilt "
             "on the next build)", "none": "no index, exact scans"}.get(space.index, space.index)
    return f"{space.provider} ({space.dimension}-d): {plural(space.vectors, 'vector')}, {index}"


def _space_cell(space: SpaceInfo, entries: int) -> str:
    """A space in the corpora table: ``provider/dimension``, ``+hnsw`` once indexed, and how
    many of the corpus's entries it holds a vector for when not all (an ingest still
    embedding, or interrupted: queries search only the embedded ones)."""
    cell = f"{space.provider}/{space.dimension}{'+hnsw' if space.index == 'hnsw' else ''}"
    return cell if space.vectors >= entries else f"{cell} ({space.vectors:,} of {entries:,} embedded)"


corpus_option = click.option("--corpus", default="default", show_default=True, help="Corpus to work on.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


@click.command()
@db_options
@json_option
@handle_errors
def corpora(url: str | None, schema: str, as_json: bool) -> None:
    """List every corpus of the schema: entries, tiers, embedding spaces, size on disk.

    Sizes are estimates: each corpus's share (by rows) of the shared tables and their
    indexes, plus its own HNSW indexes.

    Example: tnsrag corpora --json
    """
    with _open(url, schema, "default") as store:
        infos = list_corpora(store)
    if as_json:
        emit({"schema": schema, "corpora": [i.to_dict() for i in infos]}, True)
        return
    if not infos:
        click.echo(f"no corpora in schema {schema} yet (tnsrag ingest creates one)")
        return
    rows = [("CORPUS", "ENTRIES", "TIERS", "SPACES", "EDGES", "SIZE")]
    for i in infos:
        rows.append((i.name, str(i.entries), ", ".join(f"{t} {n}" for t, n in i.tiers.items()) or "-",
                     ", ".join(_space_cell(s, i.entries) for s in i.spaces) or "-", str(i.edges),
                     human_size(i.size_bytes)))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(cell.ljust(w) if c in (0, 2, 3) else cell.rjust(w)
                             for c, (cell, w) in enumerate(zip(r, widths))).rstrip())


@click.command()
@db_options
@corpus_option
@click.option("--sources", "max_sources", default=10, show_default=True, type=click.IntRange(min=1),
              help="Sources to list, most entries first.")
@json_option
@handle_errors
def stats(url: str | None, schema: str, corpus: str, max_sources: int, as_json: bool) -> None:
    """Show what a corpus holds: entries by tier and source, embedding spaces and their
    index state, BM25 statistics, edges, last write, expired and expiring entries.

    Example: tnsrag stats --corpus docs --sources 5
    """
    with _open(url, schema, corpus) as store:
        s = corpus_stats(store, max_sources=max_sources)
    if as_json:
        emit(s.to_dict(), True)
        return
    lines = [f"corpus {s.corpus}: {plural(s.entries, 'entry')}, created {s.created_at:%Y-%m-%d %H:%M}, "
             f"last write {s.last_write:%Y-%m-%d %H:%M:%S %Z}" if s.last_write else
             f"corpus {s.corpus}: {plural(s.entries, 'entry')}, created {s.created_at:%Y-%m-%d %H:%M}, no writes"]
    lines.append("tiers:    " + (", ".join(f"{t} {n}" for t, n in s.by_tier.items()) or "-"))
    shown = ", ".join(f"{src if src is not None else '(none)'} {n}" for src, n in s.by_source)
    more = f" (and {s.sources - len(s.by_source)} more)" if s.sources > len(s.by_source) else ""
    lines.append(f"sources:  {s.sources}" + (f": {shown}{more}" if shown else ""))
    lines.append("spaces:   " + ("; ".join(_space_text(sp) + (f" ({plural(s.missing(sp), 'entry')} without a "
                                                                  "vector: embedding in progress or interrupted)"
                                                                  if s.missing(sp) else "") for sp in s.spaces)
                                 or "none (nothing embedded)"))
    lines.append(f"bm25:     {s.bm25_documents} documents, average length {s.bm25_average_length:g} terms, "
                 f"{s.bm25_terms} distinct terms ({s.text_config})")
    lines.append(f"edges:    {s.edges}" + (": " + ", ".join(f"{r} {n}" for r, n in s.edges_by_relation.items())
                                            if s.edges else ""))
    lines.append(f"expiry:   {s.expired} expired (not returned; `tnsrag db sweep` deletes them), {s.expiring} expiring"
                 + (f", next at {s.next_expiry:%Y-%m-%d %H:%M:%S %Z}" if s.next_expiry else "")
                 + (f"; default {_default_expiry(s.default_expiry)}" if s.default_expiry else ""))
    click.echo("\n".join(lines))


def _default_expiry(policy: Mapping[str, Any]) -> str:
    """A corpus's default time-to-live as ``stats`` shows it: ``3600 s, WORKING 60 s``."""
    parts = [f"{policy['ttl']:g} s"] if policy.get("ttl") is not None else []
    parts += [f"{tier} {'never' if seconds is None else f'{seconds:g} s'}"
              for tier, seconds in (policy.get("tiers") or {}).items()]
    return ", ".join(parts)


#: Ids a dry run lists in its text output (--json lists all).
_SHOWN_IDS = 50

_PREFIX_SQL = "SELECT id FROM entries WHERE corpus = :c AND starts_with(id, :p) ORDER BY id"


def _chosen_ids(store: Store, ids: tuple[str, ...], chosen: dict[str, str], id_prefix: str | None,
                missing_ok: bool, age: timedelta | None = None) -> tuple[list[str], list[str]]:
    """The ids a delete removes (that exist; in natural order, ``a#2`` before ``a#10``, but
    ids given in the order given) and the ids given that do not exist."""
    if id_prefix is not None:
        return sorted((r.id for r in store.read(_PREFIX_SQL, {"c": store.corpus, "p": id_prefix})),
                      key=natural_key), []
    if chosen or age is not None:
        # Through the filter pairs only where the schema keeps them (tenancy on), as the
        # delete itself matches: elsewhere the pairs table is empty or stale.
        predicate, params = filter_sql(chosen, corpus_param="c" if store.uses_filter_pairs() else None)
        if age is not None:
            predicate += " AND e.created_at < statement_timestamp() - CAST(:age AS interval)"
            params["age"] = age
        # The predicate is built from code constants; the filter values are bound parameters.
        rows = store.read(f"SELECT e.id FROM entries e WHERE e.corpus = :c AND {predicate} ORDER BY e.id",
                          {**params, "c": store.corpus})
        return sorted((r.id for r in rows), key=natural_key), []
    wanted = list(dict.fromkeys(ids))
    found = store.get_many(wanted)
    missing = [i for i in wanted if i not in found]
    if missing and not missing_ok:
        raise ValidationError(f"no entr{'y' if len(missing) == 1 else 'ies'} "
                              f"{', '.join(map(repr, missing))} in corpus {store.corpus!r}; nothing was deleted "
                              "(--missing-ok deletes the others)")
    return [i for i in wanted if i in found], missing


@click.command()
@click.argument("ids", nargs=-1)
@db_options
@corpus_option
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Delete every entry matching all these exact filters (e.g. source=old.md), instead of IDS.")
@click.option("--id-prefix", default=None, metavar="PREFIX",
              help="Delete every entry whose id starts with PREFIX/ (what ingest --id-prefix PREFIX wrote), "
                   "instead of IDS.")
@click.option("--older-than", type=click.FloatRange(min=0, min_open=True), default=None, metavar="DAYS",
              help="Delete every entry first written more than DAYS days ago (with --filter: those matching too), "
                   "instead of IDS.")
@click.option("--missing-ok", is_flag=True, help="Delete the IDS that exist and ignore the others.")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@json_option
@handle_errors
def delete(ids: tuple[str, ...], url: str | None, schema: str, corpus: str, filters: tuple[str, ...],
           id_prefix: str | None, older_than: float | None, missing_ok: bool, dry_run: bool, as_json: bool) -> None:
    """Delete entries (with their vectors, BM25 postings and edges) by id, every entry
    matching --filter, or every entry under --id-prefix.

    By id, every id must exist (unless --missing-ok): a missing one deletes nothing.
    --id-prefix docs deletes the ids beginning "docs/" (an ingest's --id-prefix, e.g. one
    given by mistake). --older-than 30 deletes what was first written more than 30 days
    ago (forgetting by age, see docs/memory.md, "Forgetting"). --dry-run lists the ids
    instead of deleting them.

    Example: tnsrag delete guide.md#3 guide.md#4 --corpus docs   (or: --filter source=old.md, or: --id-prefix docs --dry-run)
    """
    if sum(map(bool, (ids, filters or older_than is not None, id_prefix is not None))) != 1:
        raise click.UsageError("give entry IDS, --filter KEY=VALUE and/or --older-than DAYS, or --id-prefix PREFIX "
                               "(one of them)")
    age = timedelta(days=older_than) if older_than is not None else None
    prefix = None
    if id_prefix is not None:
        prefix = id_prefix.strip("/") + "/"
        if prefix == "/":
            raise click.BadParameter("must not be empty (tnsrag drop removes a whole corpus)", param_hint="--id-prefix")
    chosen = parse_pairs(filters, "--filter")
    with _open(url, schema, corpus) as store:
        require_corpus(store)
        found: list[str] = []
        missing: list[str] = []
        if (chosen or age) and not dry_run:
            deleted = store.delete_where(chosen, older_than=age)  # one statement: what matches when it runs
        else:
            found, missing = _chosen_ids(store, ids, chosen, prefix, missing_ok, age)
            deleted = len(found) if dry_run else store.delete_many(found)
        if not deleted and chosen and not as_json:
            for note in empty_filter_notes(store, chosen):
                click.echo(f"note: {note}", err=True)
    what = (f" matching {', '.join(f'{k}={v}' for k, v in chosen.items())}" if chosen
            else f" under {prefix!r}" if prefix else "")
    if older_than is not None:
        what += f" first written more than {older_than:g} days ago"
    data: dict[str, object] = {"corpus": corpus, "deleted": deleted}
    if older_than is not None:
        data["older_than_days"] = older_than
    if chosen:
        data["filter"] = chosen
    elif prefix:
        data["id_prefix"] = prefix
    elif older_than is None:
        data["missing"] = missing
    if dry_run:
        data.update(dry_run=True, ids=found)
        text = f"dry run: would delete {deleted} entr{'y' if deleted == 1 else 'ies'}{what} from corpus {corpus!r}"
        text += "".join(f"\n  {i}" for i in found[:_SHOWN_IDS])
        if len(found) > _SHOWN_IDS:
            text += f"\n  ... and {len(found) - _SHOWN_IDS} more (--json lists every id)"
    else:
        text = f"deleted {deleted} entr{'y' if deleted == 1 else 'ies'}{what} from corpus {corpus!r}"
        if missing:
            text += f"; not found: {', '.join(missing)}"
    emit(data, as_json, text)


@click.command()
@db_options
@click.option("--corpus", required=True, help="Corpus to drop.")
@yes_option
@json_option
@handle_errors
def drop(url: str | None, schema: str, corpus: str, yes: bool, as_json: bool) -> None:
    """Drop a whole corpus: its entries, vectors, HNSW indexes, BM25 statistics and edges.

    Asks for confirmation first; without a terminal it refuses unless --yes is given.

    Example: tnsrag drop --corpus scratch --yes
    """
    with _open(url, schema, corpus) as store:
        s = corpus_stats(store, max_sources=1)
        confirm_destruction(f"drop corpus {corpus!r} ({plural(s.entries, 'entry')}, {plural(s.edges, 'edge')})",
                            yes=yes)
        store.drop_corpus()
    emit({"corpus": corpus, "dropped": True, "entries": s.entries, "edges": s.edges}, as_json,
         f"dropped corpus {corpus!r}: {plural(s.entries, 'entry')}, {plural(s.edges, 'edge')}")


_TEMP_MARK = ".tnsrag-export-"


def _export_temp(output: Path, pid: int) -> Path:
    """The file an export to ``output`` is written to before it is renamed over it:
    ``<output>.tnsrag-export-<pid>.tmp``, beside it (the rename stays on one file system)."""
    return output.with_name(f"{output.name}{_TEMP_MARK}{pid}.tmp")


def _remove_stale_temps(output: Path) -> None:
    """Remove the temporary files of earlier exports to ``output`` whose process is gone
    (killed before it could clean up); those of a running export are left alone."""
    folder = output.parent if str(output.parent) else Path(".")
    for temp in folder.glob(f"{glob_escape(output.name)}{_TEMP_MARK}*.tmp"):
        pid = temp.name[len(output.name) + len(_TEMP_MARK):-len(".tmp")]
        if pid.isdigit() and not _running(int(pid)):
            temp.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists (this process counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@click.command()
@db_options
@corpus_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="File to write (default: standard output).")
@click.option("--vectors", is_flag=True,
              help="Also write each entry's vectors (every embedding space), so the restore embeds nothing.")
@json_option
@handle_errors
def export(url: str | None, schema: str, corpus: str, output: Path | None, vectors: bool, as_json: bool) -> None:
    """Export every entry of a corpus as JSONL: id, content, tier, source, parent, timestamp,
    metadata and outgoing edges, one entry per line in id order.

    `tnsrag ingest FILE.jsonl --corpus C` restores it exactly. Without --vectors the
    restore embeds every text again (with a real model, most of its time); with it the
    exported vectors are written as they are, into spaces of the same providers.
    The file is written whole or not at all: first to OUTPUT.tnsrag-export-PID.tmp
    beside it, then renamed; such a file left by a killed export is removed by the next
    export to the same OUTPUT. The summary goes to stderr when the export itself goes
    to stdout.

    Example: tnsrag export --corpus docs --vectors -o docs.jsonl && tnsrag ingest docs.jsonl --corpus docs-copy
    """
    with _open(url, schema, corpus) as store:
        if output is None:
            counts = export_corpus(store, sys.stdout, vectors=vectors)
            to_stderr = True
        else:
            # A temporary file beside the target, renamed over it once complete; named for
            # what it is, and the ones a killed export left for this target are removed first.
            tmp = str(_export_temp(output, os.getpid()))
            try:
                _remove_stale_temps(output)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            except OSError as exc:
                raise click.FileError(str(output), hint=exc.strerror or str(exc)) from None
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                    counts = export_corpus(store, fh, vectors=vectors)
                os.replace(tmp, output)
            except ConnectionLostError as exc:
                Path(tmp).unlink(missing_ok=True)
                lost = exc.__cause__ if isinstance(exc.__cause__, ConnectionLostError) else exc
                raise lost_mid_export(lost, corpus, str(output)) from exc
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            to_stderr = False
    data = {"corpus": corpus, "file": str(output) if output else None, **counts.to_dict()}
    text = f"exported {plural(counts.entries, 'entry')} and {plural(counts.edges, 'edge')} of corpus {corpus!r}" + (
        f" to {output}" if output else "")
    if to_stderr:
        click.echo(json.dumps(data) if as_json else text, err=True)
    else:
        emit(data, as_json, text)
