"""Connection hooks: what every pooled connection needs, given by name.

Each layer that needs something of every connection gives it as :class:`ConnectionHooks`
(psycopg_pool's ``configure`` / ``check`` / ``reset`` are the model): ``configure`` runs
once on each new connection, ``check`` when the pool hands one out, ``reset`` when it
comes back. Every :class:`~tnsrag_db._db.pool.Pool` runs the library's own hooks first
(the pgvector type adaptation and the idle-connection ping, :func:`library_hooks`) and
then those its caller gave; the async pools of :mod:`tnsrag_db._db.aio` run the same tuple
(:func:`hook_steps`, under either driver of :mod:`tnsrag_db._db.steps`), so hooks are given
once for sync and async connections, and the library's own are each written once for both
(:func:`~tnsrag_db._db.steps.steps_for`). There is no process-wide
registry: two stores in one process can run different hooks. The write path's stage
tables need none: they are created on a connection's first write (see
:mod:`tnsrag_db._store.staging`) and their flag lives in the connection's ``info``, which
goes away with the connection.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from tnsrag_db._db.steps import Steps, steps_for
from tnsrag_db._errors import ConfigurationError

__all__ = ["DEFAULT_PING_AFTER_IDLE", "ROUTES_BY_CORPUS", "ConnectionHooks", "HookKind", "hook_steps", "library_hooks"]

#: Seconds a pooled connection may sit idle before it is pinged at its next checkout
#: (``Pool(ping_after_idle=...)``).
DEFAULT_PING_AFTER_IDLE = 1.0
_IDLE_SINCE = "tnsrag_idle_since"


#: ``hook(connection, info)``: the psycopg connection (a ``psycopg.Connection`` or, for the
#: async pools, a ``psycopg.AsyncConnection``) and the connection's ``info`` dict
#: (kept while the connection lives, shared with ``Connection.info``). Given an async
#: connection, a hook returns an awaitable (or None when it has nothing to do), which is
#: awaited; given a sync one, it returns None (:func:`~tnsrag_db._db.steps.steps_for` does
#: both for work written once as steps).
Hook = Callable[[Any, MutableMapping[Any, Any]], "Awaitable[None] | None"]


@dataclass(frozen=True, slots=True)
class ConnectionHooks:
    """What one layer needs of every pooled connection, by name (registering a name again
    replaces its hooks).

    - ``configure``: once per new connection, before first use. It must not write (a
      read-only role or a hot standby must be able to connect); it ends with the
      connection's transaction committed.
    - ``check``: at every checkout; raising a :class:`psycopg.Error` (the idle ping's
      ``OperationalError``) makes the pool discard the connection and hand out a fresh one.
    - ``reset``: at every checkin.
    """

    name: str
    configure: Hook | None = None
    check: Hook | None = None
    reset: Hook | None = None


HookKind = Literal["configure", "check", "reset"]


def hook_steps(kind: HookKind, hooks: Sequence[ConnectionHooks], driver: Any,
               info: MutableMapping[Any, Any]) -> Steps[None]:
    """The ``kind`` hook of each of ``hooks``, in order, on the psycopg connection ``driver``
    with the pooled connection's ``info``, as steps (:mod:`tnsrag_db._db.steps`): under
    :func:`~tnsrag_db._db.steps.arun_steps` what a hook returns for an async connection is
    awaited before the next one runs; under :func:`~tnsrag_db._db.steps.run_steps` a hook
    must return None, else :class:`ConfigurationError` (an awaitable for a sync connection)."""
    asynchronous = isinstance(driver, psycopg.AsyncConnection)
    for given in hooks:
        hook = getattr(given, kind)
        if hook is None:
            continue
        result = yield functools.partial(hook, driver, info)
        if result is not None and not asynchronous:
            if inspect.iscoroutine(result):
                result.close()  # never to be awaited
            raise ConfigurationError(f"connection hook {given.name!r} ({kind}) returned {type(result).__name__} "
                                     "for a sync connection: it must return None there")


# Pessimistic disconnect handling, but only for connections that sat idle in the pool:
# A ping at every checkout (psycopg_pool's check_connection) spends a round trip, which costs a search
# on a warm index noticeably. A connection reused within ``ping_after_idle`` seconds is
# not pinged; if its server went away meanwhile, the statement fails as a disconnect,
# the connection is closed, and the read runner retries once.
def _mark_idle(dbapi_conn: Any, info: MutableMapping[Any, Any]) -> None:
    info[_IDLE_SINCE] = time.monotonic()


def _idle_ping(after_seconds: float) -> Hook:
    def ping_if_idle(driver: Any, info: MutableMapping[Any, Any]) -> Awaitable[None] | None:
        since = info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since <= after_seconds:
            return None
        return steps_for(driver, _ping(driver))

    return ping_if_idle


def _ping(driver: Any) -> Steps[None]:
    autocommit = driver.autocommit
    try:
        # A pre-ping (only when due): SELECT 1 outside a transaction.
        yield lambda: driver.set_autocommit(True)
        try:
            yield lambda: driver.execute("SELECT 1")
        finally:
            if not driver.closed:
                yield lambda: driver.set_autocommit(autocommit)
    except Exception as exc:
        # The pool discards this connection and checks out a fresh one.
        raise psycopg.OperationalError(f"stale pooled connection: {exc}") from exc


def _register_vector(driver: Any, info: MutableMapping[Any, Any]) -> Awaitable[None] | None:
    from pgvector.psycopg import register_vector, register_vector_async  # numpy: only connections that send vectors

    register = register_vector_async if isinstance(driver, psycopg.AsyncConnection) else register_vector
    return steps_for(driver, _vector_types(driver, register))


def _vector_types(driver: Any, register: Callable[[Any], Any]) -> Steps[None]:
    try:
        yield lambda: register(driver)
    except Exception:
        # The vector extension does not exist yet (an unmigrated database); the
        # vectors still travel in their text form.
        yield driver.rollback


#: Key in a connection's ``info``: whether its database has Citus, which routes a statement
#: to one worker by the corpus value it names (the read runner then leaves the corpus
#: visible: :func:`~tnsrag_db._db.statement.hidden_corpus`).
ROUTES_BY_CORPUS = "tnsrag_db.routes_by_corpus"
_CITUS = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')"


def _note_routing(driver: Any, info: MutableMapping[Any, Any]) -> Awaitable[None] | None:
    return steps_for(driver, _routing(driver, info))


def _routing(driver: Any, info: MutableMapping[Any, Any]) -> Steps[None]:
    cursor = yield lambda: driver.execute(_CITUS)
    row = yield cursor.fetchone
    info[ROUTES_BY_CORPUS] = bool(row[0]) if row is not None else True
    if not driver.autocommit:
        yield driver.rollback  # the pool takes the connection idle


#: Nothing here writes: a read-only role or a hot standby must be able to connect.
_PGVECTOR = ConnectionHooks("tnsrag_db.pgvector", configure=_register_vector)
_ROUTING = ConnectionHooks("tnsrag_db.routing", configure=_note_routing)


def _check_ping_after_idle(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0):
        raise ConfigurationError(f"ping_after_idle must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def library_hooks(ping_after_idle: float = DEFAULT_PING_AFTER_IDLE, *,
                  vector_types: bool = True) -> tuple[ConnectionHooks, ...]:
    """The hooks every pool of the library runs first: pgvector's type adaptation and
    the note of whether the database routes by corpus (:data:`ROUTES_BY_CORPUS`), both
    ``configure``, and the ping of a connection idle for more than ``ping_after_idle``
    seconds (``check``, with ``reset`` noting when it went idle). ``vector_types=False``
    leaves pgvector out (it imports numpy): for a process that sends no vector. Raises
    :class:`ConfigurationError` for a negative or non-finite ``ping_after_idle``."""
    seconds = _check_ping_after_idle(ping_after_idle)
    ping = ConnectionHooks("tnsrag_db.idle_ping", check=_idle_ping(seconds), reset=_mark_idle)
    return (_PGVECTOR, _ROUTING, ping) if vector_types else (_ROUTING, ping)
