"""``tnsrag db build-indexes``, ``merge-postings``, ``sweep``, ``consolidate``, ``promote``,
``distribute`` and ``partition-sql``: the upkeep and layout of a migrated schema."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from tnsrag_db._cli._common import db_options, emit, handle_errors, parse_pairs, plural
from tnsrag_db._cli._progress import PhaseProgress, _isatty
from tnsrag_db._cli.db import database
from tnsrag_db._db.partition import partition_script
from tnsrag_db._indexes.vector import DEFAULT_INDEX_THRESHOLD
from tnsrag_db._indexes.vector.hnsw import build_due_indexes
from tnsrag_db._store.citus import distribute as distribute_by_corpus
from tnsrag_db._store.store import Store
from tnsrag_db.admin import require_corpus

if TYPE_CHECKING:
    from tnsrag_db._store.bm25.merge import MergeReport

__all__ = ["build_indexes", "consolidate", "distribute", "merge_postings", "partition_sql", "promote", "sweep"]


@click.command()
@db_options
@click.option("--citus", is_flag=True, required=True,
              help="Distribute on Citus (the only kind so far; required, so the command says what it does).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def distribute(url: str | None, schema: str, citus: bool, as_json: bool) -> None:
    """Distribute the migrated tables by corpus on a Citus coordinator (after tnsrag db
    upgrade, before the first write; safe to run again).

    Every table is hash-distributed by corpus and co-located, so each store operation
    routes to the one worker holding its corpus. The tenancy policies are rewritten without
    the subquery Citus refuses, and the statement triggers kept for writers of releases
    before 0011 are dropped (the schema must no longer serve them: tnsrag db upgrade
    --finish). See docs/deployment.md, "Scale out with Citus".

    Example: tnsrag db distribute --citus --url "$COORDINATOR_URL"
    """
    with database(url, schema) as db:
        report = distribute_by_corpus(db, schema=schema)
    emit({"schema": schema, "distributed": report.distributed, "already": report.already,
          "policies": report.policies, "triggers_dropped": report.triggers}, as_json,
         f"schema {schema}: {len(report.distributed)} tables distributed by corpus"
         + (f", {len(report.already)} already were" if report.already else "")
         + (f"; dropped triggers {', '.join(report.triggers)}" if report.triggers else ""))


@click.command("partition-sql")
@db_options
@click.option("--partitions", type=click.IntRange(2, 1024), default=8, show_default=True,
              help="Hash partitions per table.")
@handle_errors
def partition_sql(url: str | None, schema: str, partitions: int) -> None:
    """Print the script that hash-partitions the big tables by corpus (read from the live
    catalog; nothing is changed). Review it, then run it in a maintenance window.

    Example: tnsrag db partition-sql --url "$DATABASE_URL" --partitions 16 > partition.sql; psql "$DATABASE_URL" -1 -f partition.sql
    """
    with database(url, schema) as db, db.connect() as conn:
        click.echo(partition_script(conn, schema=schema, partitions=partitions), nl=False)


@click.command("build-indexes")
@db_options
@click.option("--threshold", type=click.IntRange(min=1), default=DEFAULT_INDEX_THRESHOLD, show_default=True,
              help="Build the index of every space holding at least this many vectors.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def build_indexes(url: str | None, schema: str, threshold: int, as_json: bool) -> None:
    """Build the HNSW indexes that are due, in every corpus (run it as the schema's owner).

    An application role that owns no table cannot build the index its writes make due;
    its writes warn and this command, run by the owner (e.g. from cron), catches up.
    Builds run concurrently with reads and writes. Each space is built on its own: a
    space whose build fails is reported with its corpus and the cause, and the others
    are still built. The exit status is the number of failed builds (at most 100), 0
    when every due index was built.

    Example: tnsrag db build-indexes --url postgresql://owner@db.internal/app
    """
    with database(url, schema) as db:
        store = Store(db, schema=schema)
        sweep = build_due_indexes(store, threshold)
        # The sweep counts a space's vectors only up to the threshold (enough to know it is
        # due); what was built is reported with its exact size, counted once it is built.
        rows = [{"corpus": d.corpus, "provider": d.provider, "dimension": d.dimension,
                 "vectors": _space_vectors(store.with_corpus(d.corpus), d.space_id), "index": name}
                for d, name in sweep.built]
    failed = [{"corpus": d.corpus, "provider": d.provider, "dimension": d.dimension, "space_id": d.space_id,
               "error": type(exc).__name__, "message": str(exc)} for d, exc in sweep.failed]
    lines = [f"built {r['index']} ({r['corpus']}, {r['provider']}, {plural(r['vectors'], 'vector')})" for r in rows]
    if not rows and not failed:
        lines.append(f"schema {schema}: no index due")
    emit({"schema": schema, "built": rows, "failed": failed}, as_json, "\n".join(lines) or None)
    for f in failed:
        click.echo(f"error: index of embedding space {f['space_id']} (corpus {f['corpus']!r}, {f['provider']}, "
                   f"dimension {f['dimension']}) not built: {f['message']}", err=True)
    if failed:
        sys.exit(min(len(failed), 100))


@click.command("merge-postings")
@db_options
@click.option("--corpus", "corpora", multiple=True, help="Merge this corpus only (repeatable; default: every corpus).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def merge_postings(url: str | None, schema: str, corpora: tuple[str, ...], as_json: bool) -> None:
    """Merge the BM25 postings of every corpus (or --corpus) from per-entry rows into blocks.

    Stores merge as they write (every 8,192 entries); this catches up at once, for
    example after an upgrade to a release with blocks, whose earlier postings are all
    rows until merged. It runs beside readers and writers, in transactions of up to
    20,000 entries, and never changes a result. Progress goes to standard error.

    Example: tnsrag db merge-postings --url "$DATABASE_URL" --json
    """
    rows = []
    with database(url, schema) as db:
        store = Store(db, schema=schema)
        names = list(corpora) or [r.corpus for r in store.read(
            "/* tnsrag:all-corpora */ SELECT corpus FROM corpora ORDER BY corpus", {})]
        for name in names:
            done = [0]

            def progress(report: MergeReport, name: str = name, done: list[int] = done) -> None:
                done[0] += report.entries
                click.echo(f"{name}: {plural(done[0], 'entry')} merged", err=True)

            total = store.with_corpus(name).merge_postings(progress=progress)
            rows.append({"corpus": name, "entries": total.entries, "postings": total.postings,
                         "tombstones_purged": total.tombstones})
    lines = [f"{r['corpus']}: merged {plural(r['entries'], 'entry')} ({plural(r['postings'], 'posting')}), "
             f"purged {plural(r['tombstones_purged'], 'tombstone')}" for r in rows]
    emit({"schema": schema, "corpora": rows}, as_json, "\n".join(lines) or f"schema {schema}: no corpus")


@click.command("sweep")
@db_options
@click.option("--corpus", "corpora", multiple=True,
              help="Sweep this corpus only (repeatable; default: every corpus with expired entries).")
@click.option("--vacuum", is_flag=True, help="Then VACUUM the library's tables: the space is free for new rows at "
                                             "once, HNSW entries included (autovacuum does it later otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def sweep(url: str | None, schema: str, corpora: tuple[str, ...], vacuum: bool, as_json: bool) -> None:
    """Delete the expired entries of every corpus (or --corpus) with their postings, vectors and edges.

    No read returns an entry past its expiry, swept or not; the sweep frees what it
    holds. It runs beside readers and writers (see docs/memory.md, "The sweep").

    Example: tnsrag db sweep --url "$DATABASE_URL" --json
    """
    rows = []
    with database(url, schema) as db:
        store = Store(db, schema=schema)
        names = list(corpora) or [r.corpus for r in store.read(
            "/* tnsrag:all-corpora */ SELECT DISTINCT corpus FROM entries "
            "WHERE expires_at <= statement_timestamp() ORDER BY corpus", {})]
        for name in names:
            report = store.with_corpus(name).sweep(vacuum=vacuum)
            rows.append({"corpus": name, "deleted": report.deleted, "tombstones_purged": report.tombstones,
                         "vacuumed": report.vacuumed})
    lines = [f"{r['corpus']}: deleted {plural(r['deleted'], 'expired entry', 'expired entries')}"
             + (", vacuumed" if r["vacuumed"] else "") for r in rows]
    emit({"schema": schema, "corpora": rows}, as_json, "\n".join(lines) or f"schema {schema}: nothing expired")


@click.command("consolidate")
@db_options
@click.option("--corpus", required=True, help="The corpus to consolidate.")
@click.option("--tier", required=True, type=click.Choice(["WORKING", "EPISODIC", "SEMANTIC", "PROCEDURAL"]),
              help="The tier whose duplicates are found (entries of other tiers are never paired).")
@click.option("--threshold", type=float, default=None, metavar="COSINE",
              help="Also pair entries whose vectors are at least this similar (0 < COSINE <= 1); "
                   "without it, only entries with the same text.")
@click.option("--mode", type=click.Choice(["merge", "link"]), default="merge", show_default=True,
              help="merge: keep the first written of each group, its others become its aliases and are deleted; "
                   "link: an edge between the entries of each pair.")
@click.option("--space", default=None, metavar="NAME",
              help="The embedding space (provider name) of --threshold (default: the corpus's only one).")
@click.option("--neighbors", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Nearest vectors looked at per entry.")
@click.option("--relation", default="duplicate_of", show_default=True, help="The relation of --mode link's edges.")
@click.option("--dry-run", is_flag=True, help="List the groups found; write nothing.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def consolidate(url: str | None, schema: str, corpus: str, tier: str, threshold: float | None, mode: str,
                space: str | None, neighbors: int, relation: str, dry_run: bool, quiet: bool, as_json: bool) -> None:
    """Merge or link the duplicates within one tier of a corpus: the same text, or (with
    --threshold) vectors at least that similar.

    A merged entry's id stays an alias of the survivor: reads of it return the survivor,
    edges move to it. Runs beside readers and writers (see docs/memory.md, "Consolidation").

    Example: tnsrag db consolidate --corpus notes --tier WORKING --threshold 0.95 --dry-run
    """
    with database(url, schema) as db:
        store = Store(db, corpus=corpus, schema=schema)
        require_corpus(store)
        with PhaseProgress(sys.stderr, {"pairs": "entries", mode: "groups"}, enabled=not quiet,
                           plain=not _isatty(sys.stderr), optional={mode}) as shown:
            def progress(phase: str, done: int, total: int) -> None:
                shown.update(phase, done, total)

            report = store.consolidate(tier, threshold=threshold, mode=mode, space=space, neighbors=neighbors,
                                       relation=relation, dry_run=dry_run, progress=progress)
    done = ("would merge" if dry_run else "merged") if mode == "merge" else ("would link" if dry_run else "linked")
    count = (sum(len(g.others) for g in report.groups) if dry_run else report.merged) if mode == "merge" \
        else (2 * report.pairs if dry_run else report.linked)
    lines = [f"{corpus} {report.tier}: {plural(report.examined, 'entry', 'entries')} examined, "
             f"{plural(report.pairs, 'pair')} in {plural(len(report.groups), 'group')}; {done} "
             + (plural(count, "entry", "entries") if mode == "merge" else plural(count, "edge"))
             + (f", {report.skipped} group(s) skipped (changed meanwhile)" if report.skipped else "")]
    lines += [f"  {g.survivor} <- {', '.join(g.others)} (similarity {g.similarity:.4f})" for g in report.groups[:50]]
    if len(report.groups) > 50:
        lines.append(f"  ... {len(report.groups) - 50} more (--json lists them all)")
    emit(report.to_dict(), as_json, "\n".join(lines))


@click.command("promote")
@db_options
@click.option("--corpus", required=True, help="The corpus whose entries move.")
@click.option("--from", "from_tier", required=True,
              type=click.Choice(["WORKING", "EPISODIC", "SEMANTIC", "PROCEDURAL"]), help="The tier entries leave.")
@click.option("--to", "to_tier", required=True,
              type=click.Choice(["WORKING", "EPISODIC", "SEMANTIC", "PROCEDURAL"]), help="The tier they move to.")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Move only the entries matching all these exact metadata filters.")
@click.option("--older-than", type=click.FloatRange(min=0, min_open=True), default=None, metavar="DAYS",
              help="Move only the entries first written more than DAYS days ago.")
@click.option("--dry-run", is_flag=True, help="List what would move; move nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def promote(url: str | None, schema: str, corpus: str, from_tier: str, to_tier: str, filters: tuple[str, ...],
            older_than: float | None, dry_run: bool, as_json: bool) -> None:
    """Move the entries of one tier that meet a rule (metadata filters, age) to another tier.

    Example: tnsrag db promote --corpus notes --from WORKING --to EPISODIC --filter pinned=yes --older-than 1
    """
    chosen = parse_pairs(filters, "--filter")
    age = timedelta(days=older_than) if older_than is not None else None
    with database(url, schema) as db:
        store = Store(db, corpus=corpus, schema=schema)
        require_corpus(store)
        report = store.promote(from_tier, to_tier, filters=chosen or None, older_than=age, dry_run=dry_run)
    text = (f"{corpus}: {plural(report.matched, 'entry', 'entries')} of {report.from_tier} match; "
            + (f"would move them to {report.to_tier}" if dry_run
               else f"moved {report.promoted} to {report.to_tier}"
               + (f", {report.skipped} skipped (changed meanwhile)" if report.skipped else "")))
    emit(report.to_dict(), as_json, text)


def _space_vectors(store: Store, space_id: int) -> int:
    """The number of vectors embedding space ``space_id`` of the store's corpus holds."""
    rows = store.read("SELECT count(*) AS n FROM embeddings WHERE corpus = :c AND space_id = :s",
                      {"c": store.corpus, "s": space_id})
    return int(rows[0].n)
