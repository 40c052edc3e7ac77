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

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db._validate import is_int
from tnsrag_db._db.statement import Statement
from tnsrag_db._errors import ConfigurationError, HierarchyError, ValidationError
from tnsrag_db._indexes.hierarchy_problems import MESSAGE_LIMIT, cycles_of, raise_problems
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import ValidatedBatch, WriteExtension, WriteReport
from tnsrag_db._types import IngestCounts
from tnsrag_db._types import MemoryEntry

__all__ = ["HierarchyIndex"]

# Serialises hierarchy writes of one corpus (a transaction-scoped advisory lock keyed by
# this constant and the corpus): two concurrent batches could otherwise each close half
# of a cycle while seeing the other's rows as not yet committed.
_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('tnsrag_db.hierarchy'), hashtext(:c))"

# Children of the batch whose parent exists neither in the corpus nor in the batch (the
# batch is already written when this runs).
_MISSING_IN_BATCH_SQL = (
    "SELECT e.id, e.parent_id FROM entries e "
    "WHERE e.corpus = :c AND e.id = ANY(:ids) AND e.parent_id IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM entries p WHERE p.corpus = :c AND p.id = e.parent_id) ORDER BY e.id"
)

# Walk up from every written entry. A walk stops at the first other written entry (whose
# own walk continues from there), at a root or missing parent (no row), or when it meets
# an id already on its path (a loop among entries this batch did not touch). Stopping at
# written entries keeps the walk linear for long chains written in one batch; the cycles
# through written entries are then found on the compressed "next written entry" graph.
_CYCLE_WALK_SQL = (
    "WITH RECURSIVE touched AS MATERIALIZED (SELECT DISTINCT unnest(CAST(:ids AS text[])) AS id), "
    "up(start_id, id, parent_id, path, stop) AS ("
    "  SELECT e.id, e.id, e.parent_id, ARRAY[e.id], NULL::text "
    "  FROM entries e JOIN touched t ON e.corpus = :c AND e.id = t.id "
    "  UNION ALL "
    "  SELECT up.start_id, p.id, p.parent_id, up.path || p.id, "
    "    CASE WHEN t.id IS NOT NULL THEN 'touched' WHEN p.id = ANY(up.path) THEN 'loop' END "
    "  FROM up JOIN entries p ON p.corpus = :c AND p.id = up.parent_id LEFT JOIN touched t ON t.id = p.id "
    "  WHERE up.stop IS NULL"
    ") SELECT start_id, path, stop FROM up WHERE stop IS NOT NULL"
)

# Whole-corpus check: everything reachable downwards from a root (no parent, or a missing
# one) is acyclic; the entries left over are on a cycle or lead into one. Those few rows
# (normally none) come back with their parents and the cycles are traced in Python.
_UNREACHABLE_SQL = (
    "WITH RECURSIVE down(id) AS ("
    "  SELECT e.id FROM entries e WHERE e.corpus = :c AND (e.parent_id IS NULL OR NOT EXISTS "
    "    (SELECT 1 FROM entries p WHERE p.corpus = :c AND p.id = e.parent_id)) "
    "  UNION ALL "
    "  SELECT ch.id FROM down JOIN entries ch ON ch.corpus = :c AND ch.parent_id = down.id"
    ") SELECT e.id, e.parent_id FROM entries e "
    "WHERE e.corpus = :c AND NOT EXISTS (SELECT 1 FROM down WHERE down.id = e.id)"
)

_MISSING_ALL_SQL = (
    "SELECT e.id, e.parent_id FROM entries e WHERE e.corpus = :c AND e.parent_id IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM entries p WHERE p.corpus = :c AND p.id = e.parent_id) ORDER BY e.id"
)

_ANCESTORS_SQL = (
    "WITH RECURSIVE up(id, parent_id, level, path) AS ("
    "  SELECT e.id, e.parent_id, 0, ARRAY[e.id] FROM entries e WHERE e.corpus = :c AND e.id = :id "
    "  UNION ALL "
    "  SELECT p.id, p.parent_id, up.level + 1, up.path || p.id "
    "  FROM up JOIN entries p ON p.corpus = :c AND p.id = up.parent_id "
    "  WHERE up.level < :max_depth AND NOT p.id = ANY(up.path)"
    ") SELECT id FROM up WHERE level > 0 ORDER BY level"
)

# Each entry's parent and the root of its chain (the topmost entry reached: a root, or the
# last entry before a missing parent or a loop), for many entries in one walk.
_LINEAGE_SQL = (
    "WITH RECURSIVE up(start_id, id, parent_id, level, path) AS ("
    "  SELECT e.id, e.id, e.parent_id, 0, ARRAY[e.id] FROM entries e WHERE e.corpus = :c AND e.id = ANY(:ids) "
    "  UNION ALL "
    "  SELECT up.start_id, p.id, p.parent_id, up.level + 1, up.path || p.id "
    "  FROM up JOIN entries p ON p.corpus = :c AND p.id = up.parent_id "
    "  WHERE NOT p.id = ANY(up.path)"
    ") SELECT start_id AS entry_id, (array_agg(parent_id ORDER BY level))[1] AS parent_id, "
    "(array_agg(id ORDER BY level DESC))[1] AS root_id FROM up GROUP BY start_id"
)


# The parent chains of many hits in one walk ({fence} and {columns} are code constants).
_PARENTS_SQL = textwrap.dedent("""\
    WITH RECURSIVE
    -- hits, the hit ids and their scores.
    hits (child_id, score) AS (
      SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:scores AS float8[]))
    ),
    -- walk, one level up per step, inside the fence, each level multiplying by the decay.
    walk (child_id, id, parent_id, level, score) AS (
      SELECT h.child_id, p.id, p.parent_id, 1, h.score * CAST(:decay AS float8)
      FROM hits h JOIN entries c ON c.corpus = :c AND c.id = h.child_id
      JOIN entries p ON p.corpus = :c AND p.id = c.parent_id AND {fence}
      UNION ALL
      SELECT w.child_id, p.id, p.parent_id, w.level + 1, w.score * CAST(:decay AS float8)
      FROM walk w JOIN entries p ON p.corpus = :c AND p.id = w.parent_id AND {fence}
      WHERE w.level < :depth
    ),
    -- best, one row per reached parent (highest score, then shallowest level, then smallest child).
    best AS (
      SELECT DISTINCT ON (id) id, child_id, level, score FROM walk ORDER BY id, score DESC, level, child_id
    )
    SELECT b.child_id, b.level, b.score, {columns}
    FROM best b JOIN entries e ON e.corpus = :c AND e.id = b.id
    """)

# Children of one node in id order, at most the limit ({parent}, {fence_*} and {columns} are
# code constants). has_children tells the caller whether a child can be expanded.
_KIDS_SQL = textwrap.dedent("""\
    kids AS MATERIALIZED (
      SELECT {columns} FROM entries e
      WHERE e.corpus = :c AND {parent} AND {fence_e} ORDER BY e.id LIMIT :lim
    )""")
# The chosen children among ranked candidates: the best ``lim`` by rank, one key probe each.
_CHOSEN_KIDS_SQL = textwrap.dedent("""\
    kids AS MATERIALIZED (
      SELECT {columns} FROM unnest(CAST(:among AS text[])) WITH ORDINALITY AS b(id, pos)
      JOIN entries e ON e.corpus = :c AND e.id = b.id
      WHERE {parent} AND {fence_e} ORDER BY b.pos LIMIT :lim
    )""")
# The ranked candidates first, then the other children in id order (an index scan that
# stops after ``lim`` rows), ``lim`` in all.
_RANKED_KIDS_SQL = textwrap.dedent("""\
    kids AS MATERIALIZED (
      SELECT {names} FROM (
        (SELECT {columns}, b.pos AS kid_pos FROM unnest(CAST(:among AS text[])) WITH ORDINALITY AS b(id, pos)
         JOIN entries e ON e.corpus = :c AND e.id = b.id
         WHERE {parent} AND {fence_e} ORDER BY b.pos LIMIT :lim)
        UNION ALL
        (SELECT {columns}, NULL AS kid_pos FROM entries e
         WHERE e.corpus = :c AND {parent} AND {fence_e} AND e.id <> ALL(CAST(:among AS text[]))
         ORDER BY e.id LIMIT :lim)
      ) u ORDER BY u.kid_pos NULLS LAST, u.entry_id LIMIT :lim
    )""")
# The ancestors of ranked entries: each hit and every entry above it (inside the fence,
# stopping at the first one outside, which hides its subtree), with its parent, its
# depth below the root (unknown here: levels above the hit) and the best hit score
# beneath it. ``hops`` bounds a chain the hierarchy checks would have refused.
_BRANCHES_SQL = textwrap.dedent("""\
    WITH RECURSIVE hits AS (
    {hits}
    ), up (id, parent_id, score, hops) AS (
      SELECT e.id, e.parent_id, h.score, 0 FROM hits h
      JOIN entries e ON e.corpus = :c AND e.id = h.entry_id AND {fence_e}
      UNION ALL
      SELECT e.id, e.parent_id, up.score, up.hops + 1 FROM up
      JOIN entries e ON e.corpus = :c AND e.id = up.parent_id AND {fence_e}
      WHERE up.hops < :max_hops
    )
    SELECT id, min(parent_id) AS parent_id, max(score) AS score FROM up GROUP BY id
    """)
_HAS_CHILDREN_SQL = ("EXISTS (SELECT 1 FROM entries h WHERE h.corpus = :c AND h.parent_id = k.entry_id "
                     "AND {fence_h}) AS has_children")
_CHILDREN_SQL = "WITH {kids}\nSELECT k.*, {has_children}, NULL::text AS subtree_text FROM kids k ORDER BY k.entry_id\n"
# With the text of each child's subtree (a forest reached from roots has no cycles).
_CHILDREN_WITH_TEXT_SQL = textwrap.dedent("""\
    WITH RECURSIVE {kids},
    -- sub, each child's subtree, breadth first.
    sub (top, node, lvl, content) AS (
      SELECT k.entry_id, k.entry_id, 0, k.content FROM kids k
      UNION ALL
      SELECT s.top, d.id, s.lvl + 1, d.content FROM sub s
      JOIN entries d ON d.corpus = :c AND d.parent_id = s.node AND {fence_d}
    ),
    -- cut, at most the rows cap for all children together (the recursion stops once that many are pulled).
    cut AS (SELECT * FROM sub LIMIT :rows),
    -- run, the running text length per child, to cut each child once it passes the text cap.
    run AS (
      SELECT top, node, lvl, content,
             sum(length(content) + 1) OVER (PARTITION BY top ORDER BY lvl, node ROWS UNBOUNDED PRECEDING) AS upto
      FROM cut
    ),
    -- agg, each child's text, cut to the text cap.
    agg AS (
      SELECT top, left(string_agg(content, E'\\n' ORDER BY lvl, node), :cap) AS subtree_text
      FROM run WHERE upto - length(content) - 1 < :cap GROUP BY top
    )
    SELECT k.*, {has_children}, a.subtree_text FROM kids k LEFT JOIN agg a ON a.top = k.entry_id
    ORDER BY k.entry_id
    """)


class _HierarchyCheck(WriteExtension):
    """The write's hierarchy lock (before the entries) and check (after them)."""

    def __init__(self, index: HierarchyIndex) -> None:
        self._index = index

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        conn.execute(sa.text(_LOCK_SQL), {"c": self._index.store.corpus})

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
        conn.execute(sa.text(_LOCK_SQL), {"c": self._store.corpus})
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
        missing = [(r.id, r.parent_id) for r in conn.execute(sa.text(_MISSING_IN_BATCH_SQL), params)]
        successor: dict[str, str] = {}
        segment: dict[str, list[str]] = {}
        loops: list[list[str]] = []
        for row in conn.execute(sa.text(_CYCLE_WALK_SQL), params):
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
            missing = [(r.id, r.parent_id) for r in conn.execute(sa.text(_MISSING_ALL_SQL), params)]
            left = {r.id: r.parent_id for r in conn.execute(sa.text(_UNREACHABLE_SQL), params)}
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
        with self._store.session.transaction() as conn:
            rows = conn.execute(sa.text(
                "SELECT e.parent_id, e.id FROM entries e WHERE e.corpus = :c AND e.parent_id = ANY(:ids) "
                "ORDER BY e.parent_id, e.id"), {"c": self._store.corpus, "ids": wanted})
            for row in rows:
                out[row.parent_id].append(row.id)
        return out

    def roots(self) -> list[str]:
        """The ids of the entries without a parent, sorted."""
        with self._store.session.transaction() as conn:
            return list(conn.execute(sa.text(
                "SELECT id FROM entries WHERE corpus = :c AND parent_id IS NULL ORDER BY id"),
                {"c": self._store.corpus}).scalars())

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
        with self._store.session.transaction() as conn:
            return list(conn.execute(sa.text(_ANCESTORS_SQL),
                                     {"c": self._store.corpus, "id": entry_id, "max_depth": depth}).scalars())

    # -- statements (no I/O; run them with Store.run) ------------------------------------
    def lineage_statement(self, entry_ids: Sequence[str]) -> Statement:
        """One row per existing entry of ``entry_ids``: ``entry_id``, ``parent_id`` (None for a
        root) and ``root_id``, the topmost entry of its parent chain (its own id for a root;
        the walk stops at a missing parent or before revisiting an id). One recursive query."""
        wanted = _id_list(entry_ids, "entry_ids")
        return Statement(_LINEAGE_SQL, {"c": self._store.corpus, "ids": wanted}, ("entry_id", "parent_id", "root_id"))

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
        sql = _PARENTS_SQL.format(fence="TRUE" if fence is None else "p.source = ANY(:fence)", columns=columns)
        return Statement(sql, params, ("child_id", "level", "score", *column_names))

    def branches_statement(self, hits: Statement, *, fence: Collection[str] | None,
                           max_hops: int = 64) -> Statement:
        """Where ranked entries sit in the tree: ``hits`` is a statement of ``(entry_id, score)``
        rows (such as a BM25 ranking; its parameters must not use the names ``c``, ``fence``
        and ``max_hops``); the result has one row per hit and per entry above a hit, at most
        ``max_hops`` levels up: ``id``, ``parent_id`` (None for a root) and ``score``, the
        best hit score at or beneath it. Entries outside ``fence`` are left out, with
        everything above them (a fenced-out entry hides its subtree)."""
        params: dict[str, Any] = {**hits.params, "c": self._store.corpus, "max_hops": max_hops}
        if fence is None:
            fence_e = "TRUE"
        else:
            params["fence"] = sorted(fence)
            fence_e = "e.source = ANY(:fence)"
        sql = _BRANCHES_SQL.format(hits=textwrap.indent(hits.sql.rstrip(), "  "), fence_e=fence_e)
        return Statement(sql, params, ("id", "parent_id", "score"))

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
        if fence is None:
            fence_e = fence_h = fence_d = "TRUE"
        else:
            params["fence"] = sorted(fence)
            fence_e, fence_h, fence_d = "e.source = ANY(:fence)", "h.source = ANY(:fence)", "d.source = ANY(:fence)"
        template = _KIDS_SQL if among is None else _CHOSEN_KIDS_SQL if only_among else _RANKED_KIDS_SQL
        kids = template.format(columns=columns, fence_e=fence_e, names=", ".join(f"u.{n}" for n in column_names),
                               parent="e.parent_id IS NULL" if parent_id is None else "e.parent_id = :pid")
        has_children = _HAS_CHILDREN_SQL.format(fence_h=fence_h)
        if subtree is None:
            sql = _CHILDREN_SQL.format(kids=kids, has_children=has_children)
        else:
            params["cap"], params["rows"] = subtree
            sql = _CHILDREN_WITH_TEXT_SQL.format(kids=kids, has_children=has_children, fence_d=fence_d)
        return Statement(sql, params, (*column_names, "has_children", "subtree_text"))


def _id_list(ids: object, what: str) -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise ValidationError(f"{what} must be a collection of ids, not {type(ids).__name__}")
    out = list(dict.fromkeys(ids))
    for item in out:
        if not isinstance(item, str):
            raise ValidationError(f"{what} must hold strings, got {item!r}")
    return out
