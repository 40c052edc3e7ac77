"""``HierarchicalRAGStrategy``: child hits plus their parent chains, with per-level decay.

The child strategy finds hits; the parent chain of every hit is walked in one
recursive query (one round trip) up to ``max_parent_depth`` levels. A parent scores
``child score × decay ** level``; when several hits reach the same parent the best
score wins (ties: the shallower level, then the smaller child id), and a parent that is
also a direct hit appears once, with its better score.

Filtering (docs/design.md, "Filters before top-K"): the child strategy is called *without* the
metadata filter, the walk is not filtered, and the filter applies to the final results
(hits and parents, with their ``depth``/``childOf`` metadata) after expansion and before
top-K. The source fence applies to hits and parents: a fenced-out entry is neither
returned nor walked through.

Candidates: the child is asked for ``max(MIN_CANDIDATES, CANDIDATE_FACTOR × max_results)``
hits (50 and 4 by default). While the top-K is not provably final — fewer than K results
survive the fence, filter and ``min_score``, or the K-th score does not beat the best score
an unfetched hit could still produce — and the child returned a full page, the request
doubles, up to ``max(MAX_CANDIDATES, first request)`` (1,000). Within that cap the result
is exactly the top-K over every child hit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._store.reads import ENTRY_COLUMN_NAMES, ENTRY_COLUMNS, document_from_row
from tnsrag_db._strategies.base import (
    RAGStrategy,
    WrappingStrategy,
    check_query,
    child_plan,
    overfetch_plan,
    resolve_context,
    returned,
    run_apart,
    source_fence,
)
from tnsrag_db._strategies.explain import explain_with, explanation_of, prefixed
from tnsrag_db._strategies.fusion import document_key
from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db._validate import is_int, is_number
from tnsrag_db.explain import ExplainedDocument, Explanation, HierarchyExplanation, ScoreExplanation

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["HierarchicalRAGStrategy"]


#: A child retrieval as a plan: ``fetch(query, context)``.
_Fetch = Callable[[str, RAGContext], Plan[list[RetrievedDocument]]]


@dataclass(slots=True)
class _Candidate:
    doc: RetrievedDocument
    depth: int
    child_of: str


def _sort_key(doc: RetrievedDocument) -> tuple[float, str, str]:
    return (-doc.score, doc.metadata.get("entryId", ""), doc.content)


class HierarchicalRAGStrategy(WrappingStrategy):
    """Child hits from ``child_strategy`` expanded with their parent chains from ``index``.

    ``allowed_sources``: the source fence (None or empty = no fence).
    ``max_parent_depth``: levels of parents walked above each hit (default 3; 0 = none).
    ``decay``: score factor per level, in (0, 1] (default 0.85).
    Raises :class:`ConfigurationError` for a bad argument.

    Every result carries ``tier``, ``entryId``, ``source`` (when set), the entry's own
    metadata, ``depth`` (``"0"`` for a hit, the level for a parent) and ``childOf`` (the
    id of the hit the result was reached from; its own id for a hit). A hit without an
    ``entryId`` (a child strategy not backed by this corpus) is kept as is, with depth
    ``"0"``, and not expanded.

    ``retrieve`` returns hits and their parents, best first, at most ``max_results``, each
    ≥ ``min_score``; errors of the child strategy propagate.
    """

    DEFAULT_MAX_PARENT_DEPTH = 3
    DEFAULT_DECAY = 0.85
    #: First child request: max(MIN_CANDIDATES, CANDIDATE_FACTOR × max_results).
    MIN_CANDIDATES = 50
    CANDIDATE_FACTOR = 4
    #: Largest child request when refetching (or the first request, when larger).
    MAX_CANDIDATES = 1000

    def __init__(
        self,
        child_strategy: RAGStrategy,
        index: HierarchyIndex,
        allowed_sources: Collection[str] | None = None,
        max_parent_depth: int = DEFAULT_MAX_PARENT_DEPTH,
        decay: float = DEFAULT_DECAY,
    ) -> None:
        if not isinstance(child_strategy, RAGStrategy):
            raise ConfigurationError(f"child_strategy must be a RAGStrategy, got {type(child_strategy).__name__}")
        if not isinstance(index, HierarchyIndex):
            raise ConfigurationError(f"index must be a HierarchyIndex, got {type(index).__name__}")
        if not is_int(max_parent_depth) or max_parent_depth < 0:
            raise ConfigurationError(f"max_parent_depth must be an int >= 0, got {max_parent_depth!r}")
        if not is_number(decay) or not math.isfinite(decay) or not 0 < decay <= 1:
            raise ConfigurationError(f"decay must be a number in (0, 1], got {decay!r}")
        fence = source_fence(allowed_sources)
        super().__init__(child_strategy)
        self._index = index
        self._fence = fence
        self._max_parent_depth = max_parent_depth
        self._decay = float(decay)

    @property
    def name(self) -> str:
        """``"hierarchical"``."""
        return "hierarchical"

    @property
    def allowed_sources(self) -> frozenset[str]:
        """The source fence (empty = no fence)."""
        return self._fence or frozenset()

    @property
    def plan_store(self) -> Store:
        """The hierarchy's :class:`Store` (the child's plan runs on it too)."""
        return self._index.store

    @property
    def max_parent_depth(self) -> int:
        """Levels of parents walked above each hit."""
        return self._max_parent_depth

    @property
    def decay(self) -> float:
        """Score factor per parent level."""
        return self._decay

    def __repr__(self) -> str:
        return (f"HierarchicalRAGStrategy(child={self._child.name!r}, max_parent_depth={self._max_parent_depth}, "
                f"decay={self._decay})")

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as an I/O-free :data:`~tnsrag_db._db.statement.Plan`: the child's
        plan (or its ``retrieve``, for a child without one), then the parent walk."""
        check_query(query)
        ctx = resolve_context(context)
        return (yield from self._plan(query, ctx, lambda q, c: child_plan(self._child, q, c)))

    def _plan(self, query: str, ctx: RAGContext, fetch: _Fetch) -> Plan[list[RetrievedDocument]]:
        k = ctx.max_results
        # A hit below min_score cannot lift a parent above it when scores are >= 0; a
        # negative hit s reaches at best s × decay ** depth, hence the wider bound below 0.
        child_min = ctx.min_score if ctx.min_score >= 0 else ctx.min_score / self._decay ** self._max_parent_depth
        floor = self._decay ** self._max_parent_depth
        return (yield from overfetch_plan(
            lambda n: fetch(query, RAGContext(n, child_min)),
            lambda hits: self._expand(hits, ctx),
            lambda last: last if last >= 0 else last * floor,
            k, min_candidates=self.MIN_CANDIDATES, factor=self.CANDIDATE_FACTOR, max_candidates=self.MAX_CANDIDATES))

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`HierarchyExplanation`: the hit
        it was reached from, that hit's score (and the child strategy's explanation of it)
        and the level, the score being the hit's times ``decay`` once per level. Errors as
        :meth:`retrieve`."""
        check_query(query)
        ctx = resolve_context(context)
        last: list[Explanation] = []

        def fetch(q: str, c: RAGContext) -> list[RetrievedDocument]:
            explained = explain_with(self._child, q, c)
            last[:] = [explained]  # the final results come from the last fetch
            return explained.documents

        docs = run_apart(self._index.store, self._plan(query, ctx, lambda q, c: returned(fetch, q, c)))
        hits: dict[str, ExplainedDocument] = {}
        if last:
            for r in last[0].results:
                key = document_key(r.document)
                if key not in hits or r.document.score > hits[key].document.score:
                    hits[key] = r
        explanations: list[ScoreExplanation] = []
        for doc in docs:
            level = int(doc.metadata.get("depth", "0"))
            child_of = doc.metadata.get("childOf")
            hit = hits.get(f"entry:{child_of}" if child_of is not None else document_key(doc))
            child_score = doc.score if hit is None else hit.document.score
            explanations.append(HierarchyExplanation(doc.score, child_of, child_score, level, self._decay,
                                                     None if hit is None else hit.explanation))
        plans = prefixed(last[0].plans, "child") if last else []
        return explanation_of(self.name, query, docs, explanations, plans)

    def _expand(self, hits: list[RetrievedDocument], ctx: RAGContext) -> Plan[list[RetrievedDocument]]:
        """Fence the hits, walk their parents, merge, filter and rank (not yet cut to K)."""
        best: dict[str, _Candidate] = {}
        anonymous: list[RetrievedDocument] = []  # hits without an entry id cannot be expanded
        for hit in hits:
            if self._fence is not None and hit.source not in self._fence:
                continue
            entry_id = hit.metadata.get("entryId")
            if entry_id is None:
                anonymous.append(hit.with_metadata(depth="0"))
                continue
            seen = best.get(entry_id)
            if seen is None or hit.score > seen.doc.score:
                best[entry_id] = _Candidate(hit.with_metadata(depth="0", childOf=entry_id), 0, entry_id)
        if best and self._max_parent_depth > 0:
            rows = yield self._index.parents_statement(
                {i: c.doc.score for i, c in best.items()}, max_depth=self._max_parent_depth, decay=self._decay,
                fence=self._fence, columns=ENTRY_COLUMNS, column_names=ENTRY_COLUMN_NAMES)
            for row in rows:
                score = float(row.score)
                seen = best.get(row.entry_id)
                # A hit keeps its place on a tie (depth 0 beats any level).
                if seen is not None and (score < seen.doc.score
                                         or (score == seen.doc.score and seen.depth <= row.level)):
                    continue
                doc = document_from_row(row, score, {"depth": str(row.level), "childOf": row.child_id})
                best[row.entry_id] = _Candidate(doc, row.level, row.child_id)
        docs = [c.doc for c in best.values()] + anonymous
        kept = [d for d in docs if d.score >= ctx.min_score and ctx.matches(d.metadata)]
        kept.sort(key=_sort_key)
        return kept
