"""LangChain adapters: langchain-tests' standard suites plus behaviour of our own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests, VectorStoreIntegrationTests
from pydantic import ValidationError as PydanticValidationError

from tnsrag_db._errors import InvalidEntryError, InvalidFilterError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier
from tnsrag_db.integrations.langchain import (
    NON_STRING_METADATA_KEY,
    TnsragRetriever,
    TnsragVectorStore,
    to_library_filters,
)

# The standard suites' async tests carry no asyncio mark (pytest-asyncio runs in strict
# mode): the classes get it, and its warning for their sync tests is silenced.
STANDARD = [pytest.mark.asyncio, pytest.mark.filterwarnings(
    "ignore:The test <Function .* is marked with '@pytest.mark.asyncio' but it is not an async function")]


@STANDARD[0]
@STANDARD[1]
class TestStandardVectorStore(VectorStoreIntegrationTests):
    """langchain-tests' VectorStore suite (sync and async), each test on an empty corpus."""

    @pytest.fixture
    def vectorstore(self, make_store: Callable[..., Store]) -> Iterator[VectorStore]:
        yield TnsragVectorStore(make_store(), self.get_embeddings())


@STANDARD[0]
@STANDARD[1]
class TestStandardRetriever(RetrieversIntegrationTests):
    """langchain-tests' retriever suite, over a corpus with a handful of matching entries."""

    @pytest.fixture(autouse=True)
    def _corpus(self, store: Store) -> None:
        BM25Index(store).add_all([MemoryEntry(f"doc{i}", f"agents share memory note {i}") for i in range(6)])
        self._store = store

    @property
    def retriever_constructor(self) -> type[TnsragRetriever]:
        return TnsragRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"store": self._store, "strategy": "keyword"}

    @property
    def retriever_query_example(self) -> str:
        return "agents memory"


@pytest.fixture
def notes(store: Store) -> Store:
    BM25Index(store).add_all([
        MemoryEntry("n1", "Agents share memory through PostgreSQL.", MemoryTier.SEMANTIC, source="guide.md",
                    metadata={"tenant": "acme"}),
        MemoryEntry("n2", "Working memory holds the current task.", MemoryTier.WORKING, metadata={"tenant": "acme"}),
        MemoryEntry("n3", "Other tenants keep their memory apart.", MemoryTier.SEMANTIC, metadata={"tenant": "zeta"}),
    ])
    return store


def test_retriever_documents_carry_id_score_tier_source_and_metadata(notes: Store) -> None:
    docs = TnsragRetriever(store=notes, strategy="keyword", k=5).invoke("memory PostgreSQL")
    first = docs[0]
    assert first.id == "n1" and first.page_content == "Agents share memory through PostgreSQL."
    assert first.metadata == {"id": "n1", "score": pytest.approx(first.metadata["score"]), "tier": "SEMANTIC",
                              "source": "guide.md", "tenant": "acme"}
    assert first.metadata["score"] > 0
    assert [d.metadata["score"] for d in docs] == sorted((d.metadata["score"] for d in docs), reverse=True)
    assert {d.id for d in docs} == {"n1", "n2", "n3"}
    [working] = [d for d in docs if d.id == "n2"]
    assert [working.metadata[k] for k in ("tier", "source", "tenant")] == ["WORKING", None, "acme"]


def test_retriever_filters_and_k_as_fields_and_per_call(notes: Store) -> None:
    acme = TnsragRetriever(store=notes, strategy="keyword", filters={"tenant": "acme"})
    assert {d.id for d in acme.invoke("memory")} == {"n1", "n2"}
    assert [d.id for d in acme.invoke("memory", filters={"tier": "WORKING"})] == ["n2"]
    assert len(acme.invoke("memory", k=1)) == 1
    assert acme.invoke("memory", min_score=1e9) == []
    with pytest.raises(ValidationError, match="'filters'.*'tenant' must be a non-blank string") as caught:
        acme.invoke("memory", filters={"tenant": ""})
    assert isinstance(caught.value.__cause__, InvalidFilterError)
    with pytest.raises(ValidationError, match="'query'.*blank"):
        acme.invoke("  ")


def test_retriever_answers_as_of_an_instant(notes: Store) -> None:
    before = datetime(2020, 1, 1, tzinfo=timezone.utc)  # before the notes were written
    assert TnsragRetriever(store=notes, strategy="keyword").invoke("memory")
    assert TnsragRetriever(store=notes, strategy="keyword", as_of=before).invoke("memory") == []
    assert TnsragRetriever(store=notes, strategy="keyword").invoke("memory", as_of=before) == []
    assert asyncio.run(TnsragRetriever(store=notes, strategy="keyword", as_of=before).ainvoke("memory")) == []
    with pytest.raises(PydanticValidationError, match="as_of must be a timezone-aware datetime"):
        TnsragRetriever(store=notes, strategy="keyword", as_of=datetime(2020, 1, 1))


def test_retriever_async_matches_sync_for_every_strategy(notes: Store) -> None:
    for strategy in ("vector", "keyword", "hybrid", "graph", "hierarchical", "temporal", "reasoning", "multi_query"):
        retriever = TnsragRetriever(store=notes, strategy=strategy, k=3)
        sync = retriever.invoke("memory")
        assert asyncio.run(retriever.ainvoke("memory")) == sync, strategy
        assert all(d.id in {"n1", "n2", "n3"} for d in sync)


def test_retriever_over_a_strategy_object_and_bad_settings(notes: Store) -> None:
    strategy = KeywordRAGStrategy(BM25Index(notes))
    assert [d.id for d in TnsragRetriever(strategy=strategy, k=1).invoke("PostgreSQL")] == ["n1"]
    with pytest.raises(PydanticValidationError, match="'k'.*max_results must be >= 1"):
        TnsragRetriever(store=notes, k=0)
    with pytest.raises(PydanticValidationError, match="unknown strategy 'bogus'"):
        TnsragRetriever(store=notes, strategy="bogus")
    with pytest.raises(PydanticValidationError, match="give the store"):
        TnsragRetriever(strategy="keyword")


@pytest.fixture
def vs(store: Store) -> TnsragVectorStore:
    return TnsragVectorStore(store, DeterministicFakeEmbedding(size=8))


def test_vector_store_metadata_round_trip_and_filters(vs: TnsragVectorStore) -> None:
    ids = vs.add_texts(["alpha text", "beta text", "gamma text"],
                       [{"source": "a.pdf", "page": 3, "tags": ["x", "y"], "tenant": "acme"},
                        {"tenant": "acme", "ok": True}, {"tenant": "zeta"}], ids=["a", None, "c"])
    assert ids[0] == "a" and ids[2] == "c" and len(ids[1]) == 36
    [(doc, score)] = vs.similarity_search_with_score("alpha text", k=1)
    assert doc == Document(id="a", page_content="alpha text",
                           metadata={"source": "a.pdf", "page": 3, "tags": ["x", "y"], "tenant": "acme"})
    assert score == pytest.approx(1.0, abs=1e-5)
    entry = vs.store.get("a")
    assert entry is not None and entry.source == "a.pdf" and entry.metadata["tenant"] == "acme"
    assert entry.metadata[NON_STRING_METADATA_KEY] == '{"page": 3, "tags": ["x", "y"]}'
    assert {d.id for d in vs.similarity_search("text", k=10, filter={"tenant": "acme"})} == {"a", ids[1]}
    assert [d.id for d in vs.similarity_search("text", k=10, filter={"source": "a.pdf"})] == ["a"]
    assert vs.similarity_search("text", k=10, filter={"tenant": "nobody"}) == []
    retriever = vs.as_retriever(search_kwargs={"k": 5, "filter": {"tenant": "zeta"}})
    assert [d.id for d in retriever.invoke("text")] == ["c"]
    relevance = vs.similarity_search_with_relevance_scores("alpha text", k=3)
    assert all(0.0 <= r <= 1.0 for _, r in relevance) and relevance[0][1] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("flt, message", [
    ({"page": 3}, "must be a string"),
    ({"tenant": {"$eq": "acme"}}, "operators"),
    ({"$and": [{"a": "b"}]}, "operator '\\$and'"),
    ({"tenant": ""}, "non-blank"),
    ("tenant=acme", "must be a dict"),
])
def test_vector_store_rejects_filters_it_cannot_express(vs: TnsragVectorStore, flt: Any, message: str) -> None:
    vs.add_texts(["x"], [{"tenant": "acme"}])
    with pytest.raises(InvalidFilterError, match=message):
        vs.similarity_search("x", filter=flt)
    with pytest.raises(InvalidFilterError, match=message):
        to_library_filters(flt)


def test_vector_store_rejects_bad_documents_whole(vs: TnsragVectorStore) -> None:
    for metadata, message in [({"tier": "WORKING"}, "reserved"), ({"entryId": "x"}, "reserved"),
                              ({"source": 7}, "'source' must be a string"),
                              ({"when": object()}, "JSON values")]:
        with pytest.raises(InvalidEntryError, match=message):
            vs.add_texts(["good", "bad"], [{}, metadata])
    with pytest.raises(ValidationError, match="2 ids for 1 texts"):
        vs.add_texts(["x"], ids=["a", "b"])
    assert vs.store.count() == 0


def test_vector_store_delete_tier_and_from_texts(store: Store) -> None:
    vs = TnsragVectorStore.from_texts(["one", "two", "three"], DeterministicFakeEmbedding(size=8),
                                      [{"kind": "a"}, {"kind": "b"}, {"kind": "b"}], ids=["1", "2", "3"],
                                      store=store, tier="EPISODIC")
    assert {e.tier for e in store.iter_entries()} == {MemoryTier.EPISODIC}
    assert vs.delete(filter={"kind": "b"}) is True
    assert [d.id for d in vs.get_by_ids(["3", "1", "2"])] == ["1"]
    vs.delete(["1", "missing"])
    assert store.count() == 0
    assert asyncio.run(vs.asimilarity_search("one")) == []


def test_vector_store_delete_without_ids_deletes_all_as_langchain_documents(store: Store) -> None:
    # VectorStore.delete: "ids: List of IDs to delete. If None, delete all."
    vs = TnsragVectorStore.from_texts(["one", "two"], DeterministicFakeEmbedding(size=8), store=store)
    assert vs.delete([]) is True and store.count() == 2
    assert vs.delete() is True
    assert store.count() == 0
    vs.add_texts(["three"])
    assert asyncio.run(vs.adelete()) is True and store.count() == 0
    with pytest.raises(ValidationError, match="ids must be a list"):
        vs.delete("one")  # type: ignore[arg-type]


def test_vector_store_k_zero_returns_nothing_as_in_memory_does(vs: TnsragVectorStore) -> None:
    vs.add_texts(["alpha text", "beta text"])
    assert vs.similarity_search("alpha text", k=0) == []
    assert vs.similarity_search_with_score("alpha text", k=0) == []
    assert vs.similarity_search_by_vector([1.0] * 8, k=0) == []
    assert vs.max_marginal_relevance_search("alpha text", k=0) == []
    assert vs.as_retriever(search_kwargs={"k": 0}).invoke("alpha text") == []
    assert asyncio.run(vs.asimilarity_search("alpha text", k=0)) == []
    with pytest.raises(ValidationError, match="k must be >= 1"):
        vs.similarity_search("alpha text", k=-1)


def test_retriever_searches_what_the_vector_store_wrote(store: Store) -> None:
    embeddings = DeterministicFakeEmbedding(size=8)
    TnsragVectorStore(store, embeddings).add_texts(["alpha text", "beta text"], ids=["a", "b"])
    for strategy in ("vector", "hybrid"):
        [doc] = TnsragRetriever(store=store, strategy=strategy, k=1, embedding=embeddings).invoke("beta text")
        assert doc.id == "b", strategy
    [doc] = TnsragRetriever(store=store, strategy="vector", k=1, embedding=embeddings).invoke("alpha text")
    assert doc.metadata["score"] == pytest.approx(1.0, abs=1e-5)


def test_retriever_decodes_what_the_vector_store_packed(store: Store) -> None:
    embeddings = DeterministicFakeEmbedding(size=8)
    vs = TnsragVectorStore(store, embeddings)
    vs.add_texts(["alpha text"], [{"page": 2, "tags": ["a"], "tenant": "acme", "source": "a.pdf"}], ids=["a"])
    [stored] = vs.similarity_search("alpha text", k=1)
    for strategy in ("vector", "hybrid", "keyword"):
        [doc] = TnsragRetriever(store=store, strategy=strategy, k=1, embedding=embeddings).invoke("alpha text")
        assert NON_STRING_METADATA_KEY not in doc.metadata, strategy
        assert {k: doc.metadata[k] for k in stored.metadata} == stored.metadata == {
            "page": 2, "tags": ["a"], "tenant": "acme", "source": "a.pdf"}, strategy
    # A value under the key that the vector store did not write is kept as it is.
    BM25Index(store).add_all([MemoryEntry("raw", "raw alpha", metadata={NON_STRING_METADATA_KEY: "not json"})])
    [doc] = TnsragRetriever(store=store, strategy="keyword", k=1).invoke("raw")
    assert doc.metadata[NON_STRING_METADATA_KEY] == "not json"


def test_retriever_has_no_score_floor_unless_asked(store: Store) -> None:
    # LangChain's retrievers return k documents when k match; random 8-d vectors give
    # negative cosine similarities, which a floor of 0 dropped (k=10 gave fewer).
    embeddings = DeterministicFakeEmbedding(size=8)
    vs = TnsragVectorStore(store, embeddings)
    vs.add_texts([f"note number {i}" for i in range(12)], ids=[f"n{i:02}" for i in range(12)])
    native = vs.as_retriever(search_kwargs={"k": 10}).invoke("a query")
    ours = TnsragRetriever(store=store, strategy="vector", k=10, embedding=embeddings).invoke("a query")
    assert len(ours) == 10 and [d.id for d in ours] == [d.id for d in native]
    assert min(d.metadata["score"] for d in ours) < 0
    assert asyncio.run(TnsragRetriever(store=store, strategy="vector", k=10, embedding=embeddings)
                       .ainvoke("a query")) == ours
    floored = TnsragRetriever(store=store, strategy="vector", k=10, embedding=embeddings, min_score=0.0)
    assert all(d.metadata["score"] >= 0 for d in floored.invoke("a query"))
    assert len(floored.invoke("a query")) < 10


class TableEmbeddings(Embeddings):
    """LangChain embeddings looked up in a table; records every text embedded."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.documents: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [self.table[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]


# tests/unit/test_mmr.py's hand-computed example: MMR at 0.5 picks delta, alpha, beta, gamma;
# plain similarity ranks delta, beta, alpha, gamma.
MMR_TABLE = {"q": [0.8, 0.6], "alpha": [1.0, 0.0], "beta": [0.96, 0.28], "gamma": [0.0, 1.0],
             "delta": [0.6, 0.8]}


@pytest.fixture
def mmr_store(store: Store) -> TnsragVectorStore:
    vs = TnsragVectorStore(store, TableEmbeddings(MMR_TABLE))
    vs.add_texts(["alpha", "beta", "gamma", "delta"], [{"team": "x"}, {"team": "x"}, {"team": "y"}, {"team": "x"}],
                 ids=["alpha", "beta", "gamma", "delta"])
    return vs


def test_max_marginal_relevance_search(mmr_store: TnsragVectorStore) -> None:
    vs = mmr_store
    embeddings = vs.embeddings
    assert isinstance(embeddings, TableEmbeddings)
    embeddings.documents.clear()
    assert [d.id for d in vs.similarity_search("q", k=2)] == ["delta", "beta"]
    assert [d.id for d in vs.max_marginal_relevance_search("q", k=2, fetch_k=4)] == ["delta", "alpha"]
    assert [d.id for d in vs.max_marginal_relevance_search("q", k=4, fetch_k=4)] == ["delta", "alpha", "beta", "gamma"]
    assert [d.id for d in vs.max_marginal_relevance_search("q", k=2, fetch_k=4, lambda_mult=1.0)] == ["delta", "beta"]
    assert [d.id for d in vs.max_marginal_relevance_search("q", k=4, fetch_k=4, lambda_mult=0.0)] == \
        ["delta", "alpha", "gamma", "beta"]
    # fetch_k bounds the candidates, as in LangChain's stores.
    assert [d.id for d in vs.max_marginal_relevance_search("q", k=4, fetch_k=2)] == ["delta", "beta"]
    assert [d.id for d in vs.max_marginal_relevance_search("q", k=4, fetch_k=4, filter={"team": "y"})] == ["gamma"]
    assert [d.id for d in vs.max_marginal_relevance_search_by_vector([8.0, 6.0], k=2, fetch_k=4)] == \
        ["delta", "alpha"]
    [doc] = vs.max_marginal_relevance_search("q", k=1)
    assert doc == Document(id="delta", page_content="delta", metadata={"team": "x"})
    assert embeddings.documents == []  # the candidates' stored vectors, not embedded again
    assert [d.id for d in asyncio.run(vs.amax_marginal_relevance_search("q", k=2, fetch_k=4))] == ["delta", "alpha"]
    assert [d.id for d in asyncio.run(vs.amax_marginal_relevance_search_by_vector([0.8, 0.6], k=2, fetch_k=4))] == \
        ["delta", "alpha"]


def test_mmr_retriever_and_search_type(mmr_store: TnsragVectorStore) -> None:
    vs = mmr_store
    retriever = vs.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4})
    assert [d.id for d in retriever.invoke("q")] == ["delta", "alpha"]
    assert [d.id for d in asyncio.run(retriever.ainvoke("q"))] == ["delta", "alpha"]
    diverse = vs.as_retriever(search_type="mmr", search_kwargs={"k": 3, "fetch_k": 4, "lambda_mult": 0.0})
    assert [d.id for d in diverse.invoke("q")] == ["delta", "alpha", "gamma"]
    assert [d.id for d in vs.search("q", "mmr", k=2, fetch_k=4)] == ["delta", "alpha"]


@pytest.mark.parametrize("kwargs, message", [
    ({"lambda_mult": 1.5}, "lambda_mult must be a number in \\[0, 1\\]"),
    ({"fetch_k": 0}, "fetch_k must be >= 1"),
    ({"k": -1}, "k must be >= 0"),
    ({"k": "2"}, "k must be an int"),
])
def test_mmr_bad_arguments(mmr_store: TnsragVectorStore, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        mmr_store.max_marginal_relevance_search("q", **kwargs)
    with pytest.raises(InvalidFilterError, match="operator"):
        mmr_store.max_marginal_relevance_search("q", filter={"$or": []})


def test_vector_store_takes_an_expiry_from_metadata(vs: TnsragVectorStore) -> None:
    vs.add_texts(["kept zebra", "expired zebra", "renewed zebra"], ids=["k", "x", "r"],
                 metadatas=[{"expiresAt": "2999-01-01T00:00:00Z"}, {"expiresAt": "2020-01-01T00:00:00Z", "topic": "t"},
                            {"ttlSeconds": 3600}])
    assert {d.id for d in vs.similarity_search("zebra", k=10)} == {"k", "r"}
    assert not vs.get_by_ids(["x"])
    with pytest.raises(InvalidEntryError, match="'expiresAt'"):
        vs.add_texts(["bad"], metadatas=[{"expiresAt": "soon"}])
    with pytest.raises(InvalidEntryError, match="ttl must be a positive"):
        vs.add_texts(["bad"], metadatas=[{"ttlSeconds": -5}])


def test_vector_store_takes_a_validity_from_metadata_and_searches_as_of(vs: TnsragVectorStore) -> None:
    vs.add_texts(["valid zebra", "past zebra", "future zebra"], ids=["v", "p", "f"],
                 metadatas=[{"validFrom": "2020-01-01T00:00:00Z"}, {"validUntil": "2020-01-01T00:00:00Z"},
                            {"validFrom": datetime(2999, 1, 1, tzinfo=timezone.utc)}])
    assert {d.id for d in vs.similarity_search("zebra", k=10)} == {"v"}
    assert vs.similarity_search("zebra", k=10, as_of=datetime(2019, 1, 1, tzinfo=timezone.utc)) == []  # not yet written
    with pytest.raises(InvalidEntryError, match="'validFrom'"):
        vs.add_texts(["bad"], metadatas=[{"validFrom": "soon"}])
