"""The declarative runtime: which store a role uses, ingestion of its sources (once; see
:mod:`tnsrag_db.declarative._ingest`), and the composition of each retrieval mode at
dispatch time (by :mod:`tnsrag_db._strategies.compose`, the rule the registry uses too).

Store resolution for a role (first that applies): :func:`bind_store` on the instance,
:func:`bind_store` on its class (or a base class), the process default set with
:func:`configure`, else ``tnsrag_db.connect()`` (the embedded database), opened once.
When the role's knowledge sources name a ``corpus``, the store's connections are used on that
corpus.

The state (default store, corpus views, ingestion and vector-store caches) lives in one
:class:`Runtime`; the module functions act on the process's runtime.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tnsrag_db._counts import IngestCounts
from tnsrag_db._errors import ConfigurationError, ExecutionError, TnsragError
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._strategies.compose import GRAPH_PROVIDER_NAME, StrategyOptions, compose_strategy, ensure_installed
from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db.declarative._config import RetrievalConfig, RetrievalStrategy
from tnsrag_db.declarative._dedup import DeduplicatingStrategy
from tnsrag_db.declarative._ingest import (
    HIERARCHY_MODES,
    VECTOR_MODES,
    Once,
    ingest_entries,
    ingest_vectors,
    mode_label,
    role_class,
    role_modes,
    validate_hierarchy,
)
from tnsrag_db.declarative._sources import collect_sources
from tnsrag_db.embeddings import ProcessEmbedding, get_process_embedding

if TYPE_CHECKING:
    from tnsrag_db._indexes.vector import VectorMemoryStore

__all__ = [
    "GRAPH_PROVIDER_NAME",
    "MODE_STRATEGIES",
    "Runtime",
    "bind_store",
    "strategy_for",
    "configure",
    "ingest_sources",
    "reset_runtime",
    "resolve_store",
    "retrieve_for",
]

_log = logging.getLogger("tnsrag_db.declarative")

STORE_ATTRIBUTE = "__tnsrag_store__"

#: The composer's strategy name of each mode.
MODE_STRATEGIES: Mapping[RetrievalStrategy, str] = {
    RetrievalStrategy.SEMANTIC: "vector",
    RetrievalStrategy.KEYWORD: "keyword",
    RetrievalStrategy.HYBRID: "hybrid",
    RetrievalStrategy.GRAPH: "graph",
    RetrievalStrategy.MULTI_QUERY: "multi_query",
    RetrievalStrategy.HIERARCHICAL: "hierarchical",
    RetrievalStrategy.TEMPORAL: "temporal",
    RetrievalStrategy.REASONING: "reasoning",
}


def _check_store(store: object, what: str) -> Store:
    if not isinstance(store, Store):
        raise ConfigurationError(f"{what} needs a tnsrag_db Store, got {type(store).__name__}")
    return store


def _options(config: RetrievalConfig, vectors: Callable[[], VectorMemoryStore] | None) -> StrategyOptions:
    """The composer's options for ``config`` (its REASONING and MULTI_QUERY settings; the
    models are required by :meth:`RetrievalConfig.create` for those modes)."""
    defaults = StrategyOptions()
    return StrategyOptions(
        vectors=vectors, navigator=config.navigator, navigator_model=config.navigator_model or defaults.navigator_model,
        expansion=config.expansion_mode or defaults.expansion,  # type: ignore[arg-type]
        expander=config.expander, expansion_model=config.expansion_model or defaults.expansion_model,
        max_expansions=config.max_expansions)


def strategy_for(mode: RetrievalStrategy, config: RetrievalConfig, store: Store,
                 embedding: ProcessEmbedding | None) -> RAGStrategy:
    """Compose ``mode`` over ``store`` as the SPI defines the mode (``embedding`` for vector-backed modes).

    Raises :class:`StrategyUnavailableError` when the mode's modules are not installed.
    """
    return _PROCESS.strategy_for(mode, config, store, embedding)


class Runtime:
    """The declarative runtime's per-process state: default and opened stores, corpus
    views, what was ingested, and one ``VectorMemoryStore`` per (store, provider) so its
    embedding-space cache is reused. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._default_store: Store | None = None
        self._connected_store: Store | None = None
        self._corpus_views: dict[tuple[int, str], Store] = {}
        self._vector_stores: dict[tuple[int, int], tuple[Store, ProcessEmbedding, VectorMemoryStore]] = {}
        self._once = Once()

    # -- stores -------------------------------------------------------------------------
    def configure(self, store: Store | None) -> None:
        """Set the default store of every role not bound with :func:`bind_store` (None clears it)."""
        if store is not None:
            _check_store(store, "configure(store=...)")
        with self._lock:
            self._default_store = store

    def resolve_store(self, role: object) -> Store:
        """The store ``role`` (class or instance) retrieves from, on its sources' corpus."""
        store = getattr(role, STORE_ATTRIBUTE, None)
        if store is None:
            with self._lock:
                store = self._default_store
                if store is None:
                    if self._connected_store is None:
                        self._connected_store = connect()
                    store = self._connected_store
        if not isinstance(store, Store):
            raise ConfigurationError(f"the store bound to {role!r} is a {type(store).__name__}, not a Store")
        _, corpus = collect_sources(role_class(role))
        if corpus is None or corpus == store.corpus:
            return store
        with self._lock:
            key = (id(store), corpus)
            view = self._corpus_views.get(key)
            if view is None:
                view = self._corpus_views[key] = store.with_corpus(corpus)
            return view

    def reset(self) -> None:
        """Forget every cache and the default store; close the store this runtime opened itself."""
        with self._lock:
            if self._connected_store is not None:
                self._connected_store.close()
            self._default_store = None
            self._connected_store = None
            self._corpus_views.clear()
            self._vector_stores.clear()
        self._once.clear()

    def vector_store(self, store: Store, embedding: ProcessEmbedding) -> VectorMemoryStore:
        """The ``VectorMemoryStore`` of (``store``, ``embedding``), made once."""
        from tnsrag_db._indexes.vector import VectorMemoryStore

        key = (id(store), id(embedding))
        with self._lock:
            cached = self._vector_stores.get(key)
            # The entry holds the store and provider themselves, so their ids cannot be reused.
            if cached is None or cached[0] is not store or cached[1] is not embedding:
                cached = self._vector_stores[key] = (store, embedding, VectorMemoryStore(store, embedding))
            return cached[2]

    # -- ingestion ----------------------------------------------------------------------
    def ingest(self, role: object, store: Store, *, embedding: ProcessEmbedding | None = None,
               modes: frozenset[RetrievalStrategy] | None = None) -> IngestCounts:
        """Write the role's sources to ``store`` once (with vectors of ``embedding`` when given),
        checked for ``modes`` (default: the role's)."""
        checked = role_modes(role_class(role)) if modes is None else modes
        if embedding is None:
            return ingest_entries(self._once, role, store, checked)
        return ingest_vectors(self._once, role, store, embedding, lambda: self.vector_store(store, embedding),
                              checked)

    # -- composition and retrieval ------------------------------------------------------
    def strategy_for(self, mode: RetrievalStrategy, config: RetrievalConfig, store: Store,
                     embedding: ProcessEmbedding | None) -> RAGStrategy:
        """Compose ``mode`` over ``store`` with ``config``'s options (see :func:`strategy_for`)."""
        vectors = None if embedding is None else (lambda: self.vector_store(store, embedding))
        return compose_strategy(MODE_STRATEGIES[mode], store, _options(config, vectors), what=mode_label(mode))

    def retrieve(self, role: object, config: RetrievalConfig, query: str,
                 filters: Mapping[str, str]) -> list[RetrievedDocument]:
        """Run ``config``'s retrieval for ``role`` (see :func:`retrieve_for`)."""
        store = self.resolve_store(role)
        mode = config.strategy
        # Every action of the role shares its ingestion: check for all of their modes.
        modes = role_modes(role_class(role)) | {mode}
        needs_vectors = mode in VECTOR_MODES
        embedding = get_process_embedding() if (needs_vectors or config.deduplicate) else None
        if needs_vectors:
            # Import first: a missing vector module must be "not available", not a failed ingestion.
            ensure_installed("vector", mode_label(mode))
            self.ingest(role, store, embedding=embedding, modes=modes)
        else:
            self.ingest(role, store, modes=modes)
        if mode in HIERARCHY_MODES:
            validate_hierarchy(self._once, role, store)
        strategy = self.strategy_for(mode, config, store, embedding if needs_vectors else None)
        if config.deduplicate:
            assert embedding is not None
            strategy = DeduplicatingStrategy(strategy, embedding.embed_batch, threshold=config.dedup_threshold)
        context = RAGContext(config.candidates, config.min_score, filters)
        documents = list(strategy.retrieve(query, context))
        if config.reranker is not None:
            documents = _rerank(config, query, documents)
        return documents[: config.top_k]


def _rerank(config: RetrievalConfig, query: str, documents: list[RetrievedDocument]) -> list[RetrievedDocument]:
    assert config.reranker is not None
    try:
        reranked = config.reranker(query, list(documents))
    except TnsragError:
        raise
    except Exception as exc:
        raise ExecutionError(f"reranker failed: {exc}") from exc
    if reranked is None or isinstance(reranked, (str, bytes)) or not all(
            isinstance(d, RetrievedDocument) for d in reranked):
        raise ExecutionError("reranker must return a sequence of RetrievedDocument")
    return list(reranked)


#: The process's runtime, which the module functions use.
_PROCESS = Runtime()


def configure(*, store: Store | None) -> None:
    """Set the process-wide default store of every role not bound with :func:`bind_store`
    (None clears it, so the embedded database is used again).

    Raises :class:`ConfigurationError` for something that is not a ``Store``.
    """
    _PROCESS.configure(store)


def bind_store(target: object, store: Store) -> None:
    """Make ``target`` (a role class, which its subclasses inherit, or one role instance) use ``store``.

    Raises :class:`ConfigurationError` for something that is not a ``Store`` or a target
    that cannot hold the binding (for example a class with ``__slots__``).
    """
    _check_store(store, "bind_store")
    try:
        setattr(target, STORE_ATTRIBUTE, store)
    except (AttributeError, TypeError) as exc:
        raise ConfigurationError(f"cannot bind a store to {target!r}: {exc}") from exc


def resolve_store(role: object) -> Store:
    """The store ``role`` (class or instance) retrieves from, on its sources' corpus (see the module docstring)."""
    return _PROCESS.resolve_store(role)


def reset_runtime() -> None:
    """Forget the per-process caches (ingested sources, corpus views, the default store) for tests.

    A store this module opened itself (the embedded default) is closed.
    """
    _PROCESS.reset()


def ingest_sources(role: object, *, store: Store | None = None, embed: bool = False) -> IngestCounts:
    """Load the knowledge sources of ``role`` (class or instance) and write them to its store,
    once per process (later calls return the first call's counts without touching the database).

    ``store`` overrides :func:`resolve_store`. ``embed=True`` also stores a vector of the
    process embedding provider for every entry (what vector-backed modes need; they do
    this themselves on first use). Returns how the entries were classified
    (inserted / updated / unchanged). Raises :class:`ConfigurationError` for bad sources,
    :class:`InvalidEntryError` for bad entries, :class:`TemporalValidationError` /
    :class:`HierarchyError` when the role has a TEMPORAL / HIERARCHICAL or REASONING action
    and the entries break its rule (see :mod:`tnsrag_db.declarative._ingest`) — nothing is
    written in these cases — and :class:`DatabaseError`.
    """
    target = store if store is not None else resolve_store(role)
    return _PROCESS.ingest(role, target, embedding=get_process_embedding() if embed else None)


def retrieve_for(role: object, config: RetrievalConfig, query: str,
                 filters: Mapping[str, str]) -> list[RetrievedDocument]:
    """Run ``config``'s retrieval for ``role``: ingest (once), compose, retrieve, de-duplicate, rerank.

    ``filters`` are the effective exact-match filters (reserved keys already removed);
    they reach SQL with the strategy's candidate query, before its top-K (top-N when
    reranking). Provider exceptions keep :class:`RetrievalError` types; anything else a
    provider raises becomes :class:`ExecutionError`.
    """
    return _PROCESS.retrieve(role, config, query, filters)
