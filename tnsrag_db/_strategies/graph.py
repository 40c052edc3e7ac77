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

The walk is level by level (a bounded Bellman-Ford over max-product scores), in one
recursive statement that :class:`~tnsrag_db._indexes.graph.GraphStore` builds (see
:mod:`tnsrag_db._indexes.graph.walk` for how it keeps a whole level in one row). A
node's result is its best frontier appearance (its last improvement).

**Bound on the work** (what keeps a hub from blowing the query up): on a level
with frontier F (|F| ≤ budget B), each frontier node follows only its heaviest
``fan = min(max_fan_out, max(1, ceil(2·B / |F|)))`` edges (2: the default
``edge_budget_factor``; ties by dst), read with
one ``ORDER BY weight DESC LIMIT fan`` index scan on ``(corpus, src, weight DESC,
dst)``. So a level reads at most ``|F| · fan ≤ 2·B + |F| ≤ 3·B`` edge rows, the
level's state never holds more than B entries, and the whole statement handles at
most ``max_depth · 3 · B`` edge rows, whatever the out-degrees. With few frontier
nodes a node follows up to ``max_fan_out`` edges; with many, fewer each (the
heaviest). The index scans (one per expanded node, at most B per level) dominate
the cost.

Metadata filters from the :class:`~tnsrag_db._types.RAGContext` apply to the final
results (in SQL, after the walk and before top-K); seeds and walked nodes are not
filtered. Results are ordered by score descending, ties by entry id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan, Statement, one
from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._indexes.graph.walk import DEFAULT_EDGE_BUDGET_FACTOR
from tnsrag_db._store.reads import ENTRY_COLUMN_NAMES, ENTRY_COLUMNS, document_from_row
from tnsrag_db._strategies.base import (
    PlannedStrategy,
    RAGStrategy,
    check_query,
    child_plan,
    planned,
    resolve_context,
    source_fence,
)
from tnsrag_db._strategies.explain import explain_with, explanation_of, prefixed
from tnsrag_db._strategies.keyword import bm25_figures_plan, bm25_plan
from tnsrag_db._types import MAX_RESULTS, RAGContext, RetrievedDocument
from tnsrag_db._validate import check_int, is_number
from tnsrag_db.explain import Explanation, GraphExplanation, GraphHop, ScoreExplanation, SearchPlan

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["GraphRAGStrategy"]



def _explained_bm25_seeds(index: BM25Index, query: str, count: int) -> Plan[
        tuple[list[tuple[str, float]], dict[str, ScoreExplanation]]]:
    """The BM25 seeds of ``query`` with their figures, from one snapshot when run with ``snapshot=True``."""
    sql, params = index.candidates_sql(query, count)
    rows = yield Statement(sql, params, ("entry_id", "score"))
    pairs = [(str(r.entry_id), float(r.score)) for r in rows]
    figures = yield from bm25_figures_plan(index, query, dict(pairs))
    return pairs, dict(figures)


def _seed_map(pairs: list[tuple[str, float]]) -> dict[str, float]:
    """Seed ids to scores: the best score of each id, dropping non-finite and non-positive ones."""
    seeds: dict[str, float] = {}
    for entry_id, score in pairs:
        if math.isfinite(score) and score > 0.0 and score > seeds.get(entry_id, 0.0):
            seeds[entry_id] = score
    return seeds


def _check_int(value: object, what: str, low: int, high: int) -> int:
    value = check_int(value, what, error=ConfigurationError)
    if not low <= value <= high:
        raise ConfigurationError(f"{what} must be between {low} and {high}, got {value}")
    return value


class GraphRAGStrategy(PlannedStrategy):
    """Seeds from a seed strategy, then a bounded, source-fenced walk along outgoing edges.

    Arguments (in the SPI's order; pass the class constants for the defaults):

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
      docstring for how it bounds the work;
    - ``include_seeds`` (default True): whether the seeds themselves are results. False
      returns only what the edges reached (hops ≥ 1): the graph's own evidence, as the
      hybrid strategy by name fuses it, so a corpus without edges adds nothing there
      instead of a second copy of the seed ranking;
    - ``edge_budget_factor`` (keyword-only, 1 to :attr:`MAX_EDGE_BUDGET_FACTOR`, default 2):
      a level reads about this many times ``max_visited_nodes`` edge rows, shared among
      its frontier nodes (the ``2`` of the bound on the work in the module docstring).

    Seed scores are used as the seed strategy reports them (not normalised); seeds
    scoring ≤ 0 carry no evidence and are dropped, as are seed documents without an
    ``entryId``. Invalid arguments raise :class:`ConfigurationError`.

    ``retrieve`` returns the entries reached from the query's seeds, best first. Each
    result's metadata carries ``tier``, ``entryId``, ``source`` (when set), the entry's own
    metadata, ``depth`` (hops, as a decimal string) and ``path`` (a JSON array of entry ids
    from the seed to the entry; these two replace entry metadata keys of the same name).
    The seed search and the walk run in autocommit, each statement on the latest committed
    data: the walk reads edges only once.
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
    #: Largest accepted ``edge_budget_factor``.
    MAX_EDGE_BUDGET_FACTOR = 16

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
        include_seeds: bool = True,
        edge_budget_factor: int = DEFAULT_EDGE_BUDGET_FACTOR,
    ) -> None:
        if not isinstance(provider_name, str) or not provider_name.strip():
            raise ConfigurationError(f"provider_name must be a non-blank string, got {provider_name!r}")
        if not isinstance(store, GraphStore):
            raise ConfigurationError(f"store must be a GraphStore, got {type(store).__name__}")
        fence = source_fence(allowed_sources)
        _check_int(max_depth, "max_depth", 1, self.MAX_DEPTH_LIMIT)
        if not is_number(depth_decay) or not math.isfinite(depth_decay) or not 0.0 < depth_decay <= 1.0:
            raise ConfigurationError(f"depth_decay must be a number in (0, 1], got {depth_decay!r}")
        _check_int(max_visited_nodes, "max_visited_nodes", 1, self.MAX_VISITED_LIMIT)
        _check_int(seed_count, "seed_count", 1, self.MAX_VISITED_LIMIT)
        _check_int(max_fan_out, "max_fan_out", 1, self.MAX_VISITED_LIMIT)
        _check_int(edge_budget_factor, "edge_budget_factor", 1, self.MAX_EDGE_BUDGET_FACTOR)
        if not isinstance(include_seeds, bool):
            raise ConfigurationError(f"include_seeds must be a bool, got {include_seeds!r}")
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
        self._include_seeds = include_seeds
        self._edge_budget_factor = edge_budget_factor

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

    @property
    def include_seeds(self) -> bool:
        """Whether the seeds themselves are results (False: only entries reached by an edge)."""
        return self._include_seeds

    def __repr__(self) -> str:
        return (f"GraphRAGStrategy(provider_name={self._provider_name!r}, corpus={self._store.corpus!r}, "
                f"max_depth={self._max_depth}, depth_decay={self._decay}, max_visited_nodes={self._budget})")

    # -- retrieval ----------------------------------------------------------------------
    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as an I/O-free :data:`~tnsrag_db._db.statement.Plan`: the seed
        search (the seed strategy's own plan when it has one), then the walk."""
        query = check_query(query)
        ctx = resolve_context(context)
        seeds = yield from self._seeds_plan(query)
        return (yield from self._traverse_plan(seeds, ctx))

    @property
    def plan_store(self) -> Store:
        """The graph's :class:`Store`."""
        return self._store.store

    @property
    def own_io(self) -> bool:
        """True for a seed strategy whose retrieval is not a plan (it runs through its ``retrieve``)."""
        return self._seed_strategy is not None and not planned(self._seed_strategy)

    def seeds(self, query: str) -> dict[str, float]:
        """The seed entries for ``query`` with their seed scores (unfiltered, unfenced)."""
        return self._store.store.run(self._seeds_plan(check_query(query)))

    def _seeds_plan(self, query: str) -> Plan[dict[str, float]]:
        if self._seed_strategy is None:
            sql, params = BM25Index(self._store.store).candidates_sql(query, self._seed_count)
            rows = yield Statement(sql, params, ("entry_id", "score"))
            pairs = [(str(r.entry_id), float(r.score)) for r in rows]
        else:
            docs = yield from child_plan(self._seed_strategy, query,
                                         RAGContext(max_results=min(MAX_RESULTS, self._seed_count)))
            pairs = [(d.metadata["entryId"], d.score) for d in docs if "entryId" in d.metadata]
        return _seed_map(pairs)

    def _explained_seeds(self, query: str) -> tuple[dict[str, float], dict[str, ScoreExplanation], list[SearchPlan]]:
        """:meth:`seeds` with each seed's explanation and the seed search's plans."""
        if self._seed_strategy is None:
            index = BM25Index(self._store.store)
            pairs, figures = self._store.store.run(_explained_bm25_seeds(index, query, self._seed_count),
                                                   snapshot=True)
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

    @honours_as_of
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
            for row in self._store.store.run(one(self._store.hops_statement(pairs))):
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
        detail = (f"{len(seeds)} seed(s), depth <= {self._max_depth}, decay {self._decay:g} per hop, at most "
                  f"{self._budget} entries visited")
        if not self._include_seeds:
            detail += "; only entries reached by an edge are results"
        if not self._store.has_edges():
            detail += "; the corpus has no edges, so " + (
                "the results are the seeds" if self._include_seeds else "nothing is reached")
        plans.append(SearchPlan("walk", "graph", bool(ctx.metadata_filters), detail=detail))
        return explanation_of(self.name, query, docs, explanations, plans)

    def traverse(self, seeds: Mapping[str, float], context: RAGContext | None = None) -> list[RetrievedDocument]:
        """Walk from explicit ``seeds`` (entry id to seed score) in one statement; see the module docstring.

        Seeds that do not exist, lie outside the fence or score ≤ 0 are ignored. If
        there are more seeds than the budget, the best-scoring ones are used.
        Raises :class:`ValidationError` for a bad seed mapping or context.
        """
        return self._store.store.run(self._traverse_plan(seeds, resolve_context(context)))

    def _traverse_plan(self, seeds: Mapping[str, float], ctx: RAGContext) -> Plan[list[RetrievedDocument]]:
        statement = self._statement(seeds, ctx)
        if not statement.params["seed_ids"]:
            return []
        rows = yield statement
        return [document_from_row(r, r.graph_score, {"depth": str(r.graph_depth),
                                                     "path": json.dumps(r.graph_path, ensure_ascii=False)})
                for r in rows]

    def explain_traversal(self, seeds: Mapping[str, float], context: RAGContext | None = None) -> list[dict[str, Any]]:
        """``EXPLAIN (ANALYZE, FORMAT JSON)`` of :meth:`traverse`'s statement (it is executed).

        Returns the plan nodes flattened, each with ``node``, ``rows`` (actual rows
        per loop × loops, i.e. the rows the node produced in total) and ``loops``.
        """
        statement = self._statement(seeds, resolve_context(context))
        plan = self._store.store.run(one(Statement("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql,
                                                   statement.params)))[0][0]
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

    def _statement(self, seeds: Mapping[str, float], ctx: RAGContext) -> Statement:
        if not isinstance(seeds, Mapping):
            raise ValidationError(f"seeds must be a mapping of entry id to score, got {type(seeds).__name__}")
        kept: dict[str, float] = {}
        for entry_id, score in seeds.items():
            if not isinstance(entry_id, str) or "\x00" in entry_id:
                raise ValidationError(f"seed ids must be strings without NUL characters, got {entry_id!r}")
            if not is_number(score) or not math.isfinite(score):
                raise ValidationError(f"seed score of {entry_id!r} must be a finite number, got {score!r}")
            if score > 0.0:
                kept[entry_id] = float(score)
        return self._store.walk_statement(
            kept, columns=ENTRY_COLUMNS, column_names=ENTRY_COLUMN_NAMES, fence=self._fence,
            max_depth=self._max_depth, decay=self._decay, budget=self._budget, max_fan_out=self._max_fan_out,
            filters=ctx.metadata_filters, min_score=ctx.min_score, k=ctx.max_results,
            min_depth=0 if self._include_seeds else 1, edge_budget_factor=self._edge_budget_factor)
