"""The write path of :class:`~tnsrag_db._indexes.vector.VectorMemoryStore`: entries with their
vectors in one transaction, the streaming ingest, and the space's HNSW index.

Which entries need a vector: new ones, those whose text changed and those lacking one in
the space. A pre-read (before the transaction, so the embedding runs outside it) decides
it from the entry's one stored change hash (``entries.content_hash``, see
:func:`~tnsrag_db._store.store.content_hash`): equal hash, unchanged entry; a different
hash with the same text (a change of metadata, tier or source only) keeps the vector, so
only those entries' stored texts are read back. Inside the transaction the entry write
deletes the vectors of changed texts, and whatever still lacks one is embedded then (a
concurrent writer changed it after the pre-read) and copied in binary form.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db._validate import check_int
from tnsrag_db._errors import DatabaseError, EmbeddingValidationError
from tnsrag_db._indexes.vector.copy import ROW_SECURITY_ACTIVE, copy_vectors
from tnsrag_db._indexes.vector.core import VectorCore
from tnsrag_db._indexes.vector.hnsw import (
    IndexProgress,
    build_space_index,
    build_with_progress,
    defer_build,
    drop_space_index,
    space_size_reaches,
)
from tnsrag_db._indexes.vector.ingest import IngestProgress, Stopped, run_ingest
from tnsrag_db._indexes.vector.spaces import Space
from tnsrag_db._store.write import ValidatedBatch, WriteExtension, WriteReport, content_hash
from tnsrag_db._types import IngestCounts
from tnsrag_db._types import MemoryEntry

__all__ = ["VectorWrites"]

# The pre-read: per entry of the batch (one primary-key probe each, OFFSET 0 keeps it a
# probe), whether its stored change hash equals the new one, its stored text only when it
# does not (to tell a metadata-only change from a new text), and whether it has a vector.
_NEEDING_VECTORS = """\
SELECT e.id, e.content_hash = n.hash AS same,
       CASE WHEN e.content_hash = n.hash THEN NULL ELSE e.content END AS content,
       {has_vector} AS has_vec
FROM unnest(CAST(:ids AS text[]), CAST(:hashes AS bytea[])) AS n(id, hash)
CROSS JOIN LATERAL (
    SELECT e.id, e.corpus, e.content, e.content_hash FROM entries e
    WHERE e.corpus = :c AND e.id = n.id OFFSET 0
) e"""

_HAS_VECTOR = "EXISTS (SELECT 1 FROM embeddings x WHERE x.corpus = e.corpus AND x.space_id = :s AND x.entry_id = e.id)"

# The ids of the batch without a vector in the space, after the entry write (OFFSET 0: one
# index probe per id, never an anti-join over the whole space), each with whether row-level
# security applies to this session's writes of embeddings (the COPY below needs to know).
_LACKING = f"""\
SELECT i.id, {ROW_SECURITY_ACTIVE} AS rls FROM unnest(CAST(:ids AS text[])) AS i(id)
WHERE NOT EXISTS (
    SELECT 1 FROM embeddings x WHERE x.corpus = :c AND x.space_id = :s AND x.entry_id = i.id OFFSET 0
)"""


class VectorWrites(VectorCore):
    """Writes and index maintenance of a vector view (see :class:`VectorMemoryStore`)."""

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
        check_int(batch_size, "batch_size", minimum=1)
        batch = ValidatedBatch(entries)
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
               index_progress: IndexProgress | None = None, vectors: bool = True) -> IngestCounts:
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
        batch). A batch still being embedded stops after the embedding call in progress
        and is waited for, so no worker thread outlives the call. A bad ``batch_size`` raises :class:`ValidationError` before anything.

        ``vectors=False`` (default True) writes the entries only: content, metadata and
        BM25 postings, batch by batch as above but embedding nothing, so each batch is
        keyword-searchable as soon as it commits (a changed text still loses its stale
        vector). A second call with the default then finds those entries unchanged and
        embeds only the ones lacking a vector in this space: the two calls are the
        keyword-first ingest of ``tnsrag ingest``, and an interrupted second call resumes
        by running again.
        """
        check_int(batch_size, "batch_size", minimum=1)
        embed_lock = threading.Lock()

        def prepare(batch: ValidatedBatch, embedded: Callable[[int], None]) -> dict[str, npt.NDArray[np.float32]]:
            if not vectors:
                return {}
            with embed_lock:
                return self._prepare(batch, batch_size, embedded)

        def write(batch: ValidatedBatch, batch_vectors: dict[str, npt.NDArray[np.float32]],
                  stop: threading.Event) -> tuple[WriteReport, Space | None]:
            return self._write_batch(batch, batch_vectors, batch_size, stop=stop, embed_lock=embed_lock,
                                     with_vectors=vectors)

        def build(space: Space, advance: Callable[[str, int, int], None]) -> None:
            def index_advance(phase: str, done: int, of: int) -> None:
                advance(phase, done, of)
                if index_progress is not None:
                    index_progress(phase, done, of)

            self._maybe_build_index(space, index_advance)

        return run_ingest(entries, batch_size, progress, prepare, write, build)

    def _prepare(self, batch: Sequence[MemoryEntry], batch_size: int,
                 progress: Callable[[int], None] | None = None) -> dict[str, npt.NDArray[np.float32]]:
        """The vectors ``batch`` needs before its write, by id (a pre-read finds what is stored)."""
        todo = self._needing_vectors(batch)
        done = len(batch) - len(todo)
        if todo:
            matrix = self._embed_entries(todo, batch_size, progress, done)
            return {e.id: matrix[i] for i, e in enumerate(todo)}
        if progress is not None:
            progress(len(batch))
        return {}

    def _embed_entries(self, entries: Sequence[MemoryEntry], batch_size: int,
                       progress: Callable[[int], None] | None = None, done: int = 0) -> npt.NDArray[np.float32]:
        """The vectors of ``entries``, row i for entry i: from the provider's
        ``embed_entries(entries)`` when it has one (a provider whose vectors belong to entry
        ids, such as a restore's exported vectors), validated as precomputed rows; else the
        embedding of their texts."""
        by_entry = getattr(self._embedding.provider, "embed_entries", None)
        if by_entry is None:
            return self._embed([e.content for e in entries], batch_size, progress, done)
        matrix = self._validate_rows(by_entry(entries), len(entries))
        if progress is not None:
            progress(done + len(entries))
        return matrix

    def _write_batch(self, batch: ValidatedBatch, vectors: dict[str, npt.NDArray[np.float32]],
                     batch_size: int, *, check: Callable[[Connection], None] | None = None,
                     stop: threading.Event | None = None, embed_lock: threading.Lock | None = None,
                     with_vectors: bool = True) -> tuple[WriteReport, Space | None]:
        """Write validated ``batch`` with ``vectors`` (embedding what a concurrent writer changed
        meanwhile) in one transaction; ``stop``, once set, aborts it after the current statement.
        ``with_vectors=False`` writes the entries only (no space: None)."""
        extension = _VectorWrite(self, vectors, batch_size, check, stop, embed_lock, with_vectors)
        report = self._store.write(batch, extensions=[extension])
        return report, extension.space

    def _vectors_after(self, conn: Connection, batch: Sequence[MemoryEntry],
                       vectors: dict[str, npt.NDArray[np.float32]], batch_size: int,
                       embed_lock: threading.Lock | None) -> Space | None:
        """Inside the write, after its entries: COPY the vectors the batch lacks in the space
        (embedding those a concurrent writer changed after the pre-read); the space, or None
        when nothing was embedded and no dimension is known."""
        if self._dimension is None:
            return None  # nothing embedded and no dimension known: nothing to store
        space = self._ensure_space(conn, self._dimension)
        by_id = {e.id: e for e in batch}
        rows = conn.execute(sa.text(_LACKING), {"c": self._store.corpus, "s": space.space_id,
                                                "ids": list(by_id)}).all()
        lacking = [r.id for r in rows]
        missing = [i for i in lacking if i not in vectors]
        if missing:
            # A concurrent writer changed these texts after our pre-read: embed them now.
            with embed_lock if embed_lock is not None else contextlib.nullcontext():
                extra = self._embed_entries([by_id[i] for i in missing], batch_size)
            vectors.update({i: extra[n] for n, i in enumerate(missing)})
        if lacking:
            copy_vectors(conn, self._store.corpus, space.space_id, lacking, np.vstack([vectors[i] for i in lacking]),
                         row_security=bool(rows[0].rls))
        return space

    def _needing_vectors(self, batch: Sequence[MemoryEntry]) -> list[MemoryEntry]:
        """Entries that are new, changed their text, or lack a vector in this space (a pre-read)."""
        if self._dimension is None:
            # The space is keyed by the dimension the provider produces: learn it first.
            self.embed_query(batch[0].content)
        assert self._dimension is not None
        with self._store.session.transaction() as conn:
            space = self._lookup_space(conn, self._dimension)
            rows = conn.execute(sa.text(_NEEDING_VECTORS.format(
                has_vector=_HAS_VECTOR if space is not None else "false")),
                {"c": self._store.corpus, "s": space.space_id if space else 0,
                 "ids": [e.id for e in batch], "hashes": [content_hash(e) for e in batch]}).all()
        stored = {r.id: r for r in rows}
        todo = []
        for e in batch:
            hit = stored.get(e.id)
            if hit is None or not hit.has_vec or not (hit.same or hit.content == e.content):
                todo.append(e)
        return todo

    # -- index ----------------------------------------------------------------------
    def _maybe_build_index(self, space: Space, progress: IndexProgress | None = None) -> None:
        """Build the space's index once it is due, after the write committed: a role that may
        not build it (the application role owns no table), or a build that fails, leaves the
        committed write standing and warns (:class:`IndexBuildDeferred`) instead of raising."""
        if self._index_threshold is None or space.index_name is not None:
            return
        n, allowed = space_size_reaches(self._store, space, self._index_threshold)
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
        while it runs, and vectors written meanwhile
        are in the index when it is done. Like any concurrent build it waits for the
        transactions that hold an older snapshot (a long statement, or a REPEATABLE READ or
        SERIALIZABLE transaction) and for open transactions that wrote to the table.
        An interrupted build leaves an invalid index, which the next call replaces.
        :meth:`add_all` calls this automatically once a space holds ``index_threshold``
        vectors.
        """
        if progress is None:
            return self._build_index(None)
        return build_with_progress(self._store, self._build_index, progress, poll_seconds)

    def _build_index(self, on_pid: Callable[[int], None] | None) -> str | None:
        space = self._current_space()
        if space is None:
            return None
        name = build_space_index(self._store, space, on_pid)
        if name is not None:
            self._spaces[space.dimension] = Space(space.space_id, space.dimension, name)
        return name

    def drop_index(self) -> bool:
        """Drop this space's HNSW index (searches fall back to exact scans); True when one existed.

        Useful before re-loading a large space (building once is much faster than inserting
        into a live graph). ``DROP INDEX CONCURRENTLY``: reads and writes of the
        ``embeddings`` table go on meanwhile. Waits for a build running on the table.
        """
        space = self._current_space()
        if space is None:
            return False
        existed = drop_space_index(self._store, space)
        self._spaces[space.dimension] = Space(space.space_id, space.dimension, None)
        return existed


class _VectorWrite(WriteExtension):
    """A batch's vectors joining its entry write: ``check`` and the vectors after the
    entries (none when ``with_vectors`` is False); with ``stop``, a check after every
    statement that aborts the write once set."""

    analyze = ("embeddings",)

    def __init__(self, view: VectorWrites, vectors: dict[str, npt.NDArray[np.float32]], batch_size: int,
                 check: Callable[[Connection], None] | None, stop: threading.Event | None,
                 embed_lock: threading.Lock | None, with_vectors: bool = True) -> None:
        self._view = view
        self._with_vectors = with_vectors
        self._vectors = vectors
        self._batch_size = batch_size
        self._check = check
        self._stop = stop
        self._embed_lock = embed_lock
        self.space: Space | None = None

    def _stop_check(self, *_: object) -> None:
        if self._stop is not None and self._stop.is_set():
            raise Stopped

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        if self._stop is not None:
            sa.event.listen(conn, "after_cursor_execute", self._stop_check)

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        if self._check is not None:
            self._check(conn)
        if not self._with_vectors:
            return
        self.space = self._view._vectors_after(conn, batch, self._vectors, self._batch_size, self._embed_lock)
        if self.space is not None:
            self._stop_check()

    def finish(self, conn: Connection) -> None:
        if self._stop is not None:
            sa.event.remove(conn, "after_cursor_execute", self._stop_check)
