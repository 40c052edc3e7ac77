"""The entry write pipeline, as named steps, and the extensions that join its transaction.

One write of a batch runs these steps in one transaction (each a function below)::

    validate   every entry checked, duplicates refused        (no I/O; then extensions' validate)
    stage      COPY the batch, its text chunks and extra terms  into the stage tables
    terms      the chunks' lexemes and each entry's length      (tnsrag_stage_terms, _lens)
    classify   insert the new entries, lock the existing ones   (in id order), new/changed/unchanged
    rewrite    update changed entries; drop their old postings and stale vectors
    postings   the new postings, df deltas and corpus statistics

The text analysis of the stage step, the statements of the terms and postings steps and the
BM25 side of a delete are BM25's (:mod:`tnsrag_db._store.bm25`); the entry statements and
the planner settings are :mod:`tnsrag_db._store.sql`.

Extensions (:class:`WriteExtension`: vectors, edges, hierarchy and timestamp checks) join
the same transaction: ``validate`` before any I/O, ``before`` ahead of the entry steps
(locks), ``after`` behind them (their own rows, checks), ``finish`` always. The whole
transaction runs again after a deadlock, extensions included.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timezone
from typing import Any, Protocol

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.pool import Connection
from tnsrag_db._errors import DatabaseError, InvalidEntryError
from tnsrag_db._store import history, sql
from tnsrag_db._store.bm25 import sql as bm25_sql
from tnsrag_db._store.bm25.analysis import analyze
from tnsrag_db._store.staging import ENTRY_STAGE_TABLES, ensure_stage_tables, reset_entry_stage
from tnsrag_db._types import MemoryEntry

__all__ = ["StagedBatch", "ValidatedBatch", "WriteExtension", "WriteReport", "WriteTarget", "classify", "content_hash",
           "delete_matching", "rewrite_changed", "run_write", "stage", "stage_terms", "validate_batch", "write_entries",
           "write_kept_rows", "write_postings"]

#: Batches at least this large ANALYZE their stage tables before the set-based steps.
ANALYZE_STAGE_ROWS = 1000


class WriteTarget(Protocol):
    """What the steps need of the corpus written (:class:`tnsrag_db._store.corpus.Corpus`)."""

    @property
    def name(self) -> str: ...

    def text_config(self, conn: Connection) -> str: ...

    def lock(self, conn: Connection, *, shared: bool) -> bool: ...

    @property
    def expiry_policy(self) -> Mapping[str, Any] | None: ...


@dataclass(slots=True)
class WriteReport:
    """Ids of a write by outcome; ``content_changed`` are the updated ids whose text changed."""

    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    content_changed: list[str] = field(default_factory=list)

    @property
    def counts(self) -> IngestCounts:
        """The counts of this report."""
        return IngestCounts(len(self.inserted), len(self.updated), len(self.unchanged))


class WriteExtension:
    """Work that joins an entry write's transaction; override the hooks you need.

    Passed to :meth:`Store.write` (``extensions=[...]``), run in list order: ``validate``
    for all, then ``before`` for all, the entry steps, ``after`` for all, and ``finish``
    for each whose ``before`` ran (in reverse order, on success and on failure). Raising
    from a hook rolls the whole write back. A deadlock runs the transaction again, hooks
    included (``validate`` excepted), so keep results as attributes set by ``after``.
    """

    #: Library tables this extension writes, refreshed with ``entries`` after bulk writes
    #: (see :meth:`~tnsrag_db._store.corpus.Writer.refresh_statistics`).
    analyze: tuple[str, ...] = ()

    def validate(self, batch: Sequence[MemoryEntry]) -> None:
        """Check the validated batch before any I/O (raise to refuse it)."""

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        """Inside the transaction, before the entries are written (take locks here)."""

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        """Inside the transaction, after the entries, their postings and statistics."""

    def finish(self, conn: Connection) -> None:
        """Inside the transaction, last, whether the write succeeded or not (undo ``before``)."""


def content_hash(entry: MemoryEntry) -> bytes:
    """SHA-256 over every stored field of ``entry``: equal hashes mean an identical entry."""
    ts = entry.timestamp.astimezone(timezone.utc).isoformat() if entry.timestamp is not None else None
    payload: list[object] = [entry.content, entry.tier.name, entry.source, entry.parent_id, ts,
                             sorted(entry.metadata.items())]
    if entry.expires_at is not None or entry.ttl is not None:  # no expiry: the hash of earlier releases
        expires = entry.expires_at.astimezone(timezone.utc).isoformat() if entry.expires_at is not None else None
        payload.append([expires, entry.ttl])
    if entry.valid_from is not None or entry.valid_until is not None:  # none: the hash of earlier releases
        payload.append(["valid", *(v.astimezone(timezone.utc).isoformat() if v is not None else None
                                   for v in (entry.valid_from, entry.valid_until))])
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()).digest()


# -- step 1: validate -----------------------------------------------------------------
def validate_batch(entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
    """Check every entry of a batch (type, fields, duplicate ids) before anything is written.

    Raises :class:`InvalidEntryError` naming the entry (id and position).
    """
    batch = list(entries)
    seen: dict[str, int] = {}
    for index, entry in enumerate(batch):
        if not isinstance(entry, MemoryEntry):
            raise InvalidEntryError(f"batch item {index} is a {type(entry).__name__}, not a MemoryEntry", index=index)
        entry.validate(index)
        first = seen.setdefault(entry.id, index)
        if first != index:
            raise InvalidEntryError(f"entry id {entry.id!r} appears twice in the batch (positions {first} and {index})",
                                    entry_id=entry.id, index=index)
    return batch


class ValidatedBatch(tuple[MemoryEntry, ...]):
    """A batch that passed :func:`validate_batch`: built only by validating (from a
    ``ValidatedBatch``, for free), immutable, its entries frozen. :meth:`Store.write`
    takes one without checking it again, so an index that validates a batch before its
    own pre-transaction work (embedding) pays for the checks once."""

    __slots__ = ()

    def __new__(cls, entries: Iterable[MemoryEntry] = ()) -> ValidatedBatch:
        if type(entries) is cls:
            return entries  # checked when it was built
        return super().__new__(cls, validate_batch(entries))

    def part(self, start: int, stop: int) -> ValidatedBatch:
        """Entries ``start`` to ``stop`` (a slice), a batch of their own without checking
        them again: they were checked, ids distinct, as part of this one."""
        return tuple.__new__(ValidatedBatch, self[start:stop])

    def only(self, ids: Iterable[str]) -> ValidatedBatch:
        """The entries whose id is in ``ids``, in this batch's order, without checking them again."""
        keep = set(ids)
        return tuple.__new__(ValidatedBatch, (e for e in self if e.id in keep))


# -- step 2: stage --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StagedBatch:
    """A batch in the stage tables: its size, and whether it is large enough to ANALYZE them."""

    size: int
    large: bool
    #: Some entry of the batch expires (``expires_at`` or ``ttl``).
    expiring: bool = False
    #: Some entry of the batch states a validity (``valid_from`` or ``valid_until``).
    bounded: bool = False


def stage(conn: Connection, batch: Sequence[MemoryEntry], *,
          progress: Callable[[int], None] | None = None, expiry: Mapping[str, Any] | None = None) -> StagedBatch:
    """COPY the batch (with its hashes), its text chunks and extra terms into the stage
    tables of ``conn``'s open transaction; ``progress`` gets the number analysed so far.
    ``expiry`` is the corpus's default (see :func:`default_ttl`) for entries without one."""
    reset_entry_stage(conn)
    expiring = bounded = False
    raw = conn.driver
    assert raw is not None
    with raw.cursor() as cur:
        with cur.copy("COPY tnsrag_stage_entries (ord, id, content, tier, source, parent_id, ts, metadata, "
                      "content_hash, expires_at, ttl, valid_from, valid_until) FROM STDIN") as copy:
            for i, e in enumerate(batch):
                ttl = e.ttl if e.ttl is not None or e.expires_at is not None else default_ttl(expiry, e.tier.name)
                expiring = expiring or ttl is not None or e.expires_at is not None
                bounded = bounded or e.valid_from is not None or e.valid_until is not None
                copy.write_row((i, e.id, e.content, e.tier.name, e.source, e.parent_id, e.timestamp,
                                json.dumps(dict(e.metadata), ensure_ascii=False), content_hash(e), e.expires_at,
                                ttl, e.valid_from, e.valid_until))
        # One COPY at a time per connection: analyse first, then stream each table.
        analyzed = []
        for i, e in enumerate(batch):
            analyzed.append(analyze(e.content))
            if progress is not None and (i + 1) % 1000 == 0:
                progress(i + 1)
        with cur.copy("COPY tnsrag_stage_chunks (ord, chunk, single) FROM STDIN") as copy:
            for i, a in enumerate(analyzed):
                single = len(a.chunks) == 1 and not a.extra_terms
                for chunk in a.chunks:
                    copy.write_row((i, chunk, single))
        if any(a.extra_terms for a in analyzed):  # most batches have none: one round trip less
            with cur.copy("COPY tnsrag_stage_extras (ord, term) FROM STDIN") as copy:
                for i, a in enumerate(analyzed):
                    for term in a.extra_terms:
                        copy.write_row((i, term))
    if progress is not None:
        progress(len(batch))
    return StagedBatch(len(batch), len(batch) >= ANALYZE_STAGE_ROWS, expiring, bounded)


def default_ttl(expiry: Mapping[str, Any] | None, tier: str) -> float | None:
    """The corpus's default time-to-live for an entry of ``tier`` without an expiry of its
    own: its tier's (``expiry["tiers"][tier]``), else the corpus's (``expiry["ttl"]``)."""
    if not expiry:
        return None
    tiers = expiry.get("tiers") or {}
    value = tiers.get(tier, expiry.get("ttl"))
    return float(value) if value is not None else None


# -- step 3: terms --------------------------------------------------------------------
def stage_terms(conn: Connection, staged: StagedBatch, text_config: str) -> None:
    """Derive the staged chunks' lexemes (``tnsrag_stage_terms``) and each entry's length
    and lexemes (``tnsrag_stage_lens``) with ``text_config``.

    Terms and lengths come first, so entries are inserted with their final doc_len (no
    second write of every new row), into a narrow table of their own (updating the wide
    stage rows instead would rewrite them).
    """
    # Temp tables get no statistics on their own; without row counts the planner
    # picks nested loops that are quadratic in the batch size.
    if staged.large:
        for table in ENTRY_STAGE_TABLES[:3]:
            conn.execute(f"ANALYZE {table}")
    conn.execute(bm25_sql.STAGED_TERMS_SQL, {"cfg": text_config})


# -- step 4: classify -----------------------------------------------------------------
def classify(conn: Connection, corpus: str, staged: StagedBatch) -> tuple[WriteReport, int]:
    """Insert the new entries and lock the existing ones, then tell changed from unchanged.

    Returns the report (``inserted`` in batch order) and the old length of the entries
    whose text changed. Every later step joins the stage tables (state ``i`` inserted,
    ``c`` text changed, ``u`` other fields changed, ``n`` unchanged) instead of passing id
    arrays: ``= ANY(array)`` over a large array is quadratic.
    """
    c = {"c": corpus}
    inserted = list(conn.execute((sql.insert_or_lock_sql(staged.expiring, staged.bounded)), c).scalars())
    report = WriteReport()
    old_len = 0
    if len(inserted) < staged.size:
        rows = conn.execute(sql.COMPARE_SQL, c).all()
        if len(rows) + len(inserted) != staged.size:  # cannot happen: every entry was inserted or locked
            raise DatabaseError(f"write to corpus {corpus!r} lost track of {staged.size - len(inserted) - len(rows)} "
                                "entries; the transaction was rolled back")
        ords: list[int] = []
        states: list[str] = []
        tids: list[str] = []
        for row in rows:
            if row.same:
                report.unchanged.append(row.id)
                state = "n"
            elif row.text_changed:
                report.updated.append(row.id)
                report.content_changed.append(row.id)
                old_len += row.doc_len
                state = "c"
            else:
                report.updated.append(row.id)
                state = "u"
            ords.append(row.ord)
            states.append(state)
            tids.append(row.tid)
        if ords:
            conn.execute(sql.SET_STATES_SQL, {"ords": ords, "states": states, "tids": tids})
    if staged.large:  # the states are set now, and the steps below filter on them
        conn.execute("ANALYZE tnsrag_stage_entries (ord, id, state)")
        conn.execute("ANALYZE tnsrag_stage_terms")
        conn.execute("ANALYZE tnsrag_stage_lens")
    report.inserted = inserted  # in batch order
    return report, old_len


# -- step 5: rewrite ------------------------------------------------------------------
def rewrite_changed(conn: Connection, corpus: str, report: WriteReport) -> None:
    """Update the changed entries; for those whose text changed, drop their old postings
    (counted as df deltas) and their vectors (stale vectors must not outlive their text).

    Rows to delete are found by primary-key probes in one statement and deleted by ctid in
    the next (:func:`_delete_staged`), so the statistics, which may not know the corpus
    yet, choose neither."""
    c = {"c": corpus}
    if report.content_changed:
        _delete_staged(conn, bm25_sql.STAGE_OLD_POSTINGS_SQL, bm25_sql.OLD_POSTINGS_GONE_SQL, c)
    if report.updated:
        ids = list(conn.execute(sql.CHANGED_IDS_SQL).scalars())
        with sql.hash_joins_only(conn):
            conn.execute(sql.UPDATE_CHANGED_SQL, {**c, "ids": ids})
    if report.content_changed:
        _delete_staged(conn, sql.STAGE_STALE_VECTORS_SQL, sql.OLD_VECTORS_GONE_SQL, c)


def _delete_staged(conn: Connection, stage_sql: str, gone_sql: str, params: dict[str, Any]) -> None:
    """Stage rows by ctid into ``tnsrag_stage_old`` with ``stage_sql`` (planned as usual),
    then delete them with ``gone_sql`` under TID scans only (no trigger on the tables
    deleted from, whose queries would be planned so too)."""
    conn.execute("DELETE FROM tnsrag_stage_old")
    conn.execute(stage_sql, params)
    _delete_old(conn, gone_sql, params)


def _delete_old(conn: Connection, gone_sql: str, params: dict[str, Any]) -> None:
    """Delete the rows staged in ``tnsrag_stage_old`` with ``gone_sql``, their ctids bound
    as one constant array, under TID scans only."""
    tids = conn.execute(sql.STAGED_OLD_SQL).scalar_one()
    if tids is not None:
        with sql.tid_scans_only(conn):
            conn.execute(gone_sql, {**params, "tids": tids})


# -- step 6: postings -----------------------------------------------------------------
def write_postings(conn: Connection, corpus: str, report: WriteReport, old_len: int) -> None:
    """Insert the postings of new and rewritten texts, apply the df deltas, and move the
    corpus statistics by the documents and length the write added."""
    c = {"c": corpus}
    new_len = 0
    if report.inserted or report.content_changed:
        conn.execute(bm25_sql.INSERT_POSTINGS_SQL, c)
        new_len = conn.execute(bm25_sql.STAGE_DF_SQL).scalar_one()
        conn.execute(bm25_sql.APPLY_DF_SQL.format(source="tnsrag_stage_df"), {**c, "shard": bm25_sql.stat_shard()})
    bm25_sql.bump_stats(conn, corpus, len(report.inserted), int(new_len) - old_len)


def write_entries(conn: Connection, corpus: WriteTarget, batch: Sequence[MemoryEntry], *,
                  progress: Callable[[int], None] | None = None) -> WriteReport:
    """Steps 2 to 6 for already-validated ``batch`` inside ``conn``'s open transaction; in a
    corpus that keeps history, the entries replaced are kept as versions first
    (:mod:`tnsrag_db._store.history`)."""
    text_config = corpus.text_config(conn)  # takes the corpus's write lock, shared
    reopened: list[str] = []
    if getattr(corpus, "keeps_history", False):
        reopened = history.keep_versions(conn, corpus.name, batch, [content_hash(e) for e in batch],
                                         lambda c, versions: _write_rows(c, corpus.name, versions, text_config))
    report = _write_rows(conn, corpus.name, batch, text_config, progress=progress, expiry=corpus.expiry_policy)
    history.reopen(conn, corpus.name, reopened)
    return report


def write_kept_rows(conn: Connection, corpus: WriteTarget, rows: Sequence[history.KeptRow],
                    recorded: Mapping[str, Any]) -> None:
    """A restore's closed rows and recording instants (:func:`~tnsrag_db._store.history.restore_rows`),
    in ``conn``'s open transaction after its current entries: the rows are written as
    entries (their postings, statistics and df counted as any entry's), then recorded."""
    if not rows and not recorded:
        return
    text_config = corpus.text_config(conn)
    history.restore_rows(conn, corpus.name, rows, recorded,
                         lambda c, entries: _write_rows(c, corpus.name, entries, text_config))


def _write_rows(conn: Connection, corpus: str, batch: Sequence[MemoryEntry], text_config: str, *,
                progress: Callable[[int], None] | None = None,
                expiry: Mapping[str, Any] | None = None) -> WriteReport:
    staged = stage(conn, batch, progress=progress, expiry=expiry)
    stage_terms(conn, staged, text_config)
    report, old_len = classify(conn, corpus, staged)
    rewrite_changed(conn, corpus, report)
    write_postings(conn, corpus, report, old_len)
    sql.count_written(conn, len(report.inserted) + len(report.updated))
    return report


def delete_matching(conn: Connection, corpus: WriteTarget, predicate: str, params: dict[str, Any], *,
                    outright: bool = False) -> int:
    """Delete the entries matching ``predicate`` (the library's filter SQL over ``e``) with
    their postings, df counts and statistics, in ``conn``'s open transaction; returns how many.
    In a corpus that keeps history, close their current versions instead (unless ``outright``).

    Embeddings and edges go with their entries (foreign keys, ``ON DELETE CASCADE``).
    """
    # The corpus lock first, as writers take it: a drop_corpus waits for this delete
    # instead of deadlocking with its df and stats updates.
    corpus.lock(conn, shared=True)
    if not outright and getattr(corpus, "keeps_history", False):
        return history.close_matching(conn, corpus.name, predicate, params)
    ensure_stage_tables(conn)
    conn.execute("DELETE FROM tnsrag_stage_ids")
    conn.execute((sql.lock_matching_sql(predicate)), {"c": corpus.name, **params})
    c = {"c": corpus.name}
    conn.execute("DELETE FROM tnsrag_stage_old")
    tids = list(conn.execute(bm25_sql.STAGE_LOCKED_SQL, c).scalars())
    if not tids:
        return 0
    _delete_old(conn, bm25_sql.OLD_POSTINGS_GONE_SQL, c)
    count, length = conn.execute(bm25_sql.DELETE_LOCKED_SQL, {**c, "tids": tids, "shard": bm25_sql.stat_shard()}).one()
    if count:
        bm25_sql.bump_stats(conn, corpus.name, -int(count), -int(length))
    return int(count)


def run_write(conn: Connection, corpus: WriteTarget, batch: Sequence[MemoryEntry],
              extensions: Sequence[WriteExtension], *,
              progress: Callable[[int], None] | None = None) -> WriteReport:
    """The entry steps between the extensions' ``before`` and ``after`` hooks, in ``conn``'s
    open transaction; an empty batch runs the extensions alone."""
    started: list[WriteExtension] = []
    try:
        for extension in extensions:
            started.append(extension)
            extension.before(conn, batch)
        report = write_entries(conn, corpus, batch, progress=progress) if batch else WriteReport()
        for extension in extensions:
            extension.after(conn, batch, report)
        return report
    finally:
        for extension in reversed(started):
            extension.finish(conn)
