"""Connection hooks: what every pooled connection needs, given by name.

Each layer that needs something of every connection gives it as :class:`ConnectionHooks`
(psycopg_pool's ``configure`` / ``check`` / ``reset`` are the model): ``configure`` runs
once on each new connection, ``check`` when the pool hands one out, ``reset`` when it
comes back. Every :class:`~tnsrag_db._db.pool.Pool` runs the library's own hooks first
(the pgvector type adaptation and the idle-connection ping, :func:`library_hooks`) and
then those its caller gave; the async pools of :mod:`tnsrag_db._db.aio` run the same tuple,
so hooks are given once for sync and async connections. There is no process-wide
registry: two stores in one process can run different hooks. The write path's stage
tables need none: they are created on a connection's first write (see
:mod:`tnsrag_db._store.staging`) and their flag lives in the connection's ``info``, which
goes away with the connection.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from tnsrag_db._errors import ConfigurationError

__all__ = ["DEFAULT_PING_AFTER_IDLE", "ConnectionHooks", "HookKind", "arun_hooks", "library_hooks", "run_hooks"]

#: Seconds a pooled connection may sit idle before it is pinged at its next checkout
#: (``Pool(ping_after_idle=...)``).
DEFAULT_PING_AFTER_IDLE = 1.0
_IDLE_SINCE = "tnsrag_idle_since"


#: ``hook(connection, info)``: the psycopg connection (a ``psycopg.Connection`` or, for the
#: async pools, a ``psycopg.AsyncConnection``) and the connection's ``info`` dict
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


async def arun_hooks(kind: HookKind, hooks: Sequence[ConnectionHooks], driver: Any,
                     info: MutableMapping[Any, Any]) -> None:
    """:func:`run_hooks` on an async connection: what each hook returns is awaited before the next runs."""
    for given in hooks:
        hook = getattr(given, kind)
        if hook is None:
            continue
        result = hook(driver, info)
        if result is not None and inspect.isawaitable(result):
            await result


# Pessimistic disconnect handling, but only for connections that sat idle in the pool:
# A ping at every checkout (psycopg_pool's check_connection) spends a round trip, which costs a search
# on a warm index noticeably. A connection reused within ``ping_after_idle`` seconds is
# not pinged; if its server went away meanwhile, the statement fails as a disconnect,
# the connection is closed, and the read runner retries once.
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
        # A pre-ping (only when due): SELECT 1 outside a transaction.
        dbapi_conn.autocommit = True
        try:
            dbapi_conn.execute("SELECT 1")
        finally:
            if not dbapi_conn.closed:
                dbapi_conn.autocommit = autocommit
    except Exception as exc:
        # The pool discards this connection and checks out a fresh one.
        raise psycopg.OperationalError(f"stale pooled connection: {exc}") from exc


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
        raise psycopg.OperationalError(f"stale pooled connection: {exc}") from exc


def _register_vector(dbapi_conn: Any, info: MutableMapping[Any, Any]) -> Awaitable[None] | None:
    from pgvector.psycopg import register_vector, register_vector_async  # numpy: only connections that send vectors

    if isinstance(dbapi_conn, psycopg.AsyncConnection):
        return _aregister_vector(dbapi_conn, register_vector_async)
    try:
        register_vector(dbapi_conn)
    except Exception:
        # The vector extension does not exist yet (an unmigrated database); the
        # vectors still travel in their text form.
        dbapi_conn.rollback()
    return None


async def _aregister_vector(driver: psycopg.AsyncConnection[Any],
                            register: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]) -> None:
    try:
        await register(driver)
    except Exception:
        await driver.rollback()  # no vector extension yet: vectors travel as text


#: Nothing here writes: a read-only role or a hot standby must be able to connect.
_PGVECTOR = ConnectionHooks("tnsrag_db.pgvector", configure=_register_vector)


def _check_ping_after_idle(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0):
        raise ConfigurationError(f"ping_after_idle must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def library_hooks(ping_after_idle: float = DEFAULT_PING_AFTER_IDLE, *,
                  vector_types: bool = True) -> tuple[ConnectionHooks, ...]:
    """The hooks every pool of the library runs first: pgvector's type adaptation
    (``configure``) and the ping of a connection idle for more than ``ping_after_idle``
    seconds (``check``, with ``reset`` noting when it went idle). ``vector_types=False``
    leaves pgvector out (it imports numpy): for a process that sends no vector. Raises
    :class:`ConfigurationError` for a negative or non-finite ``ping_after_idle``."""
    seconds = _check_ping_after_idle(ping_after_idle)
    ping = ConnectionHooks("tnsrag_db.idle_ping", check=_idle_ping(seconds), reset=_mark_idle)
    return (_PGVECTOR, ping) if vector_types else (ping,)
