"""The one place that builds a strategy by name over a store: used by the registry
(:func:`tnsrag_db._strategies.registry.build_strategy`, behind ``tnsrag query``,
``tnsrag eval``, the MCP server and the framework integrations) and by the
declarative runtime (``@retrieval`` modes).

**Composition rule.** ``hierarchical`` and ``temporal`` get *semantic* search as their
child, ``VectorRAGStrategy`` over the options' vector store, as the SPI defines those
declarative modes ("Semantic child hits + parent expansion", "Semantic child hits +
freshness reranking"). ``multi_query`` ("Query expansion + semantic base strategy")
expands over the hybrid strategy below, whose vector stream is that semantic search, and,
with RM3 expansion, fuses the original query's ranking with weight
:data:`MULTI_QUERY_ORIGINAL_WEIGHT` (3) against 1 for the expanded query: measured on three judged collections, both ranked above
expansion over vector search alone with equal weights on every one (docs/performance.md,
"Strategies by name"). Hybrid fuses BM25,
vector and, whenever the graph modules are installed, the graph stream of what the
edges reach from the BM25 seeds (never the seeds themselves: BM25 already counts
them; a missing graph module keeps the two other streams fused, never a fallback to
one), weighted :data:`HYBRID_GRAPH_WEIGHT` (0: not run, so hybrid ranks exactly as
the two-stream hybrid): on CACM's citation links every positive weight lowered
nDCG@10, by 0.10 at weight 1 (docs/performance.md, "The graph stream on real edges").
The graph strategy has the class defaults (depth 2, decay 0.85, 1,024 nodes), no
source fence and BM25 seeds; by name it returns its seeds too.

What differs between callers is options, never the rule: the registry asks for the
``lexical`` navigator and RM3 expansion (model ``"rm3"``, 3 variants); a declarative
action passes its ``@retrieval`` options.

Each builder is a small unit behind one signature, ``(store, options) -> RAGStrategy``,
looked up in :data:`BUILDERS`; the error for an unknown name is made from the same
keys. A builder names the modules it needs: when one of them is not installed the
build raises :class:`StrategyUnavailableError`; any other import error propagates
(:mod:`tnsrag_db._plugins`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tnsrag_db._errors import ConfigurationError, StrategyUnavailableError
from tnsrag_db._plugins import unavailable_unless_installed
from tnsrag_db._strategies.base import RAGStrategy

if TYPE_CHECKING:  # these load numpy, SQLAlchemy or the strategies: only the builders that need them import them
    from tnsrag_db._indexes.temporal import TemporalIndex
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db._store.store import Store
    from tnsrag_db._strategies.expansion import QueryExpander, QueryExpansion
    from tnsrag_db._strategies.graph import GraphRAGStrategy
    from tnsrag_db._strategies.navigation import TreeNavigator

__all__ = [
    "BUILDERS",
    "EMBEDDING_STRATEGIES",
    "GRAPH_PROVIDER_NAME",
    "HYBRID_GRAPH_WEIGHT",
    "MULTI_QUERY_ORIGINAL_WEIGHT",
    "STRATEGY_NAMES",
    "Builder",
    "StrategyOptions",
    "compose_strategy",
    "ensure_installed",
    "graph_strategy",
    "temporal_index",
]

#: Fusion weight of the original query's ranking in multi_query by name with RM3 (the expanded query: 1).
MULTI_QUERY_ORIGINAL_WEIGHT = 3.0

#: Fusion weight of the graph stream in hybrid by name (BM25 and vector: 1). 0: the stream
#: is built but not run; weights 0.02-2 all ranked below it on CACM's citation links.
HYBRID_GRAPH_WEIGHT = 0.0

#: The ``provider_name`` of the graph strategy built here (the distribution's name).
GRAPH_PROVIDER_NAME = "tnsrag-db"

_VECTOR = ("tnsrag_db._indexes.vector", "tnsrag_db._strategies.vector")
_KEYWORD = ("tnsrag_db._indexes.bm25", "tnsrag_db._strategies.keyword")
_GRAPH = ("tnsrag_db._indexes.graph", "tnsrag_db._strategies.graph")


@dataclass(frozen=True, kw_only=True)
class StrategyOptions:
    """What a build may need beyond the store, each resolved only by the builders that use it.

    - ``vectors``: returns the vector store of semantic search (called only by the
      strategies that embed, so a keyword build never looks for an embedding provider);
    - ``navigator`` [None: the one installed entry point of ``tnsrag_db.tree_navigators``,
      else ``"lexical"``; several installed is a :class:`ConfigurationError`] and
      ``navigator_model`` [``"lexical"``]: reasoning;
    - ``expansion`` [RM3], ``expander`` [None: ``"rm3"`` for RM3, else the one installed
      entry point of ``tnsrag_db.query_expanders``], ``expansion_model`` [``"rm3"``],
      ``max_expansions`` [3]: multi-query.
    """

    vectors: Callable[[], VectorMemoryStore] | None = None
    navigator: str | None = None
    navigator_model: str = "lexical"
    expansion: QueryExpansion | str = "RM3"
    expander: str | None = None
    expansion_model: str = "rm3"
    max_expansions: int = 3


#: A builder: the strategy over ``store`` with ``options``.
BuildFunction = Callable[["Store", StrategyOptions], RAGStrategy]


@dataclass(frozen=True)
class Builder:
    """One strategy's builder and the modules whose absence makes it unavailable."""

    build: BuildFunction
    modules: tuple[str, ...]
    embeds: bool = False


def _vector_store(options: StrategyOptions) -> VectorMemoryStore:
    if options.vectors is None:
        raise ConfigurationError("this strategy embeds the query: StrategyOptions(vectors=...) is required")
    return options.vectors()


def _semantic(store: Store, options: StrategyOptions) -> RAGStrategy:
    """The vector strategy, and the child of every composed strategy (the module docstring's rule)."""
    from tnsrag_db._strategies.vector import VectorRAGStrategy

    return VectorRAGStrategy(_vector_store(options))


def _keyword(store: Store, options: StrategyOptions) -> RAGStrategy:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy

    return KeywordRAGStrategy(BM25Index(store))


def graph_strategy(store: Store, *, include_seeds: bool = True) -> GraphRAGStrategy:
    """The graph strategy over ``store`` with the class defaults (depth 2, decay 0.85, 1,024
    nodes), no source fence and BM25 seeds; ``include_seeds`` as the class takes it."""
    from tnsrag_db._indexes.graph import GraphStore
    from tnsrag_db._strategies.graph import GraphRAGStrategy

    cls = GraphRAGStrategy
    return cls(GRAPH_PROVIDER_NAME, GraphStore(store), None, cls.DEFAULT_MAX_DEPTH, cls.DEFAULT_DEPTH_DECAY,
               cls.DEFAULT_MAX_VISITED_NODES, include_seeds=include_seeds)


def _graph(store: Store, options: StrategyOptions) -> RAGStrategy:
    return graph_strategy(store)


def _hybrid(store: Store, options: StrategyOptions) -> RAGStrategy:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._strategies.hybrid import HybridRAGStrategy

    graph: RAGStrategy | None = None
    try:
        with unavailable_unless_installed("the graph stream", _GRAPH):
            graph = graph_strategy(store, include_seeds=False)  # the seeds are BM25's: counted once
    except StrategyUnavailableError:  # without a graph store the two streams stay fused
        graph = None
    weights = None if graph is None else (1.0, 1.0, HYBRID_GRAPH_WEIGHT)
    return HybridRAGStrategy(BM25Index(store), _vector_store(options), graph, weights=weights)


def _hierarchical(store: Store, options: StrategyOptions) -> RAGStrategy:
    from tnsrag_db._indexes.hierarchy import HierarchyIndex
    from tnsrag_db._strategies.hierarchical import HierarchicalRAGStrategy

    return HierarchicalRAGStrategy(_semantic(store, options), HierarchyIndex(store))


def temporal_index(store: Store) -> TemporalIndex:
    """The ``TemporalIndex`` of the built temporal strategy, with the ``max_future_skew`` that
    strategy uses (its class default, 5 minutes): the declarative ingestion checks with it."""
    from tnsrag_db._indexes.temporal import TemporalIndex
    from tnsrag_db._strategies.temporal import TemporalRAGStrategy

    return TemporalIndex(store, max_future_skew=TemporalRAGStrategy.DEFAULT_MAX_FUTURE_SKEW)


def _temporal(store: Store, options: StrategyOptions) -> RAGStrategy:
    from tnsrag_db._strategies.temporal import TemporalRAGStrategy

    index = temporal_index(store)
    return TemporalRAGStrategy(_semantic(store, options), index, max_future_skew=index.max_future_skew)


def _navigator(name: str | None) -> TreeNavigator:
    from tnsrag_db._strategies.navigation import installed_navigators, load_navigator

    if name is None:
        installed = installed_navigators()
        if len(installed) > 1:
            raise ConfigurationError(f"{len(installed)} tree navigators are installed ({', '.join(installed)}); "
                                     "choose one with @retrieval(navigator=...)")
        name = installed[0] if installed else "lexical"
    return load_navigator(name)


def _reasoning(store: Store, options: StrategyOptions) -> RAGStrategy:
    from tnsrag_db._indexes.hierarchy import HierarchyIndex
    from tnsrag_db._strategies.reasoning import ReasoningRAGStrategy

    return ReasoningRAGStrategy(HierarchyIndex(store), _navigator(options.navigator), options.navigator_model)


def _expander(store: Store, options: StrategyOptions) -> tuple[QueryExpander, QueryExpansion]:
    from tnsrag_db._strategies.expansion import (
        EXPANDER_ENTRY_POINT_GROUP,
        QueryExpansion,
        installed_expanders,
        load_expander,
    )

    mode = QueryExpansion.parse(options.expansion)
    name = options.expander
    if name is None:
        if mode is QueryExpansion.RM3:
            name = "rm3"
        else:
            installed = installed_expanders()
            if len(installed) != 1:
                raise (StrategyUnavailableError if not installed else ConfigurationError)(
                    f"expansion mode {mode.name} needs exactly one installed query expander in entry-point group "
                    f"{EXPANDER_ENTRY_POINT_GROUP!r} (found: {', '.join(installed) or 'none'}); "
                    "or name one with @retrieval(expander=...)")
            name = installed[0]
    return load_expander(name, store=store), mode


def _multi_query(store: Store, options: StrategyOptions) -> RAGStrategy:
    from tnsrag_db._strategies.expansion import QueryExpansion
    from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy

    expander, mode = _expander(store, options)
    # RM3's expanded query drifts from the original (measured); an expander's own variants
    # (an LLM's paraphrases) are fused as the spec has it, all alike.
    weights = (MULTI_QUERY_ORIGINAL_WEIGHT, *(1.0,) * options.max_expansions) if mode is QueryExpansion.RM3 else None
    return MultiQueryRAGStrategy(_hybrid(store, options), expander, mode, options.expansion_model,
                                 options.max_expansions, weights=weights)


#: The builders by strategy name (the strategies' ``name`` values), in documentation order.
BUILDERS: dict[str, Builder] = {
    "vector": Builder(_semantic, _VECTOR, embeds=True),
    "keyword": Builder(_keyword, _KEYWORD),
    "hybrid": Builder(_hybrid, (*_KEYWORD, *_VECTOR, "tnsrag_db._strategies.hybrid"), embeds=True),
    "graph": Builder(_graph, _GRAPH),
    "hierarchical": Builder(_hierarchical, (*_VECTOR, "tnsrag_db._indexes.hierarchy",
                                            "tnsrag_db._strategies.hierarchical"), embeds=True),
    "temporal": Builder(_temporal, (*_VECTOR, "tnsrag_db._indexes.temporal", "tnsrag_db._strategies.temporal"),
                        embeds=True),
    "reasoning": Builder(_reasoning, ("tnsrag_db._indexes.hierarchy", "tnsrag_db._strategies.navigation",
                                      "tnsrag_db._strategies.reasoning")),
    "multi_query": Builder(_multi_query, (*_KEYWORD, *_VECTOR, "tnsrag_db._strategies.hybrid", "tnsrag_db._strategies.expansion",
                                          "tnsrag_db._strategies.multi_query"), embeds=True),
}

#: The names :func:`compose_strategy` accepts, in documentation order.
STRATEGY_NAMES = tuple(BUILDERS)
#: The strategies that embed the query (they call ``StrategyOptions.vectors``).
EMBEDDING_STRATEGIES = frozenset(name for name, builder in BUILDERS.items() if builder.embeds)


def _builder(name: str) -> Builder:
    builder = BUILDERS.get(name)
    if builder is None:
        raise StrategyUnavailableError(f"unknown strategy {name!r}; available: {', '.join(BUILDERS)}")
    return builder


def ensure_installed(name: str, what: str | None = None) -> None:
    """Import the modules strategy ``name`` needs, so that a missing one is reported as
    :class:`StrategyUnavailableError` ("``what`` is not available ...") before any other work."""
    import importlib

    with unavailable_unless_installed(what or f"strategy {name!r}", _builder(name).modules):
        for module in _builder(name).modules:
            importlib.import_module(module)


def compose_strategy(name: str, store: Store, options: StrategyOptions, *, what: str | None = None) -> RAGStrategy:
    """The strategy called ``name`` over ``store``, composed by the rule of the module docstring.

    ``what`` names it in the error for a missing module (default ``strategy 'name'``).
    Raises :class:`StrategyUnavailableError` for an unknown name (listing the known ones)
    or a missing module, :class:`ConfigurationError` for options it cannot use.
    """
    builder = _builder(name)
    with unavailable_unless_installed(what or f"strategy {name!r}", builder.modules):
        return builder.build(store, options)
