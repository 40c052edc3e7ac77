"""Engines: URL normalisation, pooled engines, and connection hooks.

The engine knows nothing of the layers above it. What every pooled connection needs is
given to the engine as :class:`ConnectionHooks` (psycopg_pool's ``configure`` / ``check``
/ ``reset`` are the model): ``configure`` runs once on each new connection, ``check``
when the pool hands one out, ``reset`` when it comes back. Each engine of
:func:`create_engine` runs the library's own hooks (the pgvector type adaptation and the
idle-connection ping, :func:`library_hooks`) and then the ``hooks`` its caller gave; the
async engines of :mod:`tnsrag_db._db.aio` run the same tuple (:func:`engine_hooks`), so
hooks are given once for sync and async connections. There is no process-wide registry:
two stores in one process can run different hooks. The write path's stage tables need
none: they are created on a connection's first write (see :mod:`tnsrag_db._store.staging`)
and their flag lives in the pooled connection's ``info``, which goes away with the
connection.

Database resolution: an explicit URL wins; with none, the embedded server
(:func:`tnsrag_db._store.embedded.resolve.embedded_url`). Environment variables are read only by the
CLI and the test plugin, never here.
"""

from __future__ import annotations

import inspect
import math
import re
import time
import weakref
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from tnsrag_db._db.settings import validate_schema_name
from tnsrag_db._errors import ConfigurationError

__all__ = [
    "DEFAULT_PING_AFTER_IDLE",
    "ConnectionHooks",
    "create_engine",
    "engine_hooks",
    "libpq_options",
    "library_hooks",
    "normalize_url",
    "pool_limits",
    "redact_url",
    "run_hooks",
]

#: Seconds a pooled connection may sit idle before it is pinged at its next checkout
#: (``create_engine(ping_after_idle=...)``).
DEFAULT_PING_AFTER_IDLE = 1.0
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


HookKind = Literal["configure", "check", "reset"]


def run_hooks(kind: HookKind, hooks: Sequence[ConnectionHooks], driver: Any, info: MutableMapping[Any, Any], *,
              wait: Callable[[Awaitable[None]], None] | None = None) -> None:
    """Run the ``kind`` hook of each of ``hooks``, in order, on the psycopg connection
    ``driver`` with the pooled connection's ``info``.

    For an async connection, ``wait`` awaits what a hook returns before the next one runs
    (a hook with nothing to await returns None and runs without it). Raises
    :class:`ConfigurationError` for a hook that returned an awaitable without a ``wait``
    (a sync connection)."""
    for given in hooks:
        hook = getattr(given, kind)
        if hook is None:
            continue
        result = hook(driver, info)
        if result is None:
            continue
        if wait is None or not inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()  # never to be awaited
            raise ConfigurationError(f"connection hook {given.name!r} ({kind}) returned {type(result).__name__} "
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
# on a warm index noticeably. A connection reused within ``ping_after_idle`` seconds is
# not pinged; if its server went away meanwhile, the statement fails as a disconnect,
# SQLAlchemy invalidates the pool, and the read runner retries once.
def _mark_idle(dbapi_conn: Any, info: MutableMapping[Any, Any]) -> None:
    info[_IDLE_SINCE] = time.monotonic()


def _idle_ping(after_seconds: float) -> Hook:
    def ping_if_idle(dbapi_conn: Any, info: MutableMapping[Any, Any]) -> Awaitable[None] | None:
        since = info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since <= after_seconds:
            return None
        if isinstance(dbapi_conn, psycopg.AsyncConnection):
            return _aping(dbapi_conn)
        _ping(dbapi_conn)
        return None

    return ping_if_idle


def _ping(dbapi_conn: Any) -> None:
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


def _register_vector(dbapi_conn: Any, info: MutableMapping[Any, Any]) -> Awaitable[None] | None:
    if isinstance(dbapi_conn, psycopg.AsyncConnection):
        return _aregister_vector(dbapi_conn)
    try:
        from pgvector.psycopg import register_vector

        register_vector(dbapi_conn)
    except Exception:
        # The vector extension does not exist yet (an unmigrated database); the
        # SQLAlchemy Vector type still works through its text form.
        dbapi_conn.rollback()
    return None


async def _aregister_vector(driver: psycopg.AsyncConnection[Any]) -> None:
    try:
        from pgvector.psycopg import register_vector_async

        await register_vector_async(driver)
    except Exception:
        await driver.rollback()  # no vector extension yet: vectors travel as text


#: Nothing here writes: a read-only role or a hot standby must be able to connect.
_PGVECTOR = ConnectionHooks("tnsrag_db.pgvector", configure=_register_vector)


def _check_ping_after_idle(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0):
        raise ConfigurationError(f"ping_after_idle must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def library_hooks(ping_after_idle: float = DEFAULT_PING_AFTER_IDLE) -> tuple[ConnectionHooks, ...]:
    """The hooks every engine of the library runs first: pgvector's type adaptation
    (``configure``) and the ping of a connection idle for more than ``ping_after_idle``
    seconds (``check``, with ``reset`` noting when it went idle). Raises
    :class:`ConfigurationError` for a negative or non-finite ``ping_after_idle``."""
    seconds = _check_ping_after_idle(ping_after_idle)
    return (_PGVECTOR, ConnectionHooks("tnsrag_db.idle_ping", check=_idle_ping(seconds), reset=_mark_idle))


#: The hooks each engine of :func:`create_engine` runs, for the async engines made from it.
_HOOKS: weakref.WeakKeyDictionary[Engine, tuple[ConnectionHooks, ...]] = weakref.WeakKeyDictionary()


def engine_hooks(engine: Engine) -> tuple[ConnectionHooks, ...]:
    """The hooks ``engine`` runs on its connections (an engine not made by
    :func:`create_engine`: :func:`library_hooks` with their defaults)."""
    found = _HOOKS.get(engine)
    return found if found is not None else library_hooks()


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
                  read_only: bool = False, hooks: Sequence[ConnectionHooks] = (),
                  ping_after_idle: float = DEFAULT_PING_AFTER_IDLE, **engine_options: Any) -> Engine:
    """Create a pooled SQLAlchemy engine whose connections search ``<schema>, public``
    and run :func:`library_hooks` then ``hooks`` (:class:`ConnectionHooks`, in order).

    ``ping_after_idle``: seconds a pooled connection may sit idle before its next checkout
    pings it (a round trip) and replaces it if its server went away (default
    :data:`DEFAULT_PING_AFTER_IDLE`). Raises :class:`ConfigurationError` for a hook that is
    not a :class:`ConnectionHooks` or a negative ``ping_after_idle``.

    ``pool_size`` and ``max_overflow`` are the pool's limits; ``read_only`` opens every
    session with ``default_transaction_read_only=on`` (read replicas: no write can go
    there); other keyword options go to :func:`sqlalchemy.create_engine`. A libpq
    ``options`` parameter of the URL (``?options=-c statement_timeout=5000``) is kept,
    before the library's own (``search_path``, and the read-only default), which win.

    The pool hands out the connection returned last (``pool_use_lifo=True``; pass
    ``pool_use_lifo=False`` for SQLAlchemy's default, the one idle longest): after a burst
    of concurrent use, calls one after another keep reusing one warm connection, which
    stays under ``ping_after_idle`` seconds idle, instead of cycling through every
    idle one, each idle that many times as long (so pinged sooner) and its server
    process cold; the surplus connections stay idle, for a server-side idle timeout to
    close.
    """
    validate_schema_name(schema)
    given = tuple(hooks)
    for hook in given:
        if not isinstance(hook, ConnectionHooks):
            raise ConfigurationError(f"hooks must be ConnectionHooks, got {type(hook).__name__}")
    runs = (*library_hooks(ping_after_idle), *given)
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
    _HOOKS[engine] = runs

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        run_hooks("configure", runs, dbapi_conn, record.info)
        dbapi_conn.commit()

    @sa.event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        run_hooks("check", runs, dbapi_conn, record.info)

    @sa.event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        run_hooks("reset", runs, dbapi_conn, record.info)

    return engine
