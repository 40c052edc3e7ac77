"""Run the alembic revisions programmatically (upgrade, downgrade, current, check, sql).

Each function takes the store's connections (a :class:`~tnsrag_db._db.pool.Pool`). What
alembic runs, it runs on a SQLAlchemy connection of its own, opened for the call over the
same database and closed after it (:func:`alembic_connection`): SQLAlchemy stays the
migrations' tool and nothing else's. The checks every store opening makes
(:func:`is_at_head`, :func:`schema_state`) are plain statements on the store's own pool.

The revisions live in the top-level ``migrations/`` folder of the source tree and
ship inside the wheel as ``tnsrag_db._migrations``, so an installed package can
migrate a database without the source tree.
"""

from __future__ import annotations

import io
import logging
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from tnsrag_db._db.driver_errors import driver_message, sqlstate_of
from tnsrag_db._db.lock_retries import hold_migration_lock
from tnsrag_db._db.migration_ops import compat_function_sql
from tnsrag_db._db.partition import PARTITION_NAME
from tnsrag_db._db.pool import Connections
from tnsrag_db._db.revisions import (  # read without alembic: every store opening checks them
    COMPAT_FUNCTION,
    ensure_at_head,
    is_at_head,
    migrations_dir,
    schema_state,
)
from tnsrag_db._db.settings import conninfo_of, validate_schema_name
from tnsrag_db._errors import MigrationError

# Only what migrates imports this module (a store whose schema is behind, ``tnsrag db``'s
# migration commands), so alembic and SQLAlchemy are imported at once: the checks every
# store opening makes are :mod:`~tnsrag_db._db.revisions`', one SELECT without either.

__all__ = [
    "FinishReport",
    "RUNTIME_INDEX",
    "advisory_lock_key",
    "alembic_connection",
    "bootstrap_statements",
    "check",
    "current_revision",
    "describe_difference",
    "downgrade",
    "ensure_at_head",
    "finish",
    "served_releases",
    "head_revision",
    "include_object",
    "is_at_head",
    "offline_sql",
    "schema_state",
    "upgrade",
]

_log = logging.getLogger("tnsrag_db")


def advisory_lock_key(schema: str) -> int:
    """The bigint advisory-lock key that serialises migrations of ``schema``."""
    return zlib.crc32(f"tnsrag_db.migrate:{schema}".encode()) + 0x7A5_0000_0000


def bootstrap_statements(schema: str) -> list[str]:
    """Statements run under the migration lock before any revision: the schema and pgvector."""
    validate_schema_name(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        # pgvector goes to public so that dropping the library's schema never
        # takes an extension other applications may use.
        "CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public",
    ]


def _config(schema: str, connection: Connection | None = None, url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["tnsrag_schema"] = validate_schema_name(schema)
    if connection is not None:
        cfg.attributes["connection"] = connection
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The newest revision this installation ships."""
    head = ScriptDirectory.from_config(_config("tnsrag")).get_current_head()
    assert head is not None
    return head


@contextmanager
def alembic_connection(db: Connections | str, schema: str) -> Iterator[Connection]:
    """A SQLAlchemy connection to ``db``'s database (or to the URL ``db``) for alembic,
    searching ``<schema>, public``, closed (never pooled) when the block ends: configured
    before a migration changed the schema, it must serve nobody after it."""
    conninfo = conninfo_of(db if isinstance(db, str) else db.conninfo, schema=schema)
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(conninfo),
                              poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _online_config(schema: str, conn: Connection, lock_timeout: float | None, lock_retries: int | None) -> Config:
    """The alembic config for an online migration, with the lock-timeout options env.py reads."""
    cfg = _config(schema, conn)
    if lock_timeout is not None:
        cfg.attributes["tnsrag_lock_timeout"] = lock_timeout
    if lock_retries is not None:
        cfg.attributes["tnsrag_lock_retries"] = lock_retries
    return cfg


def upgrade(db: Connections, *, schema: str, revision: str = "head", lock_timeout: float | None = None,
            lock_retries: int | None = None) -> None:
    """Migrate ``schema`` up to ``revision`` under the advisory lock; raises :class:`MigrationError`.

    A schema already at head is left alone without taking the lock or running any DDL,
    so an application or read-only role (no CREATE on the database) can run it. Each
    revision's DDL waits at most ``lock_timeout`` seconds for a table lock (default
    :data:`tnsrag_db._db.lock_retries.DEFAULT_LOCK_TIMEOUT`) and is retried ``lock_retries``
    times (default :data:`~tnsrag_db._db.lock_retries.DEFAULT_LOCK_RETRIES`) before the
    upgrade fails; the revisions committed until then stay.
    """
    state = schema_state(db, schema=schema)
    if state.newer:
        if revision == "head" and state.usable:
            return  # a later release upgraded it, and it still serves this one
        raise MigrationError(str(state.error(schema)))
    try:
        if revision == "head" and state.at_head:
            return
        with alembic_connection(db, schema) as conn:
            command.upgrade(_online_config(schema, conn, lock_timeout, lock_retries), revision)
        # The pool's connections were configured before the revisions ran (pgvector's type
        # adapts only once the extension exists): later ones are opened afresh.
        db.reopen()
    except Exception as exc:
        raise _failed(f"upgrade of schema {schema!r} to {revision}", exc) from exc


def downgrade(db: Connections, *, schema: str, revision: str = "base", lock_timeout: float | None = None,
              lock_retries: int | None = None) -> None:
    """Migrate ``schema`` down to ``revision`` (default: remove every table) under the lock
    (``lock_timeout`` and ``lock_retries`` as for :func:`upgrade`)."""
    try:
        with alembic_connection(db, schema) as conn:
            command.downgrade(_online_config(schema, conn, lock_timeout, lock_retries), revision)
        db.reopen()
    except Exception as exc:
        raise _failed(f"downgrade of schema {schema!r} to {revision}", exc) from exc


def _failed(what: str, exc: BaseException) -> MigrationError:
    """A migration's failure in one line: the server's message, without the statement and
    SQLAlchemy's documentation link (both stay on ``__cause__``), its SQLSTATE kept."""
    error = MigrationError(f"{what} failed: {driver_message(exc)}")
    error.sqlstate = sqlstate_of(exc)
    return error


def current_revision(db: Connections, *, schema: str) -> str | None:
    """The revision ``schema`` is at, or None for an unmigrated database."""
    validate_schema_name(schema)
    with db.connect() as plain:
        exists = plain.execute("SELECT to_regclass(:t) IS NOT NULL", {"t": f"{schema}.alembic_version"}).scalar_one()
    if not exists:
        return None
    with alembic_connection(db, schema) as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table_schema": schema})
        return ctx.get_current_revision()


@dataclass(frozen=True, slots=True)
class FinishReport:
    """What :func:`finish` did: the floor of served releases before and after (equal when
    nothing waited for the finish)."""

    serves_from_before: str | None
    serves_from: str | None

    @property
    def changed(self) -> bool:
        """The floor moved."""
        return self.serves_from != self.serves_from_before


#: Reads a schema's compatibility function (``{schema}``: a validated name).
_COMPAT_SQL = "SELECT serves_from, finish_to FROM {schema}." + COMPAT_FUNCTION + "()"


def served_releases(db: Connections, *, schema: str) -> tuple[str, str | None] | None:
    """The schema's floor of served releases and the floor the finish moves it to (None:
    nothing waits), or None for a schema that records none (before revision 0012)."""
    validate_schema_name(schema)
    with db.connect() as conn:
        if not conn.execute("SELECT to_regprocedure(:f) IS NOT NULL",
                            {"f": f"{schema}.{COMPAT_FUNCTION}()"}).scalar_one():
            return None
        serves_from, finish_to = conn.execute(_COMPAT_SQL.format(schema=schema)).one()
    return str(serves_from), finish_to


def finish(db: Connections, *, schema: str) -> FinishReport:
    """Finish a rolling upgrade of ``schema``: stop serving the releases older than the
    floor the last upgrade set, so the changes they cannot read may take effect (from
    revision 0012: merges of BM25 postings into blocks).

    Run it once no process of an older release uses the schema. Under the migration lock;
    a schema with nothing waiting is left alone. Raises :class:`SchemaNotReadyError` for a
    schema this release cannot use and :class:`MigrationError` for one too old to record
    a floor (run the upgrade first).
    """
    state = schema_state(db, schema=schema)
    if not state.usable:
        raise state.error(schema)
    with alembic_connection(db, schema) as conn:
        with hold_migration_lock(conn, advisory_lock_key(schema)):
            with conn.begin():
                present = conn.execute(sa.text("SELECT to_regprocedure(:f) IS NOT NULL"),
                                       {"f": f"{schema}.{COMPAT_FUNCTION}()"}).scalar_one()
                if not present:
                    raise MigrationError(f"schema {schema!r} is at revision {state.revision}, which records no "
                                         "floor of served releases: run `tnsrag db upgrade` first")
                before, to = conn.execute(sa.text(_COMPAT_SQL.format(schema=schema))).one()
                if to is not None:
                    conn.execute(sa.text(compat_function_sql(schema, to, None)))
    return FinishReport(serves_from_before=before, serves_from=before if to is None else to)


def check(db: Connections, *, schema: str) -> list[str]:
    """Compare the declared tables with the migrated database; return the differences, each
    described in one line (empty = none).

    Objects the library creates at run time are not differences (see :func:`include_object`).
    """
    from tnsrag_db._db.schema import metadata  # the table declarations (~30 ms): only this check compares them

    with alembic_connection(db, schema) as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "version_table_schema": schema,
                "compare_type": True,
                "target_metadata": metadata,
                "include_name": _not_version_table,
                "include_object": include_object,
            },
        )
        diffs = compare_metadata(ctx, metadata)
    return [describe_difference(d) for d in diffs]


def _not_version_table(name: str | None, type_: str, _parent: object) -> bool:
    # Neither the version table nor the partitions `tnsrag db partition-sql` creates
    # (their parents are the declared tables) are drift.
    return not (type_ == "table" and (name == "alembic_version" or PARTITION_NAME.match(name or "")))


#: Indexes the library creates at run time, outside the revisions: one HNSW index per
#: embedding space (``tnsrag_db._indexes.vector.hnsw.hnsw_index_name``), built and dropped by ``VectorMemoryStore``.
RUNTIME_INDEX = re.compile(r"^ix_embeddings_hnsw_[0-9]+$")
#: Foreign keys PostgreSQL adds for each partition a declared key references (``<name>_<n>``)
#: once the tables are partitioned (``tnsrag db partition-sql``).
PARTITION_FOREIGN_KEY = re.compile(r"^fk_[a-z0-9_]+_[0-9]+$")


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Alembic's ``include_object`` hook: False for the objects the library creates at run time.

    These are the per-space HNSW indexes on ``embeddings`` (found in the database, with no
    declaration to compare to) and, on partitioned tables, the per-partition copies of
    declared foreign keys; the write path's stage tables are session temp tables and
    never appear. Used by :func:`check` and by ``migrations/env.py`` (``alembic check``,
    autogenerate), so neither reports them as drift.
    """
    if type_ == "index" and reflected and compare_to is None and name is not None and RUNTIME_INDEX.match(name):
        table = getattr(obj, "table", None)
        return getattr(table, "name", None) != "embeddings"
    if type_ == "foreign_key_constraint" and reflected and compare_to is None and name is not None \
            and PARTITION_FOREIGN_KEY.match(name):
        return False  # PostgreSQL's own copy of a declared key, per partition of the table it references
    return True


def describe_difference(diff: object) -> str:
    """One readable line for an alembic autogenerate difference (a tuple, or a list of
    tuples for column modifications), e.g. ``column entries.doc_len is declared but missing
    from the database``."""
    if isinstance(diff, list):
        return "; ".join(describe_difference(d) for d in diff)
    if not isinstance(diff, tuple) or not diff:
        return repr(diff)
    op = diff[0]

    def label(obj: object) -> str:
        table = getattr(obj, "table", None)
        own = getattr(obj, "name", None) or "(unnamed)"
        return f"{getattr(table, 'name', '?')}.{own}" if table is not None else str(own)

    if op in ("add_table", "remove_table"):
        where = "declared but missing from the database" if op == "add_table" else "in the database but not declared"
        return f"table {getattr(diff[1], 'name', diff[1])} is {where}"
    if op in ("add_column", "remove_column") and len(diff) >= 4:
        where = "declared but missing from the database" if op == "add_column" else "in the database but not declared"
        return f"column {diff[2]}.{getattr(diff[3], 'name', diff[3])} is {where}"
    if op in ("add_index", "remove_index", "add_constraint", "remove_constraint", "add_fk", "remove_fk"):
        kind = {"index": "index", "constraint": "constraint", "fk": "foreign key"}[op.split("_", 1)[1]]
        where = "declared but missing from the database" if op.startswith("add") else "in the database but not declared"
        return f"{kind} {label(diff[1])} is {where}"
    if op.startswith("modify_") and len(diff) >= 7:
        what = op.removeprefix("modify_")
        return f"column {diff[2]}.{diff[3]}: {what} is {diff[5]!r} in the database, declared {diff[6]!r}"
    return repr(diff)


def offline_sql(*, schema: str, revision_range: str = "base:head", url: str = "postgresql+psycopg://") -> str:
    """The SQL an upgrade (``a:b``) or downgrade (``b:a`` with a downgrade target) would run, as text."""
    cfg = _config(schema, url=url)
    out = io.StringIO()
    cfg.output_buffer = out
    start, _, end = revision_range.partition(":")
    with redirect_stdout(out):
        if end and _is_downgrade(start, end):
            command.downgrade(cfg, revision_range, sql=True)
        else:
            command.upgrade(cfg, revision_range if end else f"base:{start}", sql=True)
    return out.getvalue()


def _is_downgrade(start: str, end: str) -> bool:
    order = ["base"] + [s.revision for s in reversed(list(ScriptDirectory.from_config(_config("tnsrag")).walk_revisions()))]
    resolve = {"head": order[-1]}
    try:
        return order.index(resolve.get(start, start)) > order.index(resolve.get(end, end))
    except ValueError:
        return False
