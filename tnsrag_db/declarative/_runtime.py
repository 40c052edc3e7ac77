"""The declarative runtime: which store a role uses, ingestion of its sources, and the
composition of each retrieval mode at dispatch time.

Store resolution for a role (first that applies): :func:`bind_store` on the instance,
:func:`bind_store` on its class (or a base class), the process default set with
:func:`configure`, else ``tnsrag_db.connect()`` (the embedded database), opened once.
When the role's knowledge sources name a ``corpus``, the store's engine is used on that
corpus.

Ingestion: the first retrieval of a role in a process loads its sources and writes them
(content-hash upsert); later retrievals reuse that (a per-process cache). Across
processes the write happens under a PostgreSQL advisory lock keyed by schema and corpus,
and entries whose stored content hash already matches are classified unchanged, so N
processes starting together insert every entry exactly once.

The write enforces what the role's modes need (the modes of every ``@retrieval`` action
of the role class, since all of them share one ingestion): with a TEMPORAL action, a
timestamp more than the mode's ``max_future_skew`` (5 minutes) ahead of its clock (now,
UTC) raises :class:`TemporalValidationError` before anything is written; with a
HIERARCHICAL or REASONING action, missing parents and cycles are checked inside the
write's transaction, so a :class:`HierarchyError` leaves nothing written (entries nor
vectors).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from tnsrag_db.declarative._config import RetrievalConfig, RetrievalStrategy
from tnsrag_db.declarative._dedup import DeduplicatingStrategy
from tnsrag_db.declarative._sources import KnowledgeSource, collect_sources
from tnsrag_db.embeddings import ProcessEmbedding, get_process_embedding
from tnsrag_db.errors import (
    ConfigurationError,
    ExecutionError,
    StrategyUnavailableError,
    TnsragError,
)
from tnsrag_db.store.store import IngestCounts, Store, content_hash, validate_batch
from tnsrag_db.strategies.base import RAGStrategy
from tnsrag_db.types import MemoryEntry, RAGContext, RetrievedDocument

if TYPE_CHECKING:
    from tnsrag_db.indexes.hierarchy import HierarchyIndex
    from tnsrag_db.indexes.temporal import TemporalIndex

__all__ = [
    "bind_store",
    "build_strategy",
    "configure",
    "ingest_sources",
    "reset_runtime",
    "resolve_store",
    "retrieve_for",
]

_log = logging.getLogger("tnsrag_db.declarative")

STORE_ATTRIBUTE = "__tnsrag_store__"
#: The ``provider_name`` the declarative GRAPH mode gives ``GraphRAGStrategy``.
GRAPH_PROVIDER_NAME = "tnsrag-db"

_state_lock = threading.Lock()
_default_store: Store | None = None
_connected_store: Store | None = None
_corpus_views: dict[tuple[int, str], Store] = {}
_ingested: dict[Hashable, IngestCounts] = {}
_ingest_locks: dict[Hashable, threading.Lock] = {}
_vector_stores: dict[tuple[int, int], tuple[Store, ProcessEmbedding, Any]] = {}


# -- stores -----------------------------------------------------------------------------

def configure(*, store: Store | None) -> None:
    """Set the process-wide default store of every role not bound with :func:`bind_store`
    (None clears it, so the embedded database is used again).

    Raises :class:`ConfigurationError` for something that is not a ``Store``.
    """
    global _default_store
    if store is not None and not isinstance(store, Store):
        raise ConfigurationError(f"configure(store=...) needs a tnsrag_db Store, got {type(store).__name__}")
    with _state_lock:
        _default_store = store


def bind_store(target: object, store: Store) -> None:
    """Make ``target`` (a role class, which its subclasses inherit, or one role instance) use ``store``.

    Raises :class:`ConfigurationError` for something that is not a ``Store`` or a target
    that cannot hold the binding (for example a class with ``__slots__``).
    """
    if not isinstance(store, Store):
        raise ConfigurationError(f"bind_store needs a tnsrag_db Store, got {type(store).__name__}")
    try:
        setattr(target, STORE_ATTRIBUTE, store)
    except (AttributeError, TypeError) as exc:
        raise ConfigurationError(f"cannot bind a store to {target!r}: {exc}") from exc


def _role_class(role: object) -> type:
    return role if isinstance(role, type) else type(role)


def resolve_store(role: object) -> Store:
    """The store ``role`` (class or instance) retrieves from, on its sources' corpus (see the module docstring)."""
    global _connected_store
    store = getattr(role, STORE_ATTRIBUTE, None)
    if store is None:
        with _state_lock:
            store = _default_store
            if store is None:
                if _connected_store is None:
                    from tnsrag_db.store.store import connect

                    _connected_store = connect()
                store = _connected_store
    if not isinstance(store, Store):
        raise ConfigurationError(f"the store bound to {role!r} is a {type(store).__name__}, not a Store")
    _, corpus = collect_sources(_role_class(role))
    if corpus is None or corpus == store.corpus:
        return store
    with _state_lock:
        key = (id(store), corpus)
        view = _corpus_views.get(key)
        if view is None:
            view = _corpus_views[key] = store.with_corpus(corpus)
        return view


def reset_runtime() -> None:
    """Forget the per-process caches (ingested sources, corpus views, the default store) for tests.

    A store this module opened itself (the embedded default) is closed.
    """
    global _default_store, _connected_store
    with _state_lock:
        if _connected_store is not None:
            _connected_store.close()
        _default_store = None
        _connected_store = None
        _corpus_views.clear()
        _ingested.clear()
        _ingest_locks.clear()
        _vector_stores.clear()


# -- ingestion --------------------------------------------------------------------------

def _lock_key(store: Store) -> str:
    return f"tnsrag_db.declarative:{store.schema}:{store.corpus}"


def _load(sources: tuple[KnowledgeSource, ...]) -> list[MemoryEntry]:
    entries: list[MemoryEntry] = []
    for source in sources:
        entries.extend(source.entries())
    return validate_batch(entries)


def _stored_hashes(store: Store, ids: list[str]) -> dict[str, bytes]:
    with store.transaction() as conn:
        rows = conn.execute(sa.text("SELECT id, content_hash FROM entries WHERE corpus = :c AND id = ANY(:ids)"),
                            {"c": store.corpus, "ids": ids}).all()
    return {r.id: bytes(r.content_hash) for r in rows}


def _vectors_present(store: Store, provider: str, ids: list[str]) -> bool:
    with store.transaction() as conn:
        found = conn.execute(sa.text(
            "SELECT count(DISTINCT x.entry_id) FROM embeddings x JOIN embedding_spaces s "
            "ON s.corpus = x.corpus AND s.space_id = x.space_id "
            "WHERE x.corpus = :c AND s.provider = :p AND x.entry_id = ANY(:ids)"),
            {"c": store.corpus, "p": provider, "ids": ids}).scalar_one()
    return int(found) == len(ids)


def _write_once(store: Store, entries: list[MemoryEntry], write: Callable[[list[MemoryEntry]], IngestCounts],
                provider: str | None = None) -> IngestCounts:
    """Write ``entries`` with ``write`` under the corpus's ingestion lock, unless all are stored already.

    ``provider`` (for vector-backed modes) also requires every entry to have a vector of
    that provider before the write is skipped.
    """
    wanted = {e.id: content_hash(e) for e in entries}
    ids = list(wanted)
    if _stored_hashes(store, ids) == wanted and (provider is None or _vectors_present(store, provider, ids)):
        return IngestCounts(unchanged=len(entries))
    # A session-level lock (not a transaction's) so the writes below may use any pooled
    # connection and any number of transactions while it is held (an HNSW build among
    # them); the writes classify entries whose stored content hash matches as unchanged,
    # so a process that waited here re-inserts nothing.
    with store.autocommit() as lock_conn, store.session_lock(lock_conn, _lock_key(store)):
        return write(entries)


#: Modes whose composition embeds with the process provider.
VECTOR_MODES = frozenset({RetrievalStrategy.SEMANTIC, RetrievalStrategy.HYBRID, RetrievalStrategy.MULTI_QUERY,
                          RetrievalStrategy.HIERARCHICAL, RetrievalStrategy.TEMPORAL})
#: Modes that need a valid stored hierarchy.
HIERARCHY_MODES = frozenset({RetrievalStrategy.HIERARCHICAL, RetrievalStrategy.REASONING})


@lru_cache(maxsize=256)
def _role_modes(cls: type) -> frozenset[RetrievalStrategy]:
    """The modes of every ``@retrieval`` action of role class ``cls``, inherited ones
    included (an override in a subclass replaces its base's action).

    Cached per class: it runs on every retrieval, and decorators are applied once.
    """
    from tnsrag_db.declarative._decorators import retrieval_config  # it imports this module

    modes: set[RetrievalStrategy] = set()
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            config = retrieval_config(value) if callable(value) else None
            if config is not None:
                modes.add(config.strategy)
    return frozenset(modes)


def _temporal_index(store: Store) -> TemporalIndex:
    """The ``TemporalIndex`` of the declarative TEMPORAL mode, with the ``max_future_skew``
    and clock its strategy uses (``@retrieval`` configures neither: 5 minutes, now in UTC)."""
    from tnsrag_db.indexes.temporal import TemporalIndex
    from tnsrag_db.strategies.temporal import TemporalRAGStrategy

    return TemporalIndex(store, max_future_skew=TemporalRAGStrategy.DEFAULT_MAX_FUTURE_SKEW)


class _Checks:
    """What a role's modes require of its ingested entries (see the module docstring)."""

    def __init__(self, store: Store, modes: frozenset[RetrievalStrategy]) -> None:
        self.temporal: TemporalIndex | None = None
        self.hierarchy: HierarchyIndex | None = None
        if RetrievalStrategy.TEMPORAL in modes:
            try:
                self.temporal = _temporal_index(store)
            except ImportError as exc:  # never write unchecked
                raise _unavailable(RetrievalStrategy.TEMPORAL, exc) from exc
        hierarchical = sorted(modes & HIERARCHY_MODES, key=lambda m: m.name)
        if hierarchical:
            try:
                from tnsrag_db.indexes.hierarchy import HierarchyIndex
            except ImportError as exc:
                raise _unavailable(hierarchical[0], exc) from exc
            self.hierarchy = HierarchyIndex(store)

    @property
    def key(self) -> tuple[bool, bool]:
        """Part of the per-process cache key: the same sources checked differently are ingested again."""
        return self.temporal is not None, self.hierarchy is not None

    def load(self, sources: tuple[KnowledgeSource, ...]) -> list[MemoryEntry]:
        """Load and validate the entries; the timestamp check runs here, before any write."""
        entries = _load(sources)
        if self.temporal is not None:
            self.temporal.check_timestamps(entries)
        return entries


def _ensure(key: Hashable, work: Callable[[], IngestCounts]) -> IngestCounts:
    with _state_lock:
        lock = _ingest_locks.setdefault(key, threading.Lock())
    with lock:
        done = _ingested.get(key)
        if done is None:
            done = _ingested[key] = work()
        return done


def ingest_sources(role: object, *, store: Store | None = None, embed: bool = False) -> IngestCounts:
    """Load the knowledge sources of ``role`` (class or instance) and write them to its store,
    once per process (later calls return the first call's counts without touching the database).

    ``store`` overrides :func:`resolve_store`. ``embed=True`` also stores a vector of the
    process embedding provider for every entry (what vector-backed modes need; they do
    this themselves on first use). Returns how the entries were classified
    (inserted / updated / unchanged). Raises :class:`ConfigurationError` for bad sources,
    :class:`InvalidEntryError` for bad entries, :class:`TemporalValidationError` /
    :class:`HierarchyError` when the role has a TEMPORAL / HIERARCHICAL or REASONING action
    and the entries break its rule (see the module docstring) — nothing is written in
    these cases — and :class:`DatabaseError`.
    """
    cls = _role_class(role)
    target = store if store is not None else resolve_store(role)
    if embed:
        return _ingest_vectors(role, target, get_process_embedding())
    return _ingest_entries(role, target, _role_modes(cls))


def _ingest_entries(role: object, store: Store, modes: frozenset[RetrievalStrategy]) -> IngestCounts:
    """Write the role's entries, checked for ``modes`` (once per process)."""
    sources, _ = collect_sources(_role_class(role))
    if not sources:
        return IngestCounts()
    checks = _Checks(store, modes)
    key = ("entries", id(store.engine), store.schema, store.corpus, tuple(id(s) for s in sources), checks.key)
    # With a hierarchy mode the write goes through HierarchyIndex.add_all, which checks the
    # batch inside its transaction (nothing is written when the check fails).
    write: Callable[[list[MemoryEntry]], IngestCounts] = (
        store.add_all if checks.hierarchy is None else checks.hierarchy.add_all)
    return _ensure(key, lambda: _write_once(store, checks.load(sources), write))


def _ingest_vectors(role: object, store: Store, embedding: ProcessEmbedding,
                    modes: frozenset[RetrievalStrategy] | None = None) -> IngestCounts:
    """Write the role's entries with vectors of the process provider (once per process),
    checked for ``modes`` (default: the role's)."""
    cls = _role_class(role)
    sources, _ = collect_sources(cls)
    if not sources:
        return IngestCounts()
    checks = _Checks(store, _role_modes(cls) if modes is None else modes)
    key = ("vectors", id(store.engine), store.schema, store.corpus, tuple(id(s) for s in sources),
           id(embedding), checks.key)

    def work() -> IngestCounts:
        vector_store = _vector_store(store, embedding)
        entries = checks.load(sources)
        hierarchy = checks.hierarchy

        def write(batch: list[MemoryEntry]) -> IngestCounts:
            if hierarchy is None:
                counts: IngestCounts = vector_store.add_all(batch)
                return counts
            # Entries and vectors stay in VectorMemoryStore's one transaction; the hierarchy
            # check runs inside it, after the entries are written, so a failure rolls back both.
            ids = [e.id for e in batch]
            checked: IngestCounts = vector_store.add_all(
                batch, check=lambda conn: hierarchy.check_written(conn, ids))
            return checked

        return _write_once(store, entries, write, embedding.name)

    return _ensure(key, work)


# -- composition ------------------------------------------------------------------------

def _unavailable(mode: RetrievalStrategy, exc: ImportError) -> StrategyUnavailableError:
    return StrategyUnavailableError(f"retrieval mode {mode.name} is not available in this installation "
                                    f"(cannot import {exc.name or exc})")


def _vector_store(store: Store, embedding: ProcessEmbedding) -> Any:
    """One ``VectorMemoryStore`` per (store, provider), so its embedding-space cache is reused."""
    from tnsrag_db.indexes.vector import VectorMemoryStore

    key = (id(store), id(embedding))
    with _state_lock:
        cached = _vector_stores.get(key)
        # The entry holds the store and provider themselves, so their ids cannot be reused.
        if cached is None or cached[0] is not store or cached[1] is not embedding:
            cached = _vector_stores[key] = (store, embedding, VectorMemoryStore(store, embedding))
        return cached[2]


def _has_edges(store: Store) -> bool:
    with store.transaction() as conn:
        return bool(conn.execute(sa.text("SELECT EXISTS (SELECT 1 FROM edges WHERE corpus = :c)"),
                                 {"c": store.corpus}).scalar_one())


def _graph(store: Store) -> RAGStrategy:
    from tnsrag_db.indexes.graph import GraphStore
    from tnsrag_db.strategies.graph import GraphRAGStrategy

    cls = GraphRAGStrategy
    return cls(GRAPH_PROVIDER_NAME, GraphStore(store), None, cls.DEFAULT_MAX_DEPTH, cls.DEFAULT_DEPTH_DECAY,
               cls.DEFAULT_MAX_VISITED_NODES)


def _navigator(name: str | None) -> Any:
    from tnsrag_db.navigation import installed_navigators, load_navigator

    if name is None:
        installed = installed_navigators()
        if len(installed) > 1:
            raise ConfigurationError(f"{len(installed)} tree navigators are installed ({', '.join(installed)}); "
                                     "choose one with @retrieval(navigator=...)")
        name = installed[0] if installed else "lexical"
    return load_navigator(name)


def _expander(config: RetrievalConfig, store: Store) -> tuple[Any, Any]:
    from tnsrag_db.expansion import EXPANDER_ENTRY_POINT_GROUP, QueryExpansion, installed_expanders, load_expander

    mode = QueryExpansion.parse(config.expansion_mode)  # type: ignore[arg-type]
    name = config.expander
    if name is None:
        if mode is QueryExpansion.RM3:
            name = "rm3"
        else:
            installed = installed_expanders()
            if len(installed) != 1:
                raise (StrategyUnavailableError if not installed else ConfigurationError)(
                    f"expansion mode {mode.name} needs exactly one installed query expander in entry-point group "
                    f"{EXPANDER_ENTRY_POINT_GROUP!r} (found: {', '.join(installed) or 'none'}); "
                    "or name one with @retrieval(expander=...)")
            name = installed[0]
    return load_expander(name, store=store), mode


def build_strategy(mode: RetrievalStrategy, config: RetrievalConfig, store: Store,
                   embedding: ProcessEmbedding | None) -> RAGStrategy:
    """Compose ``mode`` over ``store`` as the spec's table says (``embedding`` for vector-backed modes).

    Raises :class:`StrategyUnavailableError` when the mode's modules are not installed.
    """
    try:
        if mode is RetrievalStrategy.KEYWORD:
            from tnsrag_db.indexes.bm25 import BM25Index
            from tnsrag_db.strategies.keyword import KeywordRAGStrategy

            return KeywordRAGStrategy(BM25Index(store))
        if mode is RetrievalStrategy.GRAPH:
            return _graph(store)
        if mode is RetrievalStrategy.REASONING:
            from tnsrag_db.indexes.hierarchy import HierarchyIndex
            from tnsrag_db.strategies.reasoning import ReasoningRAGStrategy

            assert config.navigator_model is not None  # checked by RetrievalConfig
            return ReasoningRAGStrategy(HierarchyIndex(store), _navigator(config.navigator), config.navigator_model)
        assert embedding is not None
        from tnsrag_db.strategies.vector import VectorRAGStrategy

        semantic = VectorRAGStrategy(_vector_store(store, embedding))
        if mode is RetrievalStrategy.SEMANTIC:
            return semantic
        if mode is RetrievalStrategy.HYBRID:
            from tnsrag_db.indexes.bm25 import BM25Index
            from tnsrag_db.strategies.hybrid import HybridRAGStrategy

            graph = None
            if _has_edges(store):
                try:
                    graph = _graph(store)
                except ImportError:  # the spec: a missing graph store keeps the two streams fused
                    graph = None
            return HybridRAGStrategy(BM25Index(store), _vector_store(store, embedding), graph)
        if mode is RetrievalStrategy.HIERARCHICAL:
            from tnsrag_db.indexes.hierarchy import HierarchyIndex
            from tnsrag_db.strategies.hierarchical import HierarchicalRAGStrategy

            return HierarchicalRAGStrategy(semantic, HierarchyIndex(store))
        if mode is RetrievalStrategy.TEMPORAL:
            from tnsrag_db.strategies.temporal import TemporalRAGStrategy

            index = _temporal_index(store)
            return TemporalRAGStrategy(semantic, index, max_future_skew=index.max_future_skew)
        if mode is RetrievalStrategy.MULTI_QUERY:
            from tnsrag_db.strategies.multi_query import MultiQueryRAGStrategy

            expander, expansion = _expander(config, store)
            assert config.expansion_model is not None  # RetrievalConfig.create requires it for MULTI_QUERY
            strategy: RAGStrategy = MultiQueryRAGStrategy(semantic, expander, expansion, config.expansion_model,
                                                          config.max_expansions)
            return strategy
    except ImportError as exc:
        raise _unavailable(mode, exc) from exc
    raise StrategyUnavailableError(f"unknown retrieval mode {mode!r}")  # pragma: no cover


def _validate_hierarchy(role: object, store: Store) -> None:
    sources, _ = collect_sources(_role_class(role))
    key = ("hierarchy", id(store.engine), store.schema, store.corpus, tuple(id(s) for s in sources))

    def work() -> IngestCounts:
        try:
            from tnsrag_db.indexes.hierarchy import HierarchyIndex
        except ImportError:  # reported by build_strategy
            return IngestCounts()
        HierarchyIndex(store).validate()
        return IngestCounts()

    _ensure(key, work)


def retrieve_for(role: object, config: RetrievalConfig, query: str,
                 filters: Mapping[str, str]) -> list[RetrievedDocument]:
    """Run ``config``'s retrieval for ``role``: ingest (once), compose, retrieve, de-duplicate, rerank.

    ``filters`` are the effective exact-match filters (reserved keys already removed);
    they reach SQL with the strategy's candidate query, before its top-K (top-N when
    reranking). Provider exceptions keep :class:`RetrievalError` types; anything else a
    provider raises becomes :class:`ExecutionError`.
    """
    store = resolve_store(role)
    mode = config.strategy
    # Every action of the role shares its ingestion: check for all of their modes.
    modes = _role_modes(_role_class(role)) | {mode}
    needs_vectors = mode in VECTOR_MODES
    embedding = get_process_embedding() if (needs_vectors or config.deduplicate) else None
    if needs_vectors:
        # Import first: a missing vector module must be "not available", not a failed ingestion.
        try:
            import tnsrag_db.indexes.vector  # noqa: F401
            import tnsrag_db.strategies.vector  # noqa: F401
        except ImportError as exc:
            raise _unavailable(mode, exc) from exc
        assert embedding is not None
        _ingest_vectors(role, store, embedding, modes)
    else:
        _ingest_entries(role, store, modes)
    if mode in HIERARCHY_MODES:
        _validate_hierarchy(role, store)
    strategy = build_strategy(mode, config, store, embedding)
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
    out = list(reranked)
    return out
