"""A LlamaIndex retriever over any tnsrag_db strategy (install the ``[llamaindex]`` extra).

:class:`TnsragRetriever` returns ``NodeWithScore`` objects: a ``TextNode`` whose ``id_`` is
the entry id, whose text is the entry's content and whose metadata is the entry's own
metadata, what the strategy added (``depth``, ``path``, ...), ``tier`` and ``source``
(when set); the strategy's score is ``NodeWithScore.score``.

``aretrieve`` awaits the strategy's own ``aretrieve`` (psycopg's async connections) when
it has one, else runs the sync retrieval in the event loop's default thread pool.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from tnsrag_db.embeddings import EmbeddingFunction
from tnsrag_db.errors import ConfigurationError
from tnsrag_db.integrations._core import (
    SerialEmbedding,
    StrategyCache,
    argument,
    check_text_query,
    document_record,
    search_context,
)
from tnsrag_db.store.store import Store
from tnsrag_db.strategies.base import RAGStrategy
from tnsrag_db.types import RAGContext, RetrievedDocument

__all__ = ["TnsragRetriever", "to_node"]


def to_node(doc: RetrievedDocument) -> NodeWithScore:
    """A LlamaIndex node with score for a library result (see the module docstring)."""
    record = document_record(doc)
    metadata: dict[str, Any] = dict(record["metadata"])
    metadata["tier"] = record["tier"]
    if record["source"] is not None:
        metadata["source"] = record["source"]
    node = TextNode(id_=record["id"], text=doc.content, metadata=metadata)
    return NodeWithScore(node=node, score=doc.score)


class TnsragRetriever(BaseRetriever):
    """A LlamaIndex retriever over one tnsrag_db strategy.

    ``strategy`` is a strategy name (default ``"hybrid"``, built over ``store`` with the
    process embedding provider or ``embedding``) or any ``RAGStrategy`` object (then no
    store is needed). ``similarity_top_k`` (default 4) results, exact metadata
    ``filters``, inclusive ``min_score``. Bad settings raise the library's
    :class:`~tnsrag_db.errors.ValidationError` (naming the argument) or
    :class:`~tnsrag_db.errors.ConfigurationError` at construction.
    """

    def __init__(self, store: Store | None = None, strategy: str | RAGStrategy = "hybrid", *,
                 similarity_top_k: int = 4, filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                 embedding: EmbeddingFunction | Callable[[str], object] | None = None,
                 callback_manager: CallbackManager | None = None) -> None:
        self._context: RAGContext = search_context(similarity_top_k, filters, min_score,
                                                   top_k_name="similarity_top_k")
        if isinstance(strategy, str):
            if store is None:
                raise ConfigurationError(f"strategy {strategy!r} is a name: give the store to build it over")
            with argument("strategy"):
                self._strategy: RAGStrategy = StrategyCache(store, SerialEmbedding(embedding)).get(strategy)
        elif isinstance(strategy, RAGStrategy):
            self._strategy = strategy
        else:
            raise ConfigurationError(f"strategy must be a strategy name or a RAGStrategy, got "
                                     f"{type(strategy).__name__}")
        super().__init__(callback_manager=callback_manager)

    @property
    def strategy(self) -> RAGStrategy:
        """The strategy every retrieval runs."""
        return self._strategy

    @property
    def context(self) -> RAGContext:
        """``similarity_top_k``, ``filters`` and ``min_score`` as the library's context."""
        return self._context

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        text = check_text_query(query_bundle.query_str)
        return [to_node(d) for d in self._strategy.retrieve(text, self._context)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        aretrieve = getattr(self._strategy, "aretrieve", None)
        if aretrieve is None or not inspect.iscoroutinefunction(aretrieve):
            # A strategy without the async form: its sync retrieval runs in the default thread pool.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(self._retrieve, query_bundle))
        text = check_text_query(query_bundle.query_str)
        return [to_node(d) for d in await aretrieve(text, self._context)]
