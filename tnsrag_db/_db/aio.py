"""Async execution of plans: ``await arun(store, plan)`` runs a
:data:`~tnsrag_db._db.statement.Plan` on an async psycopg connection for ``store``'s
database, with the same statements :meth:`Store.run` sends.

The connections come from a SQLAlchemy asyncio engine over psycopg 3's
``AsyncConnection`` (a real async driver: no thread per call), created lazily for the
store's engine and the running event loop, with the sync engine's set-up: the same
URL, ``search_path`` and pool limits, and the same registered connection hooks
(:class:`~tnsrag_db._db.engine.ConnectionHooks`: pgvector types, the ping-after-idle
rule, any registered later), read at each connection event. Statements are sent by
:class:`~tnsrag_db._db.runner.AsyncPlanRunner`, the await form of the sync runner behind
:meth:`Store.run`: the same text, values and statement listeners. The async engines of
a sync engine are closed when it is disposed (:meth:`Store.close` of the store that
owns it) or by :func:`aclose_engines`
(:meth:`AsyncStore.close <tnsrag_db._store.aio.AsyncStore.close>`).

A cancelled call (``task.cancel()``, ``asyncio.timeout``, ``wait_for``) cancels its
statement on the server: psycopg sends a cancel request and waits for the backend to
stop before the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg
import sqlalchemy as sa

from tnsrag_db import _telemetry
from tnsrag_db._db.engine import HookKind, engine_hooks, libpq_options, pool_limits, run_hooks
from tnsrag_db._db.runner import AsyncPlanRunner
from tnsrag_db._errors import ConfigurationError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from tnsrag_db._db.statement import Plan

__all__ = ["AsyncRunTarget", "aclose_engines", "arun", "async_engine", "check_async_installed"]


class AsyncRunTarget(Protocol):
    """What :func:`arun` needs of a store (a :class:`~tnsrag_db._store.store.Store` has it all):
    its engine, schema and corpus, its effective statement timeout (seconds, None for none),
    its read replicas (None for none) and its sync ``run`` for replica-routed plans."""

    @property
    def engine(self) -> Engine: ...

    @property
    def schema(self) -> str: ...

    @property
    def corpus(self) -> str: ...

    @property
    def statement_timeout(self) -> float | None: ...

    @property
    def read_replicas(self) -> object | None: ...

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T: ...

_T = TypeVar("_T")

class _Engines:
    """The async engines of one sync engine: one per (event loop, schema)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_loop: dict[tuple[asyncio.AbstractEventLoop, str], AsyncEngine] = {}
        #: Driver connections back in the pool, with their engine (closed without a loop by
        #: :meth:`hard_close`).
        self.idle: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], AsyncEngine] = \
            weakref.WeakKeyDictionary()

    def hard_close(self, keep: asyncio.AbstractEventLoop | None = None) -> list[AsyncEngine]:
        """Forget the engines of every loop but ``keep`` (all when None) and close their idle
        connections without awaiting anything (their loops may be gone); returns the kept
        loop's engines, for the caller to dispose properly."""
        with self.lock:
            kept = [ae for (loop, _), ae in self.by_loop.items() if loop is keep]
            gone = [ae for (loop, _), ae in self.by_loop.items() if loop is not keep]
            self.by_loop = {key: ae for key, ae in self.by_loop.items() if key[0] is keep}
        for ae in gone:
            ae.sync_engine.dispose(close=False)  # the pool lets go of its connections...
        if gone:
            for driver, owner in list(self.idle.items()):  # ...which end here (libpq's PQfinish: no loop)
                # Only a connection at rest: one left mid-statement by an abandoned task stays
                # to the garbage collector (psycopg closes it then).
                if owner in gone and driver.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    driver.pgconn.finish()
        return kept


_REGISTRY: weakref.WeakKeyDictionary[Engine, _Engines] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()
def _engines_of(engine: Engine) -> _Engines:
    with _REGISTRY_LOCK:
        engines = _REGISTRY.get(engine)
        if engines is None:
            engines = _REGISTRY[engine] = _Engines()
            held = engines

            @sa.event.listens_for(engine, "engine_disposed")
            def _on_dispose(_engine: Engine) -> None:
                # Store.close() of the owning store (sync code): nothing may be awaited here.
                held.hard_close()

        return engines


def async_engine(store: AsyncRunTarget) -> AsyncEngine:
    """The async engine for ``store``'s engine and the running event loop (created on first use).

    Raises :class:`ConfigurationError` outside a running loop or when SQLAlchemy's
    asyncio support (the ``greenlet`` package, extra ``[async]``) is missing.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError("the async API needs a running event loop (call it from a coroutine)") from None
    engines = _engines_of(store.engine)
    key = (loop, store.schema)
    with engines.lock:
        found = engines.by_loop.get(key)
    if found is not None:
        return found
    with engines.lock:
        stale = any(other.is_closed() for other, _ in engines.by_loop)
    if stale:
        engines.hard_close(keep=loop)  # connections of finished loops (asyncio.run per call)
    created = _create_async_engine(store.engine, store.schema, engines)
    with engines.lock:
        found = engines.by_loop.setdefault(key, created)
    if found is not created:  # another thread of the same loop won the race
        created.sync_engine.dispose(close=False)
    return found


def check_async_installed() -> None:
    """Raise :class:`ConfigurationError` naming the ``async`` extra when SQLAlchemy's asyncio
    bridge (the ``greenlet`` package) is not installed."""
    if importlib.util.find_spec("greenlet") is None:
        raise ConfigurationError("the async API needs the greenlet package (SQLAlchemy's asyncio bridge): "
                                 "pip install 'tnsrag-db[async]'")


def _create_async_engine(engine: Engine, schema: str, engines: _Engines) -> AsyncEngine:
    check_async_installed()
    from sqlalchemy.ext.asyncio import create_async_engine

    size, overflow = pool_limits(engine)
    created = create_async_engine(
        engine.url.set(drivername="postgresql+psycopg"),
        pool_size=size,
        max_overflow=overflow,
        pool_use_lifo=True,  # the connection returned last, as store.engine.create_engine
        connect_args={"options": libpq_options(engine.url, schema=schema)},  # as store.engine.create_engine
    )
    sync = created.sync_engine

    # The sync engine's ConnectionHooks, given once for both. SQLAlchemy calls these
    # listeners in its greenlet bridge; run_async awaits what a hook returns there.
    given = engine_hooks(engine)

    def hooks(kind: HookKind, dbapi_conn: Any, info: Any) -> None:
        run_hooks(kind, given, dbapi_conn.driver_connection, info,
                  wait=lambda awaitable: dbapi_conn.run_async(lambda _driver: awaitable))

    @sa.event.listens_for(sync, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        hooks("configure", dbapi_conn, record.info)
        dbapi_conn.run_async(lambda driver: driver.commit())

    @sa.event.listens_for(sync, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        if dbapi_conn is not None:
            hooks("reset", dbapi_conn, record.info)
            engines.idle[dbapi_conn.driver_connection] = created

    @sa.event.listens_for(sync, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        engines.idle.pop(dbapi_conn.driver_connection, None)
        hooks("check", dbapi_conn, record.info)

    return created


async def aclose_engines(engine: Engine) -> None:
    """Close the async engines made for ``engine``: the running loop's ones awaited (their
    connections closed cleanly), those of other loops without awaiting."""
    with _REGISTRY_LOCK:
        engines = _REGISTRY.get(engine)
    if engines is None:
        return
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    for ae in engines.hard_close(keep=loop):
        await ae.dispose()


class _AsyncPooled:
    """A connection of an async engine's pool checked out for the read runner."""

    __slots__ = ("_conn", "_fairy", "driver")

    def __init__(self, conn: AsyncConnection, fairy: Any) -> None:
        self._conn = conn
        self._fairy = fairy
        self.driver: psycopg.AsyncConnection[Any] = fairy.driver_connection

    @property
    def info(self) -> dict[Any, Any]:
        info: dict[Any, Any] = self._fairy.info
        return info

    async def release(self) -> None:
        await _close(self._conn)

    async def discard(self) -> None:
        try:
            await self._conn.invalidate()
        finally:
            await _close(self._conn)


class _AsyncSource:
    """The async read runner's connections: the async engine's pool."""

    __slots__ = ("_engine",)

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def checkout(self, *, snapshot: bool) -> _AsyncPooled:
        conn = await self._engine.connect()
        try:
            fairy = await conn.get_raw_connection()
        except BaseException:
            await _close(conn)
            raise
        return _AsyncPooled(conn, fairy)


def _timeout_ms(store: AsyncRunTarget) -> int | None:
    seconds = store.statement_timeout  # the effective one (inside Store.timeout(): its value)
    return None if seconds is None else max(1, round(seconds * 1000))


async def arun(store: AsyncRunTarget, plan: Plan[_T], *, snapshot: bool = False) -> _T:
    """Drive ``plan`` on an async connection of ``store``'s database (see :meth:`Store.run`).

    The library's one read runner with awaits (:class:`~tnsrag_db._db.runner.AsyncPlanRunner`):
    the same statements, autocommit or with ``snapshot=True`` one read-only REPEATABLE READ
    transaction; the store's ``statement_timeout`` (also one set by :meth:`Store.timeout`
    around the ``await``); the connection checked out at the plan's first statement and
    returned at its end; a pooled connection found dead at the first statement replaced
    once. Driver errors become the :class:`DatabaseError` subclass their SQLSTATE names
    (thrown into the plan first). Cancelling the awaiting task cancels the running
    statement on the server.

    A store with read replicas (``connect(read_urls=...)``) runs the plan with
    :meth:`Store.run` in a worker thread instead, so its reads are routed exactly as
    sync ones (not cancelled on the server when the await is).
    """
    _telemetry.read_corpus(store.corpus)
    if store.read_replicas is not None:
        # Reads routed to standbys (round robin, lag bounds, read-your-writes waits) are the
        # sync runner's for now: its run in a worker thread (a cancelled await leaves the
        # statement to finish there, bounded by statement_timeout).
        return await asyncio.to_thread(store.run, plan, snapshot=snapshot)
    runner = AsyncPlanRunner(_AsyncSource(async_engine(store)), what=f"database error in corpus {store.corpus!r}",
                             timeout_ms=lambda: _timeout_ms(store))
    return await runner.run(plan, snapshot=snapshot)


async def _close(conn: AsyncConnection) -> None:
    """Return ``conn`` to the pool."""
    try:
        await conn.close()
    except (sa.exc.SQLAlchemyError, psycopg.Error, OSError):
        pass  # a broken connection: the pool has already discarded it
