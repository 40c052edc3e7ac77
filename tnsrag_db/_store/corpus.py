"""One corpus's row and write lock (:class:`Corpus`), and its write transactions (:class:`Writer`).

Every write and delete of a corpus takes the corpus's advisory lock in shared mode first
(:meth:`Corpus.text_config` does, creating the corpus row on first use); ``drop_corpus``
takes it exclusively. A :class:`Writer` runs the write pipeline of
:mod:`tnsrag_db._store.write` in transactions of the store's
:class:`~tnsrag_db._db.session.Session`, and refreshes the planner statistics after bulk
writes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from tnsrag_db import _telemetry
from tnsrag_db._db.lock_holders import advisory_lock
from tnsrag_db._db.pool import Connection
from tnsrag_db._db.session import Session
from tnsrag_db._errors import ConfigurationError, DatabaseError
from tnsrag_db._store import sql
from tnsrag_db._store.bm25.merge import MergeReport, merge_postings
from tnsrag_db._store.lock_keys import ROW_AFTER_LOCK_SQL, corpus_keys
from tnsrag_db._store.staging import prepare_stage_tables
from tnsrag_db._store.write import (
    ValidatedBatch,
    WriteExtension,
    WriteReport,
    delete_matching,
    run_write,
    write_entries,
)
from tnsrag_db._types import MemoryEntry, is_unicode_text, name_form
from tnsrag_db._validate import is_int

__all__ = ["DEFAULT_ANALYZE_AFTER_ROWS", "DEFAULT_MERGE_AFTER_ENTRIES", "Corpus", "Writer", "check_analyze_after_rows",
           "check_merge_after_entries"]

_T = TypeVar("_T")

#: Bulk writes of at least this many entries refresh the planner statistics (see
#: :meth:`Writer.refresh_statistics`; ``connect(analyze_after_rows=...)``).
DEFAULT_ANALYZE_AFTER_ROWS = 5000
#: A writer merges the BM25 postings it wrote into blocks after this many entries (see
#: :mod:`tnsrag_db._store.bm25.merge`): the delta of per-entry rows stays small.
DEFAULT_MERGE_AFTER_ENTRIES = 8192
#: Entries one merge transaction takes at most.
MERGE_BATCH = 20_000
#: Entries the one merge after a bulk load (:meth:`Writer.merges_deferred`) takes in one
#: transaction at most: each transaction of a merge reads the corpus's whole delta, so a
#: load merged in transactions of :data:`MERGE_BATCH` would read it again for every one.
BULK_MERGE_BATCH = 100_000
_ANALYZABLE = frozenset({"embeddings", "edges", "bm25_df", "bm25_stats", "bm25_blocks", "bm25_docs"})
#: The tables a merge changes most: analysed after a merge of many entries.
_MERGED_TABLES = ("bm25_postings", "bm25_blocks", "bm25_docs")


_MAX_CORPUS = 200

_log = logging.getLogger("tnsrag_db")

#: The name the corpus write lock's keys are hashed from (with the row's salt).
_LOCK_NAME = "tnsrag_db.corpus:{schema}:{corpus}"


def check_analyze_after_rows(value: object) -> int:
    """``value`` if it is an int >= 1, else :class:`ConfigurationError` naming the option."""
    if not is_int(value) or value < 1:
        raise ConfigurationError(f"analyze_after_rows must be an int >= 1, got {value!r}")
    return value


def check_merge_after_entries(value: object) -> int:
    """``value`` if it is an int >= 1, else :class:`ConfigurationError` naming the option."""
    if not is_int(value) or value < 1:
        raise ConfigurationError(f"merge_after_entries must be an int >= 1, got {value!r}")
    return value


def check_corpus_name(corpus: object) -> str:
    """``corpus`` in Unicode normal form NFC if it is a usable corpus name (the same name typed
    composed or decomposed is one corpus), else :class:`ConfigurationError`."""
    if not isinstance(corpus, str) or not corpus.strip() or "\x00" in corpus or len(corpus) > _MAX_CORPUS \
            or not is_unicode_text(corpus):
        raise ConfigurationError(f"corpus must be a non-blank string of at most {_MAX_CORPUS} characters, "
                                 f"got {corpus!r}")
    return name_form(corpus)


class Corpus:
    """The corpus ``name`` of ``schema``: its row (created with ``text_config`` on first
    use) and its write lock. Not shared between stores (each caches whether its row exists)."""

    def __init__(self, name: str, *, schema: str, text_config: str) -> None:
        self._name = name
        self._schema = schema
        self._text_config = text_config
        self._ready = False
        #: The lock keys of the corpus row last seen (see :meth:`lock`).
        self._keys: tuple[int, ...] | None = None
        self._expiry: dict[str, Any] | None = None
        self._history = False

    @property
    def name(self) -> str:
        """The corpus name."""
        return self._name

    @property
    def schema(self) -> str:
        """The PostgreSQL schema of the corpus's tables."""
        return self._schema

    def text_config(self, conn: Connection) -> str:
        """The corpus's text search configuration, creating the corpus row on first use.

        Also takes the corpus's write lock in shared mode until ``conn``'s transaction ends
        (see :meth:`lock`), as every write does before it touches an entry.
        """
        while True:
            if not self._ready:
                conn.execute(("INSERT INTO corpora (corpus, text_config) VALUES (:c, :cfg) "
                                     "ON CONFLICT (corpus) DO NOTHING"), {"c": self._name, "cfg": self._text_config})
            cfg = self._lock(conn, shared=True)
            if cfg is not None:
                self._ready = True
                return cfg
            self._ready = False  # the corpus was deleted meanwhile: create it again

    @property
    def expiry_policy(self) -> dict[str, Any] | None:
        """The corpus's default expiry as its row held it when this transaction took the
        write lock (``{"ttl": seconds, "tiers": {tier: seconds}}``, see
        :meth:`tnsrag_db.Store.set_expiry`), or None."""
        return self._expiry

    @property
    def keeps_history(self) -> bool:
        """Whether the corpus keeps the versions its writes replace and its deletes close, as its
        row held it when this transaction took the write lock (:meth:`tnsrag_db.Store.set_history`)."""
        return self._history

    def forget(self) -> None:
        """The corpus row was deleted: the next write creates it again."""
        self._ready = False
        self._keys = None

    def lock(self, conn: Connection, *, shared: bool) -> bool:
        """Take the corpus's transaction-level advisory lock: shared for writes and deletes,
        exclusive for ``drop_corpus``; False when the corpus has no row (nothing to lock:
        no write created it yet, or a drop deleted it while this waited).

        BM25 postings carry no foreign key (bulk writes stay fast), so nothing else stops a
        write that only rewrites existing entries (it locks no corpus row) from committing
        new postings behind a concurrent drop's back: orphans, and later writes of the same
        ids failed on the postings' primary key. With the lock, a drop waits for the writes
        in flight and writes arriving later wait for the drop, which the lock manager queues
        fairly (a drop waiting for ``FOR UPDATE`` on the corpus row instead would starve
        behind writers whose ``FOR KEY SHARE`` locks overlap).

        The key mixes in the corpus row's secret salt (see
        :mod:`tnsrag_db._store.lock_keys`): no role the row is hidden from can compute it.
        Its wait is bounded by the session's ``lock_timeout`` (a tenant role's, see
        ``tnsrag_db.tenancy.grant``), past which
        :class:`~tnsrag_db._errors.LockTimeoutError` names the holder's role. After the
        wait the row is read again: a drop that went first deleted it (or a write re-created
        it with a new salt), and the lock is taken again on what is there now.
        """
        return self._lock(conn, shared=shared) is not None

    def _lock(self, conn: Connection, *, shared: bool) -> str | None:
        """:meth:`lock`; returns the corpus's text search configuration (None: no row)."""
        name = _LOCK_NAME.format(schema=self._schema, corpus=self._name)
        while True:
            keys = self._keys if self._keys is not None else corpus_keys(conn, name, self._name)
            if keys is None:
                return None
            for key in keys:
                advisory_lock(conn, key, shared=shared)
            row = conn.execute(ROW_AFTER_LOCK_SQL, {"k": name, "c": self._name}).first()
            if row is not None and int(row.last_key) == keys[-1]:
                self._expiry = row.expiry if isinstance(row.expiry, dict) else None
                self._history = row.history is True
                # Kept for the next transaction, save the old keys of a rolling upgrade: read
                # again each time, so that a process stops taking them once it is finished.
                self._keys = keys if len(keys) == 1 else None
                return str(row.text_config)
            self._keys = None
            if row is None:
                return None


class Writer:
    """The write transactions of ``corpus`` in ``session``."""

    def __init__(self, session: Session, corpus: Corpus, *,
                 analyze_after_rows: int = DEFAULT_ANALYZE_AFTER_ROWS,
                 merge_after_entries: int = DEFAULT_MERGE_AFTER_ENTRIES) -> None:
        self._session = session
        self._corpus = corpus
        self._analyze_after_rows = check_analyze_after_rows(analyze_after_rows)
        self._merge_after = check_merge_after_entries(merge_after_entries)
        self._unmerged = 0
        self._deferral_logged = False
        self._merges_deferred = 0  # depth of merges_deferred() blocks
        self._deferred_written = 0  # entries written inside them, and the tables their writes name
        self._deferred_analyze: dict[str, None] = {}

    @property
    def analyze_after_rows(self) -> int:
        """The fewest entries a bulk write must write to refresh the planner statistics."""
        return self._analyze_after_rows

    @property
    def merge_after_entries(self) -> int:
        """After how many written entries this writer merges the BM25 postings into blocks."""
        return self._merge_after

    @property
    def corpus(self) -> Corpus:
        """The corpus written (its row, text search configuration and write lock)."""
        return self._corpus

    def transaction(self, work: Callable[[Connection], _T], *, analyze: Sequence[str] = ()) -> _T:
        """Run ``work(conn)`` in one transaction: the one way the library's writes commit.

        The stage tables are prepared first (once per connection). When PostgreSQL aborts
        the transaction to break a deadlock, ``work`` runs again, whole. After the commit,
        the entries ``work`` wrote through :func:`~tnsrag_db._store.write.write_entries`
        count toward :meth:`refresh_statistics` (``analyze`` names further library tables),
        which runs before the merge into blocks that follows every ``merge_after_entries``
        written entries.
        """
        written = 0

        def counted(conn: Connection) -> _T:
            nonlocal written
            # The dict itself, not conn.info again in the finally: after a disconnect
            # SQLAlchemy refuses every use of conn ("Can't reconnect until invalid
            # transaction is rolled back"), which hid the error that broke the write.
            info = conn.info
            info[sql.WRITTEN] = 0
            try:
                result = work(conn)
                written = info[sql.WRITTEN]
            finally:
                info.pop(sql.WRITTEN, None)
            return result

        result = self._session.write_transaction(counted, prepare=prepare_stage_tables)
        self._unmerged += written
        if self._merges_deferred:  # a bulk load: refreshed and merged once at its end (merges_deferred)
            self._deferred_written += written
            self._deferred_analyze.update(dict.fromkeys(analyze))
            return result
        # The statistics before the merge, which then plans on what the write added (to
        # statistics taken before, a corpus they never saw is one row).
        refreshed = self.refresh_statistics(written, analyze)
        self._merge_written(refreshed)
        return result

    @contextlib.contextmanager
    def merges_deferred(self) -> Iterator[None]:
        """A bulk load: inside the block, the writes of this writer neither merge their BM25
        postings into blocks nor refresh the planner statistics as they commit; when the
        block ends without an error, the statistics are refreshed once for everything
        written inside it (:meth:`refresh_statistics`) and the postings merged in one
        :meth:`merge` when they reach ``merge_after_entries``, as one write of that size
        would, in one transaction of up to :data:`BULK_MERGE_BATCH` entries. A merge every
        ``merge_after_entries`` during a load re-cuts the tail block of most terms each
        time and reads the delta again; once at the end it writes each term's blocks once.

        Queries meanwhile read the new postings as rows (exact either way). When the block
        ends with an error (an interrupt), nothing more is done: the rows stay for the next
        write's merge or ``tnsrag db merge-postings``. Blocks nest (the outermost merges).
        """
        self._merges_deferred += 1
        try:
            yield
        finally:
            self._merges_deferred -= 1
            written, analyze = self._deferred_written, tuple(self._deferred_analyze)
            if not self._merges_deferred:
                self._deferred_written, self._deferred_analyze = 0, {}
        if self._merges_deferred:
            return
        refreshed = self.refresh_statistics(written, analyze)
        self._merge_written(refreshed, batch=min(max(written, MERGE_BATCH), BULK_MERGE_BATCH))

    def _merge_written(self, refreshed: bool, *, batch: int | None = None) -> None:
        """Merge the corpus's postings when this writer has written ``merge_after_entries``
        since its last merge (``refreshed``: the statistics were just refreshed), ``batch``
        entries a transaction. A failed merge warns; the writes stand."""
        if self._unmerged < self._merge_after:
            return
        self._unmerged = 0
        try:
            merged = self.merge(wait=False, batch=batch)
            if merged.entries:
                if refreshed and merged.entries < self._analyze_after_rows:  # (more: merge() analysed)
                    self._analyze(_MERGED_TABLES)  # the delta was analysed full, the blocks before
            elif merged.held_by:
                # Another role holds the corpus's merge lock (it learnt the key: see
                # tnsrag_db._store.lock_keys): the next write tries again.
                self._unmerged = self._merge_after
                _log.warning("BM25 postings of corpus %r not merged into blocks: its merge lock is held by "
                             "role(s) %s; they stay rows (queries read both) until a later merge",
                             self._corpus.name, ", ".join(map(repr, merged.held_by)))
            elif merged.deferred and not self._deferral_logged:
                self._deferral_logged = True
                _log.info("BM25 postings of corpus %r stay rows until the rolling upgrade is finished "
                          "(tnsrag db upgrade --finish): the schema still serves a release that reads "
                          "only rows", self._corpus.name)
        except DatabaseError as exc:
            # The write has committed: a merge that fails (a timeout, a lost connection,
            # a schema not yet upgraded) leaves the postings as rows, which queries read
            # as well, for the next merge. It must not report the write as failed.
            _log.warning("BM25 postings of corpus %r not merged into blocks: %s", self._corpus.name, exc)

    def merge(self, *, sweep: bool = False, wait: bool = True,
              progress: Callable[[MergeReport], None] | None = None, batch: int | None = None) -> MergeReport:
        """Merge the corpus's BM25 postings from per-entry rows into blocks, in transactions of
        at most ``batch`` entries (default :data:`MERGE_BATCH`), until none is left; returns the totals.

        ``sweep`` also takes the entries written before blocks existed (a pass over the
        corpus's entries in id order; without it only the delta's rows are read).
        ``wait=False`` gives up at once when another session holds the corpus's merge lock
        (another merge takes the same rows; the report's ``held_by`` names the holder's
        role when it is not this session's). ``wait=True`` waits for the lock at most the
        session's ``lock_timeout``, then raises :class:`~tnsrag_db._errors.LockTimeoutError`
        naming the holder's role. ``progress`` gets each transaction's report.
        """
        with _telemetry.operation("merge", self._corpus.name, sweep=sweep) as op:
            total = self._merge(sweep=sweep, wait=wait, progress=progress,
                                batch=MERGE_BATCH if batch is None else batch)
            op.count(total.entries)
            op.set("tnsrag.tombstones", total.tombstones)
            if total.entries >= self._analyze_after_rows:
                self._analyze(_MERGED_TABLES)
        return total

    def _merge(self, *, sweep: bool, wait: bool, progress: Callable[[MergeReport], None] | None,
               batch: int) -> MergeReport:
        total = MergeReport()
        after: str | None = "" if sweep else None
        while True:
            def run(conn: Connection) -> MergeReport:
                if not self._corpus.lock(conn, shared=True):
                    return MergeReport()  # no corpus row: nothing to merge
                return merge_postings(conn, schema=self._corpus.schema, corpus=self._corpus.name,
                                      max_entries=batch, after=after, max_tombstones=MERGE_BATCH, wait=wait)

            report = self._session.write_transaction(run, prepare=prepare_stage_tables)
            if progress is not None:
                progress(report)
            total = MergeReport(entries=total.entries + report.entries, postings=total.postings + report.postings,
                                blocks_written=total.blocks_written + report.blocks_written,
                                tombstones=total.tombstones + report.tombstones, last_id=report.last_id,
                                ran=total.ran and report.ran, deferred=total.deferred or report.deferred,
                                held_by=total.held_by or report.held_by)
            # More to take: entries (a sweep goes on after the last id looked at; the delta
            # while a merge moved some, not when a writer holds every entry left), or
            # tombstones beyond one transaction's share.
            more = report.last_id is not None and (after is not None or report.entries > 0)
            if not report.ran or not (more or report.tombstones >= MERGE_BATCH):
                return total
            if after is not None and report.last_id is not None:
                after = report.last_id

    def write(self, entries: Iterable[MemoryEntry], *, extensions: Sequence[WriteExtension] = (),
              progress: Callable[[int], None] | None = None) -> WriteReport:
        """Validate ``entries`` (not again for a :class:`ValidatedBatch`), then write them with
        ``extensions`` in one transaction (see :mod:`tnsrag_db._store.write`). An empty
        batch without extensions writes nothing."""
        batch = ValidatedBatch(entries)
        for extension in extensions:
            extension.validate(batch)
        if not batch and not extensions:
            return WriteReport()
        analyze = tuple(dict.fromkeys(table for extension in extensions for table in extension.analyze))
        with _telemetry.operation("write", self._corpus.name, batch=len(batch)) as op:
            report = self.transaction(lambda conn: run_write(conn, self._corpus, batch, extensions, progress=progress),
                                      analyze=analyze)
            op.count(len(report.inserted) + len(report.updated))
        return report

    def write_in(self, conn: Connection, batch: Sequence[MemoryEntry], *,
                 progress: Callable[[int], None] | None = None) -> WriteReport:
        """Write already-validated ``batch`` inside the caller's open transaction ``conn``."""
        return write_entries(conn, self._corpus, batch, progress=progress)

    def delete(self, predicate: str, params: dict[str, Any], *, outright: bool = False) -> int:
        """Delete the entries matching ``predicate`` in a write transaction; returns how many.
        In a corpus that keeps history the current versions are closed instead (kept as
        versions), unless ``outright``.

        A delete takes its rows in id order like every writer; only a ``GraphStore``
        ``add_with_edges`` reaching entries outside its batch can cross it, and then
        PostgreSQL may pick the delete to abort: it runs again.
        """
        with _telemetry.operation("delete", self._corpus.name) as op:
            deleted = self.transaction(lambda conn: delete_matching(conn, self._corpus, predicate, params,
                                                                    outright=outright))
            op.count(deleted)
        return deleted

    def refresh_statistics(self, written: int, extra_tables: Sequence[str] = ()) -> bool:
        """ANALYZE ``entries`` and ``bm25_postings`` (and ``extra_tables``, library table
        names) after a bulk write of ``written`` rows, when that is at least 10 % of the
        ``entries`` table (autovacuum's rule, but now rather than a minute later: until then
        the planner sizes a freshly loaded corpus from stale statistics and picks slow plans),
        or when the planner estimates the corpus at less than a tenth of ``written`` (a new
        corpus in a large table).

        Skipped below :attr:`analyze_after_rows` rows. Runs in a transaction of its own after
        the write committed and never waits for a table lock (``SKIP_LOCKED``): a table that
        another session is analysing, vacuuming or indexing concurrently is left to it.
        Waiting there could deadlock with a ``CREATE INDEX CONCURRENTLY``, which waits for
        this transaction's snapshot. Returns True when it ran, False when skipped.
        """
        unknown = sorted(set(extra_tables) - _ANALYZABLE)
        if unknown:
            raise ConfigurationError(f"cannot analyse {', '.join(map(repr, unknown))}; "
                                     f"choose from {', '.join(sorted(_ANALYZABLE))}")
        if written < self._analyze_after_rows:
            return False
        with self._session.transaction(limited=False) as conn:
            rows = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass").scalar_one()
            if rows >= 0 and written < 0.1 * rows and self._planned_rows(conn) * 10 >= written:
                return False
        self._analyze(("entries", "bm25_postings", *extra_tables))
        return True

    def _planned_rows(self, conn: Connection) -> float:
        """The planner's estimate of the corpus's entries. A corpus the statistics have not
        seen is about one row to it, however large the table: a write that is a small share
        of the table but most of its corpus refreshes them too, or every probe of the
        corpus's entries by id may take an index on ``corpus`` alone and scan them all."""
        plan = conn.execute("EXPLAIN (FORMAT JSON) SELECT 1 FROM entries WHERE corpus = :c",
                            {"c": self._corpus.name}).scalar_one()
        return float(plan[0]["Plan"]["Plan Rows"])

    def _analyze(self, tables: Sequence[str]) -> None:
        """``ANALYZE (SKIP_LOCKED)`` of library tables, in a transaction of its own."""
        with self._session.transaction(limited=False) as conn:
            conn.execute(f"ANALYZE (SKIP_LOCKED) {', '.join(dict.fromkeys(tables))}")
