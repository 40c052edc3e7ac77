"""Strategies by name, with default options, for the CLI, the integrations and scripts.

The names and the composition are :mod:`tnsrag_db.strategies.compose`'s (the same
rule as the declarative modes: hierarchical, temporal and multi-query over semantic
search); this module adds the defaults of a command-line query: the process embedding
provider unless one is given, the ``lexical`` tree navigator and RM3 expansion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tnsrag_db.store.store import Store
from tnsrag_db.strategies.base import RAGStrategy
from tnsrag_db.strategies.compose import EMBEDDING_STRATEGIES, STRATEGY_NAMES, StrategyOptions, compose_strategy

if TYPE_CHECKING:  # tnsrag_db.embeddings loads numpy: only strategies that embed import it
    from tnsrag_db.embeddings import EmbeddingFunction
    from tnsrag_db.indexes.vector import VectorMemoryStore

__all__ = ["EMBEDDING_STRATEGIES", "STRATEGY_NAMES", "build_strategy"]

#: Anything that maps a text to a vector (an EmbeddingFunction or the process provider).
Embedder = Callable[[str], object]


def _process_embedding() -> Embedder:
    from tnsrag_db.embeddings import get_process_embedding

    return get_process_embedding()


def build_strategy(name: str, store: Store, *,
                   embedding: EmbeddingFunction | Embedder | None = None) -> RAGStrategy:
    """The strategy called ``name`` over ``store`` with default settings.

    ``embedding`` defaults to the process embedding provider (an installed entry point,
    else the 128-dimensional hash fallback); it is resolved only by the strategies that
    embed (:data:`EMBEDDING_STRATEGIES`), so a keyword query never looks for providers.
    Raises :class:`StrategyUnavailableError`.
    """

    def vectors() -> VectorMemoryStore:
        from tnsrag_db.indexes.vector import VectorMemoryStore

        return VectorMemoryStore(store, embedding if embedding is not None else _process_embedding())

    options = StrategyOptions(vectors=vectors, navigator="lexical", navigator_model="lexical",
                              expansion="RM3", expansion_model="rm3", max_expansions=3)
    return compose_strategy(name, store, options)
