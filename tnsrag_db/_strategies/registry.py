"""Strategies by name, with default options, for the CLI, the integrations and scripts.

The names and the composition are :mod:`tnsrag_db._strategies.compose`'s (the same
rule as the declarative modes: hierarchical, temporal and multi-query over semantic
search); this module adds the defaults of a command-line query: the corpus's own
embedding space unless a provider is given, the ``lexical`` tree navigator and RM3
expansion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._strategies.compose import EMBEDDING_STRATEGIES, STRATEGY_NAMES, StrategyOptions, compose_strategy

if TYPE_CHECKING:  # tnsrag_db.embeddings loads numpy, the store SQLAlchemy: imported where needed
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db._store.store import Store
    from tnsrag_db.embeddings import EmbeddingFunction

__all__ = ["EMBEDDING_STRATEGIES", "STRATEGY_NAMES", "build_strategy"]

#: Anything that maps a text to a vector (an EmbeddingFunction or the process provider).
Embedder = Callable[[str], object]


def build_strategy(name: str, store: Store, *,
                   embedding: EmbeddingFunction | Embedder | str | None = None) -> RAGStrategy:
    """The strategy called ``name`` over ``store`` with default settings.

    ``embedding`` is what embeds the query of the strategies that embed
    (:data:`EMBEDDING_STRATEGIES`; the others never look for a provider):

    - None (the default): the provider of the corpus's own space, the newest complete
      one (:func:`~tnsrag_db._indexes.vector.spaces.query_embedding`), so a corpus embedded
      by ``tnsrag ingest`` with the shipped model is searched with that model whatever
      the process default is; a corpus without vectors uses the default provider;
    - a provider name (``"hash"``, ``"minilm"``...): that provider's space of the corpus;
    - an embedding function: used as given.

    Raises :class:`StrategyUnavailableError` for an unknown name or a missing module, and,
    when the strategy is built, :class:`ProviderConfigurationError` naming the provider
    to install when the corpus's space was filled by a provider not installed here, or
    when a named provider has no space in the corpus.
    """

    def vectors() -> VectorMemoryStore:
        from tnsrag_db._indexes.vector import VectorMemoryStore

        if embedding is None or isinstance(embedding, str):
            from tnsrag_db._indexes.vector.spaces import query_embedding

            return VectorMemoryStore(store, query_embedding(store, embedding))
        return VectorMemoryStore(store, embedding)

    options = StrategyOptions(vectors=vectors, navigator="lexical", navigator_model="lexical",
                              expansion="RM3", expansion_model="rm3", max_expansions=3)
    return compose_strategy(name, store, options)
