"""``tnsrag db upgrade``, ``downgrade``, ``current``, ``check`` and ``sql``: the schema's
alembic migrations (this module imports alembic; ``tnsrag db``'s other commands do not)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tnsrag_db import tenancy as tenants
from tnsrag_db._cli._common import db_options, emit, handle_errors
from tnsrag_db._cli._confirm import confirm_destruction, yes_option
from tnsrag_db._cli.db import database
from tnsrag_db._db import migrate
from tnsrag_db._db.lock_retries import DEFAULT_LOCK_RETRIES, DEFAULT_LOCK_TIMEOUT

__all__ = ["check", "current", "downgrade", "sql", "upgrade"]

F = TypeVar("F", bound=Callable[..., Any])


def _lock_options(func: F) -> F:
    """--lock-timeout and --lock-retries: how DDL waits for table locks (see :mod:`tnsrag_db._db.lock_retries`)."""
    func = click.option("--lock-retries", type=click.IntRange(min=0), default=DEFAULT_LOCK_RETRIES, show_default=True,
                        help="Tries again after a lock timeout before giving up.")(func)
    return click.option("--lock-timeout", type=click.FloatRange(min=0), default=DEFAULT_LOCK_TIMEOUT,
                        show_default=True,
                        help="Seconds DDL waits for a table lock before it gives up and retries (0: no limit); "
                             "writers never queue behind it for longer.")(func)

@click.command()
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
    with database(url, schema) as db:
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


@click.command()
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
    with database(url, schema) as db:
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


@click.command()
@db_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@handle_errors
def current(url: str | None, schema: str, as_json: bool) -> None:
    """Print the revision the schema is at and this release's head.

    Example: tnsrag db current --json
    """
    with database(url, schema) as db:
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


@click.command()
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
    with database(url, schema) as db:
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


@click.command()
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
        from tnsrag_db._store.citus import citus_script  # the table declarations (~30 ms): only --citus reads them

        click.echo(citus_script(schema=schema), nl=False)
        return
    click.echo(migrate.offline_sql(schema=schema, revision_range=revision_range), nl=False)
