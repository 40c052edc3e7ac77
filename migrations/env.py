"""Alembic environment for tnsrag_db.

- The schema comes from ``config.attributes["tnsrag_schema"]`` (set by the library),
  else ``-x schema=NAME``, else the ``tnsrag.schema`` option, else ``tnsrag``.
- A connection may be injected through ``config.attributes["connection"]``;
  otherwise one is made from ``-x url=...``, ``sqlalchemy.url`` or TNSRAG_DATABASE_URL.
- Every online upgrade and downgrade holds a PostgreSQL advisory lock keyed by the
  schema, waited for by polling with no transaction open: N processes migrating the
  same database at once run one after another, and each later one finds the schema at
  head and does nothing. The version table is read only after the lock is held. The
  CLI's read-only ``current`` and ``check`` neither lock nor create anything.
- Each revision runs in its own transaction (``transaction_per_migration``) with
  ``lock_timeout`` set (``config.attributes["tnsrag_lock_timeout"]`` or ``-x
  lock_timeout=S``, seconds, default 2): DDL that cannot get its table lock in time gives up instead of queueing (which
  would block every writer of the table behind it), and the revision is tried again
  (``tnsrag_lock_retries`` / ``-x lock_retries=N`` more times, default 5) before the upgrade fails. A revision
  may leave its transaction for ``CREATE INDEX CONCURRENTLY`` (alembic's
  ``autocommit_block()``, see :mod:`tnsrag_db._db.migration_ops`).
"""

from __future__ import annotations

import os
import zlib

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from tnsrag_db._db.lock_retries import (
    DEFAULT_LOCK_RETRIES,
    DEFAULT_LOCK_TIMEOUT,
    hold_migration_lock,
    run_with_lock_retries,
)
from tnsrag_db._db.migrate import advisory_lock_key, alembic_connection, bootstrap_statements, include_object
from tnsrag_db._db.schema import DEFAULT_SCHEMA, metadata
from tnsrag_db._db.settings import validate_schema_name

config = context.config
x_args = context.get_x_argument(as_dictionary=True)
schema = validate_schema_name(
    config.attributes.get("tnsrag_schema")
    or x_args.get("schema")
    or config.get_main_option("tnsrag.schema")
    or DEFAULT_SCHEMA
)
config.attributes["tnsrag_schema"] = schema


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=metadata,
        version_table_schema=schema,
        compare_type=True,
        # The HNSW indexes the library builds per embedding space are not drift.
        include_object=include_object,
        transactional_ddl=True,
        # Online: one transaction per revision (see the module docstring). The offline
        # script stays one transaction around its advisory lock and search_path.
        transaction_per_migration=not context.is_offline_mode(),
        **kwargs,  # type: ignore[arg-type]
    )


def run_offline() -> None:
    url = x_args.get("url") or config.get_main_option("sqlalchemy.url") or "postgresql+psycopg://"
    _configure(url=url, literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.execute(f"SELECT pg_advisory_xact_lock({advisory_lock_key(schema)})")
        for statement in bootstrap_statements(schema):
            context.execute(statement)
        context.execute(f"SET LOCAL search_path TO {schema}, public")
        context.run_migrations()


def _read_only_command() -> bool:
    """True for the alembic CLI's ``current`` and ``check``: they only read the version
    table, so they must not create the schema or the extension (nor wait for the lock)."""
    cmd = getattr(getattr(config, "cmd_opts", None), "cmd", None)
    fn = cmd[0] if isinstance(cmd, tuple) and cmd else None
    return getattr(fn, "__name__", "") in {"current", "check"}


#: Extensions the revisions need, created before any revision runs (see _ensure_extensions).
_EXTENSIONS = ("vector", "btree_gin")
#: Advisory-lock key serialising extension creation across every schema of a database.
_EXTENSIONS_LOCK_KEY = zlib.crc32(b"tnsrag_db.migrate:extensions") + 0x7A5_0000_0000


def _ensure_extensions(connection: Connection) -> None:
    """Create the missing extensions under a database-wide lock, committed before the migration.

    The migration lock is per schema, so upgrades of two schemas of one database ran
    ``CREATE EXTENSION IF NOT EXISTS vector`` at the same time: the later one does not
    see the earlier one's uncommitted row and failed on pg_extension's unique index
    (about one process in eight). An extension that exists is left alone (and needs no
    privilege), so a role without CREATE on the database can upgrade once a superuser
    created the extensions.
    """
    names = list(_EXTENSIONS)
    query = text("SELECT n FROM unnest(CAST(:names AS text[])) AS n "
                 "WHERE NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = n) ORDER BY n")
    missing = connection.execute(query, {"names": names}).scalars().all()
    connection.commit()
    if not missing:
        return
    # Lock, then a new transaction (as in _run_with): it sees what the lock holder committed.
    with hold_migration_lock(connection, _EXTENSIONS_LOCK_KEY):
        with connection.begin():
            for name in connection.execute(query, {"names": names}).scalars().all():
                # Names come from _EXTENSIONS above, not from input.
                connection.execute(text(f"CREATE EXTENSION IF NOT EXISTS {name} WITH SCHEMA public"))


def _run_with(connection: Connection) -> None:
    if connection.in_transaction():
        connection.commit()
    if _read_only_command():
        with connection.begin():
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
        return
    _ensure_extensions(connection)
    # The session-level lock is taken between transactions and each revision runs in a NEW
    # transaction: waiting on an advisory lock does not refresh the backend's catalog
    # caches, so a transaction that began before another process created the schema could
    # still believe it missing (CREATE SCHEMA IF NOT EXISTS then fails on a duplicate key).
    # A transaction started after the wait sees the catalog as committed.
    with hold_migration_lock(connection, advisory_lock_key(schema)):
        with connection.begin():
            for statement in bootstrap_statements(schema):
                connection.execute(text(statement))
            # The revision this run starts from (None: a new schema), for revisions whose
            # work depends on whether any older release could have used the schema.
            config.attributes["tnsrag_upgrade_from"] = _version(connection)
        # Session-wide: the revisions' transactions come and go. The connection is
        # closed after the migration (see tnsrag_db._db.migrate.alembic_connection).
        connection.execute(text(f"SET search_path TO {schema}, public"))
        # On a Citus coordinator: a revision that reads a distributed table (in parallel,
        # one connection per shard) and then changes a function (propagated to every node
        # over one connection per node) fails in one transaction unless every command of
        # the transaction uses one connection per node.
        connection.execute(text(
            "SELECT set_config('citus.multi_shard_modify_mode', 'sequential', false) "
            "FROM pg_extension WHERE extname = 'citus'"))
        connection.commit()
        _configure(connection=connection)
        run_with_lock_retries(connection, _run_migrations, lock_timeout=float(
            config.attributes.get("tnsrag_lock_timeout", x_args.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))),
            retries=int(config.attributes.get("tnsrag_lock_retries", x_args.get("lock_retries", DEFAULT_LOCK_RETRIES))))


def _version(connection: Connection) -> str | None:
    """The revision in the schema's version table, or None (no table, or no row)."""
    if not connection.execute(text("SELECT to_regclass(:t) IS NOT NULL"),
                              {"t": f"{schema}.alembic_version"}).scalar_one():
        return None
    # The schema name was validated above: safe as an identifier.
    return connection.execute(text(f"SELECT min(version_num) FROM {schema}.alembic_version")).scalar_one()


def _run_migrations() -> None:
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    injected = config.attributes.get("connection")
    if injected is not None:
        _run_with(injected)
        return
    url = x_args.get("url") or os.environ.get("TNSRAG_DATABASE_URL") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database URL: pass -x url=..., set sqlalchemy.url or TNSRAG_DATABASE_URL")
    with alembic_connection(url, schema) as connection:
        _run_with(connection)


if context.is_offline_mode():
    run_offline()
else:
    run_online()
