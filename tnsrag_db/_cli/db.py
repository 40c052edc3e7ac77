"""``tnsrag db``: schema migrations (upgrade, downgrade, current, check, sql)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from tnsrag_db._cli._common import db_options, emit, handle_errors, plural
from tnsrag_db._cli._confirm import confirm_destruction, yes_option
from tnsrag_db._cli._group import SuggestingGroup
from tnsrag_db._db import migrate
from tnsrag_db._db.migration_ops import DEFAULT_LOCK_RETRIES, DEFAULT_LOCK_TIMEOUT
from tnsrag_db._db.pool import OneConnection
from tnsrag_db._indexes.vector import DEFAULT_INDEX_THRESHOLD
from tnsrag_db._indexes.vector.hnsw import build_due_indexes
from tnsrag_db._store.embedded.resolve import embedded_url
from tnsrag_db._store.store import Store

__all__ = ["db"]

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def _database(url: str | None, schema: str) -> Iterator[OneConnection]:
    """One connection to ``url`` (or the embedded server), closed afterwards."""
    db = OneConnection(url if url else embedded_url(), schema=schema)
    try:
        yield db
    finally:
        db.close()


@click.group(cls=SuggestingGroup)
def db() -> None:
    """Manage the library's schema with its alembic migrations.

    Example: tnsrag db upgrade --url postgresql://app@db.internal/app
    """


def _lock_options(func: F) -> F:
    """--lock-timeout and --lock-retries: how DDL waits for table locks (see migration_ops)."""
    func = click.option("--lock-retries", type=click.IntRange(min=0), default=DEFAULT_LOCK_RETRIES, show_default=True,
                        help="Tries again after a lock timeout before giving up.")(func)
    return click.option("--lock-timeout", type=click.FloatRange(min=0), default=DEFAULT_LOCK_TIMEOUT,
                        show_default=True,
                        help="Seconds DDL waits for a table lock before it gives up and retries (0: no limit); "
                             "writers never queue behind it for longer.")(func)


@db.command()
@db_options
@click.option("--revision", default="head", show_default=True, help="Target revision.")
@click.option("--tenancy", type=click.Choice(["rls", "off"]), default=None,
              help="Then switch tenant isolation (row-level security, see docs/deployment.md, 'Tenancy') "
                   "on (rls) or off; left as it is by default.")
@_lock_options
@click.option("--finish", is_flag=True,
              help="Then finish the rolling upgrade: stop serving releases older than the floor the upgrade "
                   "set, so changes they cannot read take effect (run it once no older process remains; "
                   "see docs/deployment.md, 'Rolling upgrades').")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def upgrade(url: str | None, schema: str, revision: str, tenancy: str | None, lock_timeout: float,
            lock_retries: int, finish: bool, as_json: bool) -> None:
    """Migrate the schema up (safe to run from several processes at once: an advisory lock serialises them).

    Each revision runs in its own transaction; DDL waits at most --lock-timeout for a table
    lock and is retried, so an upgrade never blocks writers behind a long transaction.
    The schema keeps serving the previous release's processes until --finish.

    Example: tnsrag db upgrade --tenancy rls --lock-timeout 2
    """
    from tnsrag_db import tenancy as tenants

    with _database(url, schema) as db:
        before = migrate.current_revision(db, schema=schema)
        migrate.upgrade(db, schema=schema, revision=revision, lock_timeout=lock_timeout, lock_retries=lock_retries)
        after = migrate.current_revision(db, schema=schema)
        finished = migrate.finish(db, schema=schema) if finish else None
        served = migrate.served_releases(db, schema=schema) if after is not None else None
        newer = migrate.schema_state(db, schema=schema).newer
        if tenancy is not None:
            switch = tenants.enable if tenancy == "rls" else tenants.disable
            switch(db, schema=schema, lock_timeout=lock_timeout, lock_retries=lock_retries)
        rls = after is not None and tenants.is_enabled(db, schema=schema)
        indexed = not rls or tenants.filters_use_indexes(db, schema=schema)
        triggers = after is not None and tenants.pair_triggers_attached(db, schema=schema)
    at_head = after == migrate.head_revision()
    state = "rls" if rls else "off"
    note = "" if indexed else ("\nnote: tenant roles' metadata filters run after the row-level security policy, "
                               "not as index conditions (jsonb @> is not LEAKPROOF and the schema's filter "
                               "pairs are missing or not maintained: run tnsrag db upgrade --tenancy rls again; "
                               "see docs/deployment.md, 'Tenancy')")
    if not rls and triggers:
        note += ("\nnote: the filter pairs' triggers stay on entries (a store that chose the pairs while tenancy "
                 "was on keeps them right), so writes keep paying them; tnsrag db downgrade --revision 0006 "
                 "removes them (see docs/deployment.md, 'Tenancy')")
    if finished is not None and finished.changed:
        note += (f"\nupgrade finished: the schema serves releases from revision {finished.serves_from} on "
                 f"(was {finished.serves_from_before})")
    if served is not None and served[1] is not None:
        note += (f"\nnote: rolling upgrade not finished: the schema still serves releases from revision "
                 f"{served[0]} on, so changes they cannot read wait (BM25 postings stay rows); once no older "
                 "process remains: tnsrag db upgrade --finish")
    emit({"schema": schema, "from": before, "to": after, "at_head": at_head, "tenancy": state,
          "filters_use_indexes": indexed, "filter_pair_triggers": triggers,
          "serves_from": served[0] if served else None, "finished": served is not None and served[1] is None},
         as_json,
         (f"schema {schema}: at revision {after}, newer than this tnsrag_db (head {migrate.head_revision()}), "
          "which it still serves; nothing to do" if newer
          else f"schema {schema}: at head ({after}), nothing to do" if before == after and at_head
          else f"schema {schema}: {before or 'empty'} -> {after}") + f"; tenancy {state}{note}")


@db.command()
@db_options
@click.option("--revision", default="base", show_default=True, help="Target revision ('base' removes every table).")
@_lock_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@yes_option
@handle_errors
def downgrade(url: str | None, schema: str, revision: str, lock_timeout: float, lock_retries: int, as_json: bool,
              yes: bool) -> None:
    """Migrate the schema down (default: to base, dropping the library's tables and data).

    Asks for confirmation first; without a terminal it refuses unless --yes is given.

    Example: tnsrag db downgrade --revision base --yes
    """
    with _database(url, schema) as db:
        before = migrate.current_revision(db, schema=schema)
        if before is None:
            emit({"schema": schema, "from": None, "to": None}, as_json, f"schema {schema}: not migrated, nothing to do")
            return
        where = db.location
        confirm_destruction(f"downgrade schema {schema!r} on {where} from {before} to {revision}"
                            f"{' (drops every table and all data)' if revision == 'base' else ''}", yes=yes)
        migrate.downgrade(db, schema=schema, revision=revision, lock_timeout=lock_timeout,
                          lock_retries=lock_retries)
        after = migrate.current_revision(db, schema=schema)
    emit({"schema": schema, "from": before, "to": after}, as_json,
         f"schema {schema}: {before} -> {after or 'base'}")


@db.command()
@db_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def current(url: str | None, schema: str, as_json: bool) -> None:
    """Print the revision the schema is at and this release's head.

    Example: tnsrag db current --json
    """
    with _database(url, schema) as db:
        rev = migrate.current_revision(db, schema=schema)
        state = migrate.schema_state(db, schema=schema)
        served = migrate.served_releases(db, schema=schema) if rev is not None else None
    head = migrate.head_revision()
    if state.newer:
        advice = (" - newer than this tnsrag_db, which it still serves" if state.usable
                  else " - newer than this tnsrag_db, which it no longer serves: upgrade tnsrag_db")
    elif rev != head:
        advice = " - run tnsrag db upgrade"
    elif served is not None and served[1] is not None:
        advice = (f" - rolling upgrade not finished (serves releases from revision {served[0]} on): "
                  "tnsrag db upgrade --finish once no older process remains")
    else:
        advice = ""
    emit({"schema": schema, "current": rev, "head": head, "up_to_date": rev == head, "usable": state.usable,
          "serves_from": served[0] if served else None, "finished": served is not None and served[1] is None},
         as_json, f"schema {schema}: {rev or 'not migrated'} (head {head}){advice}")


@db.command()
@db_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def check(url: str | None, schema: str, as_json: bool) -> None:
    """Check for drift between the library's table declarations and the migrated database.

    Exits 1 when the schema is not migrated, not at head, or differs from the
    declarations. The HNSW indexes the library builds per embedding space at run time
    are not drift.

    Example: tnsrag db check
    """
    with _database(url, schema) as db:
        rev = migrate.current_revision(db, schema=schema)
        diffs = migrate.check(db, schema=schema) if rev is not None else []
    head = migrate.head_revision()
    ok = rev == head and not diffs
    if rev is None:
        state = f"schema {schema} is not migrated (head {head}): run tnsrag db upgrade"
    elif rev != head:
        state = f"schema {schema} is at {rev}, head is {head}: run tnsrag db upgrade"
    else:
        state = f"schema {schema} at {rev} differs from this release's declarations:"
    emit({"schema": schema, "current": rev, "head": head, "differences": diffs, "ok": ok}, as_json,
         "no drift" if ok else "\n".join([state, *(f"  {d}" for d in diffs)]))
    if not ok:
        sys.exit(1)


@db.command()
@click.option("--schema", default="tnsrag", show_default=True, help="PostgreSQL schema for the tables.")
@click.option("--range", "revision_range", default="base:head", show_default=True,
              help="Revisions as FROM:TO (a downgrade when TO is older).")
@click.option("--citus", is_flag=True,
              help="Instead: the script that distributes the migrated tables by corpus on a Citus coordinator.")
def sql(schema: str, revision_range: str, citus: bool) -> None:
    """Print the SQL of a migration without connecting (for review or a DBA).

    With --citus, print the script an operator runs on a Citus coordinator after the
    migrations: every table hash-distributed by corpus and co-located (see
    docs/deployment.md, "Scale out with Citus").

    Example: tnsrag db sql --range base:head > upgrade.sql; tnsrag db sql --citus > citus.sql
    """
    if citus:
        from tnsrag_db._store.citus import citus_script

        click.echo(citus_script(schema=schema), nl=False)
        return
    click.echo(migrate.offline_sql(schema=schema, revision_range=revision_range), nl=False)


@db.command()
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
    from tnsrag_db._store.citus import distribute as run

    with _database(url, schema) as db:
        report = run(db, schema=schema)
    emit({"schema": schema, "distributed": report.distributed, "already": report.already,
          "policies": report.policies, "triggers_dropped": report.triggers}, as_json,
         f"schema {schema}: {len(report.distributed)} tables distributed by corpus"
         + (f", {len(report.already)} already were" if report.already else "")
         + (f"; dropped triggers {', '.join(report.triggers)}" if report.triggers else ""))


@db.command("partition-sql")
@db_options
@click.option("--partitions", type=click.IntRange(2, 1024), default=8, show_default=True,
              help="Hash partitions per table.")
@handle_errors
def partition_sql(url: str | None, schema: str, partitions: int) -> None:
    """Print the script that hash-partitions the big tables by corpus (read from the live
    catalog; nothing is changed). Review it, then run it in a maintenance window.

    Example: tnsrag db partition-sql --url "$DATABASE_URL" --partitions 16 > partition.sql; psql "$DATABASE_URL" -1 -f partition.sql
    """
    from tnsrag_db._db.partition import partition_script

    with _database(url, schema) as db, db.connect() as conn:
        click.echo(partition_script(conn, schema=schema, partitions=partitions), nl=False)


@db.command("build-indexes")
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
    with _database(url, schema) as db:
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


@db.command("merge-postings")
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
    from tnsrag_db._store.bm25.merge import MergeReport

    rows = []
    with _database(url, schema) as db:
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


@db.command("sweep")
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
    with _database(url, schema) as db:
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


@db.command("consolidate")
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
    from tnsrag_db._cli._progress import PhaseProgress, _isatty
    from tnsrag_db.admin import require_corpus

    with _database(url, schema) as db:
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


@db.command("promote")
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
    from datetime import timedelta

    from tnsrag_db._cli._common import parse_pairs
    from tnsrag_db.admin import require_corpus

    chosen = parse_pairs(filters, "--filter")
    age = timedelta(days=older_than) if older_than is not None else None
    with _database(url, schema) as db:
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


def _register_tenant_commands() -> None:
    from tnsrag_db._cli.db_tenant import tenant

    db.add_command(tenant)


_register_tenant_commands()
