"""tnsrag_db: a persistent, PostgreSQL-backed retrieval store for RAG and agent memory.

The eight retrieval strategies of the TnsAI RAG Strategy SPI on PostgreSQL: vectors in
pgvector, true Okapi BM25 over tsvector-derived term statistics, graph and hierarchy
walks as recursive CTEs, exact metadata filters in SQL before top-K. ``connect()``
with no URL uses an embedded PostgreSQL 18 + pgvector.

Layers, bottom up (each imports only from the layers below it, deferred imports and
annotations included; ``tests/unit/test_structure.py`` holds the same order):

1. ``_validate``, ``_plugins``, ``errors``, ``types``: checks, errors, value types;
2. ``explain``: the explained-ranking values the indexes and strategies build;
3. ``db``: engines, the one read runner, sessions and writes, migrations, tenancy DDL;
4. ``store``, ``embeddings``, ``chunking``: a corpus and its writes, the embedded server,
   embedding providers, text chunks;
5. ``indexes``: BM25, vector, graph, hierarchy, temporal, each owning its SQL;
6. ``strategies``: the eight, composition, fusion, expansion, navigation, explanations;
7. ``pipeline``, ``declarative``, ``admin``, ``loaders``, ``evaluation``,
   ``integrations``, ``tenancy``: what applications use;
8. ``cli``: the ``tnsrag`` command.

The top level holds what a user writes daily: ``connect``, the entry and context types,
the indexes, the eight strategies, fusion, expansion and navigation, the pipeline, the
declarative decorators and every error. The public subpackages are :mod:`.admin`,
:mod:`.evaluation`, :mod:`.explain` (explained rankings), :mod:`.embeddings`,
:mod:`.tenancy` and :mod:`.integrations`.

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
    from tnsrag_db.strategies.expansion import CancellationToken, QueryExpander, QueryExpansion, RM3QueryExpander
    from tnsrag_db.strategies.fusion import FusedDocument, RankShare, fuse, reciprocal_rank_fusion
    from tnsrag_db.indexes.bm25 import BM25Index
    from tnsrag_db.indexes.graph import Edge, GraphStore
    from tnsrag_db.indexes.hierarchy import HierarchyIndex
    from tnsrag_db.indexes.temporal import TemporalIndex
    from tnsrag_db.indexes.vector import VectorMemoryStore
    from tnsrag_db.strategies.navigation import LexicalTreeNavigator, NavNode, TreeNavigator
    from tnsrag_db.pipeline import RAGPipeline
    from tnsrag_db.store.aio import AsyncStore, connect_async
    from tnsrag_db.store.store import Store, connect
    from tnsrag_db.types import IngestCounts
    from tnsrag_db.strategies.base import RAGStrategy
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
    "BM25Index": "tnsrag_db.indexes.bm25",
    "CancellationToken": "tnsrag_db.strategies.expansion",
    "ConfigurationError": "tnsrag_db.errors",
    "ConnectionLostError": "tnsrag_db.errors",
    "ConstraintViolationError": "tnsrag_db.errors",
    "CorpusNotFoundError": "tnsrag_db.errors",
    "DanglingReferenceError": "tnsrag_db.errors",
    "DatabaseError": "tnsrag_db.errors",
    "DeadlockError": "tnsrag_db.errors",
    "Edge": "tnsrag_db.indexes.graph",
    "EmbeddingFunction": "tnsrag_db.embeddings",
    "EmbeddingValidationError": "tnsrag_db.errors",
    "EvaluationDataError": "tnsrag_db.errors",
    "ExecutionError": "tnsrag_db.errors",
    "FusedDocument": "tnsrag_db.strategies.fusion",
    "GraphRAGStrategy": "tnsrag_db.strategies.graph",
    "GraphStore": "tnsrag_db.indexes.graph",
    "HashingEmbedding": "tnsrag_db.embeddings",
    "HierarchicalRAGStrategy": "tnsrag_db.strategies.hierarchical",
    "HierarchyError": "tnsrag_db.errors",
    "HierarchyIndex": "tnsrag_db.indexes.hierarchy",
    "HierarchyMetadata": "tnsrag_db.types",
    "HybridMemoryRetriever": "tnsrag_db.strategies.hybrid",
    "HybridRAGStrategy": "tnsrag_db.strategies.hybrid",
    "IngestCounts": "tnsrag_db.types",
    "IngestInterrupted": "tnsrag_db.errors",
    "InvalidContextError": "tnsrag_db.errors",
    "InvalidEntryError": "tnsrag_db.errors",
    "InvalidFilterError": "tnsrag_db.errors",
    "InvalidTimestampError": "tnsrag_db.errors",
    "KeywordRAGStrategy": "tnsrag_db.strategies.keyword",
    "LexicalTreeNavigator": "tnsrag_db.strategies.navigation",
    "MemoryEntry": "tnsrag_db.types",
    "MemoryTier": "tnsrag_db.types",
    "MigrationError": "tnsrag_db.errors",
    "MultiQueryRAGStrategy": "tnsrag_db.strategies.multi_query",
    "NavNode": "tnsrag_db.strategies.navigation",
    "OnFailure": "tnsrag_db.declarative",
    "OnnxEmbedding": "tnsrag_db.embeddings",
    "PermissionDeniedError": "tnsrag_db.errors",
    "ProviderBusyError": "tnsrag_db.errors",
    "ProviderConfigurationError": "tnsrag_db.errors",
    "ProviderTransportError": "tnsrag_db.errors",
    "QueryExpander": "tnsrag_db.strategies.expansion",
    "QueryExpansion": "tnsrag_db.strategies.expansion",
    "RAGContext": "tnsrag_db.types",
    "RAGPipeline": "tnsrag_db.pipeline",
    "RAGStrategy": "tnsrag_db.strategies.base",
    "RM3QueryExpander": "tnsrag_db.strategies.expansion",
    "RankShare": "tnsrag_db.strategies.fusion",
    "ReasoningRAGStrategy": "tnsrag_db.strategies.reasoning",
    "RetrievalCancelledError": "tnsrag_db.errors",
    "RetrievalError": "tnsrag_db.errors",
    "RetrievalResult": "tnsrag_db.declarative",
    "RetrievalStrategy": "tnsrag_db.declarative",
    "RetrievedDocument": "tnsrag_db.types",
    "SchemaNotReadyError": "tnsrag_db.errors",
    "SourceLoader": "tnsrag_db.declarative",
    "StatementTimeoutError": "tnsrag_db.errors",
    "Store": "tnsrag_db.store.store",
    "StrategyUnavailableError": "tnsrag_db.errors",
    "TemporalIndex": "tnsrag_db.indexes.temporal",
    "TemporalMetadata": "tnsrag_db.types",
    "TemporalRAGStrategy": "tnsrag_db.strategies.temporal",
    "TemporalValidationError": "tnsrag_db.errors",
    "TnsragError": "tnsrag_db.errors",
    "TreeNavigator": "tnsrag_db.strategies.navigation",
    "ValidatingEmbedding": "tnsrag_db.embeddings",
    "ValidationError": "tnsrag_db.errors",
    "VectorMemoryStore": "tnsrag_db.indexes.vector",
    "VectorRAGStrategy": "tnsrag_db.strategies.vector",
    "connect": "tnsrag_db.store.store",
    "connect_async": "tnsrag_db.store.aio",
    "default_model": "tnsrag_db.embeddings",
    "fuse": "tnsrag_db.strategies.fusion",
    "knowledge_source": "tnsrag_db.declarative",
    "reciprocal_rank_fusion": "tnsrag_db.strategies.fusion",
    "retrieval": "tnsrag_db.declarative",
}

__all__ = [
    "AsyncStore",
    "BM25Index",
    "CancellationToken",
    "ConfigurationError",
    "ConnectionLostError",
    "ConstraintViolationError",
    "CorpusNotFoundError",
    "DanglingReferenceError",
    "DatabaseError",
    "DeadlockError",
    "Edge",
    "EmbeddingFunction",
    "EmbeddingValidationError",
    "EvaluationDataError",
    "ExecutionError",
    "FusedDocument",
    "GraphRAGStrategy",
    "GraphStore",
    "HashingEmbedding",
    "HierarchicalRAGStrategy",
    "HierarchyError",
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
    "ReasoningRAGStrategy",
    "RetrievalCancelledError",
    "RetrievalError",
    "RetrievalResult",
    "RetrievalStrategy",
    "RetrievedDocument",
    "SchemaNotReadyError",
    "SourceLoader",
    "StatementTimeoutError",
    "Store",
    "StrategyUnavailableError",
    "TemporalIndex",
    "TemporalMetadata",
    "TemporalRAGStrategy",
    "TemporalValidationError",
    "TnsragError",
    "TreeNavigator",
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
