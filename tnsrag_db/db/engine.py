"""Engines: URL normalisation, pooled engines, and connection hooks.

The engine knows nothing of the layers above it. A layer that needs something of every
pooled connection registers :class:`ConnectionHooks` (psycopg_pool's ``configure`` /
``check`` / ``reset`` are the model): ``configure`` runs once on each new connection,
``check`` when the pool hands one out, ``reset`` when it comes back. Hooks are given
once, for sync and async connections alike: the sync engines of :func:`create_engine`
and the async engines of :mod:`tnsrag_db.db.aio` both read the registry at every
connection event (:func:`run_hooks`), so hooks registered after an engine exists reach
its next connections too. Registered today:
this module's idle-connection ping (``check`` + ``reset``) and the pgvector type
adaptation of :mod:`tnsrag_db.db.schema` (``configure``). The write path's stage tables
need none: they are created on a connection's first write (see
:mod:`tnsrag_db.store.staging`) and their flag lives in the pooled connection's ``info``,
which goes away with the connection.

Database resolution: an explicit URL wins; with none, the embedded server
(:func:`tnsrag_db.store.embedded.resolve.embedded_url`). Environment variables are read only by the
CLI and the test plugin, never here.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from tnsrag_db.db.settings import validate_schema_name
from tnsrag_db.errors import ConfigurationError

__all__ = [
    "PING_AFTER_IDLE_SECONDS",
    "ConnectionHooks",
    "create_engine",
    "libpq_options",
    "normalize_url",
    "pool_limits",
    "redact_url",
    "register_connection_hooks",
    "registered_connection_hooks",
    "run_hooks",
    "unregister_connection_hooks",
]

#: A pooled connection idle for longer than this is pinged before use (see create_engine).
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "tnsrag_idle_since"


#: ``hook(connection, info)``: the psycopg connection (a ``psycopg.Connection`` or, for the
#: async engines, a ``psycopg.AsyncConnection``) and the pooled connection's ``info`` dict
#: (kept while the connection lives, shared with ``Connection.info``). Given an async
#: connection, a hook returns an awaitable (or None when it has nothing to do), which is
#: awaited; given a sync one, it returns None.
Hook = Callable[[Any, MutableMapping[Any, Any]], "Awaitable[None] | None"]


@dataclass(frozen=True, slots=True)
class ConnectionHooks:
    """What one layer needs of every pooled connection, by name (registering a name again
    replaces its hooks).

    - ``configure``: once per new connection, before first use. It must not write (a
      read-only role or a hot standby must be able to connect); it ends with the
      connection's transaction committed.
    - ``check``: at every checkout; raising :class:`sqlalchemy.exc.DisconnectionError`
      makes the pool discard the connection and hand out a fresh one.
    - ``reset``: at every checkin.
    """

    name: str
    configure: Hook | None = None
    check: Hook | None = None
    reset: Hook | None = None


_hooks: dict[str, ConnectionHooks] = {}
_hooks_lock = threading.Lock()


def register_connection_hooks(hooks: ConnectionHooks) -> None:
    """Add ``hooks`` for every engine of this process (engines made earlier included),
    run in registration order."""
    if not isinstance(hooks, ConnectionHooks):
        raise ConfigurationError(f"expected ConnectionHooks, got {type(hooks).__name__}")
    with _hooks_lock:
        _hooks[hooks.name] = hooks


def registered_connection_hooks() -> tuple[ConnectionHooks, ...]:
    """The registered hooks, in registration order."""
    with _hooks_lock:
        return tuple(_hooks.values())


def unregister_connection_hooks(name: str) -> None:
    """Stop running the hooks registered as ``name`` on connection events from now on (no
    error when none are)."""
    with _hooks_lock:
        _hooks.pop(name, None)


HookKind = Literal["configure", "check", "reset"]


def run_hooks(kind: HookKind, driver: Any, info: MutableMapping[Any, Any], *,
              wait: Callable[[Awaitable[None]], None] | None = None) -> None:
    """Run the ``kind`` hook of every registered :class:`ConnectionHooks`, in registration
    order, on the psycopg connection ``driver`` with the pooled connection's ``info``.

    For an async connection, ``wait`` awaits what a hook returns before the next one runs
    (a hook with nothing to await returns None and runs without it). Raises
    :class:`ConfigurationError` for a hook that returned an awaitable without a ``wait``
    (a sync connection)."""
    for hooks in registered_connection_hooks():
        hook = getattr(hooks, kind)
        if hook is None:
            continue
        result = hook(driver, info)
        if result is None:
            continue
        if wait is None or not inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()  # never to be awaited
            raise ConfigurationError(f"connection hook {hooks.name!r} ({kind}) returned {type(result).__name__} "
                                     "for a sync connection: it must return None there")
        wait(result)


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


# Pessimistic disconnect handling, but only for connections that sat idle in the pool:
# SQLAlchemy's pool_pre_ping spends a round trip on every checkout, which costs a search
# on a warm index ~10 %. A connection reused within PING_AFTER_IDLE_SECONDS is not
# pinged; if its server went away meanwhile, the statement fails as a disconnect,
# SQLAlchemy invalidates the pool, and Session.run retries once.
def _mark_idle(dbapi_conn: Any, info: MutableMapping[Any, Any]) -> None:
    info[_IDLE_SINCE] = time.monotonic()


def _ping_if_idle(dbapi_conn: Any, info: MutableMapping[Any, Any]) -> Awaitable[None] | None:
    since = info.get(_IDLE_SINCE)
    if since is None or time.monotonic() - since <= PING_AFTER_IDLE_SECONDS:
        return None
    if isinstance(dbapi_conn, psycopg.AsyncConnection):
        return _aping(dbapi_conn)
    autocommit = dbapi_conn.autocommit
    try:
        # What SQLAlchemy's own pre-ping does (only when due): SELECT 1 outside a transaction.
        dbapi_conn.autocommit = True
        try:
            dbapi_conn.execute("SELECT 1")
        finally:
            if not dbapi_conn.closed:
                dbapi_conn.autocommit = autocommit
    except Exception as exc:
        # The pool discards this connection and checks out a fresh one.
        raise sa.exc.DisconnectionError(f"stale pooled connection: {exc}") from exc
    return None


async def _aping(driver: psycopg.AsyncConnection[Any]) -> None:
    autocommit = driver.autocommit
    try:
        await driver.set_autocommit(True)
        try:
            await driver.execute("SELECT 1")
        finally:
            if not driver.closed:
                await driver.set_autocommit(autocommit)
    except Exception as exc:
        raise sa.exc.DisconnectionError(f"stale pooled connection: {exc}") from exc


register_connection_hooks(ConnectionHooks("tnsrag_db.idle_ping", check=_ping_if_idle, reset=_mark_idle))


def libpq_options(url: URL, *, schema: str, read_only: bool = False) -> str:
    """The libpq ``options`` of the library's connections to ``url``: the URL's own
    ``options`` parameter (``?options=-c statement_timeout=5000``) first, then the
    library's ``search_path`` (and with ``read_only`` the read-only default), which win
    where both set one. As a connect argument it replaces the URL's parameter, so it
    carries both."""
    ours = f"-c search_path={schema},public" + (" -c default_transaction_read_only=on" if read_only else "")
    given = url.query.get("options")
    if not given:
        return ours
    return " ".join([*((given,) if isinstance(given, str) else given), ours])


#: The pool limits ``(pool_size, max_overflow)`` each engine of :func:`create_engine` was
#: given, for the async engines made from it (SQLAlchemy keeps the overflow private).
_LIMITS: weakref.WeakKeyDictionary[Engine, tuple[int, int]] = weakref.WeakKeyDictionary()


def pool_limits(engine: Engine) -> tuple[int, int]:
    """``(pool_size, max_overflow)`` of ``engine`` as :func:`create_engine` was given them
    (another engine: its pool's size and :func:`create_engine`'s default overflow)."""
    found = _LIMITS.get(engine)
    if found is not None:
        return found
    pool = engine.pool
    return (pool.size() if isinstance(pool, sa.pool.QueuePool) else 5), 10


def create_engine(url: str | URL, *, schema: str, pool_size: int = 5, max_overflow: int = 10,
                  read_only: bool = False, **engine_options: Any) -> Engine:
    """Create a pooled SQLAlchemy engine whose connections search ``<schema>, public``
    and run the registered :class:`ConnectionHooks`.

    ``pool_size`` and ``max_overflow`` are the pool's limits; ``read_only`` opens every
    session with ``default_transaction_read_only=on`` (read replicas: no write can go
    there); other keyword options go to :func:`sqlalchemy.create_engine`. A libpq
    ``options`` parameter of the URL (``?options=-c statement_timeout=5000``) is kept,
    before the library's own (``search_path``, and the read-only default), which win.

    The pool hands out the connection returned last (``pool_use_lifo=True``; pass
    ``pool_use_lifo=False`` for SQLAlchemy's default, the one idle longest): after a burst
    of concurrent use, calls one after another keep reusing one warm connection, which
    stays under :data:`PING_AFTER_IDLE_SECONDS` idle, instead of cycling through every
    idle one, each idle that many times as long (so pinged sooner) and its server
    process cold; the surplus connections stay idle, for a server-side idle timeout to
    close.
    """
    validate_schema_name(schema)
    engine_options.setdefault("pool_use_lifo", True)
    target = normalize_url(url)
    engine = sa.create_engine(
        target,
        pool_size=pool_size,
        max_overflow=max_overflow,
        # search_path at connection start-up, so SQLAlchemy's default schema and
        # every unqualified name resolve into the library's schema.
        connect_args={"options": libpq_options(target, schema=schema, read_only=read_only)},
        **engine_options,
    )
    _LIMITS[engine] = (pool_size, max(0, max_overflow))

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        run_hooks("configure", dbapi_conn, record.info)
        dbapi_conn.commit()

    @sa.event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        run_hooks("check", dbapi_conn, record.info)

    @sa.event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        run_hooks("reset", dbapi_conn, record.info)

    return engine
