"""``VectorMemoryStore``: entries with pgvector embeddings, searched by cosine similarity.

Storage. Vectors live in the narrow ``embeddings`` table (kept apart from the wide entry
rows so a 384-d vector stays inline instead of being TOASTed), keyed by corpus, embedding
space and entry. An embedding space is (corpus, provider name, dimension): a row of
``embedding_spaces`` created on first write, so several models can coexist in one corpus.
The HNSW index of a space is a partial index on the typed expression
``(embedding::vector(<dim>)) WHERE space_id = <id>`` named ``ix_embeddings_hnsw_<id>``.

Scores are cosine similarity in [-1, 1]; a zero vector (stored or query) scores 0, never
NaN (pgvector's ``<=>`` returns NaN for it, so the SQL maps NaN to 0).

How a search is answered (one statement, chosen at run time by PostgreSQL itself through
one-time filters on InitPlans, so Hybrid can embed it as a CTE without a separate SET):

* no HNSW index in the space: exact scan (the filter joined in before top-K);
* unfiltered, index present: HNSW with ``hnsw.ef_search = max(ef_search, k)`` and
  ``hnsw.iterative_scan = strict_order`` (set with ``set_config(..., true)`` inside the
  statement, before the index scan starts). Approximate: recall@10 ≈ 0.97-0.99 at the
  default ``ef_search`` of 100 on the benchmark corpus;
* filtered, index present: the statement first collects the matching entry ids, stopping
  at ``exact_threshold + 1`` (through the entries indexes). At most ``exact_threshold``
  matches: exact scan of exactly those ids (recall 1.0). More: HNSW with strict-order
  iterative scan and a larger ``ef_search`` (``max(ef_search, 2 k, 200)``); when that
  returns fewer than ``k`` rows (``hnsw.max_scan_tuples`` reached, or zero vectors could
  belong in the result) the exact scan runs instead. A filtered query therefore always
  returns min(k, entries that match and score ≥ min_score) rows in score order.

``min_score`` is applied after the top-K by distance, which gives the same set as
filtering first (the order is by score) without letting an iterative scan run on past
the last qualifying row.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db.embeddings import EmbeddingFunction, ValidatingEmbedding
from tnsrag_db.errors import (
    ConfigurationError,
    DatabaseError,
    EmbeddingValidationError,
    IngestInterrupted,
    InvalidEntryError,
    TnsragError,
    ValidationError,
)
from tnsrag_db.indexes.hnsw_builds import defer_build, may_build_indexes
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.store.schema import hnsw_index_name
from tnsrag_db.store.store import IngestCounts, Store, WriteReport, validate_batch
from tnsrag_db.strategies.explain import CosineExplanation, SearchPlan
from tnsrag_db.types import MAX_CANDIDATES, MemoryEntry, is_unicode_text, validate_filters

__all__ = [
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_INDEX_THRESHOLD",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "IndexProgress",
    "IngestProgress",
    "VectorMemoryStore",
]

#: Default ``hnsw.ef_search`` of unfiltered queries (recall@10 ≈ 0.97-0.99 on the 100k benchmark corpus).
DEFAULT_EF_SEARCH = 100
#: Seconds a query trusts its cached "no HNSW index yet" state of a space.
SPACE_RECHECK_SECONDS = 5.0
#: Default number of matching entries up to which a filtered query is answered exactly.
#: Exact through the filter costs ≈ 5 µs per match (random heap reads of the vectors;
#: 1,000 matches ≈ 5 ms), HNSW with iterative scan about k / selectivity graph visits,
#: so below a few thousand matches exact wins on recall (1.0) at a similar cost.
DEFAULT_EXACT_THRESHOLD = 5_000
#: Default size of a space (number of vectors) at which ``add_all`` builds its HNSW index.
DEFAULT_INDEX_THRESHOLD = 10_000
#: HNSW build parameters. ``ef_construction`` is twice pgvector's default: with 64, graphs
#: of clustered embeddings left whole clusters unreachable (recall@10 of 0 for some
#: queries at any ef_search); 128 removed them for ≈ 1.5x the build time.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128

#: ``progress(phase, blocks_done, blocks_total)`` of an HNSW build (see :meth:`VectorMemoryStore.build_index`).
IndexProgress = Callable[[str, int, int], None]
#: ``progress(phase, done, total)`` of :meth:`VectorMemoryStore.ingest`: phase ``"read"``,
#: ``"embed"``, ``"write"`` or ``"index"``; ``total`` None when the input has no length.
IngestProgress = Callable[[str, int, "int | None"], None]
_R = TypeVar("_R")

_MAX_EF_SEARCH = 1000  # pgvector's upper bound
_FILTERED_MIN_EF = 200
_MAX_SCAN_TUPLES = 20_000
_MAX_MAINTENANCE_MEM_MB = 2048
# The score expression maps pgvector's NaN (a zero vector on either side) to 0 and clamps
# float rounding into [-1, 1].
# Binary COPY header: signature, flags, header-extension length.
#: The stage of a write under row-level security (see VectorMemoryStore._copy_vectors).
_VECTOR_STAGE_SQL = ("CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_vectors (corpus text NOT NULL, space_id bigint NOT NULL, "
                     "entry_id text NOT NULL, embedding vector NOT NULL) ON COMMIT DELETE ROWS")
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_SCORE = "CASE WHEN ({d}) = 'NaN'::float8 THEN 0::float8 ELSE greatest(-1::float8, least(1::float8, 1 - ({d}))) END"


#: A space row's id and index name (alias ``s``; binds ``:schema``). The name is the recorded
#: one, else that of a valid index the catalog holds under the space's index name: a build
#: whose process died after PostgreSQL finished the index, but before it was recorded,
#: left the space searched by exact scans until someone built it again.
_SPACE_COLUMNS = (
    "s.space_id, coalesce(s.index_name, (SELECT 'ix_embeddings_hnsw_' || s.space_id::text FROM pg_index i "
    "WHERE i.indexrelid = to_regclass(:schema || '.ix_embeddings_hnsw_' || s.space_id::text) AND i.indisvalid)) "
    "AS index_name"
)


@dataclass(frozen=True, slots=True)
class _Space:
    space_id: int
    dimension: int
    index_name: str | None


def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix.isidentifier() or not prefix.isascii() or len(prefix) > 20:
        raise ConfigurationError(f"prefix must be a short ASCII identifier, got {prefix!r}")
    return prefix.lower()


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_CANDIDATES:
        raise ValidationError(f"k must be an int from 1 to {MAX_CANDIDATES}, got {k!r}")
    return k


def _check_min_score(min_score: object) -> float:
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not math.isfinite(min_score):
        raise ValidationError(f"min_score must be a finite number, got {min_score!r}")
    return float(min_score)


class _Rows:
    """An embedding 'provider' that returns precomputed rows, so they pass the same wrapper rules."""

    def __init__(self, rows: Sequence[Sequence[float]] | npt.NDArray[Any]) -> None:
        self._rows = rows

    def __call__(self, text: str) -> Sequence[float]:  # pragma: no cover - only embed_batch is used
        raise NotImplementedError

    def embed_batch(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return self._rows  # type: ignore[return-value]  # an ndarray of rows serves as a sequence


class _Stopped(Exception):
    """Raised inside an ingest's write once a stop was requested (rolls the batch back)."""


def _check_batch_size(batch_size: object) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValidationError(f"batch_size must be an int >= 1, got {batch_size!r}")


class _Job(Generic[_R]):
    """``fn(arg)`` on a daemon worker thread; :meth:`wait` returns its result or raises its error."""

    def __init__(self, fn: Callable[[list[MemoryEntry]], _R], arg: list[MemoryEntry]) -> None:
        self._done = threading.Event()
        self._result: _R | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._result = fn(arg)
            except BaseException as exc:  # handed to the waiting thread
                self._error = exc
            finally:
                self._done.set()

        threading.Thread(target=run, name="tnsrag-ingest-embed", daemon=True).start()

    def wait(self, stop: threading.Event) -> _R:
        """The result, polling ``stop`` (raises :class:`_Stopped` once it is set)."""
        while not self._done.wait(0.05):
            if stop.is_set():
                raise _Stopped
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # set when no error


@contextlib.contextmanager
def _deferred_sigint(stop: threading.Event) -> Iterator[None]:
    """While inside, the first SIGINT sets ``stop`` instead of raising KeyboardInterrupt (the
    second raises it). Only on the main thread with Python's default handler in place."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class VectorMemoryStore:
    """A vector view over one :class:`Store`: add entries with embeddings, search by cosine.

    ``embedding`` is wrapped in :class:`ValidatingEmbedding` (unless it already is one
    with the same name); ``name`` overrides the provider name that keys the space.
    ``ef_search`` (default 100, 1 to 1000) is the HNSW candidate list of unfiltered
    queries. ``exact_threshold`` (default 5,000) is the number of matching entries up to
    which filtered queries scan exactly. ``index_threshold`` (default 10,000; None turns
    automatic builds off) is the space size at which :meth:`add_all` builds the HNSW
    index at the end of a write (see :meth:`build_index`). No I/O happens here.

    Raises :class:`ConfigurationError` for a bad option.
    """

    def __init__(self, store: Store, embedding: EmbeddingFunction | Callable[[str], object], *,
                 name: str | None = None, ef_search: int = DEFAULT_EF_SEARCH,
                 exact_threshold: int = DEFAULT_EXACT_THRESHOLD,
                 index_threshold: int | None = DEFAULT_INDEX_THRESHOLD) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"store must be a Store, got {type(store).__name__}")
        for option, value, low, high in (("ef_search", ef_search, 1, _MAX_EF_SEARCH),
                                         ("exact_threshold", exact_threshold, 0, 10**9)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigurationError(f"{option} must be an int from {low} to {high}, got {value!r}")
        if index_threshold is not None and (isinstance(index_threshold, bool) or not isinstance(index_threshold, int)
                                            or index_threshold < 1):
            raise ConfigurationError(f"index_threshold must be None or an int >= 1, got {index_threshold!r}")
        if isinstance(embedding, ValidatingEmbedding) and (name is None or name == embedding.name):
            self._embedding = embedding
        else:
            self._embedding = ValidatingEmbedding(embedding, name=name)
        self._store = store
        self._ef_search = ef_search
        self._exact_threshold = exact_threshold
        self._index_threshold = index_threshold
        self._lock = threading.Lock()
        self._dimension: int | None = self._embedding.dimension
        self._spaces: dict[int, _Space] = {}
        self._space_checked: dict[int, float] = {}

    # -- properties -----------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The corpus this view writes to and searches."""
        return self._store

    @property
    def embedding(self) -> ValidatingEmbedding:
        """The validating embedding function (its ``name`` keys the embedding space)."""
        return self._embedding

    @property
    def ef_search(self) -> int:
        """``hnsw.ef_search`` of unfiltered queries."""
        return self._ef_search

    @property
    def exact_threshold(self) -> int:
        """Matching entries up to which a filtered query scans exactly."""
        return self._exact_threshold

    def __repr__(self) -> str:
        return f"VectorMemoryStore(corpus={self._store.corpus!r}, provider={self._embedding.name!r})"

    # -- vectors --------------------------------------------------------------------
    def _fix_dimension(self, dim: int) -> None:
        with self._lock:
            if self._dimension is None:
                self._dimension = dim
            expected = self._dimension
        if dim != expected:
            raise EmbeddingValidationError(f"embedding provider {self._embedding.name}: embedding has dimension "
                                           f"{dim}, expected {expected} (fixed by the first vector)")

    def _validate_rows(self, rows: Sequence[Sequence[float]] | npt.NDArray[Any],
                       count: int, *, fix: bool = True) -> npt.NDArray[np.float32]:
        """Validate precomputed vectors by the wrapper's rules; returns a (count, dim) float32 array.

        ``fix=False`` (query vectors) checks against a known dimension without fixing an
        unknown one: a wrong-dimension query vector used to fix the dimension of a fresh
        view, and the next correct write failed."""
        if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
            raise EmbeddingValidationError(f"embeddings must be a sequence of vectors, got {type(rows).__name__}")
        if len(rows) != count:
            raise EmbeddingValidationError(f"got {len(rows)} embeddings for {count} entries")
        if count == 0:
            return np.zeros((0, self._dimension or 1), dtype=np.float32)
        checker = ValidatingEmbedding(_Rows(rows), name=self._embedding.name, dimension=self._dimension,
                                      max_dimension=self._embedding.max_dimension)
        vectors = checker.embed_batch([""] * count)
        if fix:
            self._fix_dimension(int(vectors[0].shape[0]))
        return np.vstack(vectors)

    def _embed(self, texts: Sequence[str], batch_size: int,
               progress: Callable[[int], None] | None = None, done: int = 0) -> npt.NDArray[np.float32]:
        out: list[npt.NDArray[np.float32]] = []
        for start in range(0, len(texts), batch_size):
            for vec in self._embedding.embed_batch(texts[start:start + batch_size]):
                self._fix_dimension(int(vec.shape[0]))
                out.append(vec)
            if progress is not None:
                progress(done + min(start + batch_size, len(texts)))
        return np.vstack(out) if out else np.zeros((0, self._dimension or 1), dtype=np.float32)

    def embed_query(self, query: str) -> npt.NDArray[np.float32]:
        """The validated embedding of ``query`` (its dimension must match the stored vectors')."""
        vec = self._embedding(query)
        self._fix_dimension(int(vec.shape[0]))
        return vec

    # -- spaces ---------------------------------------------------------------------
    def _space_params(self, dimension: int) -> dict[str, Any]:
        return {"c": self._store.corpus, "p": self._embedding.name, "d": dimension, "schema": self._store.schema}

    def _ensure_space(self, conn: Connection, dimension: int) -> _Space:
        """The space row for ``dimension``, created if missing (race-safe). Needs the corpus row."""
        params = self._space_params(dimension)
        select = sa.text(f"SELECT {_SPACE_COLUMNS} FROM embedding_spaces s WHERE corpus = :c AND provider = :p "
                         "AND dimension = :d")
        # Select first: an INSERT ... ON CONFLICT would burn an identity value on every write.
        row = conn.execute(select, params).one_or_none()
        if row is None:
            row = conn.execute(sa.text(
                "INSERT INTO embedding_spaces (corpus, provider, dimension) VALUES (:c, :p, :d) "
                "ON CONFLICT (corpus, provider, dimension) DO NOTHING RETURNING space_id, index_name"),
                params).one_or_none()
            if row is None:  # a concurrent writer created it; a new statement sees its committed row
                row = conn.execute(select, params).one()
        space = _Space(int(row.space_id), dimension, row.index_name)
        self._spaces[dimension] = space
        return space

    def _lookup_space(self, conn: Connection, dimension: int) -> _Space | None:
        cached = self._spaces.get(dimension)
        if cached is not None and cached.index_name is not None:
            return cached
        # Unindexed (or unknown) spaces are re-read: another process may have built the index.
        row = conn.execute(sa.text(
            f"SELECT {_SPACE_COLUMNS} FROM embedding_spaces s WHERE corpus = :c AND provider = :p "
            "AND dimension = :d"), self._space_params(dimension)).one_or_none()
        if row is None:
            self._spaces.pop(dimension, None)
            return None
        space = _Space(int(row.space_id), dimension, row.index_name)
        self._spaces[dimension] = space
        return space

    def _known_dimension(self, conn: Connection) -> int | None:
        if self._dimension is not None:
            return self._dimension
        dims = conn.execute(sa.text(
            "SELECT dimension FROM embedding_spaces WHERE corpus = :c AND provider = :p"),
            {"c": self._store.corpus, "p": self._embedding.name}).scalars().all()
        return int(dims[0]) if len(dims) == 1 else None

    def count(self) -> int:
        """Number of vectors stored in this view's space (0 before the first write)."""
        with self._store.transaction() as conn:
            dim = self._known_dimension(conn)
            space = None if dim is None else self._lookup_space(conn, dim)
            if space is None:
                return 0
            return int(conn.execute(sa.text(
                "SELECT count(*) FROM embeddings WHERE corpus = :c AND space_id = :s"),
                {"c": self._store.corpus, "s": space.space_id}).scalar_one())

    # -- writes ---------------------------------------------------------------------
    def add(self, entry: MemoryEntry) -> IngestCounts:
        """Insert or update one entry with its embedding. Returns its classification."""
        return self.add_all([entry])

    def add_all(self, entries: Iterable[MemoryEntry], *,
                embeddings: Sequence[Sequence[float]] | npt.NDArray[Any] | None = None,
                batch_size: int = 256, progress: Callable[[int], None] | None = None,
                check: Callable[[Connection], None] | None = None,
                index_progress: IndexProgress | None = None) -> IngestCounts:
        """Write entries and their embeddings in one transaction; returns the entry counts.

        ``embeddings`` (optional) are precomputed vectors, row i for entry i, validated by
        the same rules as the embedding function's output. Without them, the texts of new
        entries, entries whose text changed and entries lacking a vector in this space are
        embedded with ``embed_batch``, ``batch_size`` (default 256) texts per call, before
        the transaction opens. Everything is validated before anything is written: one bad
        entry (:class:`InvalidEntryError`) or vector (:class:`EmbeddingValidationError`)
        rejects the whole call. Vectors are written for new entries, entries whose text
        changed and entries lacking one in this space; an unchanged entry keeps its stored
        vector (a precomputed row for it is validated, then ignored). ``progress`` is called with the number of entries whose
        vectors are ready, then with the total once written. Builds the space's HNSW index
        afterwards when the space reaches ``index_threshold`` vectors.

        ``check`` (optional) is called with the write's connection inside its transaction,
        after the entries are written and before their vectors and the commit; an
        exception it raises rolls the whole write back (no entry, no vector) and
        propagates. It runs again if the write is retried after a deadlock.
        ``index_progress`` is handed to :meth:`build_index` when this call builds the index.
        """
        _check_batch_size(batch_size)
        batch = validate_batch(entries)
        if not batch:
            if embeddings is not None and len(embeddings) != 0:
                raise EmbeddingValidationError(f"got {len(embeddings)} embeddings for 0 entries")
            return IngestCounts()
        vectors: dict[str, npt.NDArray[np.float32]] = {}
        if embeddings is not None:
            matrix = self._validate_rows(embeddings, len(batch))
            vectors = {e.id: matrix[i] for i, e in enumerate(batch)}
            if progress is not None:
                progress(len(batch))
        else:
            vectors = self._prepare(batch, batch_size, progress)
        report, space = self._write_batch(batch, vectors, batch_size, check=check)
        if space is None:
            return report.counts
        if progress is not None:
            progress(len(batch))
        self._maybe_build_index(space, index_progress)
        return report.counts

    def ingest(self, entries: Iterable[MemoryEntry], *, batch_size: int = 256,
               progress: IngestProgress | None = None,
               index_progress: IndexProgress | None = None) -> IngestCounts:
        """Write a stream of entries batch by batch, embedding the next batch while the previous one is written.

        Unlike :meth:`add_all` (one transaction), every batch of ``batch_size`` entries
        (default 256) commits on its own, and its embedding (on a worker thread: new
        entries, changed texts and entries lacking a vector in this space, as in
        :meth:`add_all`) overlaps the write of the batch before it, so the end-to-end rate
        approaches the embedding function's own. Entries are read from ``entries``
        lazily, one batch ahead; each batch is validated before it is written, and an id
        seen in an earlier batch is an :class:`InvalidEntryError`. Re-running with the
        same entries is idempotent: unchanged entries are counted as such, not rewritten,
        nor re-embedded. The space's HNSW index is built at the end once the space holds
        ``index_threshold`` vectors.

        ``progress(phase, done, total)`` reports ``"read"`` (entries taken from
        ``entries``), ``"embed"`` (entries whose vectors are ready, unchanged ones
        included; called from the worker thread), ``"write"`` (entries committed) and
        ``"index"`` (heap blocks of the HNSW build); ``total`` is the number of entries
        when ``entries`` has a length (blocks for ``"index"``), else None.
        ``index_progress`` also receives PostgreSQL's own build phases (see :meth:`build_index`).

        Stopping: when called on the main thread with Python's default SIGINT handler in
        place, Ctrl-C (SIGINT) stops the ingest after the statement in progress (a second
        one interrupts at once). The open batch is rolled back and
        :class:`IngestInterrupted` is raised with the counts that were committed; so is
        it, chained to the cause, for any library error met on the way (a bad entry, a
        bad vector, a database error; ``committed`` is empty when it was in the first
        batch). A batch still being embedded is abandoned (its worker thread finishes on
        its own). A bad ``batch_size`` raises :class:`ValidationError` before anything.
        """
        _check_batch_size(batch_size)
        total = len(entries) if isinstance(entries, Sized) else None
        stop = threading.Event()
        embed_lock = threading.Lock()
        committed = IngestCounts()
        stream = iter(entries)
        seen: dict[str, int] = {}
        counters = {"read": 0, "embed": 0}

        def report(phase: str, done: int, of: int | None = total) -> None:
            if progress is not None:
                progress(phase, done, of)

        def read_batch() -> list[MemoryEntry]:
            start = counters["read"]
            raw = list(itertools.islice(stream, batch_size))
            try:
                batch = validate_batch(raw)
            except InvalidEntryError as exc:
                where = None if exc.index is None else start + exc.index
                raise InvalidEntryError(str(exc).replace(f"batch item {exc.index} ", f"entry {where} ")
                                        if where is not None else str(exc), entry_id=exc.entry_id,
                                        index=where) from None
            for offset, entry in enumerate(batch):
                first = seen.setdefault(entry.id, start + offset)
                if first != start + offset:
                    raise InvalidEntryError(f"entry {start + offset}: duplicate id {entry.id!r} "
                                            f"(first at entry {first})", entry_id=entry.id, index=start + offset)
            counters["read"] = start + len(batch)
            if batch:
                report("read", counters["read"])
            return batch

        def prepare(batch: list[MemoryEntry]) -> dict[str, npt.NDArray[np.float32]]:
            base = counters["embed"]

            def embedded(done: int) -> None:
                report("embed", base + done)

            with embed_lock:
                vectors = self._prepare(batch, batch_size, embedded)
            counters["embed"] = base + len(batch)
            report("embed", counters["embed"])
            return vectors

        space: _Space | None = None
        try:
            with _deferred_sigint(stop):
                batch = read_batch()
                job = _Job(prepare, batch) if batch else None
                while job is not None:
                    vectors = job.wait(stop)
                    following = read_batch()
                    next_job = _Job(prepare, following) if following else None
                    written, batch_space = self._write_batch(batch, vectors, batch_size, stop=stop,
                                                             embed_lock=embed_lock)
                    space = batch_space or space
                    committed = committed + written.counts
                    report("write", committed.total)
                    batch, job = following, next_job
            if space is not None:
                def index_advance(phase: str, done: int, of: int) -> None:
                    report("index", done, of)
                    if index_progress is not None:
                        index_progress(phase, done, of)

                self._maybe_build_index(space, index_advance)
        except (_Stopped, KeyboardInterrupt):
            raise IngestInterrupted(
                f"interrupted: {committed.total} entries committed, the batch in progress was rolled back",
                committed=committed) from None
        except TnsragError as exc:
            raise IngestInterrupted(
                f"{exc} ({committed.total} entries committed before, the batch in progress was rolled back)",
                committed=committed) from exc
        return committed

    def _prepare(self, batch: Sequence[MemoryEntry], batch_size: int,
                 progress: Callable[[int], None] | None = None) -> dict[str, npt.NDArray[np.float32]]:
        """The vectors ``batch`` needs before its write, by id (a pre-read finds what is stored)."""
        todo = self._needing_vectors(batch)
        done = len(batch) - len(todo)
        if todo:
            matrix = self._embed([e.content for e in todo], batch_size, progress, done)
            return {e.id: matrix[i] for i, e in enumerate(todo)}
        if progress is not None:
            progress(len(batch))
        return {}

    def _write_batch(self, batch: Sequence[MemoryEntry], vectors: dict[str, npt.NDArray[np.float32]],
                     batch_size: int, *, check: Callable[[Connection], None] | None = None,
                     stop: threading.Event | None = None,
                     embed_lock: threading.Lock | None = None) -> tuple[WriteReport, _Space | None]:
        """Write validated ``batch`` with ``vectors`` (embedding what a concurrent writer changed
        meanwhile) in one transaction; ``stop``, once set, aborts it after the current statement."""
        by_id = {e.id: e for e in batch}

        def stop_check(*_: object) -> None:
            if stop is not None and stop.is_set():
                raise _Stopped

        def write(conn: Connection) -> tuple[WriteReport, _Space | None]:
            if stop is not None:
                sa.event.listen(conn, "after_cursor_execute", stop_check)
            try:
                return write_in(conn)
            finally:
                if stop is not None:
                    sa.event.remove(conn, "after_cursor_execute", stop_check)

        def write_in(conn: Connection) -> tuple[WriteReport, _Space | None]:
            report = self._store.write_entries(conn, batch)
            if check is not None:
                check(conn)
            if self._dimension is None:
                return report, None  # nothing embedded and no dimension known: nothing to store
            space = self._ensure_space(conn, self._dimension)
            lacking = conn.execute(sa.text(
                # OFFSET 0: one index probe per id, never an anti-join over the whole space.
                "SELECT i.id FROM unnest(CAST(:ids AS text[])) AS i(id) WHERE NOT EXISTS (SELECT 1 FROM "
                "embeddings x WHERE x.corpus = :c AND x.space_id = :s AND x.entry_id = i.id OFFSET 0)"),
                {"c": self._store.corpus, "s": space.space_id, "ids": list(by_id)}).scalars().all()
            missing = [i for i in lacking if i not in vectors]
            if missing:
                # A concurrent writer changed these texts after our pre-read: embed them now.
                with embed_lock if embed_lock is not None else contextlib.nullcontext():
                    extra = self._embed([by_id[i].content for i in missing], batch_size)
                vectors.update({i: extra[n] for n, i in enumerate(missing)})
            if lacking:
                self._copy_vectors(conn, space.space_id, lacking, np.vstack([vectors[i] for i in lacking]))
            stop_check()
            return report, space

        return self._store.write_transaction(write, analyze=("embeddings",))

    def _needing_vectors(self, batch: Sequence[MemoryEntry]) -> list[MemoryEntry]:
        """Entries that are new, changed their text, or lack a vector in this space (a pre-read)."""
        if self._dimension is None:
            # The space is keyed by the dimension the provider produces: learn it first.
            self.embed_query(batch[0].content)
        assert self._dimension is not None
        with self._store.transaction() as conn:
            space = self._lookup_space(conn, self._dimension)
            rows = conn.execute(sa.text(
                "SELECT e.id, md5(e.content) AS h, "
                + ("EXISTS (SELECT 1 FROM embeddings x WHERE x.corpus = e.corpus AND x.space_id = :s "
                   "AND x.entry_id = e.id)" if space is not None else "false")
                + " AS has_vec FROM entries e WHERE e.corpus = :c AND e.id = ANY(:ids)"),
                {"c": self._store.corpus, "s": space.space_id if space else 0,
                 "ids": [e.id for e in batch]}).all()
        stored = {r.id: (r.h, r.has_vec) for r in rows}
        todo = []
        for e in batch:
            hit = stored.get(e.id)
            if hit is None or not hit[1] or hit[0] != hashlib.md5(e.content.encode()).hexdigest():
                todo.append(e)
        return todo

    def _copy_vectors(self, conn: Connection, space_id: int, ids: Sequence[str],
                      matrix: npt.NDArray[np.float32]) -> None:
        """COPY rows ``(corpus, space_id, ids[i], matrix[i])`` into ``embeddings`` in binary form.

        The binary stream is assembled here (pgvector's wire format: int16 dim, int16 0,
        big-endian float4s) from one big-endian copy of the whole matrix: ≈ 1 µs a row,
        against ≈ 60 µs through ``write_row`` and more for the text form.
        """
        if not ids:
            return
        raw = conn.connection.driver_connection
        assert raw is not None
        dim = int(matrix.shape[1])
        corpus = self._store.corpus.encode()
        big = np.ascontiguousarray(matrix, dtype=">f4")
        head = struct.pack(">hi", 4, len(corpus)) + corpus + struct.pack(">iq", 8, space_id)
        vec_head = struct.pack(">ihh", 4 + 4 * dim, dim, 0)
        # PostgreSQL refuses COPY FROM into a table whose row-level security applies to the
        # session (a tenant role, see tnsrag_db.tenancy): stage the rows, then one INSERT,
        # which the policy checks.
        staged = bool(conn.execute(sa.text("SELECT row_security_active('embeddings')")).scalar_one())
        if staged:
            conn.execute(sa.text(_VECTOR_STAGE_SQL))
        target = "tnsrag_stage_vectors" if staged else "embeddings"
        with raw.cursor() as cur, cur.copy(
                f"COPY {target} (corpus, space_id, entry_id, embedding) FROM STDIN (FORMAT BINARY)") as copy:
            parts: list[bytes] = [_COPY_SIGNATURE]
            for i, entry_id in enumerate(ids):
                key = entry_id.encode()
                parts.append(head + struct.pack(">i", len(key)) + key + vec_head)
                parts.append(big[i].tobytes())
                if len(parts) >= 8192:
                    copy.write(b"".join(parts))
                    parts = []
            parts.append(b"\xff\xff")
            copy.write(b"".join(parts))
        if staged:
            conn.execute(sa.text("INSERT INTO embeddings (corpus, space_id, entry_id, embedding) "
                                 "SELECT :c, space_id, entry_id, embedding FROM tnsrag_stage_vectors"),
                         {"c": self._store.corpus})

    # -- index ----------------------------------------------------------------------
    def _maybe_build_index(self, space: _Space, progress: IndexProgress | None = None) -> None:
        """Build the space's index once it is due, after the write committed: a role that may
        not build it (the application role owns no table), or a build that fails, leaves the
        committed write standing and warns (:class:`IndexBuildDeferred`) instead of raising."""
        if self._index_threshold is None or space.index_name is not None:
            return
        with self._store.transaction() as conn:
            n = conn.execute(sa.text(
                "SELECT count(*) FROM (SELECT 1 FROM embeddings WHERE corpus = :c AND space_id = :s LIMIT :t) s"),
                {"c": self._store.corpus, "s": space.space_id, "t": self._index_threshold}).scalar_one()
            allowed = n >= self._index_threshold and may_build_indexes(conn)
        if n < self._index_threshold:
            return
        if not allowed:
            defer_build(self._store, space.space_id, n, "this database role does not own the embeddings table "
                        "(or the session is read-only)")
            return
        try:
            self.build_index(progress=progress)
        except DatabaseError as exc:
            defer_build(self._store, space.space_id, n, f"the build failed ({type(exc).__name__}: {exc})")

    def build_index(self, *, progress: IndexProgress | None = None, poll_seconds: float = 0.5) -> str | None:
        """Create this space's HNSW index (cosine, m 16, ef_construction 128) if it does not exist.

        ``progress`` (optional) is called in the calling thread every ``poll_seconds`` while
        the index builds, with PostgreSQL's progress report for it (phase, blocks done,
        blocks total of that phase: "building index: loading tuples" counts heap blocks,
        the validation and waiting phases of a concurrent build follow), and once more
        with ``("done", total, total)`` when it is built, total being the largest count
        seen. The build then runs on a worker thread and its own connection; its errors
        are raised here.

        Returns the index name, or None when the space has no vectors yet. Idempotent and
        safe when several processes race: builds on one ``embeddings`` table take turns
        (a session-level advisory lock, waited for by polling) and a later one finds the
        index built. The build is ``CREATE INDEX CONCURRENTLY`` with
        ``maintenance_work_mem`` raised to hold the graph (up to 2 GB) so it stays in
        memory, and PostgreSQL's parallel maintenance workers. It does not block writes:
        every corpus and space of the shared ``embeddings`` table keeps taking vectors
        while it runs (≈ 20 s per 100k 384-d vectors here), and vectors written meanwhile
        are in the index when it is done. Like any concurrent build it waits for the
        transactions that hold an older snapshot (a long statement, or a REPEATABLE READ or
        SERIALIZABLE transaction) and for open transactions that wrote to the table.
        An interrupted build leaves an invalid index, which the next call replaces.
        :meth:`add_all` calls this automatically once a space holds ``index_threshold``
        vectors.
        """
        if progress is None:
            return self._build_index(None)
        if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)) or not poll_seconds > 0:
            raise ValidationError(f"poll_seconds must be a positive number, got {poll_seconds!r}")
        state: dict[str, Any] = {}
        started = threading.Event()

        def on_pid(pid: int) -> None:
            state["pid"] = pid
            started.set()

        def run() -> None:
            try:
                state["name"] = self._build_index(on_pid)
            except BaseException as exc:  # handed to the calling thread below
                state["error"] = exc
            finally:
                started.set()

        worker = threading.Thread(target=run, name="tnsrag-hnsw-build", daemon=True)
        worker.start()
        started.wait()
        # The largest block count seen: the later phases of a concurrent build (validation,
        # waits) report their own counts, often zero.
        total = 0
        while worker.is_alive():
            worker.join(poll_seconds)
            if worker.is_alive() and "pid" in state:
                rows = self._store.read(
                    "SELECT phase, blocks_done, blocks_total FROM pg_stat_progress_create_index WHERE pid = :pid",
                    {"pid": state["pid"]})
                if rows:
                    done, of = int(rows[0].blocks_done or 0), int(rows[0].blocks_total or 0)
                    total = max(total, done, of)
                    progress(str(rows[0].phase), done, of)
        if "error" in state:
            raise state["error"]
        if "pid" in state:  # a build ran (not only a check that found the index)
            progress("done", total, total)
        name: str | None = state.get("name")
        return name

    def _index_state(self, conn: Connection, name: str) -> bool | None:
        """None when index ``name`` does not exist in the store's schema, else whether it is valid."""
        valid: bool | None = conn.execute(sa.text(
            "SELECT i.indisvalid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_index i ON i.indexrelid = c.oid WHERE n.nspname = :schema AND c.relname = :name"),
            {"schema": self._store.schema, "name": name}).scalar_one_or_none()
        return valid

    def _build_index(self, on_pid: Callable[[int], None] | None) -> str | None:
        corpus = self._store.corpus
        with self._store.transaction() as conn:
            dim = self._known_dimension(conn)
            space = None if dim is None else self._lookup_space(conn, dim)
        if space is None:
            return None
        name = hnsw_index_name(space.space_id)
        with self._store.autocommit() as conn, self._store.hnsw_build_lock(conn):
            if conn.execute(sa.text("SELECT 1 FROM embedding_spaces WHERE corpus = :c AND space_id = :s"),
                            {"c": corpus, "s": space.space_id}).first() is None:
                return None  # the corpus was dropped meanwhile
            if not self._index_state(conn, name):
                n = conn.execute(sa.text("SELECT count(*) FROM embeddings WHERE corpus = :c AND space_id = :s"),
                                 {"c": corpus, "s": space.space_id}).scalar_one()
                # Graph + vectors: dim * 4 bytes plus ≈ 2 m neighbour slots of ~10 bytes per element.
                need_mb = int(n * (space.dimension * 4 + 2 * HNSW_M * 12 + 64) * 1.3 / 2**20) + 64
                current_mb = int(conn.execute(sa.text(
                    "SELECT setting::bigint * (CASE unit WHEN 'kB' THEN 1024 WHEN '8kB' THEN 8192 ELSE 1 END) "
                    "/ 1048576 FROM pg_settings WHERE name = 'maintenance_work_mem'")).scalar_one())
                mem = max(current_mb, min(need_mb, _MAX_MAINTENANCE_MEM_MB))
                # Session settings on an autocommit connection: reset below, and on an error
                # the connection is closed rather than pooled (Store.autocommit).
                conn.execute(sa.text(f"SET maintenance_work_mem = '{int(mem)}MB'"))
                conn.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))  # an invalid leftover
                if on_pid is not None:
                    on_pid(int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()))
                # Index name, dimension and space id are integers from the database: safe to format in.
                conn.execute(sa.text(
                    f"CREATE INDEX CONCURRENTLY {name} ON embeddings USING hnsw "
                    f"((embedding::vector({space.dimension})) vector_cosine_ops) "
                    f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE space_id = {space.space_id}"))
                conn.execute(sa.text("RESET maintenance_work_mem"))
                # Fresh statistics, so the planner sizes this space right (a bulk load leaves
                # the shared table's statistics describing other corpora). Still under the
                # build lock, and never waiting for a table lock: an ANALYZE queued behind
                # the next build could deadlock with it (SKIP_LOCKED leaves the table to
                # whoever holds it).
                conn.execute(sa.text("ANALYZE (SKIP_LOCKED) embeddings"))
            conn.execute(sa.text(
                "UPDATE embedding_spaces SET index_name = :name WHERE corpus = :c AND space_id = :s "
                "AND index_name IS DISTINCT FROM :name"),
                {"name": name, "c": corpus, "s": space.space_id})
        self._spaces[space.dimension] = _Space(space.space_id, space.dimension, name)
        return name

    def drop_index(self) -> bool:
        """Drop this space's HNSW index (searches fall back to exact scans); True when one existed.

        Useful before re-loading a large space (building once is much faster than inserting
        into a live graph). ``DROP INDEX CONCURRENTLY``: reads and writes of the
        ``embeddings`` table go on meanwhile. Waits for a build running on the table.
        """
        with self._store.transaction() as conn:
            dim = self._known_dimension(conn)
            space = None if dim is None else self._lookup_space(conn, dim)
        if space is None:
            return False
        name = hnsw_index_name(space.space_id)
        with self._store.autocommit() as conn, self._store.hnsw_build_lock(conn):
            existed = self._index_state(conn, name) is not None
            # Queries stop planning for the index first, then it goes.
            conn.execute(sa.text("UPDATE embedding_spaces SET index_name = NULL WHERE corpus = :c AND space_id = :s"),
                         {"c": self._store.corpus, "s": space.space_id})
            conn.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
        self._spaces[space.dimension] = _Space(space.space_id, space.dimension, None)
        return existed

    # -- search ---------------------------------------------------------------------
    def _space_for_query(self, dimension: int) -> _Space | None:
        cached = self._spaces.get(dimension)
        now = time.monotonic()
        # An indexed space never changes; an unindexed one is re-read at most every few
        # seconds (another process may build its index meanwhile: until then queries
        # take the exact path, which is correct, only slower), so a query is one round trip.
        if cached is not None and (cached.index_name is not None
                                   or now - self._space_checked.get(dimension, 0.0) < SPACE_RECHECK_SECONDS):
            return cached
        with self._store.transaction() as conn:
            space = self._lookup_space(conn, dimension)
        self._space_checked[dimension] = now
        return space

    def candidates_sql(self, query_vector: Sequence[float] | npt.NDArray[Any], k: int, *,
                       filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                       prefix: str = "v") -> tuple[str, dict[str, Any]]:
        """One SELECT of ``(entry_id, score)``, best first (ties by entry id), at most ``k`` rows.

        The statement can be embedded as a CTE body by another statement (Hybrid fuses it
        with BM25 in one round trip); it carries its own HNSW settings (``set_config`` with
        ``is_local = true``, so they also hold for the rest of the caller's transaction)
        and needs no separate ``SET``. ``prefix`` (a short identifier, default ``"v"``)
        keeps its parameter names and CTE names (``<prefix>_...``) unique. The query
        vector is validated like stored vectors and must have the space's dimension. May
        read the space row first (one round trip) unless the space is known to be indexed;
        returns an empty SELECT when the space does not exist yet.
        """
        p = _check_prefix(prefix)
        k = _check_k(k)
        min_score = _check_min_score(min_score)
        validate_filters(filters)
        vec = self._validate_rows([query_vector], 1, fix=False)[0]  # type: ignore[list-item]
        space = self._space_for_query(int(vec.shape[0]))
        return self._ranking_sql(space, vec, k, filters, min_score, p)

    def _ef_for(self, k: int, filtered: bool) -> int:
        """``hnsw.ef_search`` of a top-``k`` query (filtered queries search wider)."""
        return min(_MAX_EF_SEARCH, max(self._ef_search, k, (2 * k if filtered else 0),
                                       (_FILTERED_MIN_EF if filtered else 0)))

    def _ranking_sql(self, space: _Space | None, vec: npt.NDArray[np.float32], k: int,
                     filters: Mapping[str, str] | None, min_score: float, p: str,
                     plan: bool = False) -> tuple[str, dict[str, Any]]:
        """The ranking statement; with ``plan``, for an indexed space with a non-zero query
        vector, the statement that reports its path instead: ``n`` (matches counted, NULL
        unfiltered) and ``ok`` (HNSW returned enough rows), from the same CTEs."""
        if space is None:
            return "SELECT NULL::text AS entry_id, NULL::float8 AS score WHERE false", {}
        predicate, params = filter_sql(filters, alias=f"{p}_e", prefix=f"{p}_f")
        filtered = predicate != "TRUE"
        params.update({f"{p}_c": self._store.corpus, f"{p}_min": min_score})
        sid, dim = space.space_id, space.dimension
        # Exact scans are driven by the filter when there is one: the matching entries (from
        # the entries indexes) each fetch their vector by primary key. The LATERAL with
        # OFFSET 0 keeps that shape (no hash join over the whole space).
        if filtered:
            base = (f"FROM entries {p}_e CROSS JOIN LATERAL (SELECT {p}_y.entry_id, {p}_y.embedding FROM embeddings "
                    f"{p}_y WHERE {p}_y.corpus = {p}_e.corpus AND {p}_y.space_id = {sid} AND {p}_y.entry_id = {p}_e.id "
                    f"OFFSET 0) {p}_x WHERE {p}_e.corpus = :{p}_c AND {predicate}")
        else:
            base = f"FROM embeddings {p}_x WHERE {p}_x.corpus = :{p}_c AND {p}_x.space_id = {sid}"
        if not np.any(vec):
            # A zero query vector scores 0 against everything: ties, broken by entry id.
            return (f"SELECT {p}_x.entry_id, 0::float8 AS score {base} AND 0::float8 >= :{p}_min "
                    f"ORDER BY {p}_x.entry_id LIMIT {k}", params)
        params[f"{p}_q"] = vec
        exact_score = _SCORE.format(d=f"{p}_x.embedding <=> CAST(:{p}_q AS vector)")
        # The exact form uses the untyped column, which no HNSW index matches, so the planner
        # cannot turn it into an approximate scan.
        exact = (f"SELECT {p}_x.entry_id, {exact_score} AS score {base} "
                 f"ORDER BY score DESC, {p}_x.entry_id LIMIT {k}")
        if space.index_name is None:
            return (f"SELECT entry_id, score FROM ({exact}) {p}_r WHERE score >= :{p}_min "
                    f"ORDER BY score DESC, entry_id", params)
        ef = self._ef_for(k, filtered)
        # The settings are applied inside the InitPlan that yields the query vector, which
        # runs before the index scan starts; the index matches the typed expression.
        qv = (f"(SELECT CASE WHEN set_config('hnsw.ef_search', '{ef}', true) IS NULL "
              f"OR set_config('hnsw.iterative_scan', 'strict_order', true) IS NULL "
              f"OR set_config('hnsw.max_scan_tuples', '{_MAX_SCAN_TUPLES}', true) IS NULL "
              f"THEN NULL ELSE CAST(:{p}_q AS vector({dim})) END)")
        dist = f"({p}_x.embedding::vector({dim}) <=> {qv})"
        ctes = []
        gate = small = ""
        if filtered:
            t = self._exact_threshold
            # The matching ids, up to threshold + 1: counted to choose the path, and the input
            # of the exact scan when there are few (one pass over the entries, not two).
            ctes.append(f"{p}_m AS MATERIALIZED (SELECT {p}_e.id FROM entries {p}_e "
                        f"WHERE {p}_e.corpus = :{p}_c AND {predicate} LIMIT {t + 1})")
            if set(validate_filters(filters)) <= {"tier", "source"} and len(validate_filters(filters)) == 1:
                # One btree column: counted from the (corpus, column) index alone (an
                # index-only scan once the table is vacuumed); the ids are then read only
                # when the exact branch runs, since a CTE is evaluated on first use.
                ctes.append(f"{p}_n AS MATERIALIZED (SELECT count(*) AS n FROM (SELECT 1 FROM entries {p}_e "
                            f"WHERE {p}_e.corpus = :{p}_c AND {predicate} LIMIT {t + 1}) {p}_k)")
            else:
                ctes.append(f"{p}_n AS MATERIALIZED (SELECT count(*) AS n FROM {p}_m)")
            gate = f" AND (SELECT n FROM {p}_n) > {t}"
            small_score = _SCORE.format(d=f"{p}_y.embedding <=> CAST(:{p}_q AS vector)")
            # One primary-key scan over the sorted id array (PostgreSQL 17+ walks the leaf
            # pages for it instead of descending once per id).
            small = (f"SELECT {p}_y.entry_id, {small_score} AS score FROM embeddings {p}_y "
                     f"WHERE {p}_y.corpus = :{p}_c AND {p}_y.space_id = {sid} "
                     f"AND {p}_y.entry_id = ANY(ARRAY(SELECT id FROM {p}_m ORDER BY id)) "
                     f"AND (SELECT n FROM {p}_n) <= {t} ORDER BY score DESC, {p}_y.entry_id LIMIT {k}")
        # The HNSW scan drives: the filter is a per-row subquery on the entry's primary key,
        # which PostgreSQL cannot turn into a join, so the only plan is the ordered index
        # scan (iterative, strict order) checked row by row until k rows pass.
        check = (f" AND coalesce((SELECT {predicate} FROM entries {p}_e WHERE {p}_e.corpus = {p}_x.corpus "
                 f"AND {p}_e.id = {p}_x.entry_id), false)" if filtered else "")
        ctes.append(f"{p}_h AS MATERIALIZED (SELECT {p}_x.entry_id, {dist} AS d FROM embeddings {p}_x "
                    f"WHERE {p}_x.corpus = :{p}_c AND {p}_x.space_id = {sid}{check}{gate} "
                    f"ORDER BY {p}_x.embedding::vector({dim}) <=> {qv} LIMIT {k})")
        # HNSW never returns zero vectors (unindexable under cosine), which score 0: when the
        # k-th HNSW row does not score above 0 and min_score admits 0, the exact scan decides.
        ok = f"(SELECT count(*) FROM {p}_h WHERE d < 1 OR :{p}_min > 0) >= {k}"
        # Exactly one branch yields rows: the small exact scan (few matches), the HNSW rows
        # (enough of them), or the full exact scan (HNSW fell short).
        fallback = f"SELECT entry_id, score FROM ({exact}) {p}_xx WHERE NOT ({ok}){gate}"
        if plan:
            counted = f"(SELECT n FROM {p}_n)" if filtered else "NULL::bigint"
            return f"WITH {', '.join(ctes)} SELECT {counted} AS n, {ok} AS ok", params
        branches = [f"SELECT entry_id, {_SCORE.format(d='d')} AS score FROM {p}_h WHERE {ok}", fallback]
        if small:
            branches.append(f"SELECT entry_id, score FROM ({small}) {p}_s")
        sql = (f"WITH {', '.join(ctes)} SELECT entry_id, score FROM ({' UNION ALL '.join(branches)}) {p}_u "
               f"WHERE score >= :{p}_min ORDER BY score DESC, entry_id")
        return sql, params

    def search(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
               min_score: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` entries most similar to ``query``: ``(entry id, cosine)`` pairs, best first.

        ``filters`` are exact metadata filters applied before top-K; ``min_score`` is
        inclusive. Raises :class:`ValidationError` for bad arguments and what the
        embedding function raises.
        """
        ranking = self._query_ranking(query, k, filters, min_score)
        if ranking is None:
            return []
        sql, params = ranking[:2]
        return [(r.entry_id, float(r.score)) for r in self._store.read(sql, params)]

    def _query_ranking(self, query: str, k: int, filters: Mapping[str, str] | None,
                       min_score: float) -> tuple[str, dict[str, Any], _Space, npt.NDArray[np.float32]] | None:
        """Validate a text query and build its ranking SQL (with the space and the query
        vector); None when the space does not exist yet."""
        if not isinstance(query, str):
            raise ValidationError(f"query must be a string, got {type(query).__name__}")
        if not is_unicode_text(query):
            raise ValidationError("query contains a lone surrogate (not Unicode text)")
        k = _check_k(k)
        min_score = _check_min_score(min_score)
        validate_filters(filters)
        vec = self.embed_query(query)
        space = self._space_for_query(int(vec.shape[0]))
        if space is None:
            return None
        return (*self._ranking_sql(space, vec, k, filters, min_score, "v"), space, vec)

    def rows_statement(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                       min_score: float = 0.0,
                       columns: str = "") -> tuple[str, dict[str, Any], npt.NDArray[np.float32]] | None:
        """The statement :meth:`search_rows` runs, with the query vector; None when the space
        does not exist yet (then there is nothing to find)."""
        ranking = self._query_ranking(query, k, filters, min_score)
        if ranking is None:
            return None
        sql, params, _, vec = ranking
        cols = f"{columns}, " if columns else "e.id AS entry_id, "
        stmt = (f"WITH r AS ({sql}) SELECT {cols}r.score FROM r JOIN entries e ON e.corpus = :v_c "
                f"AND e.id = r.entry_id ORDER BY r.score DESC, e.id")
        return stmt, params, vec

    def search_rows(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                    min_score: float = 0.0, columns: str = "") -> list[Any]:
        """Like :meth:`search` but returns rows joined with their entries in the same statement.

        Each row has ``score`` plus ``columns`` (entry columns on alias ``e``, a code
        constant such as :data:`tnsrag_db.strategies.base.ENTRY_COLUMNS`).
        """
        statement = self.rows_statement(query, k, filters=filters, min_score=min_score, columns=columns)
        if statement is None:
            return []
        return self._store.read(statement[0], statement[1])

    # -- explanations -----------------------------------------------------------------
    def space_of(self, query_vector: npt.NDArray[np.float32]) -> tuple[int, int] | None:
        """``(space_id, dimension)`` of the space a query vector searches; None before the first write."""
        space = self._space_for_query(int(query_vector.shape[0]))
        return None if space is None else (space.space_id, space.dimension)

    def explain_cosine(self, query_vector: npt.NDArray[np.float32], score: float) -> CosineExplanation:
        """The :class:`CosineExplanation` of a score this store's search returned for ``query_vector``."""
        space = self.space_of(query_vector)
        dim = int(query_vector.shape[0])
        return CosineExplanation(score, score, self._embedding.name, dim, None if space is None else space[0])

    def explain_plan(self, conn: Connection, query_vector: npt.NDArray[np.float32], k: int, *,
                     filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                     stream: str = "vector") -> SearchPlan:
        """Which path the ranking statement for ``query_vector`` takes (see the module docstring):
        exact scan or HNSW iterative scan, the matches it counted and whether the exact
        fallback answered. For an indexed space this runs the statement's own path-choosing
        part on ``conn`` (run it in the transaction that ranked: same snapshot, same answer)."""
        k = _check_k(k)
        min_score = _check_min_score(min_score)
        filtered = bool(validate_filters(filters))
        vec = self._validate_rows([query_vector], 1)[0]  # type: ignore[list-item]
        space = self._space_for_query(int(vec.shape[0]))
        if space is None:
            return SearchPlan(stream, "none", filtered, detail="no embedding space yet: nothing to search")
        if not np.any(vec):
            return SearchPlan(stream, "exact", filtered, space.index_name,
                              detail="zero query vector: every entry scores 0 (ties by entry id)")
        if space.index_name is None:
            return SearchPlan(stream, "exact", filtered, None, detail="no HNSW index in this space: exact scan")
        sql, params = self._ranking_sql(space, vec, k, filters, min_score, "v", plan=True)
        row = conn.execute(sa.text(sql), params).one()
        ef = self._ef_for(k, filtered)
        t = self._exact_threshold
        if filtered:
            n = int(row.n)
            if n <= t:
                return SearchPlan(stream, "exact", True, space.index_name, n, t,
                                  detail=f"{n} matching entries (at most {t}): exact scan of them")
            return SearchPlan(stream, "hnsw", True, space.index_name, n, t, not bool(row.ok), ef,
                              detail="HNSW strict-order iterative scan, filter checked per row"
                              + ("; too few rows, exact scan answered" if not row.ok else ""))
        return SearchPlan(stream, "hnsw", False, space.index_name, None, None, not bool(row.ok), ef,
                          detail="HNSW strict-order iterative scan"
                          + ("; too few rows, exact scan answered" if not row.ok else ""))
