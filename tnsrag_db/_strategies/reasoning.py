"""``ReasoningRAGStrategy``: root-to-leaf best-first descent with a :class:`TreeNavigator`.

The opposite walk from ``HierarchicalRAGStrategy``: start above the roots (the entries
without a parent, children of a virtual root), let the navigator rank the children of
the most promising node, and descend. Per frontier expansion there is exactly one SQL
statement (the children of the expanded node, with their rows, whether each has
children, and — for navigators that want it — the text of each child's subtree) and one
navigator call.

Seeds. A corpus has thousands of roots and the node budget is small, so the descent
does not start from the first roots in storage order: one statement first ranks the
corpus for the query with BM25 (``seed_count`` hits, default 50) and finds where each
hit sits in the tree (the hit and its ancestors, each with the best hit score beneath
it). Each expansion then fetches the children that lead to a hit first, best branch
first, and the other children after them (in id order) while the budget lasts; each
child carries its branch's score (:attr:`NavNode.seed_score`, 0 without a hit beneath).
A navigator whose ``follows_seeds`` attribute is true (the lexical one: it scores a
child without a hit 0) gets only the children that lead to a hit, so no budget goes to
siblings it would drop. On a flat corpus (no parents) the roots fetched are the best
BM25 hits. A query that matches nothing in BM25 walks the roots in id order, as an
unseeded descent (``seed_count`` None) always does.

Scores. A navigator's raw scores are only comparable among siblings, so each sibling set
is turned into a distribution: a child scored ``s > 0`` gets ``s / Σ positive sibling
scores``; children scored ≤ 0 are dropped. A node's *path score* is the product of these
shares from the root down (in (0, 1]); the frontier is a max-heap on it (ties: deeper
first, then id), which makes the walk a best-first descent in which no node ever
outranks its ancestors. Results carry the path score.

Where the descent stops (the results):
- a leaf (a node without children inside the fence),
- a node whose children all scored ≤ 0,
- a node at ``max_depth`` (roots are depth 1),
- a node still on the frontier when the budget is spent.
When every root scores ≤ 0 there is no result.

Budget. ``max_nodes_visited`` (default 15) bounds the nodes *fetched*: every child row a
frontier query returns counts (the virtual root's expansion included), the query asks
for at most the remaining budget (``LIMIT``, children by branch score, or in id order
unseeded), and nothing is fetched once it is spent. The seed statement's hits are not
shown to the navigator and do not count. Descendant text aggregated into ``subtree_text`` is a summary computed
by that same statement, not fetched nodes.

Filtering (docs/design.md, "Filters before top-K"): the walk is not filtered; the metadata filter
applies to the stop nodes (their ``tier``/``entryId``/``source``/own metadata plus
``path`` and ``depth``) after the descent, then ``min_score`` (inclusive, on the path
score), then top-K. The source fence (None or empty = none) applies in SQL: fenced-out
entries are never fetched, shown to the navigator, walked through or counted in subtree
text (a fenced-out node hides its whole subtree).

The hierarchy is trusted as stored: entries whose parent is missing are unreachable.
Run ``HierarchyIndex.validate()`` after writing through the plain ``Store``.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import (
    ConfigurationError,
    ExecutionError,
    TnsragError,
)
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._store.reads import ENTRY_COLUMN_NAMES, ENTRY_COLUMNS, document_from_row
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.base import PlannedStrategy, check_query, resolve_context, source_fence
from tnsrag_db._strategies.explain import explanation_of
from tnsrag_db._strategies.navigation import NavNode, TreeNavigator
from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db._validate import is_int, is_number
from tnsrag_db.explain import Explanation, ReasoningExplanation, ReasoningStep, ScoreExplanation, SearchPlan

__all__ = ["Descent", "ReasoningRAGStrategy"]

_Steps = dict[str, tuple[tuple[str, float, float], ...]]

#: Result metadata key holding the root-to-node path, a JSON array of entry ids.
PATH_KEY = "path"
#: Result metadata key holding the node's depth (1 for a root), as a decimal string.
DEPTH_KEY = "depth"


@dataclass(frozen=True, slots=True)
class Descent:
    """The outcome of one descent: ``documents`` (what ``retrieve`` returns), ``visited``
    (ids of every fetched node, in fetch order; its length never exceeds
    ``max_nodes_visited``) and ``expansions`` (frontier expansions, i.e. SQL statements
    and navigator calls)."""

    documents: list[RetrievedDocument]
    visited: tuple[str, ...]
    expansions: int
    #: Entries on the seeds' branches (hits and their ancestors); 0 when unseeded or no hit.
    branches: int = 0


@dataclass(slots=True)
class _Node:
    nav: NavNode
    row: Any
    path: tuple[str, ...]
    score: float
    # (node id, navigator score, positive sibling total) from the root down: the score's factors.
    steps: tuple[tuple[str, float, float], ...]
    order: tuple[float, int, str] = field(init=False)

    def __post_init__(self) -> None:
        self.order = (-self.score, -self.nav.depth, self.nav.id)

    def __lt__(self, other: _Node) -> bool:
        return self.order < other.order


def _positive_int(value: object, what: str) -> int:
    if is_int(value):
        assert isinstance(value, int)
        if value >= 1:
            return value
    raise ConfigurationError(f"{what} must be a positive int, got {value!r}")


class ReasoningRAGStrategy(PlannedStrategy):
    """Root-to-leaf descent over a ``HierarchyIndex`` guided by a ``TreeNavigator``; ``name`` is ``"reasoning"``.

    ``ReasoningRAGStrategy(index, navigator, model)`` uses no source fence,
    ``max_nodes_visited`` 15 and ``max_depth`` 6; the full form is
    ``(index, navigator, model, allowed_sources, max_nodes_visited, max_depth)``.
    ``subtree_text_chars`` (keyword-only, default 20,000) caps the subtree text given
    to navigators that want it, per child; ``subtree_rows`` (keyword-only, default
    2,000) caps the descendant rows one expansion reads for those texts, all children
    together, breadth first (so a huge subtree costs at most that many rows; deeper
    text is left out). ``seed_count`` (keyword-only, default 50) is the number of BM25
    hits whose branches the descent walks; None starts from the roots in id order. See
    the module docstring for seeds, scores, budget and filtering.

    Raises :class:`ConfigurationError` at construction for an index without a
    :class:`Store` ``store``, a navigator without ``rank_children``, a blank ``model``,
    non-positive limits, or a bad fence.

    ``retrieve`` returns the stop nodes of the descent, best path score first (ties by
    entry id), filtered, at least ``min_score``, at most ``max_results``; each with ``path``
    (a JSON array of ids, root first) and ``depth`` metadata. It raises
    :class:`ExecutionError` when the navigator fails or returns a wrong number of scores,
    scores for unknown children, or non-finite or non-numeric scores
    (:class:`ProviderTransportError` and :class:`RetrievalCancelledError` from the
    navigator keep their type). Each expansion reads the latest committed data
    (autocommit), the navigator running between them.
    """

    #: Default bound on fetched nodes per retrieval.
    DEFAULT_MAX_NODES_VISITED = 15
    #: Default bound on depth (roots are depth 1).
    DEFAULT_MAX_DEPTH = 6
    #: Default cap, in characters, on a child's subtree text.
    DEFAULT_SUBTREE_TEXT_CHARS = 20_000
    #: Default cap on the descendant rows one expansion reads for subtree texts.
    DEFAULT_SUBTREE_ROWS = 2_000
    #: Default number of BM25 hits whose branches the descent walks.
    DEFAULT_SEED_COUNT = 50

    def __init__(self, index: HierarchyIndex, navigator: TreeNavigator, model: str,
                 allowed_sources: Collection[str] | None = None,
                 max_nodes_visited: int = DEFAULT_MAX_NODES_VISITED,
                 max_depth: int = DEFAULT_MAX_DEPTH, *,
                 subtree_text_chars: int = DEFAULT_SUBTREE_TEXT_CHARS,
                 subtree_rows: int = DEFAULT_SUBTREE_ROWS,
                 seed_count: int | None = DEFAULT_SEED_COUNT) -> None:
        store = getattr(index, "store", None)
        if not isinstance(store, Store):
            raise ConfigurationError(f"ReasoningRAGStrategy needs a HierarchyIndex, got {type(index).__name__}")
        if isinstance(navigator, type) or not callable(getattr(navigator, "rank_children", None)):
            raise ConfigurationError(f"navigator must be a TreeNavigator instance with rank_children(), "
                                     f"got {navigator!r}")
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(f"model must be a non-blank provider model name, got {model!r}")
        fence = source_fence(allowed_sources)
        self._index = index
        # Any index over a Store is accepted (as always); its hierarchy statements come from here.
        self._hierarchy = index if isinstance(index, HierarchyIndex) else HierarchyIndex(store)
        self._store = store
        self._navigator = navigator
        self._model = model
        self._fence = fence
        self._max_nodes = _positive_int(max_nodes_visited, "max_nodes_visited")
        self._max_depth = _positive_int(max_depth, "max_depth")
        self._subtree_chars = _positive_int(subtree_text_chars, "subtree_text_chars")
        self._subtree_rows = _positive_int(subtree_rows, "subtree_rows")
        self._seed_count = None if seed_count is None else _positive_int(seed_count, "seed_count")

    @property
    def name(self) -> str:
        """``"reasoning"``."""
        return "reasoning"

    @property
    def model(self) -> str:
        """The navigator model name."""
        return self._model

    @property
    def max_nodes_visited(self) -> int:
        """Bound on fetched nodes per retrieval."""
        return self._max_nodes

    @property
    def max_depth(self) -> int:
        """Bound on depth (roots are depth 1)."""
        return self._max_depth

    @property
    def allowed_sources(self) -> frozenset[str] | None:
        """The source fence, None for none."""
        return self._fence

    @property
    def seed_count(self) -> int | None:
        """BM25 hits whose branches the descent walks (None: unseeded, roots in id order)."""
        return self._seed_count

    def __repr__(self) -> str:
        return (f"ReasoningRAGStrategy(corpus={self._store.corpus!r}, navigator={self._navigator!r}, "
                f"model={self._model!r}, max_nodes_visited={self._max_nodes}, max_depth={self._max_depth})")

    # -- retrieval --------------------------------------------------------------------
    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as an I/O-free :data:`~tnsrag_db._db.statement.Plan`: one statement
        per frontier expansion, the navigator called between them."""
        descent, _ = yield from self._descent_plan(query, context)
        return descent.documents

    @property
    def plan_store(self) -> Store:
        """The hierarchy's :class:`Store`."""
        return self._store

    def descend(self, query: str, context: RAGContext | None = None) -> Descent:
        """Run one descent and return the documents with the visit record (see :class:`Descent`).

        Errors as :meth:`retrieve`.
        """
        return self._store.run(self._descent_plan(query, context))[0]

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`ReasoningExplanation`: per level
        of its path the navigator's score, the positive sibling total and the share, the
        score being the product of the shares. The navigator is asked again (a navigator
        that answers differently each time explains a different descent). Errors as
        :meth:`retrieve`."""
        descent, steps = self._store.run(self._descent_plan(query, context))
        explanations: list[ScoreExplanation] = []
        for doc in descent.documents:
            explanations.append(ReasoningExplanation(doc.score, self._model, tuple(
                ReasoningStep(node, raw, total, raw / total) for node, raw, total in steps[doc.metadata["entryId"]])))
        ctx = resolve_context(context)
        if self._seed_count is None:
            seeded = "unseeded, roots in id order"
        elif descent.branches:
            seeded = f"seeded by BM25: {descent.branches} entries on the branches of its top {self._seed_count}"
        else:
            seeded = "no BM25 hit, roots in id order"
        plan = SearchPlan("reasoning", "tree", bool(ctx.metadata_filters),
                          detail=f"{seeded}; {descent.expansions} expansion(s), {len(descent.visited)} of at most "
                                 f"{self._max_nodes} nodes fetched, depth <= {self._max_depth}")
        return explanation_of(self.name, check_query(query), descent.documents, explanations, [plan])

    def _descent_plan(self, query: str, context: RAGContext | None) -> Plan[tuple[Descent, _Steps]]:
        ctx = resolve_context(context)
        text = check_query(query)
        visited: list[str] = []
        stops: list[_Node] = []
        expansions = 0
        frontier: list[_Node] = []
        # The seeds' branches: children ids of each node (None: the roots) that lead to a hit, best first.
        leads: dict[str | None, list[str]] | None = None
        seed_scores: dict[str, float] = {}
        branches = 0
        if self._seed_count is not None:
            rows = yield self._branches(text)
            if rows:
                branches = len(rows)
                leads = {}
                for row in sorted(rows, key=lambda r: (-float(r.score), str(r.id))):
                    leads.setdefault(row.parent_id, []).append(str(row.id))
                    seed_scores[str(row.id)] = float(row.score)

        def expand(parent: _Node | None) -> Plan[None]:
            nonlocal expansions
            depth = 1 if parent is None else parent.nav.depth + 1
            parent_id = None if parent is None else parent.nav.id
            rows = yield self._children(parent_id, self._max_nodes - len(visited),
                                        None if leads is None else leads.get(parent_id, []))
            expansions += 1
            if not rows:  # the children vanished since the parent was fetched
                if parent is not None:
                    stops.append(parent)
                return
            children = [self._nav_node(row, depth, None if leads is None else seed_scores.get(row.entry_id, 0.0))
                        for row in rows]
            visited.extend(c.id for c in children)
            scores = self._rank(text, None if parent is None else parent.nav, children)
            total = math.fsum(s for s in scores if s > 0)
            if total <= 0:
                if parent is not None:
                    stops.append(parent)
                return
            base_path = () if parent is None else parent.path
            base_score = 1.0 if parent is None else parent.score
            base_steps = () if parent is None else parent.steps
            for child, row, s in zip(children, rows, scores):
                if s <= 0:
                    continue
                node = _Node(child, row, base_path + (child.id,), base_score * (s / total),
                             base_steps + ((child.id, s, total),))
                if child.has_children and child.depth < self._max_depth:
                    heapq.heappush(frontier, node)
                else:
                    stops.append(node)

        yield from expand(None)
        while frontier and len(visited) < self._max_nodes:
            yield from expand(heapq.heappop(frontier))
        stops.extend(frontier)  # the budget ran out before these were expanded

        documents: list[RetrievedDocument] = []
        steps: _Steps = {}
        for node in stops:
            doc = document_from_row(node.row, node.score, {
                PATH_KEY: json.dumps(list(node.path), ensure_ascii=False),
                DEPTH_KEY: str(node.nav.depth),
            })
            if ctx.matches(doc.metadata) and doc.score >= ctx.min_score:
                documents.append(doc)
                steps[node.nav.id] = node.steps
        documents.sort(key=lambda d: (-d.score, d.metadata["entryId"]))
        return Descent(documents[: ctx.max_results], tuple(visited), expansions, branches), steps

    # -- helpers ------------------------------------------------------------------------
    def _branches(self, query: str) -> Statement:
        """One statement: the BM25 hits of ``query`` and their ancestors, each with its best hit score."""
        assert self._seed_count is not None
        hits = BM25Index(self._store).ranking_statement(query, self._seed_count, prefix="rs")
        return self._hierarchy.branches_statement(hits, fence=self._fence)

    def _children(self, parent_id: str | None, limit: int, among: list[str] | None) -> Statement:
        """One statement: up to ``limit`` children of ``parent_id`` (roots for None): those of
        ``among`` first, in its order (the seeds' branches), then (unless the navigator follows
        the seeds) the others in id order; without ``among`` in id order."""
        follows = getattr(self._navigator, "follows_seeds", False) is True
        # A navigator that follows the seeds scores these children by their seed scores: the
        # subtree texts (up to subtree_rows rows per expansion) would be read for nothing.
        wants_text = getattr(self._navigator, "wants_subtree_text", False) is True and not (
            follows and among is not None)
        return self._hierarchy.children_statement(
            parent_id, limit, fence=self._fence, columns=ENTRY_COLUMNS, column_names=ENTRY_COLUMN_NAMES,
            subtree=(self._subtree_chars, self._subtree_rows) if wants_text else None, among=among,
            only_among=follows)

    @staticmethod
    def _nav_node(row: Any, depth: int, seed_score: float | None) -> NavNode:
        raw = row.metadata
        metadata: Mapping[str, Any] = json.loads(raw) if isinstance(raw, str) else (raw or {})
        summary = metadata.get("summary")
        return NavNode.from_content(row.entry_id, row.content, depth,
                                    summary=summary if isinstance(summary, str) else None,
                                    has_children=bool(row.has_children), subtree_text=row.subtree_text or "",
                                    seed_score=seed_score)

    def _rank(self, query: str, node: NavNode | None, children: Sequence[NavNode]) -> list[float]:
        """Call the navigator and check its answer: one finite number per child."""
        where = "the roots" if node is None else f"the children of {node.id!r}"
        try:
            answer = self._navigator.rank_children(query, node, tuple(children), self._model)
        except TnsragError:  # the library's own typed errors (timeouts, cancellation...) keep their type
            raise
        except Exception as exc:
            raise ExecutionError(f"tree navigator {self._navigator!r} failed ranking {where}: {exc}") from exc
        ids = [c.id for c in children]
        if isinstance(answer, Mapping):
            unknown = sorted(str(k) for k in answer if k not in set(ids))
            if unknown:
                raise ExecutionError(f"tree navigator returned scores for unknown children {unknown} "
                                     f"while ranking {where} (children: {ids})")
            missing = [i for i in ids if i not in answer]
            if missing:
                raise ExecutionError(f"tree navigator returned no score for children {missing} while ranking {where}")
            values: list[object] = [answer[i] for i in ids]
        elif isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
            raise ExecutionError(f"tree navigator must return a sequence of scores, got {type(answer).__name__}")
        else:
            values = list(answer)
            if len(values) != len(ids):
                raise ExecutionError(f"tree navigator returned {len(values)} scores for {len(ids)} children "
                                     f"while ranking {where}")
        scores: list[float] = []
        for child_id, value in zip(ids, values):
            if not is_number(value) or not math.isfinite(value):  # type: ignore[arg-type]
                raise ExecutionError(f"tree navigator returned a non-finite or non-numeric score {value!r} "
                                     f"for child {child_id!r} while ranking {where}")
            scores.append(float(value))  # type: ignore[arg-type]
        return scores
