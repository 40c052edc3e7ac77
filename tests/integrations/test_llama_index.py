"""The LlamaIndex retriever, with the real llama-index-core."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier
from tnsrag_db.integrations.llama_index import TnsragRetriever

STRATEGIES = ("vector", "keyword", "hybrid", "graph", "hierarchical", "temporal", "reasoning", "multi_query")


@pytest.fixture
def notes(store: Store) -> Store:
    BM25Index(store).add_all([
        MemoryEntry("n1", "Agents share memory through PostgreSQL.", MemoryTier.SEMANTIC, source="guide.md",
                    metadata={"tenant": "acme"}),
        MemoryEntry("n2", "Working memory holds the current task.", MemoryTier.WORKING, metadata={"tenant": "acme"}),
        MemoryEntry("n3", "Other tenants keep their memory apart.", MemoryTier.SEMANTIC, metadata={"tenant": "zeta"}),
    ])
    GraphStore(store).add_edge("n1", "n3", relation="see-also")
    return store


def test_returns_nodes_with_scores_ids_and_metadata(notes: Store) -> None:
    nodes = TnsragRetriever(notes, "keyword", similarity_top_k=5).retrieve("memory PostgreSQL")
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    first = nodes[0]
    assert (first.node.node_id, first.node.get_content(), first.score) == (
        "n1", "Agents share memory through PostgreSQL.", pytest.approx(first.score))
    assert first.score is not None and first.score > 0
    assert first.node.metadata == {"tier": "SEMANTIC", "source": "guide.md", "tenant": "acme"}
    assert [n.score for n in nodes] == sorted((n.score or 0.0 for n in nodes), reverse=True)
    [n2] = [n for n in nodes if n.node.node_id == "n2"]
    assert n2.node.metadata == {"tier": "WORKING", "tenant": "acme"}


def test_every_strategy_sync_and_async_with_filters(notes: Store) -> None:
    for name in STRATEGIES:
        retriever = TnsragRetriever(notes, name, similarity_top_k=3, filters={"tenant": "acme"})
        nodes = retriever.retrieve("memory")
        assert {n.node.node_id for n in nodes} <= {"n1", "n2"}, name
        again = asyncio.run(retriever.aretrieve(QueryBundle("memory")))
        assert [(n.node.node_id, n.score) for n in again] == [(n.node.node_id, n.score) for n in nodes], name
    graph = TnsragRetriever(notes, "graph", similarity_top_k=5).retrieve("PostgreSQL")
    assert [n.node.node_id for n in graph][:2] == ["n1", "n3"]
    assert graph[1].node.metadata["depth"] == "1"


def test_strategy_object_and_bad_settings(notes: Store) -> None:
    retriever = TnsragRetriever(strategy=KeywordRAGStrategy(BM25Index(notes)), similarity_top_k=1)
    assert [n.node.node_id for n in retriever.retrieve("task")] == ["n2"]
    with pytest.raises(ValidationError, match="'similarity_top_k'"):
        TnsragRetriever(notes, similarity_top_k=0)
    with pytest.raises(ValidationError, match="'filters'"):
        TnsragRetriever(notes, filters={"tenant": " "})
    with pytest.raises(ValidationError, match="'strategy'.*unknown strategy 'nearest'"):
        TnsragRetriever(notes, "nearest")
    with pytest.raises(ConfigurationError, match="give the store"):
        TnsragRetriever(strategy="keyword")
    with pytest.raises(ValidationError, match="'query'.*blank"):
        retriever.retrieve(" ")


def test_answers_as_of_an_instant(notes: Store) -> None:
    query = QueryBundle("memory")
    assert TnsragRetriever(notes, "keyword").retrieve(query)
    assert TnsragRetriever(notes, "keyword", as_of=datetime(2020, 1, 1, tzinfo=timezone.utc)).retrieve(query) == []
    with pytest.raises(ValidationError, match="as_of"):
        TnsragRetriever(notes, "keyword", as_of=datetime(2020, 1, 1))
