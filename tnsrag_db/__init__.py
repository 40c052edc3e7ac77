"""tnsrag_db: a persistent, PostgreSQL-backed retrieval store for RAG and agent memory.

The eight retrieval strategies of the TnsAI RAG Strategy SPI on PostgreSQL: vectors in
pgvector, true Okapi BM25 over tsvector-derived term statistics, graph and hierarchy
walks as recursive CTEs, exact metadata filters in SQL before top-K. ``connect()``
with no URL uses an embedded PostgreSQL 18 + pgvector.

Names are imported on first use (PEP 562), so ``import tnsrag_db`` and the ``tnsrag``
command line stay fast: a keyword query never loads alembic, numpy-heavy providers or
strategies it does not run.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from tnsrag_db.declarative import (
        OnFailure,
        RetrievalResult,
        RetrievalStrategy,
        SourceLoader,
        knowledge_source,
        retrieval,
    )
    from tnsrag_db.embeddings import (
        EmbeddingFunction,
        HashingEmbedding,
        OnnxEmbedding,
        ValidatingEmbedding,
        default_model,
    )
    from tnsrag_db.errors import (
        ConfigurationError,
        ConnectionLostError,
        ConstraintViolationError,
        CorpusNotFoundError,
        DanglingReferenceError,
        DatabaseError,
        DeadlockError,
        EmbeddingValidationError,
        EvaluationDataError,
        ExecutionError,
        HierarchyError,
        IngestInterrupted,
        InvalidContextError,
        InvalidEntryError,
        InvalidFilterError,
        InvalidTimestampError,
        MigrationError,
        PermissionDeniedError,
        ProviderBusyError,
        ProviderConfigurationError,
        ProviderTransportError,
        RetrievalCancelledError,
        RetrievalError,
        SchemaNotReadyError,
        StatementTimeoutError,
        StrategyUnavailableError,
        TemporalValidationError,
        TnsragError,
        ValidationError,
    )
    from tnsrag_db.expansion import CancellationToken, QueryExpander, QueryExpansion, RM3QueryExpander
    from tnsrag_db.fusion import FusedDocument, RankShare, fuse, reciprocal_rank_fusion
    from tnsrag_db.indexes.bm25 import BM25Index
    from tnsrag_db.indexes.graph import Edge, GraphStore
    from tnsrag_db.indexes.hierarchy import HierarchyIndex
    from tnsrag_db.indexes.temporal import TemporalIndex
    from tnsrag_db.indexes.vector import VectorMemoryStore
    from tnsrag_db.navigation import LexicalTreeNavigator, NavNode, TreeNavigator
    from tnsrag_db.pipeline import RAGPipeline
    from tnsrag_db.store.aio import AsyncStore, connect_async
    from tnsrag_db.store.store import IngestCounts, Store, connect
    from tnsrag_db.strategies.base import RAGStrategy
    from tnsrag_db.strategies.explain import (
        BM25Explanation,
        BM25TermScore,
        CosineExplanation,
        ExplainableStrategy,
        ExplainedDocument,
        Explanation,
        FusionExplanation,
        GraphExplanation,
        GraphHop,
        HierarchyExplanation,
        ReasoningExplanation,
        ReasoningStep,
        ScoreExplanation,
        SearchPlan,
        StreamShare,
        TemporalExplanation,
        UnexplainedScore,
    )
    from tnsrag_db.strategies.graph import GraphRAGStrategy
    from tnsrag_db.strategies.hierarchical import HierarchicalRAGStrategy
    from tnsrag_db.strategies.hybrid import HybridMemoryRetriever, HybridRAGStrategy
    from tnsrag_db.strategies.keyword import KeywordRAGStrategy
    from tnsrag_db.strategies.multi_query import MultiQueryRAGStrategy
    from tnsrag_db.strategies.reasoning import ReasoningRAGStrategy
    from tnsrag_db.strategies.temporal import TemporalRAGStrategy
    from tnsrag_db.strategies.vector import VectorRAGStrategy
    from tnsrag_db.types import (
        HierarchyMetadata,
        MemoryEntry,
        MemoryTier,
        RAGContext,
        RetrievedDocument,
        TemporalMetadata,
    )

#: Public name -> module defining it; ``__getattr__`` imports the module on first access.
_EXPORTS: dict[str, str] = {
    "AsyncStore": "tnsrag_db.store.aio",
    "BM25Explanation": "tnsrag_db.strategies.explain",
    "BM25Index": "tnsrag_db.indexes.bm25",
    "BM25TermScore": "tnsrag_db.strategies.explain",
    "CancellationToken": "tnsrag_db.expansion",
    "ConfigurationError": "tnsrag_db.errors",
    "ConnectionLostError": "tnsrag_db.errors",
    "ConstraintViolationError": "tnsrag_db.errors",
    "CorpusNotFoundError": "tnsrag_db.errors",
    "CosineExplanation": "tnsrag_db.strategies.explain",
    "DanglingReferenceError": "tnsrag_db.errors",
    "DatabaseError": "tnsrag_db.errors",
    "DeadlockError": "tnsrag_db.errors",
    "Edge": "tnsrag_db.indexes.graph",
    "EmbeddingFunction": "tnsrag_db.embeddings",
    "EmbeddingValidationError": "tnsrag_db.errors",
    "EvaluationDataError": "tnsrag_db.errors",
    "ExecutionError": "tnsrag_db.errors",
    "ExplainableStrategy": "tnsrag_db.strategies.explain",
    "ExplainedDocument": "tnsrag_db.strategies.explain",
    "Explanation": "tnsrag_db.strategies.explain",
    "FusedDocument": "tnsrag_db.fusion",
    "FusionExplanation": "tnsrag_db.strategies.explain",
    "GraphExplanation": "tnsrag_db.strategies.explain",
    "GraphHop": "tnsrag_db.strategies.explain",
    "GraphRAGStrategy": "tnsrag_db.strategies.graph",
    "GraphStore": "tnsrag_db.indexes.graph",
    "HashingEmbedding": "tnsrag_db.embeddings",
    "HierarchicalRAGStrategy": "tnsrag_db.strategies.hierarchical",
    "HierarchyError": "tnsrag_db.errors",
    "HierarchyExplanation": "tnsrag_db.strategies.explain",
    "HierarchyIndex": "tnsrag_db.indexes.hierarchy",
    "HierarchyMetadata": "tnsrag_db.types",
    "HybridMemoryRetriever": "tnsrag_db.strategies.hybrid",
    "HybridRAGStrategy": "tnsrag_db.strategies.hybrid",
    "IngestCounts": "tnsrag_db.store.store",
    "IngestInterrupted": "tnsrag_db.errors",
    "InvalidContextError": "tnsrag_db.errors",
    "InvalidEntryError": "tnsrag_db.errors",
    "InvalidFilterError": "tnsrag_db.errors",
    "InvalidTimestampError": "tnsrag_db.errors",
    "KeywordRAGStrategy": "tnsrag_db.strategies.keyword",
    "LexicalTreeNavigator": "tnsrag_db.navigation",
    "MemoryEntry": "tnsrag_db.types",
    "MemoryTier": "tnsrag_db.types",
    "MigrationError": "tnsrag_db.errors",
    "MultiQueryRAGStrategy": "tnsrag_db.strategies.multi_query",
    "NavNode": "tnsrag_db.navigation",
    "OnFailure": "tnsrag_db.declarative",
    "OnnxEmbedding": "tnsrag_db.embeddings",
    "PermissionDeniedError": "tnsrag_db.errors",
    "ProviderBusyError": "tnsrag_db.errors",
    "ProviderConfigurationError": "tnsrag_db.errors",
    "ProviderTransportError": "tnsrag_db.errors",
    "QueryExpander": "tnsrag_db.expansion",
    "QueryExpansion": "tnsrag_db.expansion",
    "RAGContext": "tnsrag_db.types",
    "RAGPipeline": "tnsrag_db.pipeline",
    "RAGStrategy": "tnsrag_db.strategies.base",
    "RM3QueryExpander": "tnsrag_db.expansion",
    "RankShare": "tnsrag_db.fusion",
    "ReasoningExplanation": "tnsrag_db.strategies.explain",
    "ReasoningRAGStrategy": "tnsrag_db.strategies.reasoning",
    "ReasoningStep": "tnsrag_db.strategies.explain",
    "RetrievalCancelledError": "tnsrag_db.errors",
    "RetrievalError": "tnsrag_db.errors",
    "RetrievalResult": "tnsrag_db.declarative",
    "RetrievalStrategy": "tnsrag_db.declarative",
    "RetrievedDocument": "tnsrag_db.types",
    "SchemaNotReadyError": "tnsrag_db.errors",
    "ScoreExplanation": "tnsrag_db.strategies.explain",
    "SearchPlan": "tnsrag_db.strategies.explain",
    "SourceLoader": "tnsrag_db.declarative",
    "StatementTimeoutError": "tnsrag_db.errors",
    "Store": "tnsrag_db.store.store",
    "StrategyUnavailableError": "tnsrag_db.errors",
    "StreamShare": "tnsrag_db.strategies.explain",
    "TemporalExplanation": "tnsrag_db.strategies.explain",
    "TemporalIndex": "tnsrag_db.indexes.temporal",
    "TemporalMetadata": "tnsrag_db.types",
    "TemporalRAGStrategy": "tnsrag_db.strategies.temporal",
    "TemporalValidationError": "tnsrag_db.errors",
    "TnsragError": "tnsrag_db.errors",
    "TreeNavigator": "tnsrag_db.navigation",
    "UnexplainedScore": "tnsrag_db.strategies.explain",
    "ValidatingEmbedding": "tnsrag_db.embeddings",
    "ValidationError": "tnsrag_db.errors",
    "VectorMemoryStore": "tnsrag_db.indexes.vector",
    "VectorRAGStrategy": "tnsrag_db.strategies.vector",
    "connect": "tnsrag_db.store.store",
    "connect_async": "tnsrag_db.store.aio",
    "default_model": "tnsrag_db.embeddings",
    "fuse": "tnsrag_db.fusion",
    "knowledge_source": "tnsrag_db.declarative",
    "reciprocal_rank_fusion": "tnsrag_db.fusion",
    "retrieval": "tnsrag_db.declarative",
}

__all__ = [
    "AsyncStore",
    "BM25Explanation",
    "BM25Index",
    "BM25TermScore",
    "CancellationToken",
    "ConfigurationError",
    "ConnectionLostError",
    "ConstraintViolationError",
    "CorpusNotFoundError",
    "CosineExplanation",
    "DanglingReferenceError",
    "DatabaseError",
    "DeadlockError",
    "Edge",
    "EmbeddingFunction",
    "EmbeddingValidationError",
    "EvaluationDataError",
    "ExecutionError",
    "ExplainableStrategy",
    "ExplainedDocument",
    "Explanation",
    "FusedDocument",
    "FusionExplanation",
    "GraphExplanation",
    "GraphHop",
    "GraphRAGStrategy",
    "GraphStore",
    "HashingEmbedding",
    "HierarchicalRAGStrategy",
    "HierarchyError",
    "HierarchyExplanation",
    "HierarchyIndex",
    "HierarchyMetadata",
    "HybridMemoryRetriever",
    "HybridRAGStrategy",
    "IngestCounts",
    "IngestInterrupted",
    "InvalidContextError",
    "InvalidEntryError",
    "InvalidFilterError",
    "InvalidTimestampError",
    "KeywordRAGStrategy",
    "LexicalTreeNavigator",
    "MemoryEntry",
    "MemoryTier",
    "MigrationError",
    "MultiQueryRAGStrategy",
    "NavNode",
    "OnFailure",
    "OnnxEmbedding",
    "PermissionDeniedError",
    "ProviderBusyError",
    "ProviderConfigurationError",
    "ProviderTransportError",
    "QueryExpander",
    "QueryExpansion",
    "RAGContext",
    "RAGPipeline",
    "RAGStrategy",
    "RM3QueryExpander",
    "RankShare",
    "ReasoningExplanation",
    "ReasoningRAGStrategy",
    "ReasoningStep",
    "RetrievalCancelledError",
    "RetrievalError",
    "RetrievalResult",
    "RetrievalStrategy",
    "RetrievedDocument",
    "SchemaNotReadyError",
    "ScoreExplanation",
    "SearchPlan",
    "SourceLoader",
    "StatementTimeoutError",
    "Store",
    "StrategyUnavailableError",
    "StreamShare",
    "TemporalExplanation",
    "TemporalIndex",
    "TemporalMetadata",
    "TemporalRAGStrategy",
    "TemporalValidationError",
    "TnsragError",
    "TreeNavigator",
    "UnexplainedScore",
    "ValidatingEmbedding",
    "ValidationError",
    "VectorMemoryStore",
    "VectorRAGStrategy",
    "connect",
    "connect_async",
    "default_model",
    "fuse",
    "knowledge_source",
    "reciprocal_rank_fusion",
    "retrieval",
]


if not _typing.TYPE_CHECKING:  # type checkers see the imports above; at run time names load lazily

    def __getattr__(name: str) -> _typing.Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'tnsrag_db' has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(_EXPORTS))
