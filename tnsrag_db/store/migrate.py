"""Run the alembic revisions programmatically (upgrade, downgrade, current, check, sql).

The revisions live in the top-level ``migrations/`` folder of the source tree and
ship inside the wheel as ``tnsrag_db._migrations``, so an installed package can
migrate a database without the source tree.
"""

from __future__ import annotations

import io
import zlib
from contextlib import redirect_stdout
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from tnsrag_db.errors import MigrationError, SchemaNotReadyError
from tnsrag_db.store.engine import validate_schema_name

__all__ = [
    "advisory_lock_key",
    "bootstrap_statements",
    "check",
    "current_revision",
    "downgrade",
    "ensure_at_head",
    "head_revision",
    "migrations_dir",
    "offline_sql",
    "upgrade",
]


def migrations_dir() -> Path:
    """The folder holding ``env.py`` and ``versions/``: the packaged copy, else the source tree's."""
    try:
        import tnsrag_db._migrations as packaged  # type: ignore[import-not-found]

        return Path(packaged.__file__).parent
    except ImportError:
        return Path(__file__).resolve().parents[2] / "migrations"


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


def upgrade(engine: Engine, *, schema: str, revision: str = "head") -> None:
    """Migrate ``schema`` up to ``revision`` under the advisory lock; raises :class:`MigrationError`.

    A schema already at head is left alone without taking the lock or running any DDL,
    so an application or read-only role (no CREATE on the database) can run it.
    """
    try:
        if revision == "head" and current_revision(engine, schema=schema) == head_revision():
            return
        with engine.connect() as conn:
            command.upgrade(_config(schema, conn), revision)
    except Exception as exc:
        raise MigrationError(f"upgrade of schema {schema!r} to {revision} failed: {exc}") from exc


def downgrade(engine: Engine, *, schema: str, revision: str = "base") -> None:
    """Migrate ``schema`` down to ``revision`` (default: remove every table) under the lock."""
    try:
        with engine.connect() as conn:
            command.downgrade(_config(schema, conn), revision)
    except Exception as exc:
        raise MigrationError(f"downgrade of schema {schema!r} to {revision} failed: {exc}") from exc


def current_revision(engine: Engine, *, schema: str) -> str | None:
    """The revision ``schema`` is at, or None for an unmigrated database."""
    validate_schema_name(schema)
    with engine.connect() as conn:
        exists = conn.execute(
            text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{schema}.alembic_version"}
        ).scalar_one()
        if not exists:
            return None
        ctx = MigrationContext.configure(conn, opts={"version_table_schema": schema})
        return ctx.get_current_revision()


def ensure_at_head(engine: Engine, *, schema: str) -> None:
    """Raise :class:`SchemaNotReadyError` unless ``schema`` is migrated to this release's head."""
    current = current_revision(engine, schema=schema)
    head = head_revision()
    if current != head:
        state = "not migrated" if current is None else f"at revision {current}"
        raise SchemaNotReadyError(
            f"schema {schema!r} is {state}, this tnsrag_db needs {head}: run `tnsrag db upgrade --url ...` "
            "(or connect with auto_migrate=True)"
        )


def check(engine: Engine, *, schema: str) -> list[str]:
    """Compare the declared tables with the migrated database; return the differences (empty = none)."""
    from alembic.autogenerate import compare_metadata

    from tnsrag_db.store.schema import metadata

    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "version_table_schema": schema,
                "compare_type": True,
                "target_metadata": metadata,
                "include_name": _not_version_table,
            },
        )
        diffs = compare_metadata(ctx, metadata)
    return [repr(d) for d in diffs]


def _not_version_table(name: str | None, type_: str, _parent: object) -> bool:
    return not (type_ == "table" and name == "alembic_version")


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
