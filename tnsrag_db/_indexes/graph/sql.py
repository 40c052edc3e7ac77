"""The statements of :class:`~tnsrag_db._indexes.graph.GraphStore`, as text (no I/O).

Every value is bound (``:c`` is the corpus); the ``{...}`` fields of :data:`WALK_SQL`
are code constants chosen by :func:`~tnsrag_db._indexes.graph.walk.walk_statement`.
The edge writes stage a batch in ``tnsrag_stage_edges`` (declared in
:mod:`tnsrag_db._store.staging`), lock its ends, then upsert it.
"""

from __future__ import annotations

from textwrap import dedent

# -- edge writes ------------------------------------------------------------------------

#: Empties the session's stage table before a batch is copied in.
CLEAR_STAGE_SQL = "DELETE FROM tnsrag_stage_edges"
#: The COPY that fills the stage table (rows ``ord, src, dst, relation, weight, source``).
COPY_STAGE_SQL = "COPY tnsrag_stage_edges (ord, src, dst, relation, weight, source) FROM STDIN"
#: How many distinct ``(src, relation, dst)`` keys the stage holds.
STAGED_KEYS_SQL = "SELECT count(*) FROM (SELECT DISTINCT src, relation, dst FROM tnsrag_stage_edges) d"

# Last occurrence of a duplicated (src, relation, dst) in one batch wins; ON CONFLICT
# cannot touch the same row twice in one statement. ``xmax = 0`` tells a fresh row
# from an updated one.
UPSERT_SQL = (
    "INSERT INTO edges AS g (corpus, src, dst, relation, weight, source) "
    "SELECT :c, s.src, s.dst, s.relation, s.weight, s.source FROM ("
    "  SELECT DISTINCT ON (src, relation, dst) src, dst, relation, weight, source FROM tnsrag_stage_edges "
    "  ORDER BY src, relation, dst, ord DESC) s "
    "ORDER BY s.src, s.relation, s.dst "
    "ON CONFLICT (corpus, src, relation, dst) DO UPDATE SET weight = excluded.weight, source = excluded.source "
    "WHERE (g.weight, g.source) IS DISTINCT FROM (excluded.weight, excluded.source) "
    "RETURNING (g.xmax = 0) AS inserted"
)

# Locks the entries at both ends (FOR KEY SHARE, in id order, as writers and deleters
# take their entry locks, so none can deadlock) and lists the ends that do not exist.
# A locked end cannot be deleted before this transaction ends, so the insert's foreign
# keys then hold.
LOCK_ENDS_SQL = (
    "WITH ends AS (SELECT src AS id FROM tnsrag_stage_edges UNION SELECT dst FROM tnsrag_stage_edges), "
    # One primary-key lookup per end, in id order (a join could be planned as a scan of
    # the whole corpus when its statistics are stale). The lookup asks for its row in id
    # order, by an id range of one value (not an equality, which would make the order
    # trivially met): run with sorts off (see SORTS_OFF), only the primary key (corpus, id)
    # gives that order without a sort, so it is the plan whatever the statistics and the
    # indexes' sizes say. Planned by cost, a corpus newer than the last ANALYZE (estimated
    # at one row) after a deleted one (the primary key then larger than the (corpus, ts)
    # index) was read through (corpus, ts), filtering the whole corpus once per end.
    "locked AS (SELECT k.id FROM (SELECT id FROM ends ORDER BY id) o CROSS JOIN LATERAL "
    "  (SELECT e.id FROM entries e WHERE e.corpus = :c AND e.id >= o.id AND e.id <= o.id "
    "   ORDER BY e.id FOR KEY SHARE OF e) k) "
    # An anti-join (NOT EXISTS), not NOT IN: NOT IN over a subquery too large for one hash
    # table is evaluated row by row, quadratic in the number of ends.
    "SELECT x.id FROM ends x WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.id = x.id) ORDER BY x.id"
)
#: The settings :data:`LOCK_ENDS_SQL` runs with (``set_config(name, :v, true)``, in the
#: write's transaction, then back on): no plan that needs a sort, so no other index.
SORTS_OFF = ("enable_sort", "enable_incremental_sort")

# Staged ends that are no entry but an alias (revision 0016: the id of an entry merged into
# another) become that entry (``:missing``: the ends LOCK_ENDS_SQL did not find).
RESOLVE_SRC_ALIASES_SQL = (
    "UPDATE tnsrag_stage_edges s SET src = a.entry_id FROM entry_aliases a "
    "WHERE a.corpus = :c AND a.alias = s.src AND s.src = ANY(CAST(:missing AS text[]))"
)
RESOLVE_DST_ALIASES_SQL = (
    "UPDATE tnsrag_stage_edges s SET dst = a.entry_id FROM entry_aliases a "
    "WHERE a.corpus = :c AND a.alias = s.dst AND s.dst = ANY(CAST(:missing AS text[]))"
)
#: A staged edge whose ends became one entry.
STAGED_SELF_LOOP_SQL = "SELECT src, dst FROM tnsrag_stage_edges WHERE src = dst ORDER BY ord LIMIT 1"
#: The entry an alias stands for (``:s``), when ``:s`` is no entry.
ALIAS_TARGET_SQL = (
    "SELECT a.entry_id FROM entry_aliases a WHERE a.corpus = :c AND a.alias = :s "
    "AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.corpus = :c AND e.id = :s)"
)

#: Deletes one edge (``:s``, ``:r``, ``:d``: src, relation, dst).
DELETE_EDGE_SQL = "DELETE FROM edges WHERE corpus = :c AND src = :s AND relation = :r AND dst = :d"

# -- reads ------------------------------------------------------------------------------

#: Outgoing edges of ``:s``, heaviest first (``:r``: a relation or NULL; ``:n``: a limit or NULL).
NEIGHBOURS_SQL = (
    "SELECT src, dst, relation, weight, source FROM edges "
    "WHERE corpus = :c AND src = :s AND (CAST(:r AS text) IS NULL OR relation = :r) "
    "ORDER BY weight DESC, dst, relation LIMIT :n"
)
#: The number of edges of the corpus.
COUNT_SQL = "SELECT count(*) FROM edges WHERE corpus = :c"
#: Whether the corpus has any edge (one index probe).
HAS_EDGES_SQL = "SELECT EXISTS (SELECT 1 FROM edges WHERE corpus = :c) AS has_edges"

# -- the walk (see tnsrag_db._indexes.graph.walk) -----------------------------------------

#: The fence on walked entries (alias ``n``), bound as ``:fence``.
FENCE = "AND n.source = ANY(CAST(:fence AS text[]))"

# {seed_fence}, {walk_join}, {columns} and {filter} are code constants chosen by
# walk_statement; every value is bound.
WALK_SQL = dedent("""\
    WITH RECURSIVE walk (round, v_ids, v_scores, f_ids, f_scores, f_paths) AS (
      -- Level 0, the seeds that exist (inside the fence), best per id, at most the budget.
      SELECT 0, coalesce(array_agg(s.id), '{{}}'), coalesce(array_agg(s.score), '{{}}'),
             coalesce(array_agg(s.id), '{{}}'), coalesce(array_agg(s.score), '{{}}'),
             coalesce(array_agg(jsonb_build_array(s.id)), '{{}}')
      FROM (
        SELECT x.id, max(x.score) AS score
        FROM unnest(CAST(:seed_ids AS text[]), CAST(:seed_scores AS float8[])) AS x(id, score)
        JOIN entries n ON n.corpus = :c AND n.id = x.id {seed_fence}
        GROUP BY x.id
        ORDER BY score DESC, x.id
        LIMIT :budget
      ) s
      UNION ALL
      SELECT w.round + 1, nx.* FROM walk w CROSS JOIN LATERAL (
        -- v, the visited set so far, as rows (read twice below).
        WITH v AS MATERIALIZED (
          SELECT * FROM unnest(w.v_ids, w.v_scores) AS v(id, score)
        ),
        -- cand, each node the frontier reaches over its heaviest edges (fan-out shrinks as
        -- the frontier grows, so a level reads at most about 3 x budget edge rows), best
        -- way in per node, kept when new or strictly better than its visited score.
        cand AS MATERIALIZED (
          SELECT c.id, c.score, c.weight, c.parent_path, v.score AS old_score
          FROM (
            SELECT DISTINCT ON (e.dst COLLATE "C") e.dst AS id, f.score * CAST(:decay AS float8) AS score,
                   e.weight, f.path AS parent_path
            FROM unnest(w.f_ids, w.f_scores, w.f_paths) AS f(id, score, path)
            CROSS JOIN LATERAL (
              SELECT ed.dst, ed.weight FROM edges ed
              WHERE ed.corpus = :c AND ed.src = f.id
              ORDER BY ed.weight DESC, ed.dst
              LIMIT least(CAST(:max_fan AS int),
                          greatest(1, ceil(CAST(:edge_budget AS float8) / cardinality(w.f_ids))::int))
            ) e
            {walk_join}
            ORDER BY e.dst COLLATE "C", f.score DESC, e.weight DESC, f.id COLLATE "C"
          ) c LEFT JOIN v ON v.id = c.id
          WHERE v.id IS NULL OR c.score > v.score
        ),
        -- front, the next frontier, every improved node plus the best new ones the budget
        -- still has room for (ties by the heavier edge, then id).
        front AS MATERIALIZED (
          SELECT id, score, parent_path || to_jsonb(id) AS path FROM cand WHERE old_score IS NOT NULL
          UNION ALL
          (SELECT id, score, parent_path || to_jsonb(id) FROM cand WHERE old_score IS NULL
           ORDER BY score DESC, weight DESC, id
           LIMIT greatest(CAST(:budget AS int) - cardinality(w.v_ids), 0))
        ),
        -- vis, the visited set after this level (improved scores replace old ones).
        vis AS (
          SELECT v.id, v.score FROM v WHERE NOT EXISTS (SELECT 1 FROM cand b WHERE b.id = v.id)
          UNION ALL
          SELECT id, score FROM front
        )
        SELECT a.*, b.* FROM
          (SELECT array_agg(id), array_agg(score) FROM vis) a,
          (SELECT coalesce(array_agg(id), '{{}}'), coalesce(array_agg(score), '{{}}'),
                  coalesce(array_agg(path), '{{}}')
           FROM front) b
      ) nx
      WHERE w.round < :max_depth AND cardinality(w.f_ids) > 0
    ),
    -- nodes, the final state of each node is its last (best) improvement, its top-scoring frontier entry.
    nodes AS (
      SELECT DISTINCT ON (u.id) u.id, u.score, walk.round AS depth, u.path
      FROM walk, unnest(walk.f_ids, walk.f_scores, walk.f_paths) AS u(id, score, path)
      ORDER BY u.id, u.score DESC, walk.round
    ),
    -- ranked, min_score before the entries are read.
    ranked AS (
      SELECT * FROM nodes WHERE score >= CAST(:min_score AS float8) AND depth >= CAST(:min_depth AS int)
      ORDER BY score DESC, id
    )
    SELECT {columns}, nd.score AS graph_score, nd.depth AS graph_depth, nd.path AS graph_path
    FROM ranked nd CROSS JOIN LATERAL (
      -- The metadata filter applies to the results, after the walk and before top-K.
      SELECT * FROM entries e WHERE e.corpus = :c AND e.id = nd.id AND {filter}
    ) e
    ORDER BY nd.score DESC, nd.id
    LIMIT :k
    """)

# The heaviest edge between each consecutive pair of a path (the walk follows edges
# heaviest first, so that is the edge it took).
HOPS_SQL = dedent("""\
    SELECT DISTINCT ON (x.src, x.dst) x.src, x.dst, ed.relation, ed.weight
    FROM unnest(CAST(:srcs AS text[]), CAST(:dsts AS text[])) AS x(src, dst)
    JOIN edges ed ON ed.corpus = :c AND ed.src = x.src AND ed.dst = x.dst
    ORDER BY x.src, x.dst, ed.weight DESC, ed.relation
    """)
