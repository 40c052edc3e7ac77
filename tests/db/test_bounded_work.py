"""The work of one call is bounded: analysed query terms, statement time, result counts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tnsrag_db import (
    BM25Index,
    HashingEmbedding,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    MemoryEntry,
    RAGContext,
    TemporalIndex,
    TemporalRAGStrategy,
    VectorMemoryStore,
)
from tnsrag_db._errors import ConfigurationError, InvalidContextError, StatementTimeoutError, ValidationError
from tnsrag_db._store.store import Store
from tnsrag_db._types import MAX_RESULTS


def _word(i: int) -> str:
    return "q" + "".join(chr(97 + (i // 26**n) % 26) for n in range(4))  # letters only: one term each


LONG_QUERY = " ".join(_word(i) for i in range(100_000))  # 100,000 distinct terms


def test_a_100k_term_query_analyses_only_the_cap(store: Store, make_store: Callable[..., Store]) -> None:
    first, last = _word(1), _word(99_999)
    store.add_all([MemoryEntry("a", f"{first} common"), MemoryEntry("b", f"{last} common")])
    terms = BM25Index(store).query_terms(LONG_QUERY)
    assert len(terms) <= store.max_query_terms == 256
    assert first in terms and last not in terms  # the first words count, the rest is ignored
    hits = KeywordRAGStrategy(BM25Index(store)).retrieve(LONG_QUERY)
    assert [d.metadata["entryId"] for d in hits] == ["a"]
    # Temporal over keyword (the 41-second case of the attack run) answers from the cap too.
    temporal = TemporalRAGStrategy(KeywordRAGStrategy(BM25Index(store)), TemporalIndex(store))
    assert [d.metadata["entryId"] for d in temporal.retrieve(LONG_QUERY)] == ["a"]
    small = make_store(store.corpus, max_query_terms=3)
    assert BM25Index(small).query_terms("alpha beta gamma delta epsilon") == ["alpha", "beta", "gamma"]
    # Compound identifiers split into many parts are bounded too.
    assert len(BM25Index(small).query_terms("getHTTPResponseCodeFromServerNow other")) <= 6
    with pytest.raises(ConfigurationError, match="max_query_terms"):
        make_store(max_query_terms=0)


def test_statement_timeout_per_store_and_per_block(store: Store, make_store: Callable[..., Store]) -> None:
    limited = make_store(store.corpus, statement_timeout=0.2)
    assert limited.statement_timeout == 0.2
    with pytest.raises(StatementTimeoutError):
        limited.read("SELECT pg_sleep(2)", {})
    with pytest.raises(StatementTimeoutError):
        with limited.session.transaction() as conn:
            conn.execute("SELECT pg_sleep(2)")
    # The same pooled connections serve an unlimited store afterwards.
    assert store.read("SELECT 1 AS ok FROM pg_sleep(0.4)", {})[0].ok
    with store.timeout(0.2):
        assert store.statement_timeout == 0.2
        with pytest.raises(StatementTimeoutError):
            store.read("SELECT pg_sleep(2)", {})
    assert store.statement_timeout is None
    assert store.read("SELECT 1 AS ok FROM pg_sleep(0.4)", {})[0].ok
    with limited.timeout(None):  # lifted for one block
        assert limited.read("SELECT 1 AS ok FROM pg_sleep(0.4)", {})[0].ok
    # A write that times out is rolled back whole.
    with limited.timeout(0.001):
        with pytest.raises(StatementTimeoutError):
            limited.add_all([MemoryEntry(f"t{i}", f"text {i} " * 50) for i in range(5000)])
    assert store.count() == 0
    with pytest.raises(ConfigurationError, match="statement_timeout"):
        make_store(statement_timeout=-1)


def test_max_results_is_capped_with_a_typed_error(store: Store) -> None:
    assert RAGContext(MAX_RESULTS).max_results == 10_000
    for bad in (MAX_RESULTS + 1, 2**62, 2**70):
        with pytest.raises(InvalidContextError, match="at most 10000"):
            RAGContext(bad)
    for k in (2**62, 10**6):
        with pytest.raises(ValidationError, match="k must"):
            BM25Index(store).search("x", k)
        with pytest.raises(ValidationError, match="k must"):
            VectorMemoryStore(store, HashingEmbedding(8)).search("x", k)
    # Strategies asked for the most results derive child requests within the cap.
    store.add_all([MemoryEntry(f"m{i}", f"refund text {i}") for i in range(5)])
    vectors = VectorMemoryStore(store, HashingEmbedding(8), index_threshold=None)
    vectors.add_all([MemoryEntry(f"m{i}", f"refund text {i}") for i in range(5)])
    ctx = RAGContext(MAX_RESULTS)
    temporal = TemporalRAGStrategy(KeywordRAGStrategy(BM25Index(store)), TemporalIndex(store))
    assert len(temporal.retrieve("refund", ctx)) == 5
    assert len(HybridRAGStrategy(BM25Index(store), vectors).retrieve("refund", ctx)) == 5
