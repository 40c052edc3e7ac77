"""Ingestion of a role's knowledge sources, once per process and once across processes.

The first retrieval of a role in a process loads its sources and writes them
(content-hash upsert); later retrievals reuse that (:class:`Once`, the per-process
cache). Across processes the write happens under a PostgreSQL advisory lock keyed by
schema and corpus, and entries whose stored content hash already matches are
classified unchanged, so N processes starting together insert every entry exactly once.

The write enforces what the role's modes need (the modes of every ``@retrieval`` action
of the role class, since all of them share one ingestion): with a TEMPORAL action, a
timestamp more than the mode's ``max_future_skew`` (5 minutes) ahead of its clock (now,
UTC) raises :class:`TemporalValidationError` before anything is written; with a
HIERARCHICAL or REASONING action, missing parents and cycles are checked inside the
write's transaction, so a :class:`HierarchyError` leaves nothing written (entries nor
vectors).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from functools import lru_cache
from typing import TYPE_CHECKING

from tnsrag_db._counts import IngestCounts
from tnsrag_db._plugins import is_missing, reraise_interrupt, unavailable_unless_installed
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import content_hash, validate_batch
from tnsrag_db._strategies.compose import temporal_index
from tnsrag_db._types import MemoryEntry
from tnsrag_db.declarative._config import RetrievalStrategy, retrieval_config
from tnsrag_db.declarative._sources import KnowledgeSource, collect_sources

if TYPE_CHECKING:
    from tnsrag_db._indexes.hierarchy import HierarchyIndex
    from tnsrag_db._indexes.temporal import TemporalIndex
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.embeddings import ProcessEmbedding

__all__ = [
    "HIERARCHY_MODES",
    "VECTOR_MODES",
    "Once",
    "ingest_entries",
    "ingest_vectors",
    "lock_key",
    "mode_label",
    "role_class",
    "role_modes",
    "validate_hierarchy",
    "write_once",
]

#: Modes whose composition embeds with the process provider.
VECTOR_MODES = frozenset({RetrievalStrategy.SEMANTIC, RetrievalStrategy.HYBRID, RetrievalStrategy.MULTI_QUERY,
                          RetrievalStrategy.HIERARCHICAL, RetrievalStrategy.TEMPORAL})
#: Modes that need a valid stored hierarchy.
HIERARCHY_MODES = frozenset({RetrievalStrategy.HIERARCHICAL, RetrievalStrategy.REASONING})


def mode_label(mode: RetrievalStrategy) -> str:
    """How a "not available" error names ``mode``."""
    return f"retrieval mode {mode.name}"


def role_class(role: object) -> type:
    """The class of ``role`` (a role class or one of its instances)."""
    return role if isinstance(role, type) else type(role)


class Once:
    """Work done once per key in this process (thread-safe), its result kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[Hashable, IngestCounts] = {}
        self._locks: dict[Hashable, threading.Lock] = {}

    def ensure(self, key: Hashable, work: Callable[[], IngestCounts]) -> IngestCounts:
        """``work()``'s result for ``key``, running it on the first call only (later callers wait for it)."""
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            done = self._done.get(key)
            if done is None:
                done = self._done[key] = work()
            return done

    def clear(self) -> None:
        """Forget every result."""
        with self._lock:
            self._done.clear()
            self._locks.clear()


def lock_key(store: Store) -> str:
    """The name of the advisory lock that serialises the ingestion of ``store``'s corpus."""
    return f"tnsrag_db.declarative:{store.schema}:{store.corpus}"


def _load(sources: tuple[KnowledgeSource, ...]) -> list[MemoryEntry]:
    entries: list[MemoryEntry] = []
    for source in sources:
        entries.extend(source.entries())
    return validate_batch(entries)


def _all_stored(store: Store, wanted: dict[str, bytes], provider: str | None) -> bool:
    if store.content_hashes(list(wanted)) != wanted:
        return False
    if provider is None:
        return True
    from tnsrag_db._indexes.vector.spaces import count_with_vectors

    return count_with_vectors(store, provider, list(wanted)) == len(wanted)


def write_once(store: Store, entries: list[MemoryEntry], write: Callable[[list[MemoryEntry]], IngestCounts],
               provider: str | None = None) -> IngestCounts:
    """Write ``entries`` with ``write`` under the corpus's ingestion lock, unless all are stored already.

    ``provider`` (for vector-backed modes) also requires every entry to have a vector of
    that provider before the write is skipped.
    """
    if _all_stored(store, {e.id: content_hash(e) for e in entries}, provider):
        return IngestCounts(unchanged=len(entries))
    # A session-level lock (not a transaction's) so the writes below may use any pooled
    # connection and any number of transactions while it is held (an HNSW build among
    # them); the writes classify entries whose stored content hash matches as unchanged,
    # so a process that waited here re-inserts nothing.
    with store.session.autocommit() as lock_conn, store.session.session_lock(lock_conn, lock_key(store)):
        return write(entries)


@lru_cache(maxsize=256)
def role_modes(cls: type) -> frozenset[RetrievalStrategy]:
    """The modes of every ``@retrieval`` action of role class ``cls``, inherited ones
    included (an override in a subclass replaces its base's action).

    Cached per class: it runs on every retrieval, and decorators are applied once.
    """
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


class _Checks:
    """What a role's modes require of its ingested entries (see the module docstring)."""

    def __init__(self, store: Store, modes: frozenset[RetrievalStrategy]) -> None:
        self.temporal: TemporalIndex | None = None
        self.hierarchy: HierarchyIndex | None = None
        if RetrievalStrategy.TEMPORAL in modes:  # never write unchecked
            with unavailable_unless_installed(mode_label(RetrievalStrategy.TEMPORAL),
                                              ("tnsrag_db._indexes.temporal", "tnsrag_db._strategies.temporal")):
                self.temporal = temporal_index(store)
        hierarchical = sorted(modes & HIERARCHY_MODES, key=lambda m: m.name)
        if hierarchical:
            with unavailable_unless_installed(mode_label(hierarchical[0]), ("tnsrag_db._indexes.hierarchy",)):
                from tnsrag_db._indexes.hierarchy import HierarchyIndex
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


def ingest_entries(once: Once, role: object, store: Store, modes: frozenset[RetrievalStrategy]) -> IngestCounts:
    """Write the role's entries, checked for ``modes`` (once per process)."""
    sources, _ = collect_sources(role_class(role))
    if not sources:
        return IngestCounts()
    checks = _Checks(store, modes)
    key = ("entries", id(store.pool), store.schema, store.corpus, tuple(id(s) for s in sources), checks.key)
    # With a hierarchy mode the write goes through HierarchyIndex.add_all, which checks the
    # batch inside its transaction (nothing is written when the check fails).
    write: Callable[[list[MemoryEntry]], IngestCounts] = (
        store.add_all if checks.hierarchy is None else checks.hierarchy.add_all)
    return once.ensure(key, lambda: write_once(store, checks.load(sources), write))


def ingest_vectors(once: Once, role: object, store: Store, embedding: ProcessEmbedding,
                   vector_store: Callable[[], VectorMemoryStore],
                   modes: frozenset[RetrievalStrategy] | None = None) -> IngestCounts:
    """Write the role's entries with vectors of the process provider through ``vector_store()``
    (once per process), checked for ``modes`` (default: the role's)."""
    cls = role_class(role)
    sources, _ = collect_sources(cls)
    if not sources:
        return IngestCounts()
    checks = _Checks(store, role_modes(cls) if modes is None else modes)
    key = ("vectors", id(store.pool), store.schema, store.corpus, tuple(id(s) for s in sources),
           id(embedding), checks.key)

    def work() -> IngestCounts:
        vectors = vector_store()
        entries = checks.load(sources)
        hierarchy = checks.hierarchy

        def write(batch: list[MemoryEntry]) -> IngestCounts:
            if hierarchy is None:
                return vectors.add_all(batch)
            # Entries and vectors stay in VectorMemoryStore's one transaction; the hierarchy
            # check runs inside it, after the entries are written, so a failure rolls back both.
            ids = [e.id for e in batch]
            return vectors.add_all(batch, check=lambda conn: hierarchy.check_written(conn, ids))

        return write_once(store, entries, write, embedding.name)

    return once.ensure(key, work)


def validate_hierarchy(once: Once, role: object, store: Store) -> None:
    """Check the corpus's stored hierarchy once per process (a HIERARCHICAL or REASONING retrieval)."""
    sources, _ = collect_sources(role_class(role))
    key = ("hierarchy", id(store.pool), store.schema, store.corpus, tuple(id(s) for s in sources))

    def work() -> IngestCounts:
        try:
            from tnsrag_db._indexes.hierarchy import HierarchyIndex
        except ImportError as exc:
            reraise_interrupt(exc)
            if not is_missing(exc, ("tnsrag_db._indexes.hierarchy",)):
                raise
            return IngestCounts()  # not installed: the composition reports it
        HierarchyIndex(store).validate()
        return IngestCounts()

    once.ensure(key, work)
