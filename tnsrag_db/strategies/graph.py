"""Graph retrieval: seed entries, then a bounded walk along outgoing edges in one recursive CTE.

``GraphRAGStrategy`` asks a seed strategy (BM25 over the corpus by default) for the
entries that best match the query, then follows **outgoing** edges from them in
PostgreSQL, in one statement, and returns the reached entries (seeds included):

- **score** = seed score × ``depth_decay`` ** depth. When a node is reachable in
  several ways, the best-scoring path wins (for example a two-hop path from a
  strong seed beats a one-hop path from a weak one; with equal seeds the shorter
  path wins). A node reached again through a cycle is never re-scored or returned
  twice: a cycle only multiplies by the decay again, and a node's score is only
  replaced by a strictly better one.
- **depth** is the number of hops of the winning path (0 for a seed), at most
  ``max_depth``; **path** is that path's entry ids, seed first.
- **source fence**: with ``allowed_sources`` set, an entry whose ``source`` is not
  in it (including an entry without a source) is neither a seed, nor returned, nor
  walked through, so entries behind it are reachable only by other routes.
- **budget**: at most ``max_visited_nodes`` distinct entries are ever visited
  (seeds included). When a level offers more new entries than the budget has room
  for, the best-scoring ones are kept (ties: reached by the heavier edge, then by id).

The walk is level by level (a bounded Bellman-Ford over max-product scores). The
recursive CTE carries ONE row per level: the visited set as parallel arrays (id,
best score) and the level's frontier (entries first reached or improved on that
level, with their scores and paths). Keeping a whole level in one row is what makes
the global de-duplication and the budget exact: a recursive term may not aggregate
over the working table, but a LATERAL subquery over one row's arrays may. A node's
result is its best frontier appearance (its last improvement).

**Bound on the work** (what keeps a hub from blowing the query up): on a level
with frontier F (|F| ≤ budget B), each frontier node follows only its heaviest
``fan = min(max_fan_out, max(1, ceil(2·B / |F|)))`` edges (ties by dst), read with
one ``ORDER BY weight DESC LIMIT fan`` index scan on ``(corpus, src, weight DESC,
dst)``. So a level reads at most ``|F| · fan ≤ 2·B + |F| ≤ 3·B`` edge rows, the
level's state never holds more than B entries, and the whole statement handles at
most ``max_depth · 3 · B`` edge rows, whatever the out-degrees. With few frontier
nodes a node follows up to ``max_fan_out`` edges; with many, fewer each (the
heaviest). The index scans (one per expanded node, at most B per level) dominate
the cost.

Metadata filters from the :class:`~tnsrag_db.types.RAGContext` apply to the final
results (in SQL, after the walk and before top-K); seeds and walked nodes are not
filtered. Results are ordered by score descending, ties by entry id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from typing import Any

import sqlalchemy as sa

from tnsrag_db.errors import ConfigurationError, ValidationError
from tnsrag_db.indexes.graph import GraphStore
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.strategies.base import (
    ENTRY_COLUMNS,
    RAGStrategy,
    check_query,
    document_from_row,
    resolve_context,
    source_fence,
)
from tnsrag_db.strategies.explain import (
    Explanation,
    GraphExplanation,
    GraphHop,
    ScoreExplanation,
    SearchPlan,
    explain_with,
    explanation_of,
    prefixed,
    snapshot,
)
from tnsrag_db.types import MAX_RESULTS, RAGContext, RetrievedDocument

__all__ = ["GraphRAGStrategy"]

# How many edge rows a level may read, as a multiple of the visited budget.
_EDGE_BUDGET_FACTOR = 2

_FENCE = "AND n.source = ANY(CAST(:fence AS text[]))"

# {seed_fence}/{walk_join}/{filter} are code constants chosen below; values are bound.
_TRAVERSAL_SQL = """
WITH RECURSIVE walk (round, v_ids, v_scores, f_ids, f_scores, f_paths) AS (
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
    WITH v AS MATERIALIZED (
      SELECT * FROM unnest(w.v_ids, w.v_scores) AS v(id, score)
    ), cand AS MATERIALIZED (
      SELECT c.id, c.score, c.weight, c.parent_path, v.score AS old_score
      FROM (
        SELECT DISTINCT ON (e.dst COLLATE "C") e.dst AS id, f.score * CAST(:decay AS float8) AS score, e.weight,
               f.path AS parent_path
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
    ), front AS MATERIALIZED (
      SELECT id, score, parent_path || to_jsonb(id) AS path FROM cand WHERE old_score IS NOT NULL
      UNION ALL
      (SELECT id, score, parent_path || to_jsonb(id) FROM cand WHERE old_score IS NULL
       ORDER BY score DESC, weight DESC, id
       LIMIT greatest(CAST(:budget AS int) - cardinality(w.v_ids), 0))
    ), vis AS (
      SELECT v.id, v.score FROM v WHERE NOT EXISTS (SELECT 1 FROM cand b WHERE b.id = v.id)
      UNION ALL
      SELECT id, score FROM front
    )
    SELECT a.*, b.* FROM
      (SELECT array_agg(id), array_agg(score) FROM vis) a,
      (SELECT coalesce(array_agg(id), '{{}}'), coalesce(array_agg(score), '{{}}'), coalesce(array_agg(path), '{{}}')
       FROM front) b
  ) nx
  WHERE w.round < :max_depth AND cardinality(w.f_ids) > 0
), nodes AS (
  -- A node's final state is its last (best) improvement: the frontier entry with its top score.
  SELECT DISTINCT ON (u.id) u.id, u.score, walk.round AS depth, u.path
  FROM walk, unnest(walk.f_ids, walk.f_scores, walk.f_paths) AS u(id, score, path)
  ORDER BY u.id, u.score DESC, walk.round
), ranked AS (
  SELECT * FROM nodes WHERE score >= CAST(:min_score AS float8) ORDER BY score DESC, id
)
SELECT {columns}, nd.score AS graph_score, nd.depth AS graph_depth, nd.path AS graph_path
FROM ranked nd CROSS JOIN LATERAL (
  SELECT * FROM entries e WHERE e.corpus = :c AND e.id = nd.id AND {filter}
) e
ORDER BY nd.score DESC, nd.id
LIMIT :k
"""


# The heaviest edge between each consecutive pair of a path (the walk follows edges
# heaviest first, so that is the edge it took).
_HOPS_SQL = (
    "SELECT DISTINCT ON (x.src, x.dst) x.src, x.dst, ed.relation, ed.weight "
    "FROM unnest(CAST(:srcs AS text[]), CAST(:dsts AS text[])) AS x(src, dst) "
    "JOIN edges ed ON ed.corpus = :c AND ed.src = x.src AND ed.dst = x.dst "
    "ORDER BY x.src, x.dst, ed.weight DESC, ed.relation"
)


def _seed_map(pairs: list[tuple[str, float]]) -> dict[str, float]:
    """Seed ids to scores: the best score of each id, dropping non-finite and non-positive ones."""
    seeds: dict[str, float] = {}
    for entry_id, score in pairs:
        if math.isfinite(score) and score > 0.0 and score > seeds.get(entry_id, 0.0):
            seeds[entry_id] = score
    return seeds


def _check_int(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ConfigurationError(f"{what} must be between {low} and {high}, got {value}")
    return value


class GraphRAGStrategy:
    """Seeds from a seed strategy, then a bounded, source-fenced walk along outgoing edges.

    Arguments (in the spec's order; pass the class constants for the defaults):

    - ``provider_name``: the graph provider's name (non-blank), reported by :attr:`provider_name`;
    - ``store``: the :class:`GraphStore` to walk (its corpus is the one searched);
    - ``allowed_sources``: the source fence; None or empty means no fence;
    - ``max_depth``: hops from a seed, 1 to :attr:`MAX_DEPTH_LIMIT` (default :attr:`DEFAULT_MAX_DEPTH` = 2);
    - ``depth_decay``: score multiplier per hop, in (0, 1] (default :attr:`DEFAULT_DEPTH_DECAY` = 0.85);
    - ``max_visited_nodes``: distinct entries visited, seeds included, 1 to
      :attr:`MAX_VISITED_LIMIT` (default :attr:`DEFAULT_MAX_VISITED_NODES` = 1,024);
    - ``seed_strategy``: the strategy whose results (their ``entryId`` metadata and
      score) become the seeds; None means BM25 over the corpus
      (``BM25Index(store.store).search(query, seed_count)``);
    - ``seed_count``: how many seeds to ask for, ≥ 1 (default 10);
    - ``max_fan_out``: the most edges followed from one node per level, heaviest
      first, ≥ 1 (default :attr:`DEFAULT_MAX_FAN_OUT` = 64); see the module
      docstring for how it bounds the work.

    Seed scores are used as the seed strategy reports them (not normalised); seeds
    scoring ≤ 0 carry no evidence and are dropped, as are seed documents without an
    ``entryId``. Invalid arguments raise :class:`ConfigurationError`.
    """

    DEFAULT_MAX_DEPTH = 2
    DEFAULT_DEPTH_DECAY = 0.85
    DEFAULT_MAX_VISITED_NODES = 1024
    DEFAULT_MAX_FAN_OUT = 64
    DEFAULT_SEED_COUNT = 10
    #: Largest accepted ``max_depth``.
    MAX_DEPTH_LIMIT = 16
    #: Largest accepted ``max_visited_nodes``.
    MAX_VISITED_LIMIT = 100_000

    def __init__(
        self,
        provider_name: str,
        store: GraphStore,
        allowed_sources: Collection[str] | None,
        max_depth: int,
        depth_decay: float,
        max_visited_nodes: int,
        *,
        seed_strategy: RAGStrategy | None = None,
        seed_count: int = DEFAULT_SEED_COUNT,
        max_fan_out: int = DEFAULT_MAX_FAN_OUT,
    ) -> None:
        if not isinstance(provider_name, str) or not provider_name.strip():
            raise ConfigurationError(f"provider_name must be a non-blank string, got {provider_name!r}")
        if not isinstance(store, GraphStore):
            raise ConfigurationError(f"store must be a GraphStore, got {type(store).__name__}")
        fence = source_fence(allowed_sources)
        _check_int(max_depth, "max_depth", 1, self.MAX_DEPTH_LIMIT)
        if isinstance(depth_decay, bool) or not isinstance(depth_decay, (int, float)) \
                or not math.isfinite(depth_decay) or not 0.0 < depth_decay <= 1.0:
            raise ConfigurationError(f"depth_decay must be a number in (0, 1], got {depth_decay!r}")
        _check_int(max_visited_nodes, "max_visited_nodes", 1, self.MAX_VISITED_LIMIT)
        _check_int(seed_count, "seed_count", 1, self.MAX_VISITED_LIMIT)
        _check_int(max_fan_out, "max_fan_out", 1, self.MAX_VISITED_LIMIT)
        if seed_strategy is not None and not isinstance(seed_strategy, RAGStrategy):
            raise ConfigurationError(f"seed_strategy must be a RAGStrategy, got {type(seed_strategy).__name__}")
        self._provider_name = provider_name
        self._store = store
        self._fence = fence
        self._max_depth = max_depth
        self._decay = float(depth_decay)
        self._budget = max_visited_nodes
        self._seed_strategy = seed_strategy
        self._seed_count = seed_count
        self._max_fan_out = max_fan_out

    # -- properties -----------------------------------------------------------------
    @property
    def name(self) -> str:
        """Always ``"graph"``."""
        return "graph"

    @property
    def provider_name(self) -> str:
        """The graph provider's name given at construction."""
        return self._provider_name

    @property
    def store(self) -> GraphStore:
        """The graph walked."""
        return self._store

    @property
    def allowed_sources(self) -> frozenset[str] | None:
        """The source fence, or None for no fence."""
        return self._fence

    @property
    def max_depth(self) -> int:
        """Most hops from a seed."""
        return self._max_depth

    @property
    def depth_decay(self) -> float:
        """Score multiplier per hop."""
        return self._decay

    @property
    def max_visited_nodes(self) -> int:
        """Most distinct entries visited per retrieval, seeds included."""
        return self._budget

    @property
    def max_fan_out(self) -> int:
        """Most edges followed from one node per level (heaviest first)."""
        return self._max_fan_out

    def __repr__(self) -> str:
        return (f"GraphRAGStrategy(provider_name={self._provider_name!r}, corpus={self._store.corpus!r}, "
                f"max_depth={self._max_depth}, depth_decay={self._decay}, max_visited_nodes={self._budget})")

    # -- retrieval ----------------------------------------------------------------------
    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """Entries reached from the query's seeds, best first, at most ``context.max_results``.

        Each result's metadata carries ``tier``, ``entryId``, ``source`` (when set),
        the entry's own metadata, ``depth`` (hops, as a decimal string) and ``path``
        (a JSON array of entry ids from the seed to the entry; these two replace
        entry metadata keys of the same name). Raises :class:`ValidationError` for a
        bad query or context.
        """
        query = check_query(query)
        ctx = resolve_context(context)
        return self.traverse(self.seeds(query), ctx)

    def seeds(self, query: str) -> dict[str, float]:
        """The seed entries for ``query`` with their seed scores (unfiltered, unfenced)."""
        query = check_query(query)
        if self._seed_strategy is None:
            from tnsrag_db.indexes.bm25 import BM25Index

            hits = BM25Index(self._store.store).search(query, self._seed_count)
            pairs = [(str(entry_id), float(score)) for entry_id, score in hits]
        else:
            docs = self._seed_strategy.retrieve(query, RAGContext(max_results=min(MAX_RESULTS, self._seed_count)))
            pairs = [(d.metadata["entryId"], d.score) for d in docs if "entryId" in d.metadata]
        return _seed_map(pairs)

    def _explained_seeds(self, query: str) -> tuple[dict[str, float], dict[str, ScoreExplanation], list[SearchPlan]]:
        """:meth:`seeds` with each seed's explanation and the seed search's plans."""
        if self._seed_strategy is None:
            from tnsrag_db.indexes.bm25 import BM25Index
            from tnsrag_db.strategies.keyword import bm25_plan

            index = BM25Index(self._store.store)
            sql, params = index.candidates_sql(query, self._seed_count)
            with snapshot(self._store.store) as conn:
                pairs = [(str(r.entry_id), float(r.score)) for r in conn.execute(sa.text(sql), params)]
                figures: dict[str, ScoreExplanation] = dict(index.explain_scores(conn, query, dict(pairs)))
            return _seed_map(pairs), figures, [bm25_plan(RAGContext(self._seed_count), "seeds")]
        explained = explain_with(self._seed_strategy, query, RAGContext(max_results=self._seed_count))
        seeds = _seed_map([(r.document.metadata["entryId"], r.document.score) for r in explained.results
                           if "entryId" in r.document.metadata])
        details: dict[str, ScoreExplanation] = {}
        for r in explained.results:
            entry_id = r.document.metadata.get("entryId")
            if entry_id is not None and seeds.get(entry_id) == r.document.score and entry_id not in details:
                details[entry_id] = r.explanation
        return seeds, details, prefixed(explained.plans, "seeds")

    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`GraphExplanation`: the seed and
        its score (with the seed strategy's explanation), then one hop per edge of the
        winning path (the heaviest edge between the two entries), each multiplying by the
        decay. Errors as :meth:`retrieve`."""
        query = check_query(query)
        ctx = resolve_context(context)
        seeds, seed_details, plans = self._explained_seeds(query)
        docs = self.traverse(seeds, ctx)
        paths = [tuple(json.loads(d.metadata["path"])) for d in docs]
        pairs = sorted({(a, b) for path in paths for a, b in zip(path, path[1:])})
        edges: dict[tuple[str, str], Any] = {}
        if pairs:
            with self._store.store.session.transaction() as conn:
                for row in conn.execute(sa.text(_HOPS_SQL), {"c": self._store.corpus, "srcs": [a for a, _ in pairs],
                                                             "dsts": [b for _, b in pairs]}):
                    edges[(row.src, row.dst)] = row
        explanations: list[ScoreExplanation] = []
        for doc, path in zip(docs, paths):
            value = seeds[path[0]]
            hops: list[GraphHop] = []
            for a, b in zip(path, path[1:]):
                value = value * self._decay  # as the walk multiplies, hop by hop
                edge = edges.get((a, b))
                hops.append(GraphHop(a, b, None if edge is None else str(edge.relation),
                                     None if edge is None else float(edge.weight), self._decay, value))
            explanations.append(GraphExplanation(doc.score, path[0], seeds[path[0]], self._decay, tuple(hops),
                                                 seed_details.get(path[0])))
        plans.append(SearchPlan("walk", "graph", bool(ctx.metadata_filters),
                                detail=f"{len(seeds)} seed(s), depth <= {self._max_depth}, decay {self._decay:g} "
                                       f"per hop, at most {self._budget} entries visited"))
        return explanation_of(self.name, query, docs, explanations, plans)

    def traverse(self, seeds: Mapping[str, float], context: RAGContext | None = None) -> list[RetrievedDocument]:
        """Walk from explicit ``seeds`` (entry id to seed score) in one statement; see the module docstring.

        Seeds that do not exist, lie outside the fence or score ≤ 0 are ignored. If
        there are more seeds than the budget, the best-scoring ones are used.
        Raises :class:`ValidationError` for a bad seed mapping or context.
        """
        ctx = resolve_context(context)
        sql, params = self._statement(seeds, ctx)
        if not params["seed_ids"]:
            return []
        with self._store.store.session.transaction() as conn:
            rows = conn.execute(sa.text(sql), params).all()
        return [document_from_row(r, r.graph_score, {"depth": str(r.graph_depth),
                                                     "path": json.dumps(r.graph_path, ensure_ascii=False)})
                for r in rows]

    def explain_traversal(self, seeds: Mapping[str, float], context: RAGContext | None = None) -> list[dict[str, Any]]:
        """``EXPLAIN (ANALYZE, FORMAT JSON)`` of :meth:`traverse`'s statement (it is executed).

        Returns the plan nodes flattened, each with ``node``, ``rows`` (actual rows
        per loop × loops, i.e. the rows the node produced in total) and ``loops``.
        """
        ctx = resolve_context(context)
        sql, params = self._statement(seeds, ctx)
        with self._store.store.session.transaction() as conn:
            plan = conn.execute(sa.text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql), params).scalar_one()
        if isinstance(plan, str):
            plan = json.loads(plan)
        out: list[dict[str, Any]] = []

        def walk(node: Mapping[str, Any], depth: int) -> None:
            loops = int(node.get("Actual Loops", 0))
            label = node["Node Type"]
            for key in ("Relation Name", "CTE Name", "Function Name", "Subplan Name"):
                if key in node:
                    label += f" {node[key]}"
            out.append({"node": label, "rows": round(float(node.get("Actual Rows", 0)) * loops), "loops": loops,
                        "depth": depth})
            for child in node.get("Plans", ()):
                walk(child, depth + 1)

        walk(plan[0]["Plan"], 0)
        return out

    def _statement(self, seeds: Mapping[str, float], ctx: RAGContext) -> tuple[str, dict[str, Any]]:
        if not isinstance(seeds, Mapping):
            raise ValidationError(f"seeds must be a mapping of entry id to score, got {type(seeds).__name__}")
        ids: list[str] = []
        scores: list[float] = []
        for entry_id, score in seeds.items():
            if not isinstance(entry_id, str) or "\x00" in entry_id:
                raise ValidationError(f"seed ids must be strings without NUL characters, got {entry_id!r}")
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise ValidationError(f"seed score of {entry_id!r} must be a finite number, got {score!r}")
            if score > 0.0:
                ids.append(entry_id)
                scores.append(float(score))
        predicate, fparams = filter_sql(ctx.metadata_filters, alias="e", prefix="f")
        fenced = self._fence is not None
        sql = _TRAVERSAL_SQL.format(
            seed_fence=_FENCE if fenced else "",
            walk_join=f"JOIN entries n ON n.corpus = :c AND n.id = e.dst {_FENCE}" if fenced else "",
            columns=ENTRY_COLUMNS,
            filter=predicate,
        )
        params: dict[str, Any] = {
            "c": self._store.corpus,
            "seed_ids": ids,
            "seed_scores": scores,
            "budget": self._budget,
            "max_depth": self._max_depth,
            "decay": self._decay,
            "max_fan": self._max_fan_out,
            "edge_budget": _EDGE_BUDGET_FACTOR * self._budget,
            "min_score": ctx.min_score,
            "k": ctx.max_results,
            **fparams,
        }
        if fenced:
            assert self._fence is not None
            params["fence"] = sorted(self._fence)
        return sql, params
