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

1. ``_validate``, ``_plugins``, ``_errors``, ``_types``: checks, errors, value types;
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
    from tnsrag_db._db.engine import ConnectionHooks as ConnectionHooks
    from tnsrag_db._errors import (
        ConfigurationError as ConfigurationError,
    )
    from tnsrag_db._errors import (
        ConnectionLostError as ConnectionLostError,
    )
    from tnsrag_db._errors import (
        ConstraintViolationError as ConstraintViolationError,
    )
    from tnsrag_db._errors import (
        CorpusNotFoundError as CorpusNotFoundError,
    )
    from tnsrag_db._errors import (
        DanglingReferenceError as DanglingReferenceError,
    )
    from tnsrag_db._errors import (
        DatabaseError as DatabaseError,
    )
    from tnsrag_db._errors import (
        DeadlockError as DeadlockError,
    )
    from tnsrag_db._errors import (
        EmbeddingValidationError as EmbeddingValidationError,
    )
    from tnsrag_db._errors import (
        EvaluationDataError as EvaluationDataError,
    )
    from tnsrag_db._errors import (
        ExecutionError as ExecutionError,
    )
    from tnsrag_db._errors import (
        HierarchyError as HierarchyError,
    )
    from tnsrag_db._errors import (
        IdCollisionError as IdCollisionError,
    )
    from tnsrag_db._errors import (
        IngestInterrupted as IngestInterrupted,
    )
    from tnsrag_db._errors import (
        InvalidContextError as InvalidContextError,
    )
    from tnsrag_db._errors import (
        InvalidEntryError as InvalidEntryError,
    )
    from tnsrag_db._errors import (
        InvalidFilterError as InvalidFilterError,
    )
    from tnsrag_db._errors import (
        InvalidTimestampError as InvalidTimestampError,
    )
    from tnsrag_db._errors import (
        LockTimeoutError as LockTimeoutError,
    )
    from tnsrag_db._errors import (
        MigrationError as MigrationError,
    )
    from tnsrag_db._errors import (
        PermissionDeniedError as PermissionDeniedError,
    )
    from tnsrag_db._errors import (
        ProviderBusyError as ProviderBusyError,
    )
    from tnsrag_db._errors import (
        ProviderConfigurationError as ProviderConfigurationError,
    )
    from tnsrag_db._errors import (
        ProviderTransportError as ProviderTransportError,
    )
    from tnsrag_db._errors import (
        RetrievalCancelledError as RetrievalCancelledError,
    )
    from tnsrag_db._errors import (
        RetrievalError as RetrievalError,
    )
    from tnsrag_db._errors import (
        SchemaNotReadyError as SchemaNotReadyError,
    )
    from tnsrag_db._errors import (
        StatementTimeoutError as StatementTimeoutError,
    )
    from tnsrag_db._errors import (
        StrategyUnavailableError as StrategyUnavailableError,
    )
    from tnsrag_db._errors import (
        TemporalValidationError as TemporalValidationError,
    )
    from tnsrag_db._errors import (
        TnsragError as TnsragError,
    )
    from tnsrag_db._errors import (
        ValidationError as ValidationError,
    )
    from tnsrag_db._indexes.bm25 import BM25Index as BM25Index
    from tnsrag_db._indexes.graph import Edge as Edge
    from tnsrag_db._indexes.graph import GraphStore as GraphStore
    from tnsrag_db._indexes.hierarchy import HierarchyIndex as HierarchyIndex
    from tnsrag_db._indexes.temporal import TemporalIndex as TemporalIndex
    from tnsrag_db._indexes.vector import VectorMemoryStore as VectorMemoryStore
    from tnsrag_db._indexes.vector.hnsw import IndexBuildDeferred as IndexBuildDeferred
    from tnsrag_db._loaders.files import FileLoader as FileLoader
    from tnsrag_db._pipeline import RAGPipeline as RAGPipeline
    from tnsrag_db._store.aio import AsyncStore as AsyncStore
    from tnsrag_db._store.aio import connect_async as connect_async
    from tnsrag_db._store.store import Store as Store
    from tnsrag_db._store.store import connect as connect
    from tnsrag_db._strategies.base import RAGStrategy as RAGStrategy
    from tnsrag_db._strategies.distinct import DistinctContentRAGStrategy as DistinctContentRAGStrategy
    from tnsrag_db._strategies.expansion import (
        CancellationToken as CancellationToken,
    )
    from tnsrag_db._strategies.expansion import (
        QueryExpander as QueryExpander,
    )
    from tnsrag_db._strategies.expansion import (
        QueryExpansion as QueryExpansion,
    )
    from tnsrag_db._strategies.expansion import (
        RM3QueryExpander as RM3QueryExpander,
    )
    from tnsrag_db._strategies.fusion import (
        FusedDocument as FusedDocument,
    )
    from tnsrag_db._strategies.fusion import (
        RankShare as RankShare,
    )
    from tnsrag_db._strategies.fusion import (
        fuse as fuse,
    )
    from tnsrag_db._strategies.fusion import (
        reciprocal_rank_fusion as reciprocal_rank_fusion,
    )
    from tnsrag_db._strategies.graph import GraphRAGStrategy as GraphRAGStrategy
    from tnsrag_db._strategies.hierarchical import HierarchicalRAGStrategy as HierarchicalRAGStrategy
    from tnsrag_db._strategies.hybrid import (
        HybridMemoryRetriever as HybridMemoryRetriever,
    )
    from tnsrag_db._strategies.hybrid import (
        HybridRAGStrategy as HybridRAGStrategy,
    )
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy as KeywordRAGStrategy
    from tnsrag_db._strategies.mmr import MMRRAGStrategy as MMRRAGStrategy
    from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy as MultiQueryRAGStrategy
    from tnsrag_db._strategies.navigation import (
        LexicalTreeNavigator as LexicalTreeNavigator,
    )
    from tnsrag_db._strategies.navigation import (
        NavNode as NavNode,
    )
    from tnsrag_db._strategies.navigation import (
        TreeNavigator as TreeNavigator,
    )
    from tnsrag_db._strategies.reasoning import ReasoningRAGStrategy as ReasoningRAGStrategy
    from tnsrag_db._strategies.registry import build_strategy as build_strategy
    from tnsrag_db._strategies.temporal import TemporalRAGStrategy as TemporalRAGStrategy
    from tnsrag_db._strategies.vector import VectorRAGStrategy as VectorRAGStrategy
    from tnsrag_db._types import (
        HierarchyMetadata as HierarchyMetadata,
    )
    from tnsrag_db._types import (
        IngestCounts as IngestCounts,
    )
    from tnsrag_db._types import (
        MemoryEntry as MemoryEntry,
    )
    from tnsrag_db._types import (
        MemoryTier as MemoryTier,
    )
    from tnsrag_db._types import (
        RAGContext as RAGContext,
    )
    from tnsrag_db._types import (
        RetrievedDocument as RetrievedDocument,
    )
    from tnsrag_db._types import (
        TemporalMetadata as TemporalMetadata,
    )
    from tnsrag_db.declarative import (
        OnFailure as OnFailure,
    )
    from tnsrag_db.declarative import (
        RetrievalResult as RetrievalResult,
    )
    from tnsrag_db.declarative import (
        RetrievalStrategy as RetrievalStrategy,
    )
    from tnsrag_db.declarative import (
        SourceLoader as SourceLoader,
    )
    from tnsrag_db.declarative import (
        knowledge_source as knowledge_source,
    )
    from tnsrag_db.declarative import (
        retrieval as retrieval,
    )
    from tnsrag_db.embeddings import (
        EmbeddingFunction as EmbeddingFunction,
    )
    from tnsrag_db.embeddings import (
        HashingEmbedding as HashingEmbedding,
    )
    from tnsrag_db.embeddings import (
        OnnxEmbedding as OnnxEmbedding,
    )
    from tnsrag_db.embeddings import (
        ValidatingEmbedding as ValidatingEmbedding,
    )
    from tnsrag_db.embeddings import (
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
