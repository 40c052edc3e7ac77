"""The async API on a real database: every strategy's ``aretrieve`` equals its ``retrieve``
on the same corpus, the async driver sends the sync driver's statements (each confined to
one corpus), with the sync lane's semantics (autocommit or one read-only snapshot, the
store's statement_timeout, search_path, pgvector types, typed errors), and the
``RAGPipeline`` async forms."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest

from tests._corpus_scope import corpus_violations
from tests.db._helpers import read_statements
from tests.db.test_explain import QUERIES, _corpus
from tests.fix_corpus_scope import pyformat
from tnsrag_db import (
    BM25Index,
    DistinctContentRAGStrategy,
    HashingEmbedding,
    HierarchicalRAGStrategy,
    HierarchyIndex,
    KeywordRAGStrategy,
    RAGContext,
    RAGPipeline,
    StatementTimeoutError,
    TemporalIndex,
    TemporalRAGStrategy,
)
from tnsrag_db._db import aio
from tnsrag_db._db.pool import Pool
from tnsrag_db._db.statement import Plan, Rows, Statement
from tnsrag_db._errors import DatabaseError, InvalidFilterError, ValidationError
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.base import planned
from tnsrag_db._strategies.registry import STRATEGY_NAMES, build_strategy

FIXED_NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
CONTEXTS = [RAGContext(5), RAGContext(3, 0.0, {"tier": "SEMANTIC"}), RAGContext(10, 0.01)]


def _strategy(name: str, store: Store) -> Any:
    if name == "temporal":  # the registry's temporal strategy reads the real clock: fix it
        return TemporalRAGStrategy(KeywordRAGStrategy(BM25Index(store)), TemporalIndex(store),
                                   clock=lambda: FIXED_NOW)
    return build_strategy(name, store, embedding=HashingEmbedding())


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_aretrieve_equals_retrieve(store: Store, name: str) -> None:
    strategy = _strategy(name, store)
    _corpus(store)
    cases = [(q, c) for q in QUERIES for c in CONTEXTS]

    async def both() -> list[Any]:
        return [await strategy.aretrieve(q, c) for q, c in cases]

    expected = [strategy.retrieve(q, c) for q, c in cases]
    assert any(expected), "the corpus answers some query"
    assert asyncio.run(both()) == expected  # documents, scores, metadata and order exactly


def test_concurrent_aretrieve_on_one_loop_equals_sync(store: Store) -> None:
    _corpus(store)
    strategy = KeywordRAGStrategy(BM25Index(store))
    expected = [strategy.retrieve(q, RAGContext(5)) for q in QUERIES]

    async def many() -> list[Any]:
        return await asyncio.gather(*(strategy.aretrieve(q, RAGContext(5)) for q in QUERIES * 8))

    assert asyncio.run(many()) == expected * 8


def test_bad_input_is_the_sync_error(store: Store) -> None:
    strategy = KeywordRAGStrategy(BM25Index(store))
    for query in ("   ", 42):
        with pytest.raises(ValidationError) as sync_error:
            strategy.retrieve(query)  # type: ignore[arg-type]
        with pytest.raises(ValidationError) as async_error:
            asyncio.run(strategy.aretrieve(query))  # type: ignore[arg-type]
        assert type(async_error.value) is type(sync_error.value)
        assert str(async_error.value) == str(sync_error.value)


@pytest.fixture
def sent() -> Iterator[list[tuple[bool, str, tuple[Any, ...]]]]:
    """Read statements sent during the test: (sent from a coroutine, text)."""
    with read_statements() as seen:
        yield seen


def test_async_statements_are_the_sync_ones_and_stay_in_one_corpus(store: Store,
                                                                    sent: list[tuple[bool, str, tuple[Any, ...]]]) -> None:
    # The async statements are checked here too, against the sync ones.
    _corpus(store)
    strategy = KeywordRAGStrategy(BM25Index(store))
    sent.clear()
    for q in QUERIES:
        strategy.retrieve(q, CONTEXTS[1])
    sync_sent = {s for is_async, s, _ in sent if not is_async}
    sent.clear()

    async def run() -> None:
        for q in QUERIES:
            await strategy.aretrieve(q, CONTEXTS[1])

    asyncio.run(run())
    async_sent = {s: values for is_async, s, values in sent if is_async}
    assert async_sent, "the async runner's statements reach the statement listeners"
    assert set(async_sent) <= sync_sent  # the very same texts (one set of statement builders)
    assert [p for s, values in async_sent.items() if (p := corpus_violations(*pyformat(s, values)))] == []


def _two_rounds(sql: str) -> Plan[list[Rows]]:
    first = yield Statement(sql)
    yield Statement("SELECT pg_sleep(0.02)")
    second = yield Statement(sql)
    return [first, second]


_TX = ("SELECT now() AS at, current_setting('transaction_isolation') AS iso, "
       "current_setting('transaction_read_only') AS ro, current_setting('search_path') AS path, "
       "current_setting('statement_timeout') AS timeout")


@pytest.mark.parametrize("snapshot", [False, True])
def test_lanes_as_the_sync_driver(make_store: Callable[..., Store], snapshot: bool) -> None:
    store = make_store(statement_timeout=7)
    sync = store.run(_two_rounds(_TX), snapshot=snapshot)
    got = asyncio.run(aio.arun(store, _two_rounds(_TX), snapshot=snapshot))
    for rows in (sync, got):
        first, second = rows[0][0], rows[1][0]
        assert (first.at == second.at) is snapshot  # one transaction, or one per statement
        assert first.iso == ("repeatable read" if snapshot else "read committed")
        assert first.ro == ("on" if snapshot else "off")
        assert first.timeout == "7s"
    assert [r[0][1:] for r in got] == [r[0][1:] for r in sync]  # same settings, search_path included


def test_timeout_override_and_typed_timeout_error(make_store: Callable[..., Store]) -> None:
    store = make_store(statement_timeout=0.2)

    def slow() -> Plan[Rows]:
        rows = yield Statement("SELECT pg_sleep(3)")
        return rows

    with pytest.raises(StatementTimeoutError, match="57014"):
        asyncio.run(aio.arun(store, slow()))

    async def overridden() -> Rows:
        with store.timeout(None):
            return await aio.arun(store, _two_rounds(_TX))  # type: ignore[return-value]

    assert asyncio.run(overridden())[0][0].timeout == "0"


def test_vector_type_registered_and_errors_thrown_into_the_plan(store: Store) -> None:
    def plan() -> Plan[tuple[Any, str]]:
        rows = yield Statement("SELECT CAST(:v AS vector) AS v", {"v": "[1,2,3]"})
        try:
            yield Statement("SELECT 1 / 0")
        except DatabaseError as exc:
            return rows[0].v, str(exc)
        raise AssertionError("division by zero passed")

    sync_v, sync_error = store.run(plan())
    async_v, async_error = asyncio.run(aio.arun(store, plan()))
    assert not isinstance(async_v, str) and type(async_v) is type(sync_v)  # pgvector's type, not text
    assert np.asarray(async_v.to_list()).tolist() == np.asarray(sync_v.to_list()).tolist() == [1.0, 2.0, 3.0]
    assert "division by zero" in async_error and async_error.split(":")[0] == sync_error.split(":")[0]
    with pytest.raises(InvalidFilterError):
        asyncio.run(KeywordRAGStrategy(BM25Index(store)).aretrieve("x", RAGContext(3, 0.0, {"tier": 3})))  # type: ignore[dict-item]


def test_outside_a_loop_is_a_clear_error(store: Store) -> None:
    with pytest.raises(Exception, match="running event loop"):
        aio.check_running_loop()


def test_pipeline_async_forms(store: Store) -> None:
    _corpus(store)
    pipeline = (RAGPipeline.builder(KeywordRAGStrategy(BM25Index(store))).default_context(RAGContext(4))
                .query_preprocessor(str.strip).reranker(lambda docs: list(reversed(docs))).build())
    query = "  PostgreSQL memory for agents "

    async def run() -> tuple[Any, str]:
        return await pipeline.aretrieve_documents(query), await pipeline.aexecute(query)

    docs, text = asyncio.run(run())
    assert docs == pipeline.retrieve_documents(query) and docs
    assert text == pipeline.execute(query)
    with pytest.raises(ValidationError):
        asyncio.run(pipeline.aexecute("   "))


def test_pipeline_over_a_sync_only_strategy_runs_it_in_a_thread(store: Store) -> None:
    _corpus(store)
    keyword = KeywordRAGStrategy(BM25Index(store))

    class SyncOnly:
        name = "sync-only"

        def retrieve(self, query: str, context: RAGContext | None = None) -> Any:
            return keyword.retrieve(query, context)

    pipeline = RAGPipeline.builder(SyncOnly()).build()
    assert asyncio.run(pipeline.aexecute(QUERIES[1])) == pipeline.execute(QUERIES[1]) != ""


def test_a_wrapper_over_a_sync_only_child_awaits_it_off_the_event_loop(store: Store) -> None:
    # The child has no plan: it does its own I/O. Its wrappers' aretrieve runs the whole
    # retrieval in a worker thread (before: the child's retrieve ran on the event loop,
    # blocking it), and gives the sync results; nested wrappers know it too.
    _corpus(store)
    keyword = KeywordRAGStrategy(BM25Index(store))
    threads: list[threading.Thread] = []

    class SyncOnly:
        name = "sync-only"

        def retrieve(self, query: str, context: RAGContext | None = None) -> Any:
            threads.append(threading.current_thread())
            return keyword.retrieve(query, context)

    child = SyncOnly()
    wrappers = [HierarchicalRAGStrategy(child, HierarchyIndex(store)),
                TemporalRAGStrategy(child, TemporalIndex(store), clock=lambda: FIXED_NOW),
                DistinctContentRAGStrategy(child),
                DistinctContentRAGStrategy(HierarchicalRAGStrategy(child, HierarchyIndex(store)))]
    for wrapper in wrappers:
        assert wrapper.own_io and planned(wrapper) is False
        expected = wrapper.retrieve(QUERIES[1], RAGContext(4))
        assert expected
        threads.clear()
        assert asyncio.run(wrapper.aretrieve(QUERIES[1], RAGContext(4))) == expected
        assert threads and threading.main_thread() not in threads, type(wrapper).__name__
    assert not DistinctContentRAGStrategy(keyword).own_io and planned(DistinctContentRAGStrategy(keyword))


def _on_async_engine(store: Store) -> bool:
    """Whether the running loop has async connections for ``store`` (some call used arun)."""
    pools = aio._REGISTRY.get(store.pool)  # type: ignore[call-overload]
    return pools is not None and asyncio.get_running_loop() in pools.by_loop


def test_integrations_await_aretrieve(store: Store) -> None:
    from llama_index.core.schema import QueryBundle

    from tnsrag_db.integrations.langchain import TnsragRetriever as LangChainRetriever
    from tnsrag_db.integrations.llama_index import TnsragRetriever as LlamaRetriever

    _corpus(store)
    strategy = KeywordRAGStrategy(BM25Index(store))
    langchain = LangChainRetriever(strategy=strategy, k=3, filters={"tier": "SEMANTIC"})
    llama = LlamaRetriever(strategy=strategy, similarity_top_k=3)

    async def run() -> tuple[Any, Any, bool]:
        assert not _on_async_engine(store)
        found = await langchain.ainvoke(QUERIES[1]), await llama.aretrieve(QueryBundle(QUERIES[1]))
        return found[0], found[1], _on_async_engine(store)

    documents, nodes, used_arun = asyncio.run(run())
    assert used_arun
    assert documents == langchain.invoke(QUERIES[1]) and documents
    assert [(n.node.node_id, n.score) for n in nodes] == [(n.node.node_id, n.score)
                                                         for n in llama.retrieve(QUERIES[1])]


def test_a_store_with_read_replicas_routes_async_reads_as_sync_ones(pool: Pool, store: Store) -> None:
    from tnsrag_db._db.replicas import ReadReplicas, Replica

    _corpus(store)
    # A "replica" that is no standby (the primary itself): never usable, every read falls
    # back to the primary, through the sync routing.
    replicas = ReadReplicas([Replica("not-a-standby", pool)], primary_identifier=None)
    routed = Store(pool, corpus=store.corpus, schema=store.schema, read_replicas=replicas)
    strategy = KeywordRAGStrategy(BM25Index(routed))

    async def run() -> tuple[Any, bool]:
        return await strategy.aretrieve(QUERIES[1]), _on_async_engine(routed)

    found, used_async_engine = asyncio.run(run())
    assert found == KeywordRAGStrategy(BM25Index(store)).retrieve(QUERIES[1]) and found
    assert not used_async_engine
