"""Fusion weights on real PostgreSQL: hybrid (SQL fusion and the graph form) and multi-query."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tnsrag_db import (
    BM25Index,
    ConfigurationError,
    GraphRAGStrategy,
    GraphStore,
    HashingEmbedding,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    MemoryEntry,
    MemoryTier,
    MultiQueryRAGStrategy,
    QueryExpansion,
    RAGContext,
    VectorMemoryStore,
    reciprocal_rank_fusion,
)
from tnsrag_db._store.store import Store

TEXTS = ["agent memory persists facts", "vector search with cosine similarity", "keyword search with BM25",
         "hybrid search fuses keyword and vector rankings", "agents share memory across processes",
         "graph walks follow edges", "memory tiers: working, episodic, semantic", "temporal freshness decay",
         "search agents memory vector keyword", "reciprocal rank fusion with k 60"]


def _corpus(store: Store) -> tuple[BM25Index, VectorMemoryStore]:
    vectors = VectorMemoryStore(store, HashingEmbedding())
    vectors.add_all([MemoryEntry(f"e{i}", t, MemoryTier.SEMANTIC if i % 2 else MemoryTier.WORKING)
                     for i, t in enumerate(TEXTS)])
    return BM25Index(store), vectors


def _ids(docs: Sequence[object]) -> list[str]:
    return [d.metadata["entryId"] for d in docs]  # type: ignore[attr-defined]


@pytest.mark.parametrize("weights", [(1.0, 1.0), (2.0, 0.5), (0.3, 3.0), (1.0, 0.0), (0.0, 1.0)])
def test_hybrid_sql_fusion_equals_weighted_rrf_of_its_streams(store: Store, weights: tuple[float, float]) -> None:
    keywords, vectors = _corpus(store)
    hybrid = HybridRAGStrategy(keywords, vectors, weights=weights, fusion="rrf")
    assert hybrid.weights == weights
    for query in ["agent memory", "vector keyword search", "fusion"]:
        ctx = RAGContext(6, 0.0, None)
        kw, vec = hybrid.retriever.rankings(query, ctx)
        expected = reciprocal_rank_fusion(kw, vec, weights=weights)[:6]
        got = hybrid.retrieve(query, ctx)
        assert _ids(got) == _ids(expected) and [d.score for d in got] == [d.score for d in expected]
        if weights[1] == 0.0:
            assert _ids(got) == _ids(kw)[:6] and all(d.score == 1.0 / (60 + n) for n, d in enumerate(got, 1))


def test_hybrid_weights_change_the_ranking(store: Store) -> None:
    keywords, vectors = _corpus(store)
    query = "agents memory"
    keyword_heavy = HybridRAGStrategy(keywords, vectors, weights=(5.0, 1.0)).retrieve(query, RAGContext(3))
    vector_heavy = HybridRAGStrategy(keywords, vectors, weights=(1.0, 5.0)).retrieve(query, RAGContext(3))
    kw, vec = HybridRAGStrategy(keywords, vectors).retriever.rankings(query, RAGContext(3))
    assert _ids(keyword_heavy)[0] == _ids(kw)[0] and _ids(vector_heavy)[0] == _ids(vec)[0]


def test_hybrid_graph_form_takes_three_weights(store: Store) -> None:
    keywords, vectors = _corpus(store)
    graph = GraphRAGStrategy("test", GraphStore(store), None, 2, 0.85, 1024)
    hybrid = HybridRAGStrategy(keywords, vectors, graph, weights=(1.0, 2.0, 0.5))
    ctx = RAGContext(5)
    kw, vec = hybrid.retriever.rankings("agent memory", ctx)
    graph_docs = graph.retrieve("agent memory", RAGContext(50))
    expected = reciprocal_rank_fusion(kw, vec, graph_docs, weights=(1.0, 2.0, 0.5))[:5]
    assert hybrid.retrieve("agent memory", ctx) == expected
    with pytest.raises(ConfigurationError, match=r"weights \(keyword, vector, graph\) must have one weight"):
        HybridRAGStrategy(keywords, vectors, graph, weights=(1.0, 1.0))
    with pytest.raises(ConfigurationError, match=r"weights \(keyword, vector\) must have one weight"):
        HybridRAGStrategy(keywords, vectors, weights=(1.0, 1.0, 1.0))
    for bad in [(-1.0, 1.0), (0.0, 0.0), (float("nan"), 1.0)]:
        with pytest.raises(ConfigurationError, match="weights"):
            HybridRAGStrategy(keywords, vectors, weights=bad)


class Fixed:
    def __init__(self, variants: Sequence[str]) -> None:
        self.variants = list(variants)

    def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> list[str]:
        return self.variants


def test_multi_query_weights_apply_per_query(store: Store) -> None:
    keywords, _ = _corpus(store)
    base = KeywordRAGStrategy(keywords)
    variants = ["vector cosine", "graph edges"]
    weights = (2.0, 1.0, 0.5)
    strategy = MultiQueryRAGStrategy(base, Fixed(variants), QueryExpansion.LLM, "m", 2, weights=weights)
    assert strategy.weights == weights
    pool = RAGContext(50)
    rankings = [base.retrieve(q, pool) for q in ["agent memory", *variants]]
    assert strategy.retrieve("agent memory", RAGContext(8)) == reciprocal_rank_fusion(*rankings, weights=weights)[:8]
    # Fewer variants than max_expansions: the unused weights are ignored.
    short = MultiQueryRAGStrategy(base, Fixed(variants[:1]), QueryExpansion.LLM, "m", 2, weights=weights)
    assert short.retrieve("agent memory", RAGContext(8)) == reciprocal_rank_fusion(*rankings[:2],
                                                                                   weights=weights[:2])[:8]
    # Only a zero-weighted query ran: nothing to fuse.
    silent = MultiQueryRAGStrategy(base, Fixed([]), QueryExpansion.LLM, "m", 1, weights=(0.0, 1.0))
    assert silent.retrieve("agent memory") == [] and silent.explain("agent memory").results == ()
    with pytest.raises(ConfigurationError, match=r"weights \(the original query, then each variant\) must have"):
        MultiQueryRAGStrategy(base, Fixed(variants), QueryExpansion.LLM, "m", 2, weights=(1.0, 1.0))
