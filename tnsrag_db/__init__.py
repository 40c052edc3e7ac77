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

1. ``_counts``, ``_validate``, ``_plugins``, ``_errors``, ``_types``: checks, errors, value types;
2. ``explain``: the explained-ranking values the indexes and strategies build;
3. ``_db``: engines, the one read runner, sessions and writes, migrations, tenancy DDL;
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

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    # The one list of the top level: each name as ``X as X`` (an explicit re-export for
    # type checkers); at run time __getattr__ reads this block to find a name's module.
    from tnsrag_db._chunking import chunker_for as chunker_for
    from tnsrag_db._counts import IngestCounts as IngestCounts
    from tnsrag_db._db.engine import ConnectionHooks as ConnectionHooks
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


def _read_exports() -> dict[str, str]:
    """Public name -> defining module, read from the ``TYPE_CHECKING`` block above (parsed
    once, on the first lookup of a lazy name, never at ``import tnsrag_db``)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "_typing.TYPE_CHECKING")
    return {alias.asname or alias.name: node.module for node in block.body
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


if not _typing.TYPE_CHECKING:  # type checkers see the imports above; at run time names load lazily
    _exports: dict[str, str] | None = None

    def __getattr__(name: str) -> _typing.Any:
        global _exports
        if _exports is None:
            _exports = _read_exports()
        if name in ("__all__", "_EXPORTS"):
            value: _typing.Any = (sorted(_exports, key=lambda n: (n[0].islower(), n)) if name == "__all__"
                                  else dict(_exports))
        elif name in _exports:
            value = getattr(_importlib.import_module(_exports[name]), name)
        else:
            raise AttributeError(f"module 'tnsrag_db' has no attribute {name!r}")
        globals()[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__getattr__("_EXPORTS")))
