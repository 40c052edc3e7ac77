"""The LlamaIndex retriever by LlamaIndex's habits: embed models, MetadataFilters, node
relationships, metadata views, BaseRetriever's arguments, a query engine over it."""

from __future__ import annotations

import asyncio
import hashlib

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, QueryBundle
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from tnsrag_db._errors import InvalidFilterError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier
from tnsrag_db.integrations.llama_index import LlamaIndexEmbedding, TnsragRetriever, to_library_filters


class HashEmbedding(BaseEmbedding):
    """A deterministic llama-index embed model: a text's SHA-256 as 8 Gaussian numbers."""

    @staticmethod
    def _vector(text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        return np.random.default_rng(seed).normal(size=8).tolist()  # type: ignore[no-any-return]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


@pytest.fixture
def notes(store: Store) -> Store:
    BM25Index(store).add_all([
        MemoryEntry("n1", "Agents share memory through PostgreSQL.", MemoryTier.SEMANTIC, source="guide.md",
                    metadata={"tenant": "acme"}),
        MemoryEntry("n2", "Working memory holds the current task.", MemoryTier.WORKING, metadata={"tenant": "acme"}),
        MemoryEntry("n3", "Other tenants keep their memory apart.", MemoryTier.SEMANTIC, metadata={"tenant": "zeta"}),
    ])
    return store


def test_a_llama_index_embed_model_is_adapted(store: Store) -> None:
    model = HashEmbedding(model_name="hash-8")
    texts = [f"note {i} about agents" for i in range(12)]
    VectorMemoryStore(store, LlamaIndexEmbedding(model)).add_all([MemoryEntry(f"e{i:02}", t) for i, t in enumerate(texts)])
    for strategy in ("vector", "hybrid"):
        [hit] = TnsragRetriever(store, strategy, similarity_top_k=1, embedding=model).retrieve(texts[5])
        assert hit.node.node_id == "e05", strategy
    # No score floor by default (LlamaIndex's retrievers have none): negative cosines count.
    nodes = TnsragRetriever(store, "vector", similarity_top_k=10, embedding=model).retrieve("something else")
    assert len(nodes) == 10 and min(n.score or 0.0 for n in nodes) < 0
    floored = TnsragRetriever(store, "vector", similarity_top_k=10, embedding=model, min_score=0.0)
    assert len(floored.retrieve("something else")) < 10
    # MockEmbedding, the model of llama-index's own tests, at the first query.
    mock = MockEmbedding(embed_dim=8)
    assert TnsragRetriever(store, "vector", embedding=mock).retrieve("agents") == []  # its space is empty
    assert LlamaIndexEmbedding(mock).name == "llamaindex:llama_index.core.embeddings.mock_embed_model.MockEmbedding:unknown"


def test_metadata_filters_map_to_exact_filters(notes: Store) -> None:
    acme = MetadataFilters(filters=[MetadataFilter(key="tenant", value="acme")])
    assert {n.node.node_id for n in TnsragRetriever(notes, "keyword", filters=acme).retrieve("memory")} == {"n1", "n2"}
    both = MetadataFilters(filters=[MetadataFilter(key="tenant", value="acme"),
                                    MetadataFilter(key="tier", value="WORKING", operator=FilterOperator.EQ)],
                           condition=FilterCondition.AND)
    assert [n.node.node_id for n in TnsragRetriever(notes, "keyword", filters=both).retrieve("memory")] == ["n2"]
    one_or = MetadataFilters(filters=[MetadataFilter(key="tenant", value="zeta")], condition=FilterCondition.OR)
    assert to_library_filters(one_or) == {"tenant": "zeta"}
    assert to_library_filters(MetadataFilters(filters=[])) == {}


@pytest.mark.parametrize("filters, message", [
    (MetadataFilters(filters=[MetadataFilter(key="year", value=2020, operator=FilterOperator.GT)]),
     "filter on 'year' uses operator '>'"),
    (MetadataFilters(filters=[MetadataFilter(key="tenant", value=["acme"], operator=FilterOperator.IN)]),
     "filter on 'tenant' uses operator 'in'"),
    (MetadataFilters(filters=[MetadataFilter(key="page", value=3)]), "value for 'page' must be a string"),
    (MetadataFilters(filters=[MetadataFilter(key="tenant", value="acme"), MetadataFilter(key="tenant", value="zeta")],
                     condition=FilterCondition.OR), "condition 'or' over 2 filters"),
    (MetadataFilters(filters=[MetadataFilter(key="tenant", value="acme")], condition=FilterCondition.NOT),
     "condition 'not'"),
    (MetadataFilters(filters=[MetadataFilters(filters=[MetadataFilter(key="tenant", value="acme")])]),
     "nested MetadataFilters"),
    (MetadataFilters(filters=[MetadataFilter(key="tenant", value="acme"), MetadataFilter(key="tenant", value="zeta")]),
     "'tenant' to equal both 'acme' and 'zeta'"),
    (MetadataFilters(filters=[MetadataFilter(key="tenant", value="")]), "non-blank"),
])
def test_metadata_filters_that_cannot_be_exact_are_refused(notes: Store, filters: MetadataFilters,
                                                           message: str) -> None:
    with pytest.raises(ValidationError, match=f"'filters'.*{message}") as caught:
        TnsragRetriever(notes, "keyword", filters=filters)
    assert isinstance(caught.value.__cause__, InvalidFilterError)
    with pytest.raises(InvalidFilterError, match=message):
        to_library_filters(filters)


@pytest.fixture
def manual(notes: Store) -> Store:
    HierarchyIndex(notes).add_all([
        MemoryEntry("manual", "The flux capacitor manual."),
        MemoryEntry("install", "Installing the capacitor.", parent_id="manual"),
        MemoryEntry("flux", "Calibrate the flux coil before driving.", parent_id="install"),
        MemoryEntry("page", "Flux page of the guide.", source="guide.md", parent_id="n1"),
    ])
    BM25Index(notes).add_all(list(notes.get_many(["manual", "install", "flux", "page"]).values()))
    return notes


def test_nodes_carry_parent_and_source_relationships(manual: Store) -> None:
    retriever = TnsragRetriever(manual, "keyword", similarity_top_k=10)
    for nodes in (retriever.retrieve("flux capacitor guide PostgreSQL"),
                  asyncio.run(retriever.aretrieve(QueryBundle("flux capacitor guide PostgreSQL")))):
        by_id = {n.node.node_id: n.node for n in nodes}
        assert set(by_id) >= {"manual", "install", "flux", "page", "n1"}
        relations = {i: (n.parent_node.node_id if n.parent_node else None, n.ref_doc_id) for i, n in by_id.items()}
        assert relations["flux"] == ("install", "manual")  # no source: the root of its chain
        assert relations["install"] == ("manual", "manual")
        assert relations["manual"] == (None, None)  # a root without a source is a document itself
        assert relations["page"] == ("n1", "guide.md")  # the source wins over the root
        assert relations["n1"] == (None, "guide.md")
    # A strategy object without store=: the source alone.
    alone = TnsragRetriever(strategy=KeywordRAGStrategy(BM25Index(manual)), similarity_top_k=10)
    by_id = {n.node.node_id: n.node for n in alone.retrieve("flux capacitor guide")}
    assert by_id["flux"].parent_node is None and by_id["flux"].ref_doc_id is None
    assert by_id["page"].ref_doc_id == "guide.md"
    # ... and with it, the corpus is read.
    given = TnsragRetriever(manual, KeywordRAGStrategy(BM25Index(manual)), similarity_top_k=10)
    assert {n.node.node_id: n.node.ref_doc_id for n in given.retrieve("flux")}["flux"] == "manual"


def test_bookkeeping_keys_stay_out_of_llm_and_embedding_views(manual: Store) -> None:
    [node] = [n.node for n in TnsragRetriever(manual, "keyword").retrieve("PostgreSQL") if n.node.node_id == "n1"]
    assert node.metadata == {"tier": "SEMANTIC", "source": "guide.md", "tenant": "acme"}
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        shown = node.get_content(metadata_mode=mode)
        assert "tier" not in shown and "SEMANTIC" not in shown, mode
        assert "tenant: acme" in shown and "source: guide.md" in shown, mode
    assert "tier: SEMANTIC" in node.get_content(metadata_mode=MetadataMode.ALL)
    hierarchical = TnsragRetriever(manual, "hierarchical", similarity_top_k=5,
                                   embedding=HashEmbedding(model_name="hash-8"))
    VectorMemoryStore(manual, LlamaIndexEmbedding(HashEmbedding(model_name="hash-8"))).add_all(
        list(manual.get_many(["manual", "install", "flux"]).values()))
    nodes = hierarchical.retrieve("Calibrate the flux coil before driving.")
    assert any("childOf" in n.node.metadata for n in nodes)
    for n in nodes:
        shown = n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert not any(f"{key}: " in shown for key in ("tier", "depth", "childOf", "entryId", "path")), shown
    # The prompt a query engine builds (MockLLM answers with the prompt it was given).
    pool = RetrieverQueryEngine.from_args(TnsragRetriever(manual, "keyword"), llm=MockLLM())
    prompt = str(pool.query("PostgreSQL"))
    assert "Agents share memory through PostgreSQL." in prompt and "tenant: acme" in prompt
    assert "tier" not in prompt


def test_base_retriever_arguments_are_accepted(notes: Store) -> None:
    callbacks = CallbackManager([])
    retriever = TnsragRetriever(notes, "keyword", callback_manager=callbacks, verbose=True, object_map={},
                                objects=[])
    assert retriever.callback_manager is callbacks and retriever.object_map == {}
    assert [n.node.node_id for n in retriever.retrieve("PostgreSQL")][:1] == ["n1"]


def test_ingest_and_collapse_keys_stay_out_of_the_llm_view(store: Store) -> None:
    from tnsrag_db._strategies.distinct import DistinctContentRAGStrategy

    store.add_all([MemoryEntry("a", "Same changelog text.", metadata={"root": "/usr/share/doc/pkg-a"}),
                   MemoryEntry("b", "Same changelog text.", metadata={"root": "/usr/share/doc/pkg-b"})])
    strategy = DistinctContentRAGStrategy(KeywordRAGStrategy(BM25Index(store)))
    [node] = [n.node for n in TnsragRetriever(store, strategy).retrieve("changelog")]
    assert set(node.metadata) >= {"root", "duplicateIds"}
    shown = node.get_content(metadata_mode=MetadataMode.LLM)
    assert "root: " not in shown and "duplicateIds" not in shown and "/usr/share/doc" not in shown, shown
