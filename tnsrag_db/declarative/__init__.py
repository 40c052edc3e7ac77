"""Declarative retrieval: ``@knowledge_source`` and ``@retrieval`` on agent role classes.

A role class declares its knowledge sources; an action method declares how to
retrieve; the runtime ingests the sources (once per process, idempotently across
processes), composes the mode's strategy over the role's store at dispatch time and
passes a :class:`RetrievalResult` to the action as its ``retrieved`` keyword argument::

    @knowledge_source("docs/")
    class SupportAgent:
        @retrieval(RetrievalStrategy.HYBRID, top_k=3)
        def answer(self, question: str, *, retrieved: RetrievalResult) -> str:
            return retrieved.context

Vector-backed modes and de-duplication embed with the process provider
(:func:`tnsrag_db.embeddings.get_process_embedding`). The modes are composed by
:mod:`tnsrag_db._strategies.compose`, the composer of ``tnsrag query --strategy`` too; the
process's state (stores, ingestion caches) is one :class:`Runtime`.
"""

from __future__ import annotations

from tnsrag_db.declarative._binding import RESULT_PARAMETER, QueryBinding, plan_binding
from tnsrag_db.declarative._config import (
    DEFAULT_DEDUP_THRESHOLD,
    RESERVED_REQUEST_PREFIX,
    OnFailure,
    RetrievalConfig,
    RetrievalStrategy,
    retrieval_config,
    strip_reserved,
)
from tnsrag_db.declarative._decorators import is_runtime_failure, retrieval, retrieval_filters
from tnsrag_db.declarative._dedup import DeduplicatingStrategy
from tnsrag_db.declarative._result import RetrievalResult, format_context
from tnsrag_db.declarative._runtime import (
    Runtime,
    bind_store,
    configure,
    ingest_sources,
    reset_runtime,
    resolve_store,
    strategy_for,
)
from tnsrag_db.declarative._sources import FileLoader, KnowledgeSource, SourceLoader, collect_sources, knowledge_source

__all__ = [
    "DEFAULT_DEDUP_THRESHOLD",
    "DeduplicatingStrategy",
    "FileLoader",
    "KnowledgeSource",
    "OnFailure",
    "QueryBinding",
    "RESERVED_REQUEST_PREFIX",
    "RESULT_PARAMETER",
    "RetrievalConfig",
    "RetrievalResult",
    "RetrievalStrategy",
    "Runtime",
    "SourceLoader",
    "bind_store",
    "collect_sources",
    "configure",
    "format_context",
    "ingest_sources",
    "is_runtime_failure",
    "knowledge_source",
    "plan_binding",
    "reset_runtime",
    "resolve_store",
    "retrieval",
    "retrieval_config",
    "retrieval_filters",
    "strategy_for",
    "strip_reserved",
]
