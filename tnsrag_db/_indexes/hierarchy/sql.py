"""The statements of :class:`~tnsrag_db._indexes.hierarchy.HierarchyIndex`, as text (no I/O).

Every value is bound (``:c`` is the corpus); the ``{...}`` fields of the templates are
code constants chosen by the index (fences, entry columns, the parent condition).
"""

from __future__ import annotations

from textwrap import dedent

# Serialises hierarchy writes of one corpus (a transaction-scoped advisory lock keyed by
# this constant and the corpus): two concurrent batches could otherwise each close half
# of a cycle while seeing the other's rows as not yet committed.
LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('tnsrag_db.hierarchy'), hashtext(:c))"

# Children of the batch whose parent exists neither in the corpus nor in the batch (the
# batch is already written when this runs).
MISSING_IN_BATCH_SQL = (
    "SELECT e.id, e.parent_id FROM entries e "
    "WHERE e.corpus = :c AND e.id = ANY(:ids) AND e.parent_id IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM entries p WHERE p.corpus = :c AND p.id = e.parent_id) ORDER BY e.id"
)

# Walk up from every written entry. A walk stops at the first other written entry (whose
# own walk continues from there), at a root or missing parent (no row), or when it meets
# an id already on its path (a loop among entries this batch did not touch). Stopping at
# written entries keeps the walk linear for long chains written in one batch; the cycles
# through written entries are then found on the compressed "next written entry" graph.
CYCLE_WALK_SQL = (
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
UNREACHABLE_SQL = (
    "WITH RECURSIVE down(id) AS ("
    "  SELECT e.id FROM entries e WHERE e.corpus = :c AND (e.parent_id IS NULL OR NOT EXISTS "
    "    (SELECT 1 FROM entries p WHERE p.corpus = :c AND p.id = e.parent_id)) "
    "  UNION ALL "
    "  SELECT ch.id FROM down JOIN entries ch ON ch.corpus = :c AND ch.parent_id = down.id"
    ") SELECT e.id, e.parent_id FROM entries e "
    "WHERE e.corpus = :c AND NOT EXISTS (SELECT 1 FROM down WHERE down.id = e.id)"
)

MISSING_ALL_SQL = (
    "SELECT e.id, e.parent_id FROM entries e WHERE e.corpus = :c AND e.parent_id IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM entries p WHERE p.corpus = :c AND p.id = e.parent_id) ORDER BY e.id"
)

ANCESTORS_SQL = (
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
LINEAGE_SQL = (
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
PARENTS_SQL = dedent("""\
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
KIDS_SQL = dedent("""\
    kids AS MATERIALIZED (
      SELECT {columns} FROM entries e
      WHERE e.corpus = :c AND {parent} AND {fence_e} ORDER BY e.id LIMIT :lim
    )""")
# The chosen children among ranked candidates: the best ``lim`` by rank, one key probe each.
CHOSEN_KIDS_SQL = dedent("""\
    kids AS MATERIALIZED (
      SELECT {columns} FROM unnest(CAST(:among AS text[])) WITH ORDINALITY AS b(id, pos)
      JOIN entries e ON e.corpus = :c AND e.id = b.id
      WHERE {parent} AND {fence_e} ORDER BY b.pos LIMIT :lim
    )""")
# The ranked candidates first, then the other children in id order (an index scan that
# stops after ``lim`` rows), ``lim`` in all.
RANKED_KIDS_SQL = dedent("""\
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
BRANCHES_SQL = dedent("""\
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
HAS_CHILDREN_SQL = ("EXISTS (SELECT 1 FROM entries h WHERE h.corpus = :c AND h.parent_id = k.entry_id "
                     "AND {fence_h}) AS has_children")
CHILDREN_SQL = "WITH {kids}\nSELECT k.*, {has_children}, NULL::text AS subtree_text FROM kids k ORDER BY k.entry_id\n"
# With the text of each child's subtree (a forest reached from roots has no cycles).
CHILDREN_WITH_TEXT_SQL = dedent("""\
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

#: The child ids of the parents ``:ids``, by parent then id.
CHILD_IDS_SQL = ("SELECT e.parent_id, e.id FROM entries e WHERE e.corpus = :c AND e.parent_id = ANY(:ids) "
                 "ORDER BY e.parent_id, e.id")
#: The ids of the entries without a parent, sorted.
ROOTS_SQL = "SELECT id FROM entries WHERE corpus = :c AND parent_id IS NULL ORDER BY id"
