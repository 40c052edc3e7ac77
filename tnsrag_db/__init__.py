"""tnsrag_db: a persistent, PostgreSQL-backed retrieval store for RAG and agent memory.

The eight retrieval strategies of the TnsAI RAG Strategy SPI on PostgreSQL: vectors in
pgvector, true Okapi BM25 over tsvector-derived term statistics, graph and hierarchy
walks as recursive CTEs, exact metadata filters in SQL before top-K. ``connect()``
with no URL uses an embedded PostgreSQL 18 + pgvector.
"""

from __future__ import annotations

from tnsrag_db.declarative import (
    OnFailure,
    RetrievalResult,
    RetrievalStrategy,
    SourceLoader,
    knowledge_source,
    retrieval,
)
from tnsrag_db.embeddings import EmbeddingFunction, HashingEmbedding, ValidatingEmbedding
from tnsrag_db.errors import (
    ConfigurationError,
    ConnectionLostError,
    DanglingReferenceError,
    DatabaseError,
    EmbeddingValidationError,
    ExecutionError,
    HierarchyError,
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
from tnsrag_db.fusion import reciprocal_rank_fusion
from tnsrag_db.indexes.bm25 import BM25Index
from tnsrag_db.indexes.graph import Edge, GraphStore
from tnsrag_db.indexes.hierarchy import HierarchyIndex
from tnsrag_db.indexes.temporal import TemporalIndex
from tnsrag_db.indexes.vector import VectorMemoryStore
from tnsrag_db.navigation import LexicalTreeNavigator, NavNode, TreeNavigator
from tnsrag_db.pipeline import RAGPipeline
from tnsrag_db.store.store import IngestCounts, Store, connect
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

__all__ = [
    "BM25Index",
    "CancellationToken",
    "ConfigurationError",
    "ConnectionLostError",
    "DanglingReferenceError",
    "DatabaseError",
    "Edge",
    "EmbeddingFunction",
    "EmbeddingValidationError",
    "ExecutionError",
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
    "knowledge_source",
    "reciprocal_rank_fusion",
    "retrieval",
]
