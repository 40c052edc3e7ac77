"""The write side of a :class:`~tnsrag_db._indexes.vector.VectorMemoryStore`: which entries of a
batch need a vector, :class:`VectorWrite`, the extension that writes them in the entry
write's transaction, and :func:`write_stored_vectors`, the vectors of stored entries alone.

Which entries need a vector: new ones, those whose text changed and those lacking one in
the space. A pre-read (:func:`needing_vectors`, before the transaction, so the embedding
runs outside it) decides it from the entry's one stored change hash
(``entries.content_hash``, see :func:`~tnsrag_db._store.write.content_hash`): equal hash,
unchanged entry; a different hash with the same text (a change of metadata, tier or
source only) keeps the vector, so only those entries' stored texts are read back. Inside
the transaction the entry write deletes the vectors of changed texts, and whatever still
lacks one is embedded then (a concurrent writer changed it after the pre-read) and copied
in binary form.

The vector pass over entries already written (:func:`write_stored_vectors`, what
:meth:`~tnsrag_db._indexes.vector.VectorMemoryStore.fill_vectors` runs after a keyword-first
write) skips the entry write altogether: it locks the batch's stored entries, keeps those
whose text is the one embedded, and copies the vectors they lack.

The view imports this module (and SQLAlchemy with it) only when it writes: a process that
only queries never loads it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from tnsrag_db._db.pool import Connection
from tnsrag_db._db.statement import Plan, Rows, Statement, run_plan
from tnsrag_db._indexes.vector.copy import ROW_SECURITY_ACTIVE, copy_vectors
from tnsrag_db._indexes.vector.ingest import Stopped
from tnsrag_db._indexes.vector.spaces import ProviderSpaces, Space
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import WriteExtension, WriteReport, content_hash
from tnsrag_db._types import MemoryEntry

__all__ = ["VectorWrite", "needing_vectors", "on_connection", "write_stored_vectors"]

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

_HAS_VECTOR = "EXISTS (SELECT 1 FROM embeddings x WHERE x.corpus = :c AND x.space_id = :s AND x.entry_id = e.id)"

# The ids of the batch without a vector in the space, after the entry write (OFFSET 0: one
# index probe per id, never an anti-join over the whole space), each with whether row-level
# security applies to this session's writes of embeddings (the COPY below needs to know).
_LACKING = f"""\
SELECT i.id, {ROW_SECURITY_ACTIVE} AS rls FROM unnest(CAST(:ids AS text[])) AS i(id)
WHERE NOT EXISTS (
    SELECT 1 FROM embeddings x WHERE x.corpus = :c AND x.space_id = :s AND x.entry_id = i.id OFFSET 0
)"""

# The vector pass over stored entries: the batch's entries locked as every entry writer
# takes them (FOR NO KEY UPDATE, in id order: no deadlock with a writer, and a concurrent
# writer's change of the text waits for this commit, so no vector outlives its text), each
# with whether its stored change hash is the one given and, when it is not, its stored text
# (a metadata-only change keeps the text the vector was made of).
_LOCK_STORED = """\
SELECT e.id, e.content_hash = n.hash AS same,
       CASE WHEN e.content_hash = n.hash THEN NULL ELSE e.content END AS content
FROM unnest(CAST(:ids AS text[]), CAST(:hashes AS bytea[])) AS n(id, hash)
JOIN entries e ON e.corpus = :c AND e.id = n.id
ORDER BY e.id
FOR NO KEY UPDATE OF e"""

Vectors = dict[str, npt.NDArray[np.float32]]


def on_connection(conn: Connection) -> Callable[[Statement], Rows]:
    """A statement executor on ``conn``, a write transaction's connection, for the plans that
    are part of that write: :meth:`~tnsrag_db._indexes.vector.spaces.ProviderSpaces.ensure_plan`
    creates the space row the write's vectors go into (in the write, so that a rolled back
    write leaves no space behind) and reads it under the write's locks. A read before a
    write is a plan on the store's read runner instead (``session.run(plan, primary=True)``)."""
    return lambda statement: conn.execute(statement.sql, dict(statement.params)).all()


def _needing_plan(spaces: ProviderSpaces, corpus: str, dimension: int,
                  batch: Sequence[MemoryEntry]) -> Plan[list[MemoryEntry]]:
    space = yield from spaces.lookup_plan(dimension)
    rows = yield Statement(_NEEDING_VECTORS.format(has_vector=_HAS_VECTOR if space is not None else "false"),
                           {"c": corpus, "s": space.space_id if space else 0,
                            "ids": [e.id for e in batch], "hashes": [content_hash(e) for e in batch]},
                           ("id", "same", "content", "has_vec"))
    stored = {r.id: r for r in rows}
    todo = []
    for e in batch:
        hit = stored.get(e.id)
        if hit is None or not hit.has_vec or not (hit.same or hit.content == e.content):
            todo.append(e)
    return todo


def needing_vectors(store: Store, spaces: ProviderSpaces, dimension: int,
                    batch: Sequence[MemoryEntry]) -> list[MemoryEntry]:
    """The entries of ``batch`` that are new, changed their text, or lack a vector in the
    space of ``dimension`` (a plan on the store's read runner, on the primary, before the write)."""
    return store.session.run(_needing_plan(spaces, store.corpus, dimension, batch), primary=True)


class VectorWrite(WriteExtension):
    """A batch's vectors joining its entry write: ``check`` and the vectors after the
    entries (none when ``with_vectors`` is False); with ``stop``, a check after every
    statement that aborts the write once set.

    ``vectors`` are the batch's prepared vectors by entry id (from the pre-read), in the
    space of ``dimension`` (None: nothing embedded and no dimension known, so nothing to
    store) of ``spaces``; ``embed(entries)`` embeds what a concurrent writer changed after
    the pre-read (under ``embed_lock`` when given). After the write, :attr:`space` is the
    space written (None when no vector was stored)."""

    #: Refreshed after bulk writes: the vectors' table (not when only entries are written).
    analyze: tuple[str, ...] = ("embeddings",)

    def __init__(self, spaces: ProviderSpaces, dimension: int | None, vectors: Vectors,
                 embed: Callable[[Sequence[MemoryEntry]], npt.NDArray[np.float32]], *,
                 check: Callable[[Connection], None] | None = None, stop: threading.Event | None = None,
                 embed_lock: threading.Lock | None = None, with_vectors: bool = True) -> None:
        self._spaces = spaces
        self._dimension = dimension
        self._vectors = vectors
        self._embed = embed
        self._check = check
        self._stop = stop
        self._embed_lock = embed_lock
        self._with_vectors = with_vectors
        if not with_vectors:
            self.analyze = ()
        self.space: Space | None = None

    def _stop_check(self) -> None:
        if self._stop is not None and self._stop.is_set():
            raise Stopped

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        if self._stop is not None:
            conn.add_after_statement(self._stop_check)

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        if self._check is not None:
            self._check(conn)
        if not self._with_vectors:
            return
        self.space = self._vectors_after(conn, batch)
        if self.space is not None:
            self._stop_check()

    def finish(self, conn: Connection) -> None:
        if self._stop is not None:
            conn.remove_after_statement(self._stop_check)

    def _vectors_after(self, conn: Connection, batch: Sequence[MemoryEntry]) -> Space | None:
        """Inside the write, after its entries: COPY the vectors the batch lacks in the space
        (embedding those a concurrent writer changed after the pre-read); the space, or None
        when nothing was embedded and no dimension is known."""
        if self._dimension is None:
            return None  # nothing embedded and no dimension known: nothing to store
        corpus = self._spaces.corpus
        space = run_plan(self._spaces.ensure_plan(self._dimension), on_connection(conn))
        by_id = {e.id: e for e in batch}
        rows = conn.execute(_LACKING, {"c": corpus, "s": space.space_id, "ids": list(by_id)}).all()
        lacking = [r.id for r in rows]
        missing = [i for i in lacking if i not in self._vectors]
        if missing:
            # A concurrent writer changed these texts after our pre-read: embed them now.
            with self._embed_lock if self._embed_lock is not None else contextlib.nullcontext():
                extra = self._embed([by_id[i] for i in missing])
            self._vectors.update({i: extra[n] for n, i in enumerate(missing)})
        if lacking:
            copy_vectors(conn, corpus, space.space_id, lacking, np.vstack([self._vectors[i] for i in lacking]),
                         row_security=bool(rows[0].rls))
        return space


def write_stored_vectors(store: Store, spaces: ProviderSpaces, dimension: int, batch: Sequence[MemoryEntry],
                         vectors: Vectors, *, stop: threading.Event | None = None) -> tuple[int, Space | None]:
    """COPY ``vectors`` (by entry id, made of the texts of ``batch``) into the space of
    ``dimension`` for the entries of ``batch`` that the corpus holds with that same text
    and without a vector in the space, in one transaction of their own; nothing else is
    written (no stage, no analysis, no entry row). An entry deleted, or whose text another
    writer changed since, is left alone (that writer's own write keeps its vectors right).
    ``stop``, once set, aborts the transaction after the current statement. Returns the
    number of vectors written and the space (None when the corpus has no row)."""
    corpus = spaces.corpus
    by_id = {e.id: e for e in batch if e.id in vectors}
    if not by_id:
        return 0, None

    def check_stop() -> None:
        if stop is not None and stop.is_set():
            raise Stopped

    def work(conn: Connection) -> tuple[int, Space | None]:
        conn.add_after_statement(check_stop)
        try:
            if not store.writer.corpus.lock(conn, shared=True):
                return 0, None  # the corpus was dropped: its entries went with it
            ids = sorted(by_id)
            locked = conn.execute(_LOCK_STORED, {"c": corpus, "ids": ids,
                                                          "hashes": [content_hash(by_id[i]) for i in ids]}).all()
            same = [r.id for r in locked if r.same or r.content == by_id[r.id].content]
            if not same:
                return 0, None
            space = run_plan(spaces.ensure_plan(dimension), on_connection(conn))
            rows = conn.execute(_LACKING, {"c": corpus, "s": space.space_id, "ids": same}).all()
            lacking = [r.id for r in rows]
            if lacking:
                copy_vectors(conn, corpus, space.space_id, lacking, np.vstack([vectors[i] for i in lacking]),
                             row_security=bool(rows[0].rls))
                check_stop()
            return len(lacking), space
        finally:
            conn.remove_after_statement(check_stop)

    return store.writer.transaction(work, analyze=VectorWrite.analyze)
