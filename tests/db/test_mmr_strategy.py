"""MMRRAGStrategy over real strategies: candidates' vectors come from the stored embeddings."""

from __future__ import annotations

import asyncio

import pytest

from tests.db.test_vector import TableEmbedding
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.mmr import MMRRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext

# The vectors of tests/unit/test_mmr.py's hand-computed example (query q; MMR at 0.5: d, a, b, c).
TABLE = {"q": [0.8, 0.6], "alpha": [1.0, 0.0], "beta": [0.96, 0.28], "gamma": [0.0, 1.0], "delta": [0.6, 0.8]}


def ids(docs: list) -> list[str]:  # type: ignore[type-arg]
    return [d.metadata["entryId"] for d in docs]


@pytest.fixture
def vectors(store: Store) -> VectorMemoryStore:
    emb = TableEmbedding(TABLE, dim=2)
    vectors = VectorMemoryStore(store, emb)
    vectors.add_all([MemoryEntry(i, i) for i in ("alpha", "beta", "gamma", "delta")])
    return vectors


def test_mmr_over_vector_search_uses_stored_vectors(vectors: VectorMemoryStore) -> None:
    emb = vectors.embedding._fn  # type: ignore[attr-defined]
    base = VectorRAGStrategy(vectors)
    context = RAGContext(4, min_score=-1.0)
    assert ids(base.retrieve("q", context)) == ["delta", "beta", "alpha", "gamma"]
    emb.calls.clear()
    mmr = MMRRAGStrategy(base, vectors, fetch_k=4, lambda_mult=0.5)
    docs = mmr.retrieve("q", context)
    assert ids(docs) == ["delta", "alpha", "beta", "gamma"]
    assert set(emb.calls) == {"q"}  # the candidates were not embedded again
    # Each document keeps the base strategy's score.
    assert [round(d.score, 3) for d in docs] == [0.96, 0.8, 0.936, 0.6]
    assert ids(MMRRAGStrategy(base, vectors, fetch_k=4, lambda_mult=1.0).retrieve("q", context)) == \
        ["delta", "beta", "alpha", "gamma"]
    assert ids(mmr.retrieve("q", RAGContext(2, min_score=-1.0))) == ["delta", "alpha"]
    # fetch_k bounds the candidates (LangChain's rule): 2 fetched, 2 returned whatever max_results.
    assert ids(MMRRAGStrategy(base, vectors, fetch_k=2).retrieve("q", context)) == ["delta", "beta"]
    assert ids(mmr.retrieve("q", RAGContext(4, metadata_filters={"entryId": "gamma"}, min_score=-1.0))) == ["gamma"]
    assert ids(asyncio.run(mmr.aretrieve("q", context))) == ids(docs)


def test_mmr_over_keyword_search_embeds_entries_without_a_stored_vector(vectors: VectorMemoryStore) -> None:
    store = vectors.store
    BM25Index(store).add_all([MemoryEntry("words", "beta")])  # no vector: embedded from its content
    emb = vectors.embedding._fn  # type: ignore[attr-defined]
    emb.calls.clear()
    mmr = MMRRAGStrategy(KeywordRAGStrategy(BM25Index(store)), vectors, fetch_k=10, lambda_mult=0.0)
    docs = mmr.retrieve("beta", RAGContext(2))
    # Both match "beta" and have the same vector: the second pick is the one listed second.
    assert sorted(ids(docs)) == ["beta", "words"]
    assert sorted(emb.calls) == ["beta", "beta"]  # the query, and the entry without a vector
    assert mmr.retrieve("nothing matches this", RAGContext(2)) == []


def test_mmr_bad_settings(vectors: VectorMemoryStore) -> None:
    base = VectorRAGStrategy(vectors)
    with pytest.raises(ConfigurationError, match="fetch_k must be >= 1"):
        MMRRAGStrategy(base, vectors, fetch_k=0)
    with pytest.raises(ConfigurationError, match="lambda_mult must be a number in"):
        MMRRAGStrategy(base, vectors, lambda_mult=2)
    with pytest.raises(ConfigurationError, match="base must be a RAGStrategy"):
        MMRRAGStrategy("vector", vectors)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="vectors must be a VectorMemoryStore"):
        MMRRAGStrategy(base, base)  # type: ignore[arg-type]
