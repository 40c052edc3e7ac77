"""``connect_async`` and ``AsyncStore`` on a real database: reads and writes agree with the
sync store, calls after ``close()`` fail at once, closing (async or through the sync
store) ends the async backends, and a cancelled call cancels its server statement."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL

from tnsrag_db import AsyncStore, BM25Index, KeywordRAGStrategy, MemoryEntry, MemoryTier, connect, connect_async
from tnsrag_db._db import aio
from tnsrag_db._db.pool import Pool
from tnsrag_db._db.statement import Plan, Rows, Statement, one
from tnsrag_db._errors import ConfigurationError, InvalidEntryError, InvalidFilterError
from tnsrag_db._store.store import Store

SCHEMA = "tnsrag"


def _entries() -> list[MemoryEntry]:
    return [MemoryEntry(id=f"e{i}", content=f"note {i} about asynchronous agents and postgres {'even' if i % 2 else 'odd'}",
                        tier=MemoryTier.SEMANTIC if i % 3 else MemoryTier.EPISODIC, source=f"s{i % 2}",
                        metadata={"team": "a" if i < 4 else "b"}) for i in range(8)]


@pytest.fixture
def corpus(pool: Pool) -> Iterator[str]:
    name = f"test_async_{uuid.uuid4().hex[:10]}"
    yield name
    Store(pool, corpus=name, schema=SCHEMA).drop_corpus()


def _pids(pool: Pool, pids: list[int]) -> list[int]:
    with pool.connect() as conn:
        return list(conn.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(:p)",
                                 {"p": pids}).scalars())


def _wait_gone(pool: Pool, pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 10
    while (left := _pids(pool, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


_PID = Statement("SELECT pg_backend_pid() AS pid")


def test_reads_and_writes_agree_with_the_sync_store(db_url: URL, corpus: str) -> None:
    async def scenario() -> dict[str, Any]:
        async with await connect_async(db_url, corpus=corpus, schema=SCHEMA) as astore:
            out: dict[str, Any] = {"added": await astore.add_all(iter(_entries()))}
            out["again"] = await astore.add(_entries()[0])
            out["get"] = await astore.get("e1")
            out["missing"] = await astore.get("nope")
            out["many"] = await astore.get_many(["e2", "e3", "nope"])
            out["count"] = await astore.count()
            out["count_b"] = await astore.count({"team": "b", "tier": "SEMANTIC"})
            sync = astore.store
            out["sync"] = (sync.get("e1"), sync.get_many(["e2", "e3", "nope"]), sync.count(),
                           sync.count({"team": "b", "tier": "SEMANTIC"}))
            out["search"] = (await KeywordRAGStrategy(BM25Index(sync)).aretrieve("asynchronous agents"),
                             KeywordRAGStrategy(BM25Index(sync)).retrieve("asynchronous agents"))
            with pytest.raises(InvalidEntryError):
                await astore.add_all([_entries()[0], _entries()[0]])
            with pytest.raises(InvalidFilterError):
                await astore.count({"team": 3})  # type: ignore[dict-item]
            with pytest.raises(ConfigurationError, match="clear"):
                await astore.delete_where({})
            out["deleted"] = (await astore.delete("e0"), await astore.delete("e0"),
                              await astore.delete_many(["e1", "e2", "e1", "nope"]),
                              await astore.delete_where({"team": "b"}), await astore.count())
            out["cleared"] = (await astore.clear(), await astore.count())
            await astore.add(_entries()[5])
            await astore.drop_corpus()
            out["dropped"] = await astore.count()
            return out

    out = asyncio.run(scenario())
    assert out["added"].inserted == 8 and out["again"].unchanged == 1
    assert out["get"] == _entries()[1] and out["missing"] is None
    assert set(out["many"]) == {"e2", "e3"} and out["many"]["e3"] == _entries()[3]
    assert out["count"] == 8 and out["count_b"] == 3
    assert out["sync"] == (out["get"], out["many"], out["count"], out["count_b"])
    assert out["search"][0] == out["search"][1] and out["search"][0]
    assert out["deleted"] == (True, False, 2, 4, 1)
    assert out["cleared"] == (1, 0)
    assert out["dropped"] == 0


def test_calls_after_close_fail_at_once(db_url: URL, corpus: str) -> None:
    async def scenario() -> AsyncStore:
        astore = await connect_async(db_url, corpus=corpus, schema=SCHEMA)
        assert await astore.count() == 0
        await astore.close()
        await astore.close()  # idempotent
        calls = [astore.get("x"), astore.get_many(["x"]), astore.count(), astore.add(_entries()[0]),
                 astore.add_all(_entries()), astore.delete("x"), astore.delete_many(["x"]),
                 astore.delete_where({"team": "a"}), astore.clear(), astore.drop_corpus(),
                 astore.read("SELECT 1", {}), astore.run(one(_PID))]
        for call in calls:
            with pytest.raises(ConfigurationError, match="closed"):
                await asyncio.wait_for(call, 5)  # never a hang on the closed pool
        with pytest.raises(ConfigurationError, match="closed"):
            async with astore:
                pass
        return astore

    astore = asyncio.run(scenario())
    assert astore.closed and "closed" in repr(astore)
    with pytest.raises(ConfigurationError, match="closed"):
        astore.store  # noqa: B018


def test_close_ends_the_async_backends(db_url: URL, corpus: str, pool: Pool) -> None:
    async def scenario() -> list[int]:
        astore = await connect_async(db_url, corpus=corpus, schema=SCHEMA)
        pids = [r.pid for r in await asyncio.gather(*(astore.run(_first(_PID)) for _ in range(3)))]
        await astore.close()
        return pids

    pids = asyncio.run(scenario())
    assert pids and _wait_gone(pool, pids) == []


def _first(statement: Statement) -> Plan[Any]:
    rows = yield statement
    yield Statement("SELECT pg_sleep(0.05)")  # keeps the connection, so the three calls use three
    return rows[0]


def test_sync_close_and_new_loops_end_the_async_backends(db_url: URL, corpus: str, pool: Pool) -> None:
    store = connect(db_url, corpus=corpus, schema=SCHEMA)  # owns its engine
    first = asyncio.run(aio.arun(store, _first(_PID))).pid
    second = asyncio.run(aio.arun(store, _first(_PID))).pid  # a new loop: the old loop's connection ends
    assert _wait_gone(pool, [first]) == []
    assert _pids(pool, [second]) == [second]
    store.close()  # the sync store's close ends the async connections too
    assert _wait_gone(pool, [second]) == []


def _slow(tag: str) -> Plan[Rows]:
    rows = yield Statement(f"SELECT pg_sleep(600) AS slept /* {tag} */")
    return rows


def _running(pool: Pool, tag: str) -> list[int]:
    with pool.connect() as conn:
        return list(conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE :p AND pid <> pg_backend_pid()",
            {"p": f"%{tag}%"}).scalars())


def test_a_twice_cancelled_call_returns_only_after_its_statement_stopped(store: Store, pool: Pool) -> None:
    """Hosts cancel twice (a timeout, then shutdown): the second cancel must not cut the wait
    for the backend short (before: the error came back while the statement still ran, 9 of 20)."""
    async def once(pause: float) -> list[int]:
        tag = f"tnsrag_cancel2_{uuid.uuid4().hex[:10]}"
        task = asyncio.create_task(aio.arun(store, _slow(tag)))
        deadline = time.monotonic() + 20
        while not await asyncio.to_thread(_running, pool, tag):
            assert time.monotonic() < deadline and not task.done(), "the slow statement never started"
            await asyncio.sleep(0.02)
        task.cancel()
        await asyncio.sleep(pause)  # the first cancel is being handled: psycopg waits for the backend
        task.cancel()
        async with asyncio.timeout(60):
            with pytest.raises(asyncio.CancelledError):
                await task
        return await asyncio.to_thread(_running, pool, tag)  # at once: no grace period

    async def scenario() -> list[list[int]]:
        return [await once(pause) for pause in (0.0, 0.0005, 0.001, 0.002, 0.004) * 4]

    assert asyncio.run(scenario()) == [[]] * 20


@pytest.mark.parametrize("how", ["cancel", "wait_for", "timeout"])
def test_cancelling_a_call_cancels_its_server_statement(store: Store, pool: Pool, how: str) -> None:
    tag = f"tnsrag_cancel_{uuid.uuid4().hex[:10]}"

    async def scenario() -> tuple[list[int], list[int], Any]:
        task = asyncio.create_task(aio.arun(store, _slow(tag)))
        deadline = time.monotonic() + 20
        while not (seen := await asyncio.to_thread(_running, pool, tag)):
            assert time.monotonic() < deadline and not task.done(), "the slow statement never started"
            await asyncio.sleep(0.05)
        # The cancellation must not wait for the statement (600 s) to end by itself: a
        # generous bound (it takes well under a second) fails the test instead of hanging.
        async with asyncio.timeout(120):
            if how == "cancel":
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            elif how == "wait_for":
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(task, 0.1)
            else:
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await task
        after = await asyncio.to_thread(_running, pool, tag)  # at once: no grace period
        assert aio._pools_of(store.pool).get().checked_out == 0  # type: ignore[arg-type]
        usable = await KeywordRAGStrategy(BM25Index(store)).aretrieve("anything")
        return seen, after, usable

    seen, after, usable = asyncio.run(scenario())
    assert len(seen) == 1
    assert after == []  # no orphaned backend keeps running the statement
    assert usable == []  # the pool still serves (an empty corpus)


def _terminate(pool: Pool, pid: int) -> None:
    with pool.connect() as conn:
        conn.execute("SELECT pg_terminate_backend(:p)", {"p": pid})
    assert _wait_gone(pool, [pid]) == []


@pytest.mark.parametrize("idle", [0.0, 1.2])
def test_a_pooled_connection_whose_server_went_away_is_replaced(store: Store, pool: Pool, idle: float) -> None:
    # Reused at once: the statement fails as a disconnect and runs again once on a fresh
    # connection; idle for longer than ping_after_idle (1 s): the checkout's ping finds it.
    async def scenario() -> tuple[int, int]:
        first = (await aio.arun(store, one(_PID)))[0].pid
        await asyncio.to_thread(_terminate, pool, first)
        await asyncio.sleep(idle)
        again = (await aio.arun(store, one(_PID)))[0].pid
        return first, again

    first, again = asyncio.run(scenario())
    assert again != first


_APP_NAME = Statement("SELECT current_setting('application_name') AS name")


def _hooked_store(db_url: Any, corpus: str, hooks: Any) -> Store:
    from tests.fix_db import SCHEMA
    from tnsrag_db._db.pool import Pool

    return Store(Pool(db_url, schema=SCHEMA, pool_size=2, max_overflow=0, hooks=hooks),
                 corpus=corpus, schema=SCHEMA, owns_pool=True)


def test_hooks_given_to_an_engine_reach_its_sync_and_async_connections(db_url: Any, store: Store) -> None:
    """Connection hooks are given once, to the engine, for sync and async connections; a
    store on another engine of the same process does not run them (no process-wide registry)."""
    from tnsrag_db._db.pool import ConnectionHooks

    seen: list[tuple[str, str]] = []

    def kind(driver: Any) -> str:
        return "AsyncConnection" if isinstance(driver, psycopg.AsyncConnection) else "Connection"

    def configure(driver: Any, info: Any) -> Any:
        seen.append(("configure", kind(driver)))
        if isinstance(driver, psycopg.AsyncConnection):
            return driver.execute("SET application_name = 'hooked_async'")  # awaited by the engine
        driver.execute("SET application_name = 'hooked_sync'")
        return None

    def check(driver: Any, info: Any) -> None:
        seen.append(("check", kind(driver)))

    hooked = _hooked_store(db_url, store.corpus, [ConnectionHooks("test.hook", configure=configure, check=check)])
    try:
        async def scenario() -> tuple[str, str]:
            return ((await aio.arun(hooked, one(_APP_NAME)))[0].name,
                    (await aio.arun(store, one(_APP_NAME)))[0].name)

        hooked_async, plain_async = asyncio.run(scenario())
        hooked_sync = hooked.read(_APP_NAME.sql, {})[0].name
        plain_sync = store.read(_APP_NAME.sql, {})[0].name
    finally:
        hooked.close()
    assert hooked_async == "hooked_async"
    assert ("configure", "AsyncConnection") in seen and ("check", "AsyncConnection") in seen
    assert hooked_sync == "hooked_sync"  # the same hooks, given once, on the sync engine
    assert {plain_async, plain_sync}.isdisjoint({"hooked_async", "hooked_sync"})


def test_a_hook_returning_an_awaitable_for_a_sync_connection_is_a_configuration_error(db_url: Any,
                                                                                     store: Store) -> None:
    from tnsrag_db._db.pool import ConnectionHooks

    async def only_async(driver: Any, info: Any) -> None:
        return None

    hooked = _hooked_store(db_url, store.corpus, [ConnectionHooks("test.async_only", check=only_async)])
    try:
        with pytest.raises(ConfigurationError, match="test.async_only"):
            hooked.read("SELECT 1", {})
    finally:
        hooked.close()


def test_a_hook_that_is_not_connection_hooks_is_refused(db_url: Any) -> None:
    from tests.fix_db import SCHEMA
    from tnsrag_db._db.pool import Pool

    with pytest.raises(ConfigurationError, match="hooks must be ConnectionHooks, got function"):
        Pool(db_url, schema=SCHEMA, hooks=[lambda driver, info: None])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="ping_after_idle must be a finite number"):
        Pool(db_url, schema=SCHEMA, ping_after_idle=-1)


