"""tnsrag_db: a persistent, PostgreSQL-backed retrieval store for RAG and agent memory.

The eight retrieval strategies of the TnsAI RAG Strategy SPI on PostgreSQL: vectors in
pgvector, true Okapi BM25 over tsvector-derived term statistics, graph and hierarchy
walks as recursive CTEs, exact metadata filters in SQL before top-K. ``connect()``
with no URL uses an embedded PostgreSQL 18 + pgvector.

Public: this top level, which holds what a user writes daily (``connect``, the entry and
context types, the indexes, the eight strategies and their wrappers, fusion, expansion and
navigation, the pipeline, loading files, the declarative decorators and every error), and
the documented subpackages :mod:`.admin`, :mod:`.evaluation`, :mod:`.explain` (explained
rankings), :mod:`.embeddings`, :mod:`.tenancy`, :mod:`.declarative` and
:mod:`.integrations`. Every other module's name starts with ``_``: it may change in any
release.

Layers, bottom up (each imports only from the layers below it, deferred imports and
annotations included; ``tests/unit/test_structure.py`` holds the same order):

1. ``_counts``, ``_lazy``, ``_validate``, ``_plugins``, ``_errors``, ``_types``, ``_telemetry``: checks,
   errors, value types, lazily loaded names, OpenTelemetry spans and metrics;
2. ``explain``: the explained-ranking values the indexes and strategies build;
3. ``_db``: connection pools, the one read runner, sessions and writes, migrations, tenancy DDL;
4. ``_store``, ``embeddings``, ``_chunking``: a corpus and its writes, the embedded server,
   embedding providers, text chunks;
5. ``_indexes``: BM25, vector, graph, hierarchy, temporal, each owning its SQL;
6. ``_strategies``: the eight, composition, fusion, expansion, navigation, explanations;
7. ``_pipeline``, ``declarative``, ``admin``, ``_loaders``, ``evaluation``,
   ``integrations``, ``tenancy``: what applications use;
8. ``_cli``: the ``tnsrag`` command.

Names are imported on first use (PEP 562), so ``import tnsrag_db`` and the ``tnsrag``
command line stay fast: a keyword query never loads alembic, numpy-heavy providers or
strategies it does not run.
"""

from __future__ import annotations

import typing as _typing

from tnsrag_db._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    # Each name as ``X as X`` (an explicit re-export for type checkers); _EXPORTS below is
    # the list the run time reads.
    from tnsrag_db._chunking import chunker_for as chunker_for
    from tnsrag_db._counts import IngestCounts as IngestCounts
    from tnsrag_db._db.as_of import as_of as as_of
    from tnsrag_db._db.hooks import ConnectionHooks as ConnectionHooks
    from tnsrag_db._db.pool import Pool as Pool
    from tnsrag_db._errors import (
        ConfigurationError as ConfigurationError,
        ConnectionLostError as ConnectionLostError,
        ConstraintViolationError as ConstraintViolationError,
        CorpusNotFoundError as CorpusNotFoundError,
        DanglingReferenceError as DanglingReferenceError,
        DatabaseError as DatabaseError,
        DeadlockError as DeadlockError,
        EmbeddingValidationError as EmbeddingValidationError,
        EvaluationDataError as EvaluationDataError,
        ExecutionError as ExecutionError,
        HierarchyError as HierarchyError,
        IdCollisionError as IdCollisionError,
        IngestInterrupted as IngestInterrupted,
        InvalidContextError as InvalidContextError,
        InvalidEntryError as InvalidEntryError,
        InvalidFilterError as InvalidFilterError,
        InvalidTimestampError as InvalidTimestampError,
        LockTimeoutError as LockTimeoutError,
        MigrationError as MigrationError,
        PermissionDeniedError as PermissionDeniedError,
        ProviderBusyError as ProviderBusyError,
        ProviderConfigurationError as ProviderConfigurationError,
        ProviderTransportError as ProviderTransportError,
        RetrievalCancelledError as RetrievalCancelledError,
        RetrievalError as RetrievalError,
        SchemaNotReadyError as SchemaNotReadyError,
        StatementTimeoutError as StatementTimeoutError,
        StrategyUnavailableError as StrategyUnavailableError,
        TemporalValidationError as TemporalValidationError,
        TnsragError as TnsragError,
        ValidationError as ValidationError,
    )
    from tnsrag_db._indexes.bm25 import BM25Index as BM25Index
    from tnsrag_db._indexes.graph import Edge as Edge, GraphStore as GraphStore
    from tnsrag_db._indexes.hierarchy import HierarchyIndex as HierarchyIndex
    from tnsrag_db._indexes.temporal import TemporalIndex as TemporalIndex
    from tnsrag_db._indexes.vector import VectorMemoryStore as VectorMemoryStore
    from tnsrag_db._indexes.vector.hnsw import IndexBuildDeferred as IndexBuildDeferred
    from tnsrag_db._loaders.files import FileLoader as FileLoader
    from tnsrag_db._pipeline import RAGPipeline as RAGPipeline
    from tnsrag_db._store.aio import AsyncStore as AsyncStore, connect_async as connect_async
    from tnsrag_db._store.reads import EntryVersion as EntryVersion
    from tnsrag_db._store.store import Store as Store, connect as connect
    from tnsrag_db._strategies.base import RAGStrategy as RAGStrategy
    from tnsrag_db._strategies.distinct import DistinctContentRAGStrategy as DistinctContentRAGStrategy
    from tnsrag_db._strategies.expansion import (
        CancellationToken as CancellationToken,
        QueryExpander as QueryExpander,
        QueryExpansion as QueryExpansion,
        RM3QueryExpander as RM3QueryExpander,
    )
    from tnsrag_db._strategies.fusion import (
        FusedDocument as FusedDocument,
        RankShare as RankShare,
        fuse as fuse,
        reciprocal_rank_fusion as reciprocal_rank_fusion,
    )
    from tnsrag_db._strategies.graph import GraphRAGStrategy as GraphRAGStrategy
    from tnsrag_db._strategies.hierarchical import HierarchicalRAGStrategy as HierarchicalRAGStrategy
    from tnsrag_db._strategies.hybrid import (
        HybridMemoryRetriever as HybridMemoryRetriever,
        HybridRAGStrategy as HybridRAGStrategy,
    )
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy as KeywordRAGStrategy
    from tnsrag_db._strategies.mmr import MMRRAGStrategy as MMRRAGStrategy
    from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy as MultiQueryRAGStrategy
    from tnsrag_db._strategies.navigation import (
        LexicalTreeNavigator as LexicalTreeNavigator,
        NavNode as NavNode,
        TreeNavigator as TreeNavigator,
    )
    from tnsrag_db._strategies.reasoning import ReasoningRAGStrategy as ReasoningRAGStrategy
    from tnsrag_db._strategies.registry import build_strategy as build_strategy
    from tnsrag_db._strategies.temporal import TemporalRAGStrategy as TemporalRAGStrategy
    from tnsrag_db._strategies.vector import VectorRAGStrategy as VectorRAGStrategy
    from tnsrag_db._types import (
        HierarchyMetadata as HierarchyMetadata,
        MemoryEntry as MemoryEntry,
        MemoryTier as MemoryTier,
        RAGContext as RAGContext,
        RetrievedDocument as RetrievedDocument,
        TemporalMetadata as TemporalMetadata,
    )
    from tnsrag_db.declarative import (
        OnFailure as OnFailure,
        RetrievalResult as RetrievalResult,
        RetrievalStrategy as RetrievalStrategy,
        SourceLoader as SourceLoader,
        knowledge_source as knowledge_source,
        retrieval as retrieval,
    )
    from tnsrag_db.embeddings import (
        EmbeddingFunction as EmbeddingFunction,
        HashingEmbedding as HashingEmbedding,
        OnnxEmbedding as OnnxEmbedding,
        ValidatingEmbedding as ValidatingEmbedding,
        default_model as default_model,
    )


#: Each public name and the module that defines it: the one list of the top level, read by
#: :func:`~tnsrag_db._lazy.lazy_names` at run time. The ``TYPE_CHECKING`` block above says
#: the same for type checkers (``tests/unit/test_exports.py`` holds the two equal).
_EXPORTS: dict[str, str] = {
    "AsyncStore": "tnsrag_db._store.aio",
    "BM25Index": "tnsrag_db._indexes.bm25",
    "CancellationToken": "tnsrag_db._strategies.expansion",
    "ConfigurationError": "tnsrag_db._errors",
    "ConnectionHooks": "tnsrag_db._db.hooks",
    "ConnectionLostError": "tnsrag_db._errors",
    "ConstraintViolationError": "tnsrag_db._errors",
    "CorpusNotFoundError": "tnsrag_db._errors",
    "DanglingReferenceError": "tnsrag_db._errors",
    "DatabaseError": "tnsrag_db._errors",
    "DeadlockError": "tnsrag_db._errors",
    "DistinctContentRAGStrategy": "tnsrag_db._strategies.distinct",
    "Edge": "tnsrag_db._indexes.graph",
    "EmbeddingFunction": "tnsrag_db.embeddings",
    "EmbeddingValidationError": "tnsrag_db._errors",
    "EvaluationDataError": "tnsrag_db._errors",
    "ExecutionError": "tnsrag_db._errors",
    "FileLoader": "tnsrag_db._loaders.files",
    "FusedDocument": "tnsrag_db._strategies.fusion",
    "GraphRAGStrategy": "tnsrag_db._strategies.graph",
    "GraphStore": "tnsrag_db._indexes.graph",
    "HashingEmbedding": "tnsrag_db.embeddings",
    "HierarchicalRAGStrategy": "tnsrag_db._strategies.hierarchical",
    "HierarchyError": "tnsrag_db._errors",
    "HierarchyIndex": "tnsrag_db._indexes.hierarchy",
    "HierarchyMetadata": "tnsrag_db._types",
    "HybridMemoryRetriever": "tnsrag_db._strategies.hybrid",
    "HybridRAGStrategy": "tnsrag_db._strategies.hybrid",
    "IdCollisionError": "tnsrag_db._errors",
    "IndexBuildDeferred": "tnsrag_db._indexes.vector.hnsw",
    "IngestCounts": "tnsrag_db._counts",
    "IngestInterrupted": "tnsrag_db._errors",
    "InvalidContextError": "tnsrag_db._errors",
    "InvalidEntryError": "tnsrag_db._errors",
    "InvalidFilterError": "tnsrag_db._errors",
    "InvalidTimestampError": "tnsrag_db._errors",
    "KeywordRAGStrategy": "tnsrag_db._strategies.keyword",
    "LexicalTreeNavigator": "tnsrag_db._strategies.navigation",
    "LockTimeoutError": "tnsrag_db._errors",
    "MMRRAGStrategy": "tnsrag_db._strategies.mmr",
    "MemoryEntry": "tnsrag_db._types",
    "EntryVersion": "tnsrag_db._store.reads",
    "as_of": "tnsrag_db._db.as_of",
    "MemoryTier": "tnsrag_db._types",
    "MigrationError": "tnsrag_db._errors",
    "MultiQueryRAGStrategy": "tnsrag_db._strategies.multi_query",
    "NavNode": "tnsrag_db._strategies.navigation",
    "OnFailure": "tnsrag_db.declarative",
    "OnnxEmbedding": "tnsrag_db.embeddings",
    "PermissionDeniedError": "tnsrag_db._errors",
    "Pool": "tnsrag_db._db.pool",
    "ProviderBusyError": "tnsrag_db._errors",
    "ProviderConfigurationError": "tnsrag_db._errors",
    "ProviderTransportError": "tnsrag_db._errors",
    "QueryExpander": "tnsrag_db._strategies.expansion",
    "QueryExpansion": "tnsrag_db._strategies.expansion",
    "RAGContext": "tnsrag_db._types",
    "RAGPipeline": "tnsrag_db._pipeline",
    "RAGStrategy": "tnsrag_db._strategies.base",
    "RM3QueryExpander": "tnsrag_db._strategies.expansion",
    "RankShare": "tnsrag_db._strategies.fusion",
    "ReasoningRAGStrategy": "tnsrag_db._strategies.reasoning",
    "RetrievalCancelledError": "tnsrag_db._errors",
    "RetrievalError": "tnsrag_db._errors",
    "RetrievalResult": "tnsrag_db.declarative",
    "RetrievalStrategy": "tnsrag_db.declarative",
    "RetrievedDocument": "tnsrag_db._types",
    "SchemaNotReadyError": "tnsrag_db._errors",
    "SourceLoader": "tnsrag_db.declarative",
    "StatementTimeoutError": "tnsrag_db._errors",
    "Store": "tnsrag_db._store.store",
    "StrategyUnavailableError": "tnsrag_db._errors",
    "TemporalIndex": "tnsrag_db._indexes.temporal",
    "TemporalMetadata": "tnsrag_db._types",
    "TemporalRAGStrategy": "tnsrag_db._strategies.temporal",
    "TemporalValidationError": "tnsrag_db._errors",
    "TnsragError": "tnsrag_db._errors",
    "TreeNavigator": "tnsrag_db._strategies.navigation",
    "ValidatingEmbedding": "tnsrag_db.embeddings",
    "ValidationError": "tnsrag_db._errors",
    "VectorMemoryStore": "tnsrag_db._indexes.vector",
    "VectorRAGStrategy": "tnsrag_db._strategies.vector",
    "build_strategy": "tnsrag_db._strategies.registry",
    "chunker_for": "tnsrag_db._chunking",
    "connect": "tnsrag_db._store.store",
    "connect_async": "tnsrag_db._store.aio",
    "default_model": "tnsrag_db.embeddings",
    "fuse": "tnsrag_db._strategies.fusion",
    "knowledge_source": "tnsrag_db.declarative",
    "reciprocal_rank_fusion": "tnsrag_db._strategies.fusion",
    "retrieval": "tnsrag_db.declarative",
}

__all__ = sorted(_EXPORTS, key=lambda n: (n[0].islower(), n))  # classes first, then functions

if not _typing.TYPE_CHECKING:  # type checkers see the imports above; at run time names load lazily
    __getattr__, __dir__ = _lazy_names(__name__, _EXPORTS)
