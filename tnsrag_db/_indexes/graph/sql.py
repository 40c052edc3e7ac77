"""The statements of :class:`~tnsrag_db._indexes.graph.GraphStore`, as text (no I/O).

Every value is bound (``:c`` is the corpus); the ``{...}`` fields of :data:`WALK_SQL`
are code constants chosen by :func:`~tnsrag_db._indexes.graph.walk.walk_statement`.
The edge write (stage, lock the ends, upsert) is :func:`tnsrag_db._store.edges.write_edges`.
Every read that follows or lists edges keeps those valid at the read's instant
(:func:`tnsrag_db._store.validity.edge_valid`, over the edge alias ``ed``).
"""

from __future__ import annotations

from textwrap import dedent

from tnsrag_db._store.validity import edge_valid

#: The edge alias ``ed`` valid at the read's instant.
_EDGE_VALID = edge_valid("ed")

# -- edge writes (the one edge write, staging included, is tnsrag_db._store.edges) -----------

#: The entry an alias stands for (``:s``), when ``:s`` is no entry.
ALIAS_TARGET_SQL = (
    "SELECT a.entry_id FROM entry_aliases a WHERE a.corpus = :c AND a.alias = :s "
    "AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.corpus = :c AND e.id = :s)"
)

#: Deletes one edge (``:s``, ``:r``, ``:d``: src, relation, dst).
DELETE_EDGE_SQL = "DELETE FROM edges WHERE corpus = :c AND src = :s AND relation = :r AND dst = :d"

# -- reads ------------------------------------------------------------------------------

#: The columns of an edge as :data:`NEIGHBOURS_SQL` returns them.
EDGE_COLUMNS = ("src", "dst", "relation", "weight", "source", "valid_from", "valid_until")
#: Outgoing edges of ``:s`` valid at the instant, heaviest first (``:r``: a relation or
#: NULL; ``:n``: a limit or NULL).
NEIGHBOURS_SQL = (
    f"SELECT {', '.join(f'ed.{c}' for c in EDGE_COLUMNS)} FROM edges ed "
    "WHERE ed.corpus = :c AND ed.src = :s AND (CAST(:r AS text) IS NULL OR ed.relation = :r) "
    f"AND {_EDGE_VALID} ORDER BY ed.weight DESC, ed.dst, ed.relation LIMIT :n"
)
#: The number of edges of the corpus.
COUNT_SQL = "SELECT count(*) FROM edges WHERE corpus = :c"
#: Whether the corpus has any edge (one index probe).
HAS_EDGES_SQL = "SELECT EXISTS (SELECT 1 FROM edges WHERE corpus = :c) AS has_edges"

# -- the walk (see tnsrag_db._indexes.graph.walk) -----------------------------------------

#: The fence on walked entries (alias ``n``), bound as ``:fence``.
FENCE = "AND n.source = ANY(CAST(:fence AS text[]))"

# {seed_fence}, {walk_join}, {edges_bounded}, {edge_valid}, {columns} and {filter} are code
# constants chosen by walk_statement; every value is bound.
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
              -- A node's heaviest edges valid at the instant. Two branches, one of which runs
              -- (their gates are computed once per statement): in a corpus whose edges state
              -- no validity, the fan-out index alone (an index-only scan); else each edge tested.
              (SELECT ed.dst, ed.weight FROM edges ed
               WHERE ed.corpus = :c AND ed.src = f.id AND NOT {edges_bounded}
               ORDER BY ed.weight DESC, ed.dst
               LIMIT least(CAST(:max_fan AS int),
                           greatest(1, ceil(CAST(:edge_budget AS float8) / cardinality(w.f_ids))::int)))
              UNION ALL
              (SELECT ed.dst, ed.weight FROM edges ed
               WHERE ed.corpus = :c AND ed.src = f.id AND {edges_bounded} AND {edge_valid}
               ORDER BY ed.weight DESC, ed.dst
               LIMIT least(CAST(:max_fan AS int),
                           greatest(1, ceil(CAST(:edge_budget AS float8) / cardinality(w.f_ids))::int)))
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

# The heaviest edge valid at the instant between each consecutive pair of a path (the walk
# follows those edges heaviest first, so that is the edge it took).
HOPS_SQL = dedent(f"""\
    SELECT DISTINCT ON (x.src, x.dst) x.src, x.dst, ed.relation, ed.weight
    FROM unnest(CAST(:srcs AS text[]), CAST(:dsts AS text[])) AS x(src, dst)
    JOIN edges ed ON ed.corpus = :c AND ed.src = x.src AND ed.dst = x.dst AND {_EDGE_VALID}
    ORDER BY x.src, x.dst, ed.weight DESC, ed.relation
    """)
