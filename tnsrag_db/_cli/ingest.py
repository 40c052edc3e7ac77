"""``tnsrag ingest``: read a document tree into a corpus, batch by batch, with progress.

The steps: pick the embedding (:func:`choose_embedding`), then :func:`_write`, the one
writer: :meth:`VectorMemoryStore.ingest` of the entries without vectors (each batch
commits on its own and is keyword-searchable at once, written as the files are read),
then :meth:`VectorMemoryStore.fill_vectors` (only the vectors, embedding overlapping the
writes), then the summary. A run that must see every file before writing (``--strict``
refuses any skip, ``--dry-run``, ``--prune``, JSONL records, two roots giving one path)
reads and validates everything first, hands the writer the whole list, and prunes last.
What PATHs are and the ids they give: :mod:`tnsrag_db._cli._roots`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import click

from tnsrag_db import embeddings
from tnsrag_db._chunking import DEFAULT_CHUNK_CHARS, Chunker, chunker_for
from tnsrag_db._cli._common import Suggesting, db_options, emit, handle_errors, natural_key, parse_pairs, plural
from tnsrag_db._cli._confirm import confirm_destruction, yes_option
from tnsrag_db._cli._group import EXIT_INTERRUPTED, STOPPING
from tnsrag_db._cli._progress import ingest_progress
from tnsrag_db._cli._roots import ROOT_KEY, Reading, check_roots, find_roots, iter_roots, read_roots, stale_ids
from tnsrag_db._cli._schema import open_existing
from tnsrag_db._counts import IngestCounts
from tnsrag_db._errors import (
    ConfigurationError,
    DanglingReferenceError,
    IdCollisionError,
    IngestInterrupted,
    InvalidEntryError,
    SchemaNotReadyError,
)
from tnsrag_db._indexes import graph
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._indexes.vector.spaces import bind_embedding, count_with_vectors, default_embedding_name, query_space
from tnsrag_db._loaders import FileLoader
from tnsrag_db._loaders.formats import file_format
from tnsrag_db._loaders.jsonl import Recorded
from tnsrag_db._loaders.owners import claims_of
from tnsrag_db._store.reads import existing_ids_plan
from tnsrag_db._store.store import connect
from tnsrag_db._store.write import ValidatedBatch, content_hash, write_kept_rows
from tnsrag_db._types import RESERVED_METADATA_KEYS, MemoryEntry, MemoryTier
from tnsrag_db.admin.restore import ExportedVectors, restore_providers

__all__ = ["choose_embedding", "ingest", "sample_corpus_path"]

_INTERRUPTED = "interrupted: {n} committed, the batch in progress was rolled back"


def sample_corpus_path() -> Path:
    """The small sample corpus that ships with the package (JSONL)."""
    return Path(str(resources.files("tnsrag_db") / "data" / "sample_corpus.jsonl"))


def corpus_provider(url: str | None, schema: str, corpus: str) -> str | None:
    """What an ingest without ``--embedding`` embeds with: the provider name of the space
    queries of ``corpus`` use, so that a second folder written into a corpus fills the space
    its searches read instead of starting another one that holds only the new files (each
    space then missing the other's); for a corpus without one, the schema's default
    (:func:`~tnsrag_db._indexes.vector.spaces.default_embedding_name`; None: no such schema
    yet, or the library's default)."""
    try:
        store = open_existing(url, schema, corpus, create_default=False)
    except SchemaNotReadyError:
        return None  # nothing written yet: the ingest creates the schema
    with store:
        space = query_space(store)
        return default_embedding_name(store) if space is None else space.provider


def choose_embedding(name: str | None = None, say: Any = None) -> Any:
    """The embedding provider the ingest writes with: ``name`` (``hash``, the shipped
    model's name or an installed entry-point provider), by default the shipped model when
    the ``embed`` extra is installed, else the hash fallback with a one-line notice on
    stderr, through ``say(line)`` when given (:func:`tnsrag_db.embeddings.resolve_embedding`)."""
    return embeddings.resolve_embedding(name, on_fallback=say or (lambda notice: click.echo(notice, err=True)))


def _check_edge_ends(store: Any, edges: Any, loaded: set[str]) -> None:
    """Raise :class:`DanglingReferenceError` before anything is written when an edge of the
    files ends at an entry neither in the files nor in the corpus (batches commit one at a
    time, so the edge write after them could no longer undo the entries)."""

    ends = sorted({end for edge in edges for end in (edge.src, edge.dst)} - loaded)
    if not ends:
        return
    stored = store.run(existing_ids_plan(store.corpus, ends))
    missing = [end for end in ends if end not in stored]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise DanglingReferenceError(f"edges end at entries that are neither in the files nor in corpus "
                                     f"{store.corpus!r}: {shown}; nothing was written")


#: What each key --meta may not set is set by instead.
_SET_BY = {"tier": "--tier", "source": "--source", "entryId": "the file's path (--id-prefix)"}


def _meta_pairs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """--meta's KEY=VALUE pairs, checked as the options are parsed (before any file is
    read): a malformed pair or a key the ingest sets itself is a usage error naming --meta."""
    pairs = parse_pairs(values, "--meta")
    for key in pairs:
        if key == ROOT_KEY:
            raise click.BadParameter(f"{key!r} is set by ingest (the root each entry was read from)",
                                     ctx=ctx, param=param)
        if key in RESERVED_METADATA_KEYS:
            raise click.BadParameter(f"{key!r} is reserved ({', '.join(sorted(RESERVED_METADATA_KEYS))}): "
                                     f"it is set by {_SET_BY.get(key, 'the store')}", ctx=ctx, param=param)
    return pairs


#: Ids a dry run lists in its text summary (--json lists all).
_SHOWN_PRUNE_IDS = 50


def _summary(corpus: str, result: dict[str, Any]) -> str:
    if result["dry_run"]:
        head = (f"dry run: {plural(result['entries'], 'entry')} from {plural(result['files'], 'file')} for corpus "
                f"{corpus!r} would be "
                f"{result['inserted']} inserted, {result['updated']} updated, {result['unchanged']} unchanged")
    else:
        head = (f"{plural(result['entries'], 'entry')} from {plural(result['files'], 'file')} into corpus {corpus!r}: "
                f"{result['inserted']} inserted, {result['updated']} updated, {result['unchanged']} unchanged")
    if result.get("pruned") is not None:
        head += f", {result['pruned']} pruned"
    if result.get("truncated"):
        head += f" ({result['truncated']} truncated to the model's {result['window']}-token window)"
    if result["dry_run"]:
        head += "; nothing was written"
        ids = result.get("prune_ids") or []
        head += "".join(f"\n  would prune {i}" for i in ids[:_SHOWN_PRUNE_IDS])
        if len(ids) > _SHOWN_PRUNE_IDS:
            head += f"\n  ... and {len(ids) - _SHOWN_PRUNE_IDS} more (--json lists every id)"
    else:
        head += f", {_vectors_text(result)} ({result['seconds']:.1f} s"
        if "searchable_seconds" in result:
            head += f"; keyword-searchable after {result['searchable_seconds']:.1f} s"
        head += ")"
    skipped = result["skipped"]
    if not skipped:
        return head
    reasons: Counter[str] = Counter()
    for s in skipped:  # a root's cache directories are one record standing for their files
        reasons["in cache directories" if s["files"] != 1 or "cache director" in s["reason"]
                else s["reason"]] += s["files"]
    lines = [head, f"skipped {plural(sum(s['files'] for s in skipped), 'file')}: "
             + ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())]
    lines += _skip_lines(skipped)
    return "\n".join(lines)


def _skip_lines(skipped: list[dict[str, Any]]) -> list[str]:
    """A line per skipped file, except files of one unknown type: one line for all of them
    (``  docs/scripts: 18 files of unknown type '.cocci'``, in the folder holding them all),
    as cache directories get one line per root. ``--json`` lists every file."""
    unknown: dict[str, list[str]] = {}
    for s in skipped:
        if s["files"] == 1 and s["reason"].startswith(_UNKNOWN):
            unknown.setdefault(s["reason"], []).append(s["path"])
    lines: list[str] = []
    for s in skipped:
        paths = unknown.get(s["reason"], [])
        if len(paths) < 2 or s["files"] != 1:
            lines.append(f"  {s['path']}: {s['reason']}")
        elif s["path"] == paths[0]:  # the group's line, where its first file was
            try:
                folder = os.path.commonpath([os.path.dirname(p) or "." for p in paths])
            except ValueError:  # absolute and relative paths mixed (several roots)
                folder = "."
            lines.append(f"  {folder}: {len(paths)} files of unknown type {s['reason'][len(_UNKNOWN):]}")
    return lines


#: The start of the reason a file of an unknown type is skipped for (then its suffix).
_UNKNOWN = "unknown file type "


def _vectors_text(result: dict[str, Any]) -> str:
    """Where the run's vectors came from: the file's own (an export with --vectors, of which
    only entries the file has no vector for are embedded) and the providers that embedded."""
    restored = result.get("restored_vectors") or []
    parts = []
    if restored:
        missing = result.get("embedded_missing", 0)
        parts.append(f"vectors of {', '.join(restored)} restored from the file"
                     + (f" ({plural(missing, 'entry')} without one embedded)" if missing else ""))
    embedded = [name for name in result["embedding_providers"] if name not in restored]
    if embedded or not parts:
        parts.append(f"embedded with {', '.join(embedded)}")
    return "; ".join(parts)


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus to write into.")
@click.option("--tier", type=Suggesting([t.name for t in MemoryTier]), default="SEMANTIC", show_default=True,
              help="Tier for entries that do not set one.")
@click.option("--source", default=None, help="Source for every entry (default: the file's path).")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", callback=_meta_pairs,
              help="Metadata for every entry (repeatable; not the reserved tier, source, entryId or root).")
@click.option("--sample", is_flag=True, help="Ingest the sample corpus that ships with tnsrag_db.")
@click.option("--id-prefix", default="", metavar="PREFIX",
              help="Put PREFIX/ in front of every file id and path (before the root's name when several "
                   "roots are given), to keep several ingests apart in one corpus.")
@click.option("--chunk-tokens", type=click.IntRange(min=16), default=None, metavar="N",
              help="Chunk size: tokens of the embedding model (default: its window), or characters with the "
                   "hash fallback (default 1000).")
@click.option("--prune", is_flag=True,
              help="Afterwards delete the entries earlier read from these same roots that this run did not "
                   "produce: deleted files, chunks that no longer exist, ids of another --id-prefix.")
@click.option("--dry-run", is_flag=True,
              help="Read and compare only: say what would be inserted, updated, unchanged and pruned (listing "
                   "the pruned ids); write and embed nothing.")
@yes_option
@click.option("--strict", is_flag=True, help="Fail (writing nothing) when any file would be skipped.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Entries per embedding call and per committed batch of vectors. The entries, written "
                   "before their vectors, commit in batches that start at this size and double up to 4096, "
                   "as do the batches of vectors read from the file (nothing to embed).")
@click.option("--embedding", default=None, metavar="NAME|DIR",
              help="Embedding provider: hash, all-MiniLM-L6-v2-int8 (the shipped model), a model folder (an "
                   "exported sentence-transformers model) or an installed entry-point provider; any of them "
                   "followed by +context1 embeds each entry with its title, path and headings. Default: the "
                   "provider of the corpus's embedding space; for a new corpus the shipped model when installed, "
                   "else hash.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@handle_errors
def ingest(paths: tuple[str, ...], url: str | None, schema: str, corpus: str, tier: str, source: str | None,
           meta: dict[str, str], sample: bool, id_prefix: str, chunk_tokens: int | None, prune: bool,
           dry_run: bool, yes: bool, strict: bool, batch_size: int, embedding: str | None, quiet: bool,
           as_json: bool) -> None:
    """Ingest document trees (or files, or globs) into a corpus.

    Reads Markdown and HTML (one entry per heading section, each the child of its
    enclosing section; HTML with its title), text and reST, PDF (per page), source code
    (by suffix, with a "language") and JSONL (one entry per line: a tnsrag export is
    restored exactly, with its vectors when exported with --vectors, then nothing is
    embedded); .gz files by the name inside. Text encodings are detected. Binary, empty and unknown files are skipped and
    listed with the reason (--strict makes any skip an error).

    Ids are paths relative to the PATH given plus "#n" (docs/ gives
    "guide/install.md#3"), the same from any directory. With several PATHs each folder's
    ids start with its name ("docs/guide/install.md#3"; a file keeps its name), so several
    folders go in one command. A quoted glob is expanded here ('/usr/share/doc/python3*':
    each matching folder is read, its ids below the glob's fixed part). --id-prefix goes
    in front of all of it. Every entry read from a file records its root (metadata
    "root"), and a root's ids are its own: a folder whose files would take ids that
    entries of another folder hold in the corpus (both have a README) is refused before
    anything is written (exit 1, naming the ids and both folders; --id-prefix keeps it
    apart), while the same folder read again updates its entries in place. --prune
    deletes only entries of the roots just read; it asks first (or needs --yes off a
    terminal) when it would delete more entries than the run writes.
    Entries are embedded with --embedding (default: the provider of the corpus's
    embedding space, the one its searches use; for a corpus without one the shipped model
    of the embed extra, else the offline 128-dimensional hash fallback, with a notice); texts beyond
    the model's window are truncated and counted. Chunks fit the embedding model's
    window (--chunk-tokens). The entries are written first, batch by batch without
    vectors as the files are read, so keyword search answers within seconds (--strict,
    --dry-run, --prune and JSONL files read everything first); then their vectors are filled
    (each batch embeds while the previous one's vectors are written), and vector and
    hybrid queries meanwhile search the entries embedded so far, with a note saying how
    many. Re-running is idempotent (unchanged entries are reported, not rewritten, and
    only missing vectors are embedded, found in one check before the first), so an
    interrupted ingest continues where it stopped. Ctrl-C says at once that the ingest
    stops, and it does after the model call (about half a second with the shipped model)
    or statement in progress, rolling that batch back (exit 130); a second Ctrl-C
    abandons the wait. A note says when new entries repeat texts the corpus already holds
    under other ids. Progress goes to stderr: redrawn lines on a terminal, else a plain
    line every few seconds (the first within seconds); the read's ETA follows the bytes
    read, the embed line counts the entries lacking vectors.

    Example: tnsrag ingest docs/ --id-prefix docs --prune --meta tenant=acme
    """
    targets = list(paths) + ([str(sample_corpus_path())] if sample else [])
    if not targets:
        raise click.UsageError("give at least one PATH, or --sample")
    extra = meta  # checked by _meta_pairs
    try:
        roots = find_roots(targets, id_prefix)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    started = time.perf_counter()
    # Progress from the start: loading the model and finding the files take seconds.
    progress = ingest_progress(sys.stderr, quiet=quiet)
    ledger = _Ledger(IngestCounts())
    plan = _Plan(url, schema, corpus, batch_size, prune, dry_run, yes, lambda: progress.say(STOPPING))

    def shaped(entry: MemoryEntry) -> MemoryEntry:
        return dataclasses.replace(entry, source=source or entry.source, metadata={**entry.metadata, **extra})

    def read_progress(done: int, total: int, bytes_done: int, bytes_total: int) -> None:
        progress.update("read", done, total, work=(bytes_done, bytes_total))

    try:
        with progress:
            # JSONL files are not chunked, and an export with --vectors carries its vectors: the
            # default provider (loading the model takes seconds) is resolved only when some entry
            # needs embedding, i.e. when the files carry no vectors or --embedding names one.
            only_jsonl = all(root.kind == "file" and file_format(Path(root.given).name) == "jsonl" for root in roots)
            if embedding is None and not only_jsonl:
                embedding = corpus_provider(url, schema, corpus)  # a corpus keeps its provider
            if not (only_jsonl and embedding is None):  # a model takes seconds to load: say so at once
                progress.status(f"loading the embedding model{f' {embedding}' if embedding else ''}",
                                announce=embedding != "hash")
            provider = None if only_jsonl and embedding is None else choose_embedding(embedding, progress.say)
            truncated_before = getattr(provider, "truncated_texts", 0)
            progress.status("finding the files")
            try:
                chunker = (Chunker(chunk_tokens or DEFAULT_CHUNK_CHARS) if provider is None
                           else chunker_for(provider, chunk_tokens))
                loaders = [FileLoader(root.given, tier=tier, chunker=chunker, relative_to="pattern",
                                      id_prefix=root.prefix) for root in roots]
                # One walk of each root before reading, when the run may stream its writes: the
                # files it will read, and the id path and root of each (checked before writing).
                selections = [] if strict or dry_run or prune else [loader.selected_roots() for loader in loaders]
                streaming = bool(selections) and _streamable(selections)
            except ConfigurationError as exc:
                raise click.UsageError(str(exc)) from None
            progress.start("read")
            entries: Sequence[MemoryEntry]
            if streaming:
                assert provider is not None  # resolved above: a streamed run reads no JSONL
                claims = claims_of(item for selection in selections for item in selection)
                reading = Reading([], [], [], {}, 0, {})
                providers = [provider]
                # Written batch by batch as the files are read and chunked.
                counts, entries, outcome = _write(
                    (shaped(e) for e in iter_roots(roots, lambda root: loaders[roots.index(root)], reading,
                                                   read_progress)),
                    plan, providers, progress, ledger, roots, claims)
                read_seconds = outcome.pop("read_at") - started
            else:
                try:
                    reading = read_roots(roots, lambda root: loaders[roots.index(root)], progress=read_progress)
                except ConfigurationError as exc:
                    raise click.UsageError(str(exc)) from None
                read_seconds = time.perf_counter() - started
                skipped = reading.skipped
                if strict and skipped:
                    listed = "; ".join(f"{s['path']} ({s['reason']})" for s in skipped[:5])
                    more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
                    raise InvalidEntryError(f"--strict: {plural(sum(s['files'] for s in skipped), 'file')} would be "
                                            f"skipped: {listed}{more}; nothing was written")
                entries = ValidatedBatch(shaped(e) for e in reading.entries)
                # JSONL exports with vectors (tnsrag export --vectors) are written with them,
                # one pass per exported space, embedding nothing else unless --embedding asks.
                if provider is None and not reading.vectors:
                    provider = choose_embedding(None, progress.say)
                    truncated_before = getattr(provider, "truncated_texts", 0)
                providers = restore_providers([*entries, *(r.row() for r in reading.recorded.rows)], reading.vectors,
                                              None if embedding is None and reading.vectors else provider)
                # The files read claim their id paths (JSONL records carry a root of their own, if any).
                claims = {e.metadata["path"]: root.key for e in entries
                          if (root := reading.root_of.get(e.id)) is not None and e.metadata.get(ROOT_KEY) == root.key
                          and "path" in e.metadata}
                counts, _, outcome = _write(entries, plan, providers, progress, ledger, roots, claims, reading.edges,
                                            reading.recorded)
            skipped = reading.skipped
    except IngestInterrupted as exc:
        if exc.__cause__ is None:
            click.echo(str(exc), err=True)
            sys.exit(EXIT_INTERRUPTED)
        raise
    except KeyboardInterrupt:
        click.echo(_INTERRUPTED.format(n=plural(ledger.committed.total, "entry")), err=True)
        sys.exit(EXIT_INTERRUPTED)
    except IdCollisionError as exc:
        if as_json:  # the refusal as data too; the error line and exit status 1 follow
            emit({"corpus": corpus, "error": type(exc).__name__, "message": str(exc),
                  "collisions": [{"id": i, "root": root, "owner": owner} for i, root, owner in exc.collisions]},
                 True)
        raise
    elapsed = time.perf_counter() - started
    result = {"corpus": corpus, "files": reading.files_read, "entries": len(entries), "edges": len(reading.edges),
              "inserted": counts.inserted,
              "updated": counts.updated, "unchanged": counts.unchanged, "pruned": outcome.get("pruned"),
              "duplicates": outcome.get("duplicates", 0), "dry_run": dry_run,
              "roots": [{"path": r.key, "prefix": r.prefix} for r in roots], "skipped": skipped,
              "chunk": {"size": chunker.max_tokens, "unit": chunker.unit}, "read_seconds": round(read_seconds, 3),
              "embedding": ", ".join(embeddings.provider_name(p) for p in providers),
              "embedding_providers": [embeddings.provider_name(p) for p in providers],
              "restored_vectors": [embeddings.provider_name(p) for p in providers if isinstance(p, ExportedVectors)],
              "embedded_missing": sum(p.embedded_texts for p in providers if isinstance(p, ExportedVectors)),
              "truncated": getattr(provider, "truncated_texts", 0) - truncated_before,
              "window": getattr(provider, "max_tokens", None), "seconds": round(elapsed, 3)}
    if "first_searchable_at" in outcome:  # when the first batch committed: keyword search answers from then on
        result["first_searchable_seconds"] = round(outcome["first_searchable_at"] - started, 3)
    if "searchable_at" in outcome:  # when every entry was written: keyword-searchable from then on
        result["searchable_seconds"] = round(outcome["searchable_at"] - started, 3)
    if dry_run:
        result["prune_ids"] = outcome.get("prune_ids", [])
    duplicates = result["duplicates"]
    if duplicates:
        hint = " (re-ingested under another prefix?)" if 2 * duplicates >= counts.inserted else ""
        click.echo(f"note: {duplicates:,} of {counts.inserted:,} "
                   f"{'entries that would be' if dry_run else 'entries'} inserted duplicate contents already "
                   f"stored under other ids{hint}", err=True)
    emit(result, as_json, _summary(corpus, result))


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Where and how :func:`_write` writes (the command's options)."""

    url: str | None
    schema: str
    corpus: str
    batch_size: int
    prune: bool
    dry_run: bool
    yes: bool
    on_stop: Any = None  # called at the first Ctrl-C of a pass (to say the ingest stops)


#: New entries whose text the corpus already holds under an id this run neither writes nor
#: prunes (md5 of the UTF-8 text: a count for a note, not a guarantee).
_DUPLICATES_SQL = """
WITH run AS (SELECT unnest(CAST(:run AS text[])) AS id)
SELECT count(*) AS n FROM unnest(CAST(:hashes AS text[])) AS f(h)
WHERE f.h IN (SELECT md5(convert_to(o.content, 'UTF8')) FROM entries o
              WHERE o.corpus = :c AND NOT EXISTS (SELECT 1 FROM run r WHERE r.id = o.id))
"""


def _duplicates(store: Any, fresh: list[MemoryEntry], excluded: list[str]) -> int:
    if not fresh:
        return 0
    hashes = [hashlib.md5(e.content.encode("utf-8"), usedforsecurity=False).hexdigest() for e in fresh]
    rows = store.read(_DUPLICATES_SQL, {"c": store.corpus, "run": excluded, "hashes": hashes})
    return int(rows[0].n)


def _write(entries: Iterable[MemoryEntry], plan: _Plan, providers: list[Any], progress: Any, ledger: _Ledger,
           roots: list[Any], claims: dict[str, str], edges: Sequence[Any] = (),
           recorded: Recorded | None = None) -> tuple[Any, Sequence[MemoryEntry], dict[str, Any]]:
    """The one writer of ``tnsrag ingest``: connect, refuse files whose ids another root's
    entries hold (``claims``: id path -> root, :func:`~tnsrag_db._cli._roots.check_roots`),
    write ``entries`` batch by batch without vectors (keyword-searchable as each batch
    commits; their counts go to ``ledger``), then fill their vectors
    (:func:`_fill_vectors`, a pass per provider of ``providers``), then the history of a
    JSONL export (``recorded``: closed rows and recording instants, in one transaction, then
    the closed rows' vectors), the ``edges`` and the prune.

    ``entries`` is either everything read, validated as a whole (a ValidatedBatch: a run that
    must see every file first: ``--strict``, ``--dry-run``, ``--prune``, JSONL records):
    then the ends of ``edges`` are checked and what ``--prune`` removes is found before
    anything is written (asking first when that is more than the run writes), and a dry run
    classifies the entries against the stored ones instead and writes nothing; or an
    iterator of the entries as the files are read (:func:`_streamable`), whose batches are
    then written while the next files are read and chunked. An error met while reading (two
    files giving one id) stops the ingest there: the batches committed before stay, as
    after an interrupt.

    Returns the entry counts, the entries written and the outcome: ``duplicates`` (new
    entries whose text is stored under another id), ``first_searchable_at`` (the
    ``time.perf_counter()`` when the first batch committed), ``searchable_at`` (every entry
    written), ``read_at`` (every entry read), ``pruned`` and, for a dry run, ``prune_ids``."""
    whole = entries if isinstance(entries, ValidatedBatch) else None
    if whole is not None and not whole and not plan.prune:
        return IngestCounts(), [], {}
    if plan.dry_run:
        store = open_existing(plan.url, plan.schema, plan.corpus)  # a dry run creates no schema
    else:
        store = connect(plan.url, corpus=plan.corpus, schema=plan.schema,
                        auto_migrate=None if plan.url is None else False)
    outcome: dict[str, Any] = {}
    streamed: list[MemoryEntry] = []  # the entries of an iterator, as they are written
    fresh: list[MemoryEntry] = []  # entries whose id the corpus did not hold before this run
    with store:
        check_roots(store, roots, claims)
        stale: list[str] = []
        if whole is not None:
            if edges:
                _check_edge_ends(store, edges, {e.id for e in whole}
                                 | {r.row_id for r in (recorded.rows if recorded else ())})
            stale = stale_ids(store, roots, {e.id for e in whole}) if plan.prune else []
            if plan.dry_run:
                stored = store.content_hashes([e.id for e in whole]) if whole else {}
                new = [e for e in whole if e.id not in stored]
                unchanged = sum(1 for e in whole if stored.get(e.id) == content_hash(e))
                # Entries about to be pruned do not count as "stored under other ids".
                outcome.update(duplicates=_duplicates(store, new, [e.id for e in whole] + stale),
                               prune_ids=sorted(stale, key=natural_key), pruned=len(stale) if plan.prune else None)
                return IngestCounts(len(new), len(stored) - unchanged, unchanged), whole, outcome
            if len(stale) > len(whole):
                with progress.held():
                    confirm_destruction(f"prune {plural(len(stale), 'entry')} of corpus {plan.corpus!r} read earlier "
                                        f"from {_roots_text(roots)}: more than the {len(whole)} this run writes "
                                        "(--dry-run lists them)", yes=plan.yes)
        # Bound to the corpus's spaces before anything is written: a provider whose
        # dimension differs from its own stored space is refused here.
        views = [VectorMemoryStore(store, bind_embedding(store, provider)) for provider in providers]

        def taken(batch: list[MemoryEntry]) -> list[MemoryEntry]:
            # Read before the batch is written (the ingest reads one batch ahead of its writes).
            stored = store.content_hashes([e.id for e in batch]) if batch else {}
            fresh.extend(e for e in batch if e.id not in stored)
            if whole is None:
                streamed.extend(batch)
            return batch

        def batches() -> Iterator[MemoryEntry]:
            batch: list[MemoryEntry] = []
            for entry in entries:
                batch.append(entry)
                if len(batch) == plan.batch_size:
                    yield from taken(batch)
                    batch = []
            yield from taken(batch)
            outcome["read_at"] = time.perf_counter()

        def advance(phase: str, done: int, total: int | None) -> None:
            if phase == "write":  # the read line counts files, done by now; nothing embeds
                progress.update(phase, done, total if whole is None else len(whole))
                if done:
                    outcome.setdefault("first_searchable_at", time.perf_counter())

        def index_advance(phase: str, done: int, total: int) -> None:
            progress.update("index", done, total, note=phase)

        progress.start("write")
        if whole is not None:  # handed over whole: its batches are not checked again
            for start in range(0, len(whole), _CHECK_BATCH):
                taken(list(whole[start:start + _CHECK_BATCH]))
        counts = views[0].ingest(batches() if whole is None else whole, batch_size=plan.batch_size,
                                 progress=advance, vectors=False, on_stop=plan.on_stop,
                                 max_batch_size=WRITE_BATCH_MAX)
        ledger.committed = counts
        written: Sequence[MemoryEntry] = streamed if whole is None else whole
        outcome["searchable_at"] = time.perf_counter()
        outcome.setdefault("read_at", outcome["searchable_at"])
        progress.update("write", counts.total, len(written))
        # After the writes, the run's own ids (and those pruned) left out: what the corpus
        # held under other ids before this run.
        outcome["duplicates"] = _duplicates(store, fresh, [e.id for e in written] + stale)
        _fill_vectors(store, views, written, plan, progress, index_advance)
        if recorded:
            # A corpus's history (tnsrag export of a corpus that keeps history): its closed
            # rows and when each row was recorded, once every entry is committed.
            store.writer.transaction(lambda conn: write_kept_rows(conn, store.writer.corpus, recorded.rows,
                                                                  recorded.since))
            kept = [r.row() for r in recorded.rows]
            for view in views if kept else ():
                view.fill_kept_vectors(kept)
        if edges:
            # The edges of JSONL records (tnsrag export files), once every entry is
            # committed: an edge to an entry neither in the files nor in the corpus is an
            # error naming it, and no edge is written.
            graph.GraphStore(store).add_edges(edges)
        if plan.prune:
            outcome["pruned"] = store.delete_many(stale)
    return counts, written, outcome


def _streamable(selections: list[list[tuple[Path, str, str | None]]]) -> bool:
    """Whether the files each loader selected (:meth:`FileLoader.selected_roots`) can be
    written while they are read (see :func:`_write`): none is JSONL (whose
    records bring their own ids, edges and vectors, checked as a whole before anything is
    written) and no two roots give one file path (the ids would clash: reading everything
    first refuses that before writing)."""
    seen: set[str] = set()
    for selection in selections:
        for path, rel, _ in selection:
            if file_format(path.name) == "jsonl" or rel in seen:
                return False
            seen.add(rel)
    return True


@dataclasses.dataclass
class _Ledger:
    """What an ingest has committed so far (for the line an interrupt prints)."""

    committed: Any = None


#: The interrupt line once every entry is written and vectors are being filled.
_INTERRUPTED_VECTORS = ("interrupted: {n} committed, {v} with vectors of {provider}, the batch in progress "
                        "was rolled back; the same ingest run again (or tnsrag embed --corpus {corpus} --embedding "
                        "{provider}) embeds the rest")
#: The same once the stop came as the last batch of vectors committed: only the index build was left.
_INTERRUPTED_INDEX = ("interrupted: {n} committed, {v} with vectors of {provider}, every batch read was written; "
                      "tnsrag db build-indexes{schema} builds the vector index if one is due")


#: The largest batch of a pass that runs no model: the keyword pass (entries without
#: vectors) and the vector pass of vectors read from the file. Their batches start at
#: --batch-size (the first keyword answer waits for the first) and double up to this.
WRITE_BATCH_MAX = 4096

#: Entries per statement of the check for missing vectors before the vector pass.
_CHECK_BATCH = 5_000


def _fill_vectors(store: Any, views: list[Any], entries: Sequence[MemoryEntry], plan: _Plan, progress: Any,
                  index_advance: Any) -> None:
    """The second phase of an ingest: embed the entries lacking a vector in each view's space
    (the entries are all written and unchanged by now, so only vectors are written; a
    rerun after an interrupt embeds only what is still missing), embedding each batch on
    a worker while the previous one's vectors are written. An interrupt raises
    :class:`IngestInterrupted` saying how many of the entries have vectors."""

    def advance(phase: str, done: int, total: int | None) -> None:
        if phase == "embed":  # the write line counted the entries; this pass writes vectors only
            progress.update(phase, done, total)

    for vectors in views:
        # Which entries lack a vector, in a few statements: a rerun goes straight to them,
        # and the embed line has its total from the start.
        lacking: list[MemoryEntry] = []
        for start in range(0, len(entries), _CHECK_BATCH):
            progress.update("embed", 0, note=f"checking which have vectors: {start:,}/{len(entries):,}")
            lacking += vectors.needing_vectors(entries[start:start + _CHECK_BATCH])
        # Entries checked as a whole: their parts are not checked again.
        todo = entries.only(e.id for e in lacking) if isinstance(entries, ValidatedBatch) else lacking
        progress.update("embed", 0, len(todo), note="" if len(todo) == len(entries)
                        else f"{len(entries) - len(todo):,} had vectors")
        progress.start("embed")
        if not todo:
            continue
        # Vectors read from the file are looked up, not computed: their batches grow as the
        # keyword pass's do. A model's batch stays --batch-size (the unit of its work).
        looked_up = isinstance(vectors.embedding.provider, ExportedVectors)
        try:
            vectors.fill_vectors(todo, batch_size=plan.batch_size, progress=advance, index_progress=index_advance,
                                 on_stop=plan.on_stop, max_batch_size=WRITE_BATCH_MAX if looked_up else None)
        except IngestInterrupted as exc:
            if exc.__cause__ is not None:
                raise
            name = vectors.embedding.name
            have = count_with_vectors(store, name, [e.id for e in entries])
            said = (_INTERRUPTED_VECTORS if exc.rolled_back else _INTERRUPTED_INDEX).format(
                n=plural(len(entries), "entry"), v=have, provider=name, corpus=plan.corpus,
                schema=f" --schema {plan.schema}" if plan.schema else "")
            raise IngestInterrupted(said, committed=exc.committed, rolled_back=exc.rolled_back) from None


def _roots_text(roots: list[Any]) -> str:
    keys = [r.key for r in roots]
    return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more roots" if len(keys) > 3 else "")
