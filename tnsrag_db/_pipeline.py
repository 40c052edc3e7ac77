"""``RAGPipeline``: preprocess the query, retrieve, rerank, format numbered context.

The four phases run in the SPI's order::

    query_preprocessor(query) -> strategy.retrieve(query, context) -> reranker(documents) -> numbered text

:meth:`RAGPipeline.aexecute` and :meth:`~RAGPipeline.aretrieve_documents` are the async
forms (the strategy's ``aretrieve``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._strategies.base import RAGStrategy, aretrieve_with, check_query, resolve_context
from tnsrag_db._types import RAGContext, RetrievedDocument

__all__ = ["RAGPipeline", "RAGPipelineBuilder", "format_context"]

QueryPreprocessor = Callable[[str], str]
Reranker = Callable[[list[RetrievedDocument]], Sequence[RetrievedDocument]]


def format_context(documents: Sequence[RetrievedDocument]) -> str:
    """Numbered text: ``[1] content`` blocks (with ``(source: ...)`` when known), separated by blank lines."""
    blocks = []
    for number, doc in enumerate(documents, start=1):
        suffix = f"\n(source: {doc.source})" if doc.source else ""
        blocks.append(f"[{number}] {doc.content}{suffix}")
    return "\n\n".join(blocks)


class RAGPipeline:
    """A programmatic retrieval pipeline; build it with :meth:`builder`."""

    def __init__(self, strategy: RAGStrategy, default_context: RAGContext,
                 query_preprocessor: QueryPreprocessor | None, reranker: Reranker | None) -> None:
        self._strategy = strategy
        self._default_context = default_context
        self._preprocess = query_preprocessor
        self._rerank = reranker

    @staticmethod
    def builder(strategy: RAGStrategy) -> RAGPipelineBuilder:
        """Start a builder for ``strategy`` (any object with ``name`` and ``retrieve``)."""
        return RAGPipelineBuilder(strategy)

    @property
    def strategy(self) -> RAGStrategy:
        """The retrieval strategy."""
        return self._strategy

    @property
    def default_context(self) -> RAGContext:
        """The context used when a call passes none."""
        return self._default_context

    def retrieve_documents(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """Run phases 1-3 and return the documents after optional reranking."""
        text, ctx = self._prepared(query, context)
        return self._reranked(list(self._strategy.retrieve(text, ctx)))

    def _prepared(self, query: str, context: RAGContext | None) -> tuple[str, RAGContext]:
        """Phase 1: the checked, preprocessed query and the call's context."""
        text = check_query(query)
        if self._preprocess is not None:
            text = check_query(self._preprocess(text))
        return text, resolve_context(context) if context is not None else self._default_context

    def _reranked(self, documents: list[RetrievedDocument]) -> list[RetrievedDocument]:
        if self._rerank is not None:
            reranked = self._rerank(documents)
            if reranked is None or not all(isinstance(d, RetrievedDocument) for d in reranked):
                raise ValidationError("reranker must return a sequence of RetrievedDocument")
            documents = list(reranked)
        return documents

    def execute(self, query: str, context: RAGContext | None = None) -> str:
        """Run all four phases and return the numbered context text ("" when nothing matched)."""
        return format_context(self.retrieve_documents(query, context))

    async def aretrieve_documents(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """:meth:`retrieve_documents` with the strategy's ``aretrieve`` (async connections); a
        strategy without one runs its ``retrieve`` in a worker thread. The preprocessor and
        reranker run on the event loop (they should be quick)."""
        text, ctx = self._prepared(query, context)
        return self._reranked(await aretrieve_with(self._strategy, text, ctx))

    async def aexecute(self, query: str, context: RAGContext | None = None) -> str:
        """:meth:`execute` with :meth:`aretrieve_documents`."""
        return format_context(await self.aretrieve_documents(query, context))


class RAGPipelineBuilder:
    """Builder for :class:`RAGPipeline` (``default_context``, ``query_preprocessor``, ``reranker``)."""

    def __init__(self, strategy: RAGStrategy) -> None:
        if strategy is None or not callable(getattr(strategy, "retrieve", None)):
            raise ConfigurationError("RAGPipeline needs a strategy with a retrieve(query, context) method")
        self._strategy = strategy
        self._context = RAGContext()
        self._preprocess: QueryPreprocessor | None = None
        self._rerank: Reranker | None = None

    def default_context(self, context: RAGContext) -> RAGPipelineBuilder:
        """Use ``context`` when a call passes none (default: ``RAGContext()``)."""
        self._context = resolve_context(context)
        return self

    def query_preprocessor(self, preprocessor: QueryPreprocessor) -> RAGPipelineBuilder:
        """Transform each query before retrieval (for example ``str.strip``)."""
        if not callable(preprocessor):
            raise ConfigurationError("query_preprocessor must be callable")
        self._preprocess = preprocessor
        return self

    def reranker(self, reranker: Reranker) -> RAGPipelineBuilder:
        """Reorder or cut the retrieved documents before formatting."""
        if not callable(reranker):
            raise ConfigurationError("reranker must be callable")
        self._rerank = reranker
        return self

    def build(self) -> RAGPipeline:
        """The configured pipeline."""
        return RAGPipeline(self._strategy, self._context, self._preprocess, self._rerank)
