"""The SQL of a bounded graph walk, built without I/O (:class:`~tnsrag_db._db.statement.Statement`).

:func:`walk_statement` is the whole walk of ``GraphRAGStrategy`` in one recursive
statement (its semantics, and the bound on the work, are described in
:mod:`tnsrag_db._strategies.graph`); :func:`hops_statement` reads the edges a winning
path took, for explanations. :class:`~tnsrag_db._indexes.graph.GraphStore` hands them
out with its corpus bound.

The walk carries ONE row per level: the visited set as parallel arrays (id, best
score) and the level's frontier (entries first reached or improved on that level,
with their scores and paths). Keeping a whole level in one row is what makes the
global de-duplication and the budget exact: a recursive term may not aggregate over
the working table, but a LATERAL subquery over one row's arrays may.
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tnsrag_db._db.statement import Statement
from tnsrag_db._store.filters import filter_sql

__all__ = ["EDGE_BUDGET_FACTOR", "WALK_COLUMNS", "hops_statement", "walk_statement"]

#: How many edge rows a level may read, as a multiple of the visited budget.
EDGE_BUDGET_FACTOR = 2

#: The columns a walk row carries besides the caller's entry columns.
WALK_COLUMNS = ("graph_score", "graph_depth", "graph_path")

_FENCE = "AND n.source = ANY(CAST(:fence AS text[]))"

# {seed_fence}, {walk_join}, {columns} and {filter} are code constants chosen by
# walk_statement; every value is bound.
_WALK_SQL = textwrap.dedent("""\
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
_HOPS_SQL = textwrap.dedent("""\
    SELECT DISTINCT ON (x.src, x.dst) x.src, x.dst, ed.relation, ed.weight
    FROM unnest(CAST(:srcs AS text[]), CAST(:dsts AS text[])) AS x(src, dst)
    JOIN edges ed ON ed.corpus = :c AND ed.src = x.src AND ed.dst = x.dst
    ORDER BY x.src, x.dst, ed.weight DESC, ed.relation
    """)


def walk_statement(corpus: str, seed_ids: Sequence[str], seed_scores: Sequence[float], *, columns: str,
                   column_names: Sequence[str], fence: Collection[str] | None, max_depth: int, decay: float,
                   budget: int, max_fan_out: int, filters: Mapping[str, str] | None, min_score: float,
                   k: int, min_depth: int = 0) -> Statement:
    """The walk from ``seed_ids`` (scores > 0, checked by the caller) in ``corpus``.

    ``columns`` is the entry columns to return (a code constant over alias ``e``, named
    ``column_names``); each row also carries ``graph_score``, ``graph_depth`` and
    ``graph_path`` (a JSON array of ids, seed first), best first (ties by id), at most
    ``k``; only entries at least ``min_depth`` hops from their seed are returned (0: the
    seeds too; 1: only what the edges reached). ``fence`` (None for none) confines seeds, walked and returned entries to those
    sources. Raises :class:`InvalidFilterError` for a bad filter.
    """
    predicate, fparams = filter_sql(filters, alias="e", prefix="f")
    fenced = fence is not None
    sql = _WALK_SQL.format(
        seed_fence=_FENCE if fenced else "",
        walk_join=f"JOIN entries n ON n.corpus = :c AND n.id = e.dst {_FENCE}" if fenced else "",
        columns=columns,
        filter=predicate,
    )
    params: dict[str, Any] = {
        "c": corpus,
        "seed_ids": list(seed_ids),
        "seed_scores": list(seed_scores),
        "budget": budget,
        "max_depth": max_depth,
        "decay": decay,
        "max_fan": max_fan_out,
        "edge_budget": EDGE_BUDGET_FACTOR * budget,
        "min_score": min_score,
        "min_depth": min_depth,
        "k": k,
        **fparams,
    }
    if fence is not None:
        params["fence"] = sorted(fence)
    return Statement(sql, params, (*column_names, *WALK_COLUMNS))


def hops_statement(corpus: str, pairs: Sequence[tuple[str, str]]) -> Statement:
    """For each ``(src, dst)`` of ``pairs`` that has an edge, the heaviest one (ties by
    relation): rows ``src, dst, relation, weight``."""
    return Statement(_HOPS_SQL, {"c": corpus, "srcs": [a for a, _ in pairs], "dsts": [b for _, b in pairs]},
                     ("src", "dst", "relation", "weight"))
