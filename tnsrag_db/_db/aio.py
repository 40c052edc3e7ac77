"""Async execution of plans: ``await arun(store, plan)`` runs a
:data:`~tnsrag_db._db.statement.Plan` on an async psycopg connection for ``store``'s
database, with the same statements :meth:`Store.run` sends.

The connections are psycopg's ``AsyncConnection`` (a real async driver: no thread per
call), kept per event loop for the store's :class:`~tnsrag_db._db.pool.Pool` with the sync
pool's set-up: the same database, ``search_path``, size and
:class:`~tnsrag_db._db.hooks.ConnectionHooks` (pgvector types, the ping-after-idle rule, the
application's), whose awaitables are awaited. Unlike the sync pool (psycopg_pool, whose
maintenance runs in threads), the async one runs no task of its own: psycopg_pool's
``AsyncConnectionPool`` keeps tasks on the loop, and a loop ended by ``asyncio.run``
while one of them was opening a connection waited for it without end. Statements are
sent by :meth:`PlanRunner.arun <tnsrag_db._db.runner.PlanRunner.arun>`, the await form of the
sync runner behind :meth:`Store.run` (one implementation, two thin drivers): the same text,
values and statement listeners. A connection's set-up, check and reset are the sync pool's
own steps (:func:`~tnsrag_db._db.pool.configure_steps`, :func:`~tnsrag_db._db.pool.reset_steps`),
awaited. The async pools
of a sync pool are closed when it is (:meth:`Store.close` of the store that owns it) or
by :func:`aclose_pools` (:meth:`AsyncStore.close <tnsrag_db._store.aio.AsyncStore.close>`).

A cancelled call (``task.cancel()``, ``asyncio.timeout``, ``wait_for``) cancels its
statement on the server: psycopg sends a cancel request and waits for the backend to
stop before the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg

from tnsrag_db import _telemetry
from tnsrag_db._db.hooks import hook_steps
from tnsrag_db._db.pool import Handed, Pool, configure_steps, connect_error, info_of, reset_steps
from tnsrag_db._db.runner import PlanRunner
from tnsrag_db._db.settings import conninfo_of
from tnsrag_db._db.steps import arun_steps
from tnsrag_db._errors import ConfigurationError, DatabaseError

if TYPE_CHECKING:
    from tnsrag_db._db.statement import Plan

__all__ = ["AsyncRunTarget", "aclose_pools", "arun", "check_running_loop"]


class AsyncRunTarget(Protocol):
    """What :func:`arun` needs of a store (a :class:`~tnsrag_db._store.store.Store` has it all):
    its pool, schema and corpus, its effective statement timeout (seconds, None for none),
    its read replicas (None for none) and its sync ``run`` for replica-routed plans."""

    @property
    def pool(self) -> Any: ...

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

class _LoopPool:
    """The async connections of one sync :class:`~tnsrag_db._db.pool.Pool` on one event loop:
    at most the sync pool's ``max_size`` handed out at once, the one returned last handed
    out first, each opened when needed with the sync pool's database, ``search_path`` and
    hooks. It runs no task of its own, so a loop can end (``asyncio.run`` per call) with
    nothing of the pool left to cancel."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.conninfo = conninfo_of(pool.conninfo, schema=pool.schema, read_only=pool.read_only)
        self.idle: list[psycopg.AsyncConnection[Any]] = []
        self.slots = asyncio.Semaphore(pool.max_size)
        #: How many connections are handed out now.
        self.checked_out = 0

    async def getconn(self) -> psycopg.AsyncConnection[Any]:
        """A connection for one plan; :class:`DatabaseError` when none came free within the
        pool's ``timeout`` or a new one could not be opened ("could not connect")."""
        try:
            await asyncio.wait_for(self.slots.acquire(), self.pool.timeout)
        except TimeoutError:
            raise DatabaseError(f"no connection to {self.pool.location} came free within {self.pool.timeout:g} s "
                                f"(all {self.pool.max_size} in use)") from None
        try:
            while self.idle:
                driver = self.idle.pop()
                if driver.closed or driver.broken:
                    continue
                try:
                    await arun_steps(hook_steps("check", self.pool.hooks, driver, info_of(driver)))
                except psycopg.Error:
                    await driver.close()  # found dead by the idle ping: open another
                    continue
                self.checked_out += 1
                return driver
            try:
                driver = await psycopg.AsyncConnection.connect(self.conninfo)
            except psycopg.Error as exc:
                raise connect_error(exc) from exc
            try:
                await arun_steps(configure_steps(driver, self.pool.hooks))
                await arun_steps(hook_steps("check", self.pool.hooks, driver, info_of(driver)))
            except BaseException:
                await driver.close()
                raise
            self.checked_out += 1
            return driver
        except BaseException:
            self.slots.release()
            raise

    async def putconn(self, driver: psycopg.AsyncConnection[Any]) -> None:
        """Take ``driver`` back (a broken or closed one is dropped)."""
        try:
            if not driver.closed and not driver.broken:
                await arun_steps(reset_steps(driver, self.pool.hooks))
                self.idle.append(driver)
            elif not driver.closed:
                await driver.close()
        except psycopg.Error:
            await driver.close()
        finally:
            self.checked_out -= 1
            self.slots.release()

    async def close(self) -> None:
        """Close the idle connections."""
        idle, self.idle = self.idle, []
        for driver in idle:
            await driver.close()

    def finish(self) -> None:
        """Close the idle connections without awaiting (the loop may be gone): libpq's
        ``PQfinish``. Connections in use are left to the garbage collector."""
        idle, self.idle = self.idle, []
        for driver in idle:
            if not driver.closed:
                driver.pgconn.finish()


class _Pools:
    """The :class:`_LoopPool` of each event loop for one sync pool. Those of loops that have
    ended are finished without their loop when another loop opens its own or the sync pool
    closes."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.lock = threading.Lock()
        self.by_loop: dict[asyncio.AbstractEventLoop, _LoopPool] = {}

    def hard_close(self, keep: asyncio.AbstractEventLoop | None = None) -> list[_LoopPool]:
        """Forget the pools of every loop but ``keep`` (all when None), finishing their idle
        connections; returns the kept loop's pools, for the caller to close properly."""
        with self.lock:
            kept = [p for loop, p in self.by_loop.items() if loop is keep]
            gone = [p for loop, p in self.by_loop.items() if loop is not keep]
            self.by_loop = {loop: p for loop, p in self.by_loop.items() if loop is keep}
        for loop_pool in gone:
            loop_pool.finish()
        return kept

    def get(self) -> _LoopPool:
        """The running loop's pool (created on first use)."""
        loop = asyncio.get_running_loop()
        with self.lock:
            found = self.by_loop.get(loop)
            stale = any(other.is_closed() for other in self.by_loop)
        if found is not None:
            return found
        if stale:
            self.hard_close(keep=loop)  # connections of finished loops (asyncio.run per call)
        with self.lock:
            return self.by_loop.setdefault(loop, _LoopPool(self.pool))


_REGISTRY: weakref.WeakKeyDictionary[Pool, _Pools] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def _pools_of(pool: Pool) -> _Pools:
    with _REGISTRY_LOCK:
        pools = _REGISTRY.get(pool)
        if pools is None:
            pools = _REGISTRY[pool] = _Pools(pool)
            # Store.close() of the owning store (sync code): nothing may be awaited there.
            pool.on_close(pools.hard_close)
        return pools


def check_running_loop() -> None:
    """Raise :class:`ConfigurationError` outside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError("the async API needs a running event loop (call it from a coroutine)") from None


async def aclose_pools(pool: Pool) -> None:
    """Close the async connections made for ``pool``: the running loop's awaited (closed
    cleanly), those of other loops without awaiting."""
    with _REGISTRY_LOCK:
        pools = _REGISTRY.get(pool)
    if pools is None:
        return
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    for kept in pools.hard_close(keep=loop):
        await kept.close()


class _AsyncSource:
    """The async read runner's connections: the running loop's pool of ``pools``."""

    __slots__ = ("_pools",)

    def __init__(self, pools: _Pools) -> None:
        self._pools = pools

    async def checkout(self, *, snapshot: bool) -> Handed[psycopg.AsyncConnection[Any]]:
        pool = self._pools.get()
        return Handed(pool.putconn, await pool.getconn())

    def failed(self, checkout: object) -> bool:
        """False: the async connections are the primary's (a store with replicas reads through
        the sync runner), so there is no standby to leave out."""
        return False


def _timeout_ms(store: AsyncRunTarget) -> int | None:
    seconds = store.statement_timeout  # the effective one (inside Store.timeout(): its value)
    return None if seconds is None else max(1, round(seconds * 1000))


async def arun(store: AsyncRunTarget, plan: Plan[_T], *, snapshot: bool = False) -> _T:
    """Drive ``plan`` on an async connection of ``store``'s database (see :meth:`Store.run`).

    The library's one read runner, awaited (:meth:`~tnsrag_db._db.runner.PlanRunner.arun`):
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
    check_running_loop()
    runner = PlanRunner(_AsyncSource(_pools_of(store.pool)), what=f"database error in corpus {store.corpus!r}",
                        timeout_ms=lambda: _timeout_ms(store))
    return await runner.arun(plan, snapshot=snapshot)
