"""Strategies by name, with default composition, for the CLI and scripts.

The keys are the strategies' ``name`` values; the error for an unknown name is
built from the same keys, so the message cannot drift from what exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tnsrag_db.errors import StrategyUnavailableError
from tnsrag_db.store.store import Store
from tnsrag_db.strategies.base import RAGStrategy

if TYPE_CHECKING:  # tnsrag_db.embeddings loads numpy: only strategies that embed import it
    from tnsrag_db.embeddings import EmbeddingFunction

__all__ = ["STRATEGY_NAMES", "build_strategy"]

#: Anything that maps a text to a vector (an EmbeddingFunction or the process provider).
Embedder = Callable[[str], object]
#: A factory gets the embedding as a thunk: strategies without vectors never resolve it,
#: so a keyword query does not look for providers (an entry-point scan) or load one.
Factory = Callable[[Store, Callable[[], Embedder]], RAGStrategy]


def _vector(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.indexes.vector import VectorMemoryStore
    from tnsrag_db.strategies.vector import VectorRAGStrategy

    return VectorRAGStrategy(VectorMemoryStore(store, embedding()))


def _keyword(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.indexes.bm25 import BM25Index
    from tnsrag_db.strategies.keyword import KeywordRAGStrategy

    return KeywordRAGStrategy(BM25Index(store))


def _graph(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.cli.graph import graph_strategy

    return graph_strategy(store)


def _hybrid(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.indexes.bm25 import BM25Index
    from tnsrag_db.indexes.vector import VectorMemoryStore
    from tnsrag_db.strategies.hybrid import HybridRAGStrategy

    graph = None
    try:
        graph = _graph(store, embedding)
    except ImportError:
        pass
    return HybridRAGStrategy(BM25Index(store), VectorMemoryStore(store, embedding()), graph)


def _hierarchical(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.indexes.hierarchy import HierarchyIndex
    from tnsrag_db.strategies.hierarchical import HierarchicalRAGStrategy

    return HierarchicalRAGStrategy(_keyword(store, embedding), HierarchyIndex(store))


def _temporal(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.indexes.temporal import TemporalIndex
    from tnsrag_db.strategies.temporal import TemporalRAGStrategy

    return TemporalRAGStrategy(_keyword(store, embedding), TemporalIndex(store))


def _reasoning(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.indexes.hierarchy import HierarchyIndex
    from tnsrag_db.navigation import LexicalTreeNavigator
    from tnsrag_db.strategies.reasoning import ReasoningRAGStrategy

    return ReasoningRAGStrategy(HierarchyIndex(store), LexicalTreeNavigator(), "lexical")


def _multi_query(store: Store, embedding: Callable[[], Embedder]) -> RAGStrategy:
    from tnsrag_db.expansion import QueryExpansion, RM3QueryExpander
    from tnsrag_db.indexes.bm25 import BM25Index
    from tnsrag_db.strategies.multi_query import MultiQueryRAGStrategy

    index = BM25Index(store)
    return MultiQueryRAGStrategy(_keyword(store, embedding), RM3QueryExpander(index), QueryExpansion.RM3, "rm3", 3)


_FACTORIES: dict[str, Factory] = {
    "vector": _vector,
    "keyword": _keyword,
    "hybrid": _hybrid,
    "graph": _graph,
    "hierarchical": _hierarchical,
    "temporal": _temporal,
    "reasoning": _reasoning,
    "multi_query": _multi_query,
}

#: Names accepted by :func:`build_strategy`, in documentation order.
STRATEGY_NAMES = tuple(_FACTORIES)


def _process_embedding() -> Embedder:
    from tnsrag_db.embeddings import get_process_embedding

    return get_process_embedding()


def build_strategy(name: str, store: Store, *,
                   embedding: EmbeddingFunction | Embedder | None = None) -> RAGStrategy:
    """The strategy called ``name`` over ``store`` with default settings.

    ``embedding`` defaults to the process embedding provider (an installed entry point,
    else the 128-dimensional hash fallback). Raises :class:`StrategyUnavailableError`.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        raise StrategyUnavailableError(f"unknown strategy {name!r}; available: {', '.join(STRATEGY_NAMES)}")
    try:
        return factory(store, (lambda: embedding) if embedding is not None else _process_embedding)
    except ImportError as exc:
        raise StrategyUnavailableError(f"strategy {name!r} is not available in this installation: {exc}") from exc
