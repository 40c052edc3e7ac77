"""strategies/compose: one builder per name, one composition rule for the registry (CLI,
integrations) and the declarative runtime, and "not available" only for missing modules."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import pytest

from tnsrag_db._errors import StrategyUnavailableError
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.compose import BUILDERS, EMBEDDING_STRATEGIES, STRATEGY_NAMES
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import MemoryEntry, RAGContext
from tnsrag_db.declarative import RetrievalConfig, RetrievalStrategy, strategy_for as declarative_build

DECLARATIVE_OPTIONS: dict[RetrievalStrategy, dict[str, Any]] = {
    RetrievalStrategy.MULTI_QUERY: {"expansion_mode": "RM3", "expansion_model": "rm3"},
    RetrievalStrategy.REASONING: {"navigator_model": "lexical"},
}


def _embed(text: str) -> list[float]:
    """Near only what the test says is near: "zebra" and "horse stable" share a direction."""
    return [1.0, 0.0] if text in ("zebra", "horse stable") else [0.0, 1.0]


def _process(fn: Any) -> Any:
    """``fn`` as the process provider the declarative runtime embeds with (same provider name)."""
    from tnsrag_db.embeddings import ProcessEmbedding, ValidatingEmbedding

    return ProcessEmbedding(ValidatingEmbedding(fn))


@pytest.fixture
def corpus(store: Store) -> Store:
    from tnsrag_db._indexes.vector import VectorMemoryStore

    VectorMemoryStore(store, _embed).add_all([
        MemoryEntry("doc", "Animals of the plains."),
        MemoryEntry("x", "zebra crossing", parent_id="doc"),  # the keyword hit
        MemoryEntry("y", "horse stable", parent_id="doc"),    # the semantic hit: no word of the query
    ])
    return store


@pytest.mark.parametrize("name", ["hierarchical", "temporal", "multi_query"])
def test_composed_strategies_search_semantically_from_the_registry(corpus: Store, name: str) -> None:
    # Changed for the registry (tnsrag query/eval, MCP, integrations): the child was BM25,
    # which never returns "y" (it shares no word with the query).
    strategy = build_strategy(name, corpus, embedding=_embed)
    found = [d.metadata["entryId"] for d in strategy.retrieve("zebra", RAGContext(5))]
    assert "y" in found


@pytest.mark.parametrize("mode", [RetrievalStrategy.HIERARCHICAL, RetrievalStrategy.TEMPORAL,
                                  RetrievalStrategy.MULTI_QUERY])
def test_the_declarative_modes_compose_as_the_registry_does(corpus: Store, mode: RetrievalStrategy) -> None:
    config = RetrievalConfig.create(mode, **DECLARATIVE_OPTIONS.get(mode, {}))
    declared = declarative_build(mode, config, corpus, _process(_embed))
    name = {RetrievalStrategy.HIERARCHICAL: "hierarchical", RetrievalStrategy.TEMPORAL: "temporal",
            RetrievalStrategy.MULTI_QUERY: "multi_query"}[mode]
    registered = build_strategy(name, corpus, embedding=_embed)
    assert type(declared) is type(registered)
    context = RAGContext(5)
    declared_docs, registered_docs = declared.retrieve("zebra", context), registered.retrieve("zebra", context)
    assert [d.metadata["entryId"] for d in declared_docs] == [d.metadata["entryId"] for d in registered_docs]
    if mode is RetrievalStrategy.MULTI_QUERY:  # expansion over hybrid: the keyword and the semantic hit
        assert {"x", "y"} <= {d.metadata["entryId"] for d in declared_docs}
    else:
        assert declared_docs[0].metadata["entryId"] in ("y", "doc")  # the semantic hit (or its parent) leads
    if mode is not RetrievalStrategy.TEMPORAL:  # (its clock moves between the two calls)
        assert declared_docs == registered_docs


def test_declarative_hybrid_fuses_the_graph_stream_without_edges(corpus: Store) -> None:
    # Changed for the declarative path: HYBRID fused the graph stream only when the corpus
    # had edges (so its ranking jumped when the first edge was added); now, as the registry,
    # whenever the graph modules are installed.
    declared = declarative_build(RetrievalStrategy.HYBRID, RetrievalConfig.create(), corpus, _process(_embed))
    registered = build_strategy("hybrid", corpus, embedding=_embed)
    assert isinstance(declared, HybridRAGStrategy) and isinstance(registered, HybridRAGStrategy)
    assert declared.graph is not None and registered.graph is not None
    assert declared.retrieve("zebra") == registered.retrieve("zebra")


def test_hybrid_without_the_graph_modules_keeps_two_streams(corpus: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tnsrag_db._strategies.graph", None)  # "import" raises ImportError
    hybrid = build_strategy("hybrid", corpus, embedding=_embed)
    assert isinstance(hybrid, HybridRAGStrategy) and hybrid.graph is None
    with pytest.raises(StrategyUnavailableError, match=r"^strategy 'graph' is not available in this installation "
                                                       r"\(cannot import tnsrag_db._strategies.graph\)$"):
        build_strategy("graph", corpus)


def test_the_unknown_name_error_is_made_from_the_builders(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    assert STRATEGY_NAMES == tuple(BUILDERS)
    assert EMBEDDING_STRATEGIES == {"vector", "hybrid", "hierarchical", "temporal", "multi_query"}
    monkeypatch.setitem(BUILDERS, "nearest_new", BUILDERS["keyword"])  # a builder added later is listed
    with pytest.raises(StrategyUnavailableError) as info:
        build_strategy("nearest", store)
    assert str(info.value) == f"unknown strategy 'nearest'; available: {', '.join(BUILDERS)}"
    assert "nearest_new" in str(info.value)


def test_a_keyword_build_never_resolves_the_embedding(store: Store) -> None:
    def explode(text: str) -> list[float]:
        raise AssertionError("embedded")

    for name in sorted(set(STRATEGY_NAMES) - EMBEDDING_STRATEGIES):
        build_strategy(name, store, embedding=explode).retrieve("anything")


class _Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``name`` as a module whose own import of a missing package fails (a bug in it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname == self.name else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec("import tnsrag_db_no_such_dependency", module.__dict__)


@pytest.fixture
def broken_reasoning(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delitem(sys.modules, "tnsrag_db._strategies.reasoning")
    finder = _Broken("tnsrag_db._strategies.reasoning")
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("tnsrag_db._strategies.reasoning", None)


def test_an_import_bug_inside_a_strategy_module_is_never_unavailable(store: Store, broken_reasoning: None) -> None:
    # Both builders used to report this as "not available in this installation".
    with pytest.raises(ModuleNotFoundError) as info:
        build_strategy("reasoning", store)
    assert info.value.name == "tnsrag_db_no_such_dependency"
    config = RetrievalConfig.create(RetrievalStrategy.REASONING, navigator_model="lexical")
    with pytest.raises(ModuleNotFoundError):
        declarative_build(RetrievalStrategy.REASONING, config, store, None)


def test_a_missing_strategy_module_is_unavailable_in_the_registry(store: Store,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tnsrag_db._strategies.reasoning", None)
    with pytest.raises(StrategyUnavailableError, match=r"strategy 'reasoning' is not available in this installation"):
        build_strategy("reasoning", store)


# -- strategies by name answer as well as their parts ---------------------------------------


def _two_streams(store: Store, embedding: Any) -> HybridRAGStrategy:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._indexes.vector import VectorMemoryStore

    return HybridRAGStrategy(BM25Index(store), VectorMemoryStore(store, embedding))


def test_hybrid_by_name_on_a_corpus_without_edges_ranks_as_the_two_streams(store: Store) -> None:
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.embeddings import HashingEmbedding

    words = ["engine", "wing", "flap", "rudder", "fuel", "pump", "blade", "crack", "oil", "filter"]
    VectorMemoryStore(store, HashingEmbedding()).add_all(
        [MemoryEntry(f"e{n:02d}", " ".join(words[(n * k) % 10] for k in range(1, 6))) for n in range(40)])
    by_name = build_strategy("hybrid", store, embedding=HashingEmbedding())
    assert isinstance(by_name, HybridRAGStrategy) and by_name.graph is not None
    two = _two_streams(store, HashingEmbedding())
    for query in ("engine crack", "fuel pump filter", "rudder"):
        # Before: the graph stream of an edge-less corpus was BM25's seeds again, so BM25 counted twice.
        assert by_name.retrieve(query, RAGContext(10)) == two.retrieve(query, RAGContext(10)), query


def test_hybrid_by_name_weights_its_graph_stream_in_one_place_and_runs_it_only_above_zero(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from tnsrag_db._indexes.graph import Edge, GraphStore
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db._strategies import compose
    from tnsrag_db._strategies.fusion import DEFAULT_SCORE_WEIGHTS
    from tnsrag_db._strategies.graph import GraphRAGStrategy
    from tnsrag_db.embeddings import HashingEmbedding

    VectorMemoryStore(store, HashingEmbedding()).add_all([
        MemoryEntry("seed", "turbine blade inspection"),
        MemoryEntry("linked", "maintenance schedule for the hangar"),
        MemoryEntry("alone", "catering menu"),
    ])
    GraphStore(store).add_edges([Edge("seed", "linked", "see-also")])
    # Weighted 0 (CACM's measurement): the stream is built but never run, so hybrid by name
    # ranks as the two streams even on a corpus with edges.
    by_name = build_strategy("hybrid", store, embedding=HashingEmbedding())
    assert isinstance(by_name, HybridRAGStrategy) and by_name.graph is not None
    # The two streams keep the default fusion's weights (keyword 1.8 : vector 1).
    assert by_name.weights == (*DEFAULT_SCORE_WEIGHTS, compose.HYBRID_GRAPH_WEIGHT) == (1.8, 1.0, 0.0)
    monkeypatch.setattr(GraphRAGStrategy, "retrieve", lambda *a, **k: pytest.fail("a 0-weighted stream ran"))
    monkeypatch.setattr(GraphRAGStrategy, "explain", lambda *a, **k: pytest.fail("a 0-weighted stream ran"))
    two = _two_streams(store, HashingEmbedding())
    assert by_name.retrieve("turbine blade", RAGContext(5)) == two.retrieve("turbine blade", RAGContext(5))
    streams = {r.document.metadata["entryId"]: [s.stream for s in r.explanation.streams]
               for r in by_name.explain("turbine blade", RAGContext(5)).results}  # type: ignore[attr-defined]
    assert streams and all("graph" not in s for s in streams.values())
    monkeypatch.undo()
    # Weighted above 0 (the one constant), it fuses only what the edges reach.
    monkeypatch.setattr(compose, "HYBRID_GRAPH_WEIGHT", 0.5)
    weighted = build_strategy("hybrid", store, embedding=HashingEmbedding())
    assert weighted.weights == (*DEFAULT_SCORE_WEIGHTS, 0.5)  # type: ignore[attr-defined]
    explained = weighted.explain("turbine blade", RAGContext(5))  # type: ignore[attr-defined]
    streams = {r.document.metadata["entryId"]: [s.stream for s in r.explanation.streams]
               for r in explained.results}
    assert "graph" not in streams["seed"]  # the seed is BM25's: counted once
    assert "graph" in streams["linked"]    # the entry the edge reached is the graph's evidence


def test_graph_by_name_on_a_corpus_without_edges_says_so(store: Store) -> None:
    store.add_all([MemoryEntry("a", "turbine blade"), MemoryEntry("b", "blade crack")])
    explained = build_strategy("graph", store).explain("blade")  # type: ignore[attr-defined]
    assert any("the corpus has no edges, so the results are the seeds" in (p.detail or "")
               for p in explained.plans)


def test_strategies_by_name_search_the_corpus_space_not_the_process_default(store: Store) -> None:
    from tnsrag_db._errors import ProviderConfigurationError
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.embeddings import HashingEmbedding

    corpus_model = HashingEmbedding(dimension=32)  # tnsrag-hash-32: not the process default
    VectorMemoryStore(store, corpus_model).add_all([MemoryEntry("a", "turbine blade"),
                                                    MemoryEntry("b", "catering menu")])
    for name in sorted(EMBEDDING_STRATEGIES):
        # Before: the process provider's space (empty here) was searched: no results, silently.
        found = [d.metadata["entryId"] for d in build_strategy(name, store).retrieve("turbine blade")]
        assert found and found[0] == "a", name
    with pytest.raises(ProviderConfigurationError, match="no embedding space for provider"):
        build_strategy("vector", store, embedding="hash")  # the 128-slot hash: no space here


def test_multi_query_by_name_expands_hybrid_with_the_original_query_weighted(corpus: Store) -> None:
    from tnsrag_db._strategies.compose import MULTI_QUERY_ORIGINAL_WEIGHT
    from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy

    strategy = build_strategy("multi_query", corpus, embedding=_embed)
    assert isinstance(strategy, MultiQueryRAGStrategy)
    assert isinstance(strategy.base_strategy, HybridRAGStrategy)
    assert strategy.weights == (MULTI_QUERY_ORIGINAL_WEIGHT, 1.0, 1.0, 1.0) == (3.0, 1.0, 1.0, 1.0)
    assert {"x", "y"} <= {d.metadata["entryId"] for d in strategy.retrieve("zebra", RAGContext(5))}
