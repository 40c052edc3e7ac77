"""``VectorMemoryStore``: entries with pgvector embeddings, searched by cosine similarity.

The one class of the vector index. Its collaborators, each owned or passed explicitly:
the provider's embedding spaces (:class:`~tnsrag_db._indexes.vector.spaces.ProviderSpaces`,
a cache and the plans that read them), the ranking SQL (:mod:`.sql`), the write
extension that joins an entry write (:class:`~tnsrag_db._indexes.vector.write.VectorWrite`),
the HNSW builds (:mod:`.hnsw`) and the streaming ingest loop (:mod:`.ingest`). The write
side and the builds are imported by the methods that write or build, so a process that
only queries (``tnsrag query``) loads neither; every read of this class is a
:data:`~tnsrag_db._db.statement.Plan` run on the store's read runner.

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
  ``hnsw.iterative_scan = relaxed_order`` (set with ``set_config(..., true)`` inside the
  statement, before the index scan starts; the first ``ef_search`` candidates come back
  sorted, and strict order would cost twice the scan). Approximate: recall@10 ≈
  0.97-0.99 at the default ``ef_search`` of 100 on the benchmark corpus;
* filtered, index present: the statement first collects the matching entry ids, stopping
  at ``exact_threshold + 1`` (through the entries indexes). At most ``exact_threshold``
  matches: exact scan of exactly those ids (recall 1.0). More: HNSW with strict-order
  iterative scan, which looks for the ``k`` matches among a budget of nearest vectors
  sized from the corpus's own statistics: ``(3 k + 20) * N / (exact_threshold + 1)``
  (N its entries, from the BM25 statistics), between 200 and 1,000, with ``ef_search``
  raised to the budget. A filter independent of the vectors has its ``k`` matches there
  all but always; when the scan ends with fewer (the matches near the query are rarer
  than the filter is overall, as when it follows the clusters of the vectors, or zero
  vectors could belong in the result) the exact scan of every match answers instead. A
  filtered query therefore always returns min(k, entries that match and score ≥
  min_score) rows in score order.

``min_score`` is applied after the top-K by distance, which gives the same set as
filtering first (the order is by score) without letting an iterative scan run on past
the last qualifying row.
"""


from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.as_of import with_instant
from tnsrag_db._db.statement import Plan, Rows, Statement, run_plan
from tnsrag_db._errors import ConfigurationError, DatabaseError, EmbeddingValidationError
from tnsrag_db._indexes.vector.hnsw import (
    build_space_index,
    build_with_progress,
    defer_build,
    drop_space_index,
    space_size_reaches,
)
from tnsrag_db._indexes.vector.ingest import run_ingest
from tnsrag_db._indexes.vector.pacing import CallPacer, is_local
from tnsrag_db._indexes.vector.progress import IndexProgress, IngestProgress
from tnsrag_db._indexes.vector.spaces import SPACE_RECHECK_SECONDS, ProviderSpaces, Space
from tnsrag_db._indexes.vector.sql import (
    DOCUMENT_COLUMNS,
    EMPTY_RANKING,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    MAX_EF,
    MAX_SCAN_TUPLES,
    STORED_VECTORS,
    Ranking,
    cosines_sql,
    documents_sql,
    ranking_sql,
)
from tnsrag_db._indexes.vector.write import VectorWrite, needing_vectors, write_stored_vectors
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import ValidatedBatch, WriteReport
from tnsrag_db._types import MAX_CANDIDATES, MemoryEntry, validate_filters
from tnsrag_db._validate import check_int, check_number, check_prefix, check_query_text
from tnsrag_db.embeddings import EmbeddingFunction, ValidatingEmbedding
from tnsrag_db.explain import CosineExplanation, SearchPlan

if TYPE_CHECKING:
    from tnsrag_db._db.pool import Connection
    from tnsrag_db._store.write import WriteExtension

__all__ = [
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_FILTERED_EF_SEARCH",
    "DEFAULT_INDEX_THRESHOLD",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "IndexProgress",
    "IngestProgress",
    "QueryBasis",
    "VectorMemoryStore",
]

#: Default ``hnsw.ef_search`` of unfiltered queries (recall@10 ≈ 0.97-0.99 on the 100k benchmark corpus).
DEFAULT_EF_SEARCH = 100
#: Default smallest ``hnsw.ef_search`` of a filtered query (it searches wider: see ``filtered_ef_search``).
DEFAULT_FILTERED_EF_SEARCH = 200
#: Default number of matching entries up to which a filtered query is answered exactly.
#: Exact through the filter costs one random heap read per match, HNSW with iterative
#: scan about k / selectivity graph visits, so below a few thousand matches exact wins on
#: recall (1.0) at a similar cost (figures in docs/performance.md).
DEFAULT_EXACT_THRESHOLD = 5_000
#: Default size of a space (number of vectors) at which ``add_all`` builds its HNSW index.
DEFAULT_INDEX_THRESHOLD = 10_000

#: pgvector's bounds of ``m`` and ``ef_construction`` (its build refuses others).
_HNSW_M_RANGE = (2, 100)
_HNSW_EF_CONSTRUCTION_RANGE = (4, 1000)
Vectors = dict[str, npt.NDArray[np.float32]]


def _check_k(k: object) -> int:
    return check_int(k, "k", minimum=1, maximum=MAX_CANDIDATES)


@dataclass(frozen=True, slots=True)
class QueryBasis:
    """What a query's statements need to know of the database before they are built
    (:meth:`VectorMemoryStore.basis_plan`): the space its vector searches (None before the
    space's first write, or when the query has no vector) and whether its metadata filters
    go through the filter pairs (tenancy on)."""

    space: Space | None
    pairs: bool


class _Rows:
    """An embedding 'provider' that returns precomputed rows, so they pass the same wrapper rules."""

    def __init__(self, rows: Sequence[Sequence[float]] | npt.NDArray[Any]) -> None:
        self._rows = rows

    def __call__(self, text: str) -> Sequence[float]:  # pragma: no cover - only embed_batch is used
        raise NotImplementedError

    def embed_batch(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return self._rows  # type: ignore[return-value]  # an ndarray of rows serves as a sequence


class VectorMemoryStore:
    """A vector view over one :class:`Store`: add entries with embeddings, search by cosine.

    ``embedding`` is wrapped in :class:`ValidatingEmbedding` (unless it already is one
    with the same name); ``name`` overrides the provider name that keys the space.
    Keyword-only tuning options, each validated (:class:`ConfigurationError` naming it):

    - ``ef_search`` (default 100, 1 to 1000): the HNSW candidate list of unfiltered queries;
    - ``filtered_ef_search`` (default 200, 1 to 1000): the smallest candidate list of a
      filtered query (which also searches at least ``2 k`` and ``ef_search`` wide);
    - ``exact_threshold`` (default 5,000, 0 to 10**9): the number of matching entries up
      to which filtered queries scan exactly;
    - ``max_scan_tuples`` (default 20,000, at least 1): ``hnsw.max_scan_tuples``, the most
      vectors one iterative HNSW scan visits;
    - ``space_recheck_seconds`` (default 5.0, at least 0): how long a query trusts its
      cached "no HNSW index yet" state of the space before reading it again;
    - ``index_threshold`` (default 10,000; None turns automatic builds off): the space size
      at which :meth:`add_all` builds the HNSW index at the end of a write (see
      :meth:`build_index`);
    - ``hnsw_m`` (default 16, 2 to 100) and ``hnsw_ef_construction`` (default 128, 4 to
      1000, at least ``2 * hnsw_m``): the graph of the HNSW index this view builds.

    ``store`` is a :class:`~tnsrag_db._store.store.Store`. No I/O happens here.
    Raises :class:`ConfigurationError` for a bad option or store.
    """

    def __init__(self, store: Store, embedding: EmbeddingFunction | Callable[[str], object], *,
                 name: str | None = None, ef_search: int = DEFAULT_EF_SEARCH,
                 filtered_ef_search: int = DEFAULT_FILTERED_EF_SEARCH,
                 exact_threshold: int = DEFAULT_EXACT_THRESHOLD, max_scan_tuples: int = MAX_SCAN_TUPLES,
                 space_recheck_seconds: float = SPACE_RECHECK_SECONDS,
                 index_threshold: int | None = DEFAULT_INDEX_THRESHOLD,
                 hnsw_m: int = HNSW_M, hnsw_ef_construction: int = HNSW_EF_CONSTRUCTION) -> None:

        if not isinstance(store, Store):
            raise ConfigurationError(f"store must be a Store, got {type(store).__name__}")
        check_int(ef_search, "ef_search", minimum=1, maximum=MAX_EF, error=ConfigurationError)
        check_int(filtered_ef_search, "filtered_ef_search", minimum=1, maximum=MAX_EF, error=ConfigurationError)
        check_int(exact_threshold, "exact_threshold", minimum=0, maximum=10**9, error=ConfigurationError)
        check_int(max_scan_tuples, "max_scan_tuples", minimum=1, maximum=2**31 - 1, error=ConfigurationError)
        if index_threshold is not None:
            check_int(index_threshold, "index_threshold", minimum=1, error=ConfigurationError)
        check_int(hnsw_m, "hnsw_m", minimum=_HNSW_M_RANGE[0], maximum=_HNSW_M_RANGE[1], error=ConfigurationError)
        check_int(hnsw_ef_construction, "hnsw_ef_construction", minimum=max(_HNSW_EF_CONSTRUCTION_RANGE[0],
                                                                            2 * hnsw_m),
                  maximum=_HNSW_EF_CONSTRUCTION_RANGE[1], error=ConfigurationError)
        if isinstance(embedding, ValidatingEmbedding) and (name is None or name == embedding.name):
            self._embedding = embedding
        else:
            self._embedding = ValidatingEmbedding(embedding, name=name)
        self._store = store
        self._ef_search = ef_search
        self._filtered_ef_search = filtered_ef_search
        self._exact_threshold = exact_threshold
        self._max_scan_tuples = max_scan_tuples
        self._index_threshold = index_threshold
        self._hnsw = (hnsw_m, hnsw_ef_construction)
        self._lock = threading.Lock()
        self._dimension: int | None = self._embedding.dimension
        self._spaces = ProviderSpaces(store, self._embedding.name, recheck_seconds=space_recheck_seconds)
        provider = self._embedding.provider
        window = getattr(provider, "max_tokens", None)
        # A local model's batches are cut into calls of about half a second (an ingest
        # stops between two); a remote one gets whole batches.
        self._pacer = CallPacer(window_tokens=window if isinstance(window, int) else None) if is_local(provider) \
            else None

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
    def spaces(self) -> ProviderSpaces:
        """The embedding spaces of this view's provider in its corpus, as the view knows them."""
        return self._spaces

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
        """The vectors of ``texts`` in order, in calls of at most ``batch_size`` texts (of
        about half a second each for a local model: :mod:`.pacing`), ``progress`` called
        with ``done`` plus the texts embedded after each call (it may raise to stop)."""
        out: list[npt.NDArray[np.float32] | None] = [None] * len(texts)
        pacer = self._pacer
        calls: Iterable[Sequence[int]] = (
            pacer.calls(texts, batch_size) if pacer is not None
            else (range(start, min(start + batch_size, len(texts))) for start in range(0, len(texts), batch_size)))
        finished = 0
        if progress is not None and texts:
            progress(done)  # a stop asked before the first call ends this here
        for rows in calls:
            started = time.perf_counter()
            vectors = self._embedding.embed_batch([texts[i] for i in rows])
            if pacer is not None:
                pacer.record(sum(pacer.size(texts[i]) for i in rows), time.perf_counter() - started)
            for i, vec in zip(rows, vectors):
                self._fix_dimension(int(vec.shape[0]))
                out[i] = vec
            finished += len(rows)
            if progress is not None:
                progress(done + finished)
        return np.vstack(cast("list[npt.NDArray[np.float32]]", out)) if out else np.zeros((0, self._dimension or 1), dtype=np.float32)

    def embed_query(self, query: str) -> npt.NDArray[np.float32]:
        """The validated embedding of ``query`` (its dimension must match the stored vectors')."""
        vec = self._embedding(query)
        self._fix_dimension(int(vec.shape[0]))
        return vec

    def _embed_entries(self, entries: Sequence[MemoryEntry], batch_size: int,
                       progress: Callable[[int], None] | None = None, done: int = 0) -> npt.NDArray[np.float32]:
        """The vectors of ``entries``, row i for entry i: from the provider's
        ``embed_entries(entries)`` when it has one (a provider whose vectors belong to entry
        ids, such as a restore's exported vectors), validated as precomputed rows; else the
        embedding of their texts: the provider's ``entry_text(entry)`` when it has one (a
        :class:`~tnsrag_db.embeddings.ContextualEmbedding`), else their contents."""
        by_entry = getattr(self._embedding.provider, "embed_entries", None)
        if by_entry is None:
            text_of = getattr(self._embedding.provider, "entry_text", None)
            texts = [e.content for e in entries] if text_of is None else [text_of(e) for e in entries]
            return self._embed(texts, batch_size, progress, done)
        matrix = self._validate_rows(by_entry(entries), len(entries))
        if progress is not None:
            progress(done + len(entries))
        return matrix

    # -- spaces ---------------------------------------------------------------------
    def basis_plan(self, dimension: int | None, filters: Mapping[str, str] | None = None) -> Plan[QueryBasis]:
        """What the statements of a query need to know before they are built, as the first
        statements of the query's plan (none once the store and the space cache know it):
        the space a query vector of ``dimension`` searches (not read for None) and whether
        ``filters`` go through the filter pairs."""
        space = None if dimension is None else (yield from self._spaces.query_plan(dimension))
        pairs = bool(filters) and (yield from self._store.filter_pairs_plan())
        return QueryBasis(space, pairs)

    def _basis(self, dimension: int, filters: Mapping[str, str] | None, basis: QueryBasis | None) -> QueryBasis:
        """``basis`` when the caller's plan resolved it; else resolved now (a builder called
        outside any plan: at most two round trips of its own)."""
        return basis if basis is not None else self._store.run(self.basis_plan(dimension, filters))

    def _current_space(self, store: Store) -> Space | None:
        """This view's space, read on the primary (None before the first write): what a write
        or an index build acts on."""
        return store.session.run(self._spaces.current_plan(self._dimension), primary=True)

    def _count_plan(self) -> Plan[int]:
        """:meth:`count` as a plan (the space row first when the view does not know it)."""
        space = yield from self._spaces.current_plan(self._dimension)
        if space is None:
            return 0
        rows = yield Statement("SELECT count(*) AS n FROM embeddings WHERE corpus = :c AND space_id = :s",
                               {"c": self._store.corpus, "s": space.space_id}, ("n",))
        return int(rows[0].n)

    def count(self) -> int:
        """Number of vectors stored in this view's space (0 before the first write)."""
        return self._store.run(self._count_plan())

    # -- writes ---------------------------------------------------------------------
    def add(self, entry: MemoryEntry) -> IngestCounts:
        """Insert or update one entry with its embedding. Returns its classification."""
        return self.add_all([entry])

    def add_all(self, entries: Iterable[MemoryEntry], *,
                embeddings: Sequence[Sequence[float]] | npt.NDArray[Any] | None = None,
                batch_size: int = 256, progress: Callable[[int], None] | None = None,
                check: Callable[[Connection], None] | None = None,
                index_progress: IndexProgress | None = None,
                extensions: Sequence[WriteExtension] = ()) -> IngestCounts:
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
        ``extensions`` (:class:`~tnsrag_db._store.write.WriteExtension`) join the write's
        transaction before the vectors' own (a consolidation's merge does).
        """

        check_int(batch_size, "batch_size", minimum=1)
        store = self._store
        batch = ValidatedBatch(entries)
        if not batch:
            if embeddings is not None and len(embeddings) != 0:
                raise EmbeddingValidationError(f"got {len(embeddings)} embeddings for 0 entries")
            return IngestCounts()
        vectors: Vectors = {}
        if embeddings is not None:
            matrix = self._validate_rows(embeddings, len(batch))
            vectors = {e.id: matrix[i] for i, e in enumerate(batch)}
            if progress is not None:
                progress(len(batch))
        else:
            vectors = self._prepare(batch, batch_size, progress)
        report, space = self._write_batch(store, batch, vectors, batch_size, check=check, extensions=extensions)
        if space is None:
            return report.counts
        if progress is not None:
            progress(len(batch))
        self._maybe_build_index(store, space, index_progress)
        return report.counts

    def ingest(self, entries: Iterable[MemoryEntry], *, batch_size: int = 256,
               progress: IngestProgress | None = None,
               index_progress: IndexProgress | None = None, vectors: bool = True,
               on_stop: Callable[[], None] | None = None, max_batch_size: int | None = None) -> IngestCounts:
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
        one interrupts at once); ``on_stop`` (optional) is called at that first Ctrl-C,
        from the signal handler, to say so. The open batch is rolled back and
        :class:`IngestInterrupted` is raised with the counts that were committed; so is
        it, chained to the cause, for any library error met on the way (a bad entry, a
        bad vector, a database error; ``committed`` is empty when it was in the first
        batch). A batch still being embedded stops after the embedding call in progress
        (about half a second with a provider of ``local_compute``, such as the shipped
        model) and is waited for, so no worker thread outlives the call. A bad ``batch_size`` raises :class:`ValidationError` before anything.

        ``vectors=False`` (default True) writes the entries only: content, metadata and
        BM25 postings, batch by batch as above but embedding nothing, so each batch is
        keyword-searchable as soon as it commits (a changed text still loses its stale
        vector). :meth:`fill_vectors` then embeds and writes only the vectors those entries
        lack in this space, staging nothing again: the two calls are the keyword-first
        ingest of ``tnsrag ingest``, and an interrupted second call resumes by running
        again.

        Each batch is durable at its commit; an interrupt or an error loses nothing
        committed, and the same call run again continues.

        ``max_batch_size`` (optional, above ``batch_size``): the batches after the first
        double in size up to it, which suits a call that embeds nothing (``vectors=False``):
        the first batch still commits early, and a larger batch costs less per entry to
        write (fewer statements and commits, one document-frequency update per term of the
        batch). With an embedding function it also sizes the embedding work per batch.

        The call is one bulk load (:meth:`~tnsrag_db._store.corpus.Writer.merges_deferred`):
        its batches leave their BM25 postings as rows, and once every batch is written the
        planner statistics of the entries are refreshed when the call wrote a large share
        of them (the rule of a single bulk write, see
        :meth:`~tnsrag_db._store.corpus.Writer.refresh_statistics`), so the corpus just
        loaded is planned for as it is, and the postings are merged into blocks once, in
        one pass (when the call wrote at least the store's ``merge_after_entries``).
        """

        check_int(batch_size, "batch_size", minimum=1)
        if max_batch_size is not None:
            check_int(max_batch_size, "max_batch_size", minimum=1)
        store = self._store
        embed_lock = threading.Lock()

        def prepare(batch: ValidatedBatch, embedded: Callable[[int], None]) -> Vectors:
            if not vectors:
                return {}
            with embed_lock:
                return self._prepare(batch, batch_size, embedded)

        def write(batch: ValidatedBatch, batch_vectors: Vectors,
                  stop: threading.Event) -> tuple[WriteReport, Space | None]:
            return self._write_batch(store, batch, batch_vectors, batch_size, stop=stop, embed_lock=embed_lock,
                                     with_vectors=vectors)

        # Each batch is too small to refresh the planner statistics on its own, so the call
        # refreshes them once for all it wrote (to statistics taken before, a new corpus is
        # one row, and a probe of its entries by id may then scan the whole corpus per id),
        # then merges the postings of all of them at once.
        with store.writer.merges_deferred():
            return run_ingest(entries, batch_size, progress, prepare, write, self._builder(store, index_progress),
                              on_stop, max_batch_size)

    def fill_vectors(self, entries: Iterable[MemoryEntry], *, batch_size: int = 256,
                     progress: IngestProgress | None = None, index_progress: IndexProgress | None = None,
                     on_stop: Callable[[], None] | None = None, max_batch_size: int | None = None) -> IngestCounts:
        """Embed and write the vectors of entries the corpus already holds, writing nothing
        else: the vector pass after :meth:`ingest` with ``vectors=False`` (and ``tnsrag
        embed``'s over the stored entries).

        The loop is :meth:`ingest`'s (batches read one ahead, each embedded on a worker
        while the previous one's vectors are written, Ctrl-C and ``on_stop`` alike, the
        HNSW index built at the end once due, the same ``progress`` phases), but a batch
        is neither staged nor analysed: its transaction locks its stored entries, and
        copies the vectors of those stored with the same text and lacking one in this
        view's space. Entries that already have a vector are not embedded (a pre-read
        per batch), so an interrupted call resumes by running again. An entry the corpus
        does not hold, or holds with another text (a concurrent writer changed it), gets
        no vector here. Returns the entries' counts: all of them ``unchanged`` (none is
        written). Errors and ``max_batch_size`` as in :meth:`ingest` (for vectors that are
        looked up rather than computed, such as an export's).
        """

        check_int(batch_size, "batch_size", minimum=1)
        if max_batch_size is not None:
            check_int(max_batch_size, "max_batch_size", minimum=1)
        store = self._store

        def prepare(batch: ValidatedBatch, embedded: Callable[[int], None]) -> Vectors:
            return self._prepare(batch, batch_size, embedded)

        def write(batch: ValidatedBatch, batch_vectors: Vectors,
                  stop: threading.Event) -> tuple[WriteReport, Space | None]:
            space = None
            if batch_vectors and self._dimension is not None:
                _, space = write_stored_vectors(store, self._spaces, self._dimension, batch, batch_vectors, stop=stop)
            return WriteReport(unchanged=[e.id for e in batch]), space

        return run_ingest(entries, batch_size, progress, prepare, write, self._builder(store, index_progress), on_stop,
                          max_batch_size)

    def fill_kept_vectors(self, rows: Sequence[MemoryEntry], *, batch_size: int = 256) -> int:
        """Embed and write the vectors of closed rows the corpus holds (a restore's kept
        versions and entries a delete closed, :func:`~tnsrag_db.admin.restore_corpus`), in
        one transaction: :meth:`fill_vectors` for rows whose ids no application writes
        (``<id>\\x1e<n>``), which the write checks refuse. Rows that already have a vector
        in this view's space are left as they are. Returns the number of vectors written."""
        check_int(batch_size, "batch_size", minimum=1)
        todo = self._needing_vectors(rows)
        if not todo:
            return 0
        matrix = self._embed_entries(todo, batch_size)
        assert self._dimension is not None  # fixed by the embedding just done
        written, _ = write_stored_vectors(self._store, self._spaces, self._dimension, todo,
                                          {e.id: matrix[i] for i, e in enumerate(todo)})
        return written

    def _builder(self, store: Store,
                 index_progress: IndexProgress | None) -> Callable[[Space, Callable[[str, int, int], None]], None]:
        """The end of :meth:`ingest` and :meth:`fill_vectors`: the space's index once due,
        its progress to the loop's ``advance`` and to ``index_progress``."""
        def build(space: Space, advance: Callable[[str, int, int], None]) -> None:
            def index_advance(phase: str, done: int, of: int) -> None:
                advance(phase, done, of)
                if index_progress is not None:
                    index_progress(phase, done, of)

            self._maybe_build_index(store, space, index_advance)

        return build

    def _prepare(self, batch: Sequence[MemoryEntry], batch_size: int,
                 progress: Callable[[int], None] | None = None) -> Vectors:
        """The vectors ``batch`` needs before its write, by id (a pre-read finds what is stored)."""
        todo = self._needing_vectors(batch)
        done = len(batch) - len(todo)
        if todo:
            matrix = self._embed_entries(todo, batch_size, progress, done)
            return {e.id: matrix[i] for i, e in enumerate(todo)}
        if progress is not None:
            progress(len(batch))
        return {}

    def needing_vectors(self, entries: Sequence[MemoryEntry]) -> list[MemoryEntry]:
        """The entries of ``entries`` that a write through this view would embed: new ones,
        those whose text differs from the stored one, and those lacking a vector in this
        view's space (one transaction on the primary; the provider embeds one text first
        when its dimension is not known yet). :meth:`ingest` of the others changes nothing."""
        return self._needing_vectors(entries) if entries else []

    def _needing_vectors(self, batch: Sequence[MemoryEntry]) -> list[MemoryEntry]:
        """Entries that are new, changed their text, or lack a vector in this space (a pre-read,
        :func:`~tnsrag_db._indexes.vector.write.needing_vectors`)."""

        store = self._store
        if self._dimension is None:
            # The space is keyed by the dimension the provider produces: learn it first.
            self.embed_query(batch[0].content)
        assert self._dimension is not None
        return needing_vectors(store, self._spaces, self._dimension, batch)

    def _write_batch(self, store: Store, batch: ValidatedBatch, vectors: Vectors, batch_size: int, *,
                     check: Callable[[Connection], None] | None = None, stop: threading.Event | None = None,
                     embed_lock: threading.Lock | None = None,
                     with_vectors: bool = True,
                     extensions: Sequence[WriteExtension] = ()) -> tuple[WriteReport, Space | None]:
        """Write validated ``batch`` with ``vectors`` (embedding what a concurrent writer changed
        meanwhile) in one transaction; ``stop``, once set, aborts it after the current statement.
        ``with_vectors=False`` writes the entries only (no space: None). ``extensions`` join
        the transaction before the vectors' own (a consolidation's merge)."""

        extension = VectorWrite(self._spaces, self._dimension, vectors,
                                lambda entries: self._embed_entries(entries, batch_size),
                                check=check, stop=stop, embed_lock=embed_lock, with_vectors=with_vectors)
        report = store.write(batch, extensions=[*extensions, extension])
        return report, extension.space

    # -- index ----------------------------------------------------------------------
    def _maybe_build_index(self, store: Store, space: Space, progress: IndexProgress | None = None) -> None:
        """Build the space's index once it is due, after the write committed: a role that may
        not build it (the application role owns no table), or a build that fails, leaves the
        committed write standing and warns (:class:`IndexBuildDeferred`) instead of raising."""

        if self._index_threshold is None or space.index_name is not None:
            return
        n, allowed = space_size_reaches(store, space, self._index_threshold)
        if n < self._index_threshold:
            return
        if not allowed:
            defer_build(store, space.space_id, n, "this database role does not own the embeddings table "
                        "(or the session is read-only)")
            return
        try:
            self.build_index(progress=progress)
        except DatabaseError as exc:
            defer_build(store, space.space_id, n, f"the build failed ({type(exc).__name__}: {exc})")

    def build_index(self, *, progress: IndexProgress | None = None, poll_seconds: float = 0.5) -> str | None:
        """Create this space's HNSW index (cosine, ``hnsw_m`` and ``hnsw_ef_construction``:
        default m 16, ef_construction 128) if it does not exist.

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
        ``maintenance_work_mem`` raised to hold the graph (up to 2 GB, or half of a larger
        ``shared_buffers``) so it stays in
        memory, and PostgreSQL's parallel maintenance workers. It does not block writes:
        every corpus and space of the shared ``embeddings`` table keeps taking vectors
        while it runs, and vectors written meanwhile
        are in the index when it is done. Like any concurrent build it waits for the
        transactions that hold an older snapshot (a long statement, or a REPEATABLE READ or
        SERIALIZABLE transaction) and for open transactions that wrote to the table.
        An interrupted build leaves an invalid index, which the next call replaces.
        :meth:`add_all` calls this automatically once a space holds ``index_threshold``
        vectors. Raises :class:`ConfigurationError` on a store that only reads.
        """

        store = self._store
        if progress is None:
            return self._build_index(None)
        return build_with_progress(store, self._build_index, progress, poll_seconds)

    def _build_index(self, on_pid: Callable[[int], None] | None) -> str | None:

        store = self._store
        space = self._current_space(store)
        if space is None:
            return None
        m, ef_construction = self._hnsw
        name = build_space_index(store, space, on_pid, m=m, ef_construction=ef_construction)
        if name is not None:
            self._spaces.remember(space.dimension, Space(space.space_id, space.dimension, name))
        return name

    def drop_index(self) -> bool:
        """Drop this space's HNSW index (searches fall back to exact scans); True when one existed.

        Useful before re-loading a large space (building once is much faster than inserting
        into a live graph). ``DROP INDEX CONCURRENTLY``: reads and writes of the
        ``embeddings`` table go on meanwhile. Waits for a build running on the table.
        Raises :class:`ConfigurationError` on a store that only reads.
        """

        store = self._store
        space = self._current_space(store)
        if space is None:
            return False
        existed = drop_space_index(store, space)
        self._spaces.remember(space.dimension, Space(space.space_id, space.dimension, None))
        return existed

    # -- statements -----------------------------------------------------------------
    def _ef_for(self, k: int, filtered: bool) -> int:
        """``hnsw.ef_search`` of a top-``k`` query (filtered queries search wider)."""
        return min(MAX_EF, max(self._ef_search, k, (2 * k if filtered else 0),
                               (self._filtered_ef_search if filtered else 0)))

    def _ranking(self, space: Space, vec: npt.NDArray[np.float32], k: int, filters: Mapping[str, str] | None,
                 min_score: float, prefix: str, pairs: bool) -> Ranking:
        return Ranking(self._store.corpus, space.space_id, space.dimension, space.index_name, vec, k,
                       filters, min_score, prefix, self._ef_for(k, bool(validate_filters(filters))),
                       self._exact_threshold, bool(filters) and pairs, self._max_scan_tuples)

    def _query_vector(self, query_vector: Sequence[float] | npt.NDArray[Any], k: object, filters: object,
                      min_score: object, *, fix: bool = False) -> tuple[npt.NDArray[np.float32], int, float]:
        """Validated arguments of a query by vector: the vector, ``k``, ``min_score``."""
        k = _check_k(k)
        score = check_number(min_score, "min_score")
        validate_filters(filters)  # type: ignore[arg-type]
        vec = query_vector
        # What embed_query returns (1-d float32, finite, of the known dimension) is valid
        # as it is; anything else goes through the full check.
        if not (isinstance(vec, np.ndarray) and vec.dtype == np.float32 and vec.ndim == 1
                and vec.shape[0] == self._dimension and bool(np.isfinite(vec).all())):
            vec = self._validate_rows([query_vector], 1, fix=fix)[0]  # type: ignore[list-item]
        return vec, k, score

    def candidates_sql(self, query_vector: Sequence[float] | npt.NDArray[Any], k: int, *,
                       filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                       prefix: str = "v", basis: QueryBasis | None = None) -> tuple[str, dict[str, Any]]:
        """One SELECT of ``(entry_id, score)``, best first (ties by entry id), at most ``k`` rows.

        The statement can be embedded as a CTE body by another statement (Hybrid fuses it
        with BM25 in one round trip); it carries its own HNSW settings (``set_config`` with
        ``is_local = true``, so they also hold for the rest of the caller's transaction)
        and needs no separate ``SET``. ``prefix`` (a short lower-case identifier, default
        ``"v"``) keeps its parameter names and CTE names (``<prefix>_...``) unique. The
        query vector is validated like stored vectors and must have the space's dimension.
        Built without I/O when ``basis`` is given (:meth:`basis_plan`, run by the caller's
        plan); else the space row and the filter pairs' test are read first when not known.
        Returns an empty SELECT when the space does not exist yet. One parameter is shared
        by every statement of the library, ``:tnsrag_as_of``: the instant the statement
        answers at, bound to the ``as_of`` of the block it is built in (see
        :func:`tnsrag_db.as_of`; None: now).
        """
        p = check_prefix(prefix, error=ConfigurationError)
        vec, k, score = self._query_vector(query_vector, k, filters, min_score)
        basis = self._basis(int(vec.shape[0]), filters, basis)
        if basis.space is None:
            return EMPTY_RANKING, {}
        return with_instant(*ranking_sql(self._ranking(basis.space, vec, k, filters, score, p, basis.pairs)))

    def cosines_sql(self, query_vector: Sequence[float] | npt.NDArray[Any], source: str, *,
                    prefix: str = "vs", basis: QueryBasis | None = None) -> tuple[str, dict[str, Any]]:
        """A SELECT of ``(entry_id, score)``: the cosine of ``query_vector`` with the stored
        vector of each entry of the CTE ``source`` (a code constant naming a CTE with an
        ``entry_id`` column, defined by the statement this one is embedded in), the score a
        ranking gives it; entries without a vector in the query's space are left out, and
        before the space's first write nothing is returned. Names and parameters start
        with ``prefix``. Built without I/O when ``basis`` is given (:meth:`basis_plan`); else
        the space row is read first when the cache cannot answer."""
        p = check_prefix(prefix, error=ConfigurationError)
        vec, _, _ = self._query_vector(query_vector, 1, None, 0.0)
        space = self._basis(int(vec.shape[0]), None, basis).space
        if space is None:
            return EMPTY_RANKING, {}
        return with_instant(*cosines_sql(self._store.corpus, space.space_id, vec, source, p))

    def _ranking_plan(self, query_vector: Sequence[float] | npt.NDArray[Any], k: int, *,
                      filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                      prefix: str = "v") -> Plan[Statement | None]:
        """:meth:`candidates_sql` as a :class:`Statement` (columns ``entry_id, score``), built
        by a plan that first reads the space row when the cache cannot answer; None when
        the space does not exist yet (nothing to find)."""
        p = check_prefix(prefix, error=ConfigurationError)
        vec, k, score = self._query_vector(query_vector, k, filters, min_score)
        basis = yield from self.basis_plan(int(vec.shape[0]), filters)
        if basis.space is None:
            return None
        sql, params = ranking_sql(self._ranking(basis.space, vec, k, filters, score, p, basis.pairs))
        return Statement(sql, params, ("entry_id", "score"))

    def documents_plan(self, query_vector: Sequence[float] | npt.NDArray[Any], k: int, *,
                       filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                       explain: bool = False) -> Plan[tuple[Rows, SearchPlan | None]]:
        """The best ``k`` entries for ``query_vector`` with the columns documents are built
        from (:data:`~tnsrag_db._indexes.vector.sql.DOCUMENT_COLUMNS`), as a plan: one
        statement when the space is cached, else the space row first. With ``explain``,
        also the :class:`SearchPlan` of the ranking (from a second statement of the same
        plan: run it with ``snapshot=True`` for the same answer); else None."""
        vec, k, score = self._query_vector(query_vector, k, filters, min_score)
        filtered = bool(validate_filters(filters))
        basis = yield from self.basis_plan(int(vec.shape[0]), filters)
        space = basis.space
        if space is None:
            return [], (SearchPlan("vector", "none", filtered, detail="no embedding space yet") if explain else None)
        ranking = self._ranking(space, vec, k, filters, score, "v", basis.pairs)
        sql, params = ranking_sql(ranking)
        rows = yield Statement(documents_sql(sql, "v"), params, DOCUMENT_COLUMNS)
        if not explain:
            return rows, None
        path_row = None
        if space.index_name is not None and np.any(vec):
            path_sql, path_params = ranking_sql(ranking, path=True)
            path_row = (yield Statement(path_sql, path_params, ("n", "ok")))[0]
        return rows, self._search_plan(ranking, path_row)

    def _search_plan(self, r: Ranking, row: Any, stream: str = "vector") -> SearchPlan:
        """The :class:`SearchPlan` of ranking ``r``; ``row`` is its path statement's row (None
        for an unindexed space or a zero query vector, whose path is known without it)."""
        filtered = bool(validate_filters(r.filters))
        index_name = r.index_name
        if not np.any(r.vector):
            return SearchPlan(stream, "exact", filtered, index_name,
                              detail="zero query vector: every entry scores 0 (ties by entry id)")
        if index_name is None:
            return SearchPlan(stream, "exact", filtered, None, detail="no HNSW index in this space: exact scan")
        t = r.exact_threshold
        fell_short = not bool(row.ok)
        if filtered:
            n = int(row.n)
            if n <= t:
                return SearchPlan(stream, "exact", True, index_name, n, t,
                                  detail=f"{n} matching entries (at most {t}): exact scan of them")
            return SearchPlan(stream, "hnsw", True, index_name, n, t, fell_short, r.ef_search,
                              detail="HNSW strict-order iterative scan, filter checked per row"
                              + ("; too few rows, exact scan answered" if fell_short else ""))
        return SearchPlan(stream, "hnsw", False, index_name, None, None, fell_short, r.ef_search,
                          detail="HNSW relaxed-order iterative scan"
                          + ("; too few rows, exact scan answered" if fell_short else ""))

    # -- search ---------------------------------------------------------------------
    def search(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
               min_score: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` entries most similar to ``query``: ``(entry id, cosine)`` pairs, best first.

        ``filters`` are exact metadata filters applied before top-K; ``min_score`` is
        inclusive. Raises :class:`ValidationError` for bad arguments and what the
        embedding function raises.
        """
        vec = self._embed_text_query(query, k, filters, min_score)
        return self._store.run(self._ids_plan(vec, k, filters, min_score))

    def _ids_plan(self, vec: npt.NDArray[np.float32], k: int, filters: Mapping[str, str] | None,
                        min_score: float) -> Plan[list[tuple[str, float]]]:
        statement = yield from self._ranking_plan(vec, k, filters=filters, min_score=min_score)
        if statement is None:
            return []
        rows = yield statement
        return [(r.entry_id, float(r.score)) for r in rows]

    def _embed_text_query(self, query: object, k: object, filters: object,
                          min_score: object) -> npt.NDArray[np.float32]:
        """Validate a text query's arguments (before embedding it) and embed it."""
        text = check_query_text(query)
        _check_k(k)
        check_number(min_score, "min_score")
        validate_filters(filters)  # type: ignore[arg-type]
        return self.embed_query(text)

    def _rows_statement(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                        min_score: float = 0.0,
                        columns: str = "") -> tuple[str, dict[str, Any], npt.NDArray[np.float32]] | None:
        """The statement :meth:`search_rows` runs, with the query vector; None when the space
        does not exist yet (then there is nothing to find)."""
        vec = self._embed_text_query(query, k, filters, min_score)
        basis = self._basis(int(vec.shape[0]), filters, None)
        if basis.space is None:
            return None
        sql, params = ranking_sql(self._ranking(basis.space, vec, k, filters, float(min_score), "v", basis.pairs))
        return documents_sql(sql, "v", columns or "e.id AS entry_id"), params, vec

    def search_rows(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                    min_score: float = 0.0, columns: str = "") -> list[Any]:
        """Like :meth:`search` but returns rows joined with their entries in the same statement.

        Each row has ``score`` plus ``columns`` (entry columns on alias ``e``, a code
        constant such as :data:`tnsrag_db._store.reads.ENTRY_COLUMNS`).
        """
        statement = self._rows_statement(query, k, filters=filters, min_score=min_score, columns=columns)
        if statement is None:
            return []
        return self._store.read(statement[0], statement[1])

    # -- stored vectors -------------------------------------------------------------
    def stored_vectors_plan(self, entry_ids: Sequence[str],
                            dimension: int) -> Plan[dict[str, npt.NDArray[np.float32]]]:
        """The vectors this view's space of ``dimension`` holds for ``entry_ids``, by entry id,
        as a plan (the space row first when the cache cannot answer; then one statement). An
        id without a vector in that space (an entry written without one, or not at all) is
        absent from the answer; so is every id before the space's first write."""
        ids = list(dict.fromkeys(entry_ids))
        space = yield from self._spaces.query_plan(dimension)
        if space is None or not ids:
            return {}
        rows = yield Statement(STORED_VECTORS, {"c": self._store.corpus, "s": space.space_id, "ids": ids},
                               ("entry_id", "embedding"))
        return {r.entry_id: np.asarray(r.embedding, dtype=np.float32) for r in rows}

    def stored_vectors(self, entry_ids: Sequence[str], dimension: int) -> dict[str, npt.NDArray[np.float32]]:
        """:meth:`stored_vectors_plan` run on the store (at most two round trips)."""
        return self._store.run(self.stored_vectors_plan(entry_ids, dimension))

    # -- explanations -----------------------------------------------------------------
    def _space_of(self, query_vector: npt.NDArray[np.float32], *,
                  basis: QueryBasis | None = None) -> tuple[int, int] | None:
        """``(space_id, dimension)`` of the space a query vector searches; None before the first
        write. Without I/O given ``basis`` (:meth:`basis_plan`)."""
        space = self._basis(int(query_vector.shape[0]), None, basis).space
        return None if space is None else (space.space_id, space.dimension)

    def explain_cosine(self, query_vector: npt.NDArray[np.float32], score: float, *,
                       basis: QueryBasis | None = None) -> CosineExplanation:
        """The :class:`CosineExplanation` of a score this store's search returned for
        ``query_vector``. Without I/O given ``basis`` (:meth:`basis_plan`)."""
        space = self._space_of(query_vector, basis=basis)
        dim = int(query_vector.shape[0])
        return CosineExplanation(score, score, self._embedding.name, dim, None if space is None else space[0])

    def explain_plan(self, execute: Callable[[Statement], Rows], query_vector: npt.NDArray[np.float32], k: int, *,
                     filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                     stream: str = "vector") -> SearchPlan:
        """Which path the ranking statement for ``query_vector`` takes (see the module docstring):
        exact scan or HNSW iterative scan, the matches it counted and whether the exact
        fallback answered. For an indexed space this runs the statement's own path-choosing
        part with ``execute`` (a statement executor: run it in the snapshot that ranked, same
        answer)."""
        vec, k, score = self._query_vector(query_vector, k, filters, min_score, fix=True)
        basis = run_plan(self.basis_plan(int(vec.shape[0]), filters), execute)
        space = basis.space
        if space is None:
            return SearchPlan(stream, "none", bool(validate_filters(filters)),
                              detail="no embedding space yet: nothing to search")
        ranking = self._ranking(space, vec, k, filters, score, "v", basis.pairs)
        row = None
        if space.index_name is not None and np.any(vec):
            sql, params = ranking_sql(ranking, path=True)
            (row,) = execute(Statement(sql, params))
        return self._search_plan(ranking, row, stream)
