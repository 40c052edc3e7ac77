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
from tnsrag_db.embeddings import (
    EmbeddingFunction,
    HashingEmbedding,
    OnnxEmbedding,
    ValidatingEmbedding,
    default_model,
)
from tnsrag_db.errors import (
    ConfigurationError,
    DanglingReferenceError,
    DatabaseError,
    EmbeddingValidationError,
    EvaluationDataError,
    ExecutionError,
    HierarchyError,
    IngestInterrupted,
    InvalidContextError,
    InvalidEntryError,
    InvalidFilterError,
    MigrationError,
    ProviderBusyError,
    ProviderConfigurationError,
    ProviderTransportError,
    RetrievalCancelledError,
    RetrievalError,
    SchemaNotReadyError,
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

__all__ = [
    "BM25Explanation",
    "BM25Index",
    "BM25TermScore",
    "CancellationToken",
    "ConfigurationError",
    "CosineExplanation",
    "DanglingReferenceError",
    "DatabaseError",
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
    "KeywordRAGStrategy",
    "LexicalTreeNavigator",
    "MemoryEntry",
    "MemoryTier",
    "MigrationError",
    "MultiQueryRAGStrategy",
    "NavNode",
    "OnFailure",
    "OnnxEmbedding",
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
    "default_model",
    "fuse",
    "knowledge_source",
    "reciprocal_rank_fusion",
    "retrieval",
]
