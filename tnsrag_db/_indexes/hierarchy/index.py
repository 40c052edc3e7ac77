"""``HierarchyIndex``: the parent/child structure of a corpus, kept valid at every write.

An entry's parent is its ``parent_id`` column (``MemoryEntry.parent_id``, or the
metadata key ``HierarchyMetadata.PARENT_ID``). Writes through this index check, in
the write's own transaction, that the batch has no duplicate ids, that every parent
exists (in the corpus or in the batch) and that no parent chain loops; a failure
raises :class:`HierarchyError` naming the offending ids and nothing is written.
:meth:`HierarchyIndex.validate` checks the whole corpus the same way (entries written
or deleted through the plain :class:`Store` are not checked at write time).
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.pool import Connection
from tnsrag_db._db.statement import Statement, one
from tnsrag_db._errors import ConfigurationError, HierarchyError, ValidationError
from tnsrag_db._indexes.hierarchy import sql
from tnsrag_db._indexes.hierarchy.problems import MESSAGE_LIMIT, cycles_of, raise_problems
from tnsrag_db._store.expiry import live
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import ValidatedBatch, WriteExtension, WriteReport
from tnsrag_db._types import MemoryEntry
from tnsrag_db._validate import is_int

__all__ = ["HierarchyIndex"]

class _HierarchyCheck(WriteExtension):
    """The write's hierarchy lock (before the entries) and check (after them)."""

    def __init__(self, index: HierarchyIndex) -> None:
        self._index = index

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        conn.execute(sql.LOCK_SQL, {"c": self._index.store.corpus})

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        self._index._check_written(conn, [e.id for e in batch])


class HierarchyIndex:
    """The parent hierarchy of one corpus, validated at every write through it.

    ``HierarchyIndex(store)`` is a view over ``store``'s corpus (no I/O at
    construction). Write hierarchical entries with :meth:`add` / :meth:`add_all`;
    :meth:`children`, :meth:`roots` and :meth:`ancestors` read the structure.
    """

    def __init__(self, store: Store) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"HierarchyIndex needs a Store, got {type(store).__name__}")
        self._store = store

    @property
    def store(self) -> Store:
        """The store (and corpus) this index reads and writes."""
        return self._store

    def __repr__(self) -> str:
        return f"HierarchyIndex(corpus={self._store.corpus!r})"

    # -- writes -----------------------------------------------------------------------
    def add(self, entry: MemoryEntry) -> IngestCounts:
        """Write one entry (an upsert by id) after checking its parent exists and no cycle forms.

        Raises :class:`HierarchyError` (nothing written) or :class:`InvalidEntryError`.
        """
        return self.add_all([entry])

    def add_all(self, entries: Iterable[MemoryEntry]) -> IngestCounts:
        """Write a batch in one transaction and check the hierarchy it touches before committing.

        Raises :class:`HierarchyError` with ``ids`` naming the offending entries for
        duplicate ids in the batch, a parent id that is neither in the corpus nor in the
        batch, or a cycle (every id on it); :class:`InvalidEntryError` for an invalid
        entry. On any error the transaction is rolled back and nothing is written.
        """
        raw = list(entries)
        self._check_duplicates(raw)
        batch = ValidatedBatch(raw)
        if not batch:
            return IngestCounts()
        return self._store.write(batch, extensions=[_HierarchyCheck(self)]).counts

    def check_written(self, conn: Connection, entry_ids: Sequence[str]) -> None:
        """Check the hierarchy around ``entry_ids`` inside the caller's open transaction
        ``conn``, after the caller wrote those entries in it (through another write path).

        Takes the corpus's hierarchy write lock (transaction-scoped, the one :meth:`add_all`
        takes), then runs :meth:`add_all`'s check: every parent of a written entry exists
        (in the corpus, this transaction's writes included) and no parent chain through
        them loops. Raises :class:`HierarchyError` naming the offending ids; the caller
        must then roll its transaction back so that nothing is written. Raises
        :class:`ValidationError` for ``entry_ids`` that is not a collection of strings.
        """
        ids = _id_list(entry_ids, "entry_ids")
        if not ids:
            return
        conn.execute(sql.LOCK_SQL, {"c": self._store.corpus})
        self._check_written(conn, ids)

    @staticmethod
    def _check_duplicates(batch: Sequence[object]) -> None:
        seen: set[str] = set()
        duplicates: list[str] = []
        for entry in batch:
            if isinstance(entry, MemoryEntry) and isinstance(entry.id, str):
                if entry.id in seen and entry.id not in duplicates:
                    duplicates.append(entry.id)
                seen.add(entry.id)
        if duplicates:
            shown = ", ".join(repr(i) for i in duplicates[:MESSAGE_LIMIT])
            raise HierarchyError(f"invalid hierarchy in batch: duplicate ids ({shown})", tuple(duplicates))

    def _check_written(self, conn: Connection, ids: list[str]) -> None:
        params: dict[str, Any] = {"c": self._store.corpus, "ids": ids}
        missing = [(r.id, r.parent_id) for r in conn.execute(sql.MISSING_IN_BATCH_SQL, params)]
        successor: dict[str, str] = {}
        segment: dict[str, list[str]] = {}
        loops: list[list[str]] = []
        for row in conn.execute(sql.CYCLE_WALK_SQL, params):
            path: list[str] = list(row.path)
            if row.stop == "touched":
                successor[row.start_id] = path[-1]
                segment[row.start_id] = path[:-1]
            else:  # a loop among entries the batch did not write, reached from it
                loops.append(path[path.index(path[-1]):-1])
        cycles = [[i for start in cycle for i in segment[start]] for cycle in cycles_of(successor)]
        raise_problems(missing, cycles + loops, "after writing the batch")

    # -- checks -----------------------------------------------------------------------
    def validate(self) -> None:
        """Check the whole corpus: every parent exists and no parent chain loops.

        Raises :class:`HierarchyError` naming the entries with missing parents and every
        id of every cycle. Two queries, linear in the corpus size.
        """
        with self._store.session.transaction() as conn:
            params = {"c": self._store.corpus}
            missing = [(r.id, r.parent_id) for r in conn.execute(sql.MISSING_ALL_SQL, params)]
            left = {r.id: r.parent_id for r in conn.execute(sql.UNREACHABLE_SQL, params)}
        raise_problems(missing, cycles_of(left), "in the corpus")

    # -- reads ------------------------------------------------------------------------
    def children(self, parent_ids: Sequence[str]) -> dict[str, list[str]]:
        """The child ids of each of ``parent_ids`` (sorted by id; an empty list when none).

        One query. Unknown parent ids map to an empty list.
        """
        wanted = _id_list(parent_ids, "parent_ids")
        out: dict[str, list[str]] = {pid: [] for pid in wanted}
        if not wanted:
            return out
        for row in self._store.run(one(Statement(sql.CHILD_IDS_SQL, {"c": self._store.corpus, "ids": wanted},
                                                 ("parent_id", "id")))):
            out[row.parent_id].append(row.id)
        return out

    def roots(self) -> list[str]:
        """The ids of the entries without a parent, sorted."""
        return [row[0] for row in self._store.run(one(Statement(sql.ROOTS_SQL, {"c": self._store.corpus}, ("id",))))]

    def ancestors(self, entry_id: str, max_depth: int | None = None) -> list[str]:
        """The parent chain of ``entry_id``, nearest first, at most ``max_depth`` levels (None = all).

        Empty for a root or an unknown id; stops at a missing parent or before revisiting
        an id (so it terminates even on an invalid corpus). One recursive query.
        """
        if not isinstance(entry_id, str):
            raise ValidationError(f"entry_id must be a string, got {type(entry_id).__name__}")
        if max_depth is not None and (not is_int(max_depth) or max_depth < 0):
            raise ValidationError(f"max_depth must be a non-negative int or None, got {max_depth!r}")
        depth = 2**31 - 1 if max_depth is None else max_depth
        rows = self._store.run(one(Statement(sql.ANCESTORS_SQL, {"c": self._store.corpus, "id": entry_id,
                                                                 "max_depth": depth}, ("id",))))
        return [row[0] for row in rows]

    # -- statements (no I/O; run them with Store.run) ------------------------------------
    def lineage_statement(self, entry_ids: Sequence[str]) -> Statement:
        """One row per existing entry of ``entry_ids``: ``entry_id``, ``parent_id`` (None for a
        root) and ``root_id``, the topmost entry of its parent chain (its own id for a root;
        the walk stops at a missing parent or before revisiting an id). One recursive query."""
        wanted = _id_list(entry_ids, "entry_ids")
        return Statement(sql.LINEAGE_SQL, {"c": self._store.corpus, "ids": wanted}, ("entry_id", "parent_id", "root_id"))

    def parents_statement(self, scores: dict[str, float], *, max_depth: int, decay: float,
                          fence: Collection[str] | None, columns: str, column_names: Sequence[str]) -> Statement:
        """The parent chains above the hits ``scores`` (entry id to score), up to ``max_depth``
        levels, inside ``fence`` (None for none): one row per reached parent with ``child_id``
        (the hit it was best reached from), ``level``, ``score`` (the hit's × ``decay`` per
        level; the best wins, then the shallower level, then the smaller child id) and
        ``columns`` (entry columns over alias ``e``, named ``column_names``)."""
        params: dict[str, Any] = {"c": self._store.corpus, "ids": list(scores), "scores": list(scores.values()),
                                  "decay": decay, "depth": max_depth}
        if fence is not None:
            params["fence"] = sorted(fence)
        text = sql.PARENTS_SQL.format(fence=_fence("p", fence), columns=columns)
        return Statement(text, params, ("child_id", "level", "score", *column_names))

    def branches_statement(self, hits: Statement, *, fence: Collection[str] | None,
                           max_hops: int = 64) -> Statement:
        """Where ranked entries sit in the tree: ``hits`` is a statement of ``(entry_id, score)``
        rows (such as a BM25 ranking; its parameters must not use the names ``c``, ``fence``
        and ``max_hops``); the result has one row per hit and per entry above a hit, at most
        ``max_hops`` levels up: ``id``, ``parent_id`` (None for a root) and ``score``, the
        best hit score at or beneath it. Entries outside ``fence`` are left out, with
        everything above them (a fenced-out entry hides its subtree)."""
        params: dict[str, Any] = {**hits.params, "c": self._store.corpus, "max_hops": max_hops}
        if fence is not None:
            params["fence"] = sorted(fence)
        fence_e = _fence("e", fence)
        text = sql.BRANCHES_SQL.format(hits=textwrap.indent(hits.sql.rstrip(), "  "), fence_e=fence_e)
        return Statement(text, params, ("id", "parent_id", "score"))

    def children_statement(self, parent_id: str | None, limit: int, *, fence: Collection[str] | None,
                           columns: str, column_names: Sequence[str],
                           subtree: tuple[int, int] | None = None,
                           among: Sequence[str] | None = None, only_among: bool = True) -> Statement:
        """Up to ``limit`` children of ``parent_id`` (the roots for None) inside ``fence``, in id order:
        ``columns`` (entry columns over alias ``e``, named ``column_names``), ``has_children`` (inside
        the fence) and ``subtree_text``: with ``subtree = (cap, rows)`` each child's subtree text, breadth
        first, at most ``cap`` characters per child and ``rows`` rows for all children; NULL without.
        With ``among`` (entry ids, best first), those children first, in that order (each read by
        its key), then, unless ``only_among``, the others by id: ``limit`` in all. ``column_names``
        must include ``entry_id`` then."""
        params: dict[str, Any] = {"c": self._store.corpus, "lim": limit}
        if among is not None:
            params["among"] = list(among)
        if parent_id is not None:
            params["pid"] = parent_id
        if fence is not None:
            params["fence"] = sorted(fence)
        fence_e, fence_h, fence_d = _fence("e", fence), _fence("h", fence), _fence("d", fence)
        template = sql.KIDS_SQL if among is None else sql.CHOSEN_KIDS_SQL if only_among else sql.RANKED_KIDS_SQL
        kids = template.format(columns=columns, fence_e=fence_e, names=", ".join(f"u.{n}" for n in column_names),
                               parent="e.parent_id IS NULL" if parent_id is None else "e.parent_id = :pid")
        has_children = sql.HAS_CHILDREN_SQL.format(fence_h=fence_h)
        if subtree is None:
            text = sql.CHILDREN_SQL.format(kids=kids, has_children=has_children)
        else:
            params["cap"], params["rows"] = subtree
            text = sql.CHILDREN_WITH_TEXT_SQL.format(kids=kids, has_children=has_children, fence_d=fence_d)
        return Statement(text, params, (*column_names, "has_children", "subtree_text"))


def _fence(alias: str, fence: Collection[str] | None) -> str:
    """The condition on entry row ``alias`` of the tree reads: not expired (an expired entry
    hides its subtree, as a fenced-out one does), and with a ``fence``, of its sources."""
    return live(alias) if fence is None else f"{live(alias)} AND {alias}.source = ANY(:fence)"


def _id_list(ids: object, what: str) -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise ValidationError(f"{what} must be a collection of ids, not {type(ids).__name__}")
    out = list(dict.fromkeys(ids))
    for item in out:
        if not isinstance(item, str):
            raise ValidationError(f"{what} must hold strings, got {item!r}")
    return out
