"""``TemporalRAGStrategy``: a child strategy's candidates re-ranked by a bounded freshness multiplier.

``score = child score × multiplier`` with
``multiplier = relevance_floor + (1 − relevance_floor) × 0.5 ** (age / half_life)``:
1 for a brand-new entry, ``floor + (1 − floor) / 2`` at one half-life, approaching the
floor for old entries. Undated entries keep the floor. A timestamp up to
``max_future_skew`` ahead of the clock counts as age 0; one further ahead raises
:class:`TemporalValidationError` at retrieval (as it does at write, through
:class:`TemporalIndex`).

Filtering (docs/design.md, "Filters before top-K"): the metadata filter is passed *down* to the
child strategy (it is a re-ranking strategy), so the child applies it before its own
top-K. The source fence is applied to the child's candidates here.

Candidates: the child is asked for ``max(MIN_CANDIDATES, CANDIDATE_FACTOR × max_results)``
candidates (50 and 4 by default). The multiplier is at most 1, so a candidate the child
did not return (child score ≤ the last one returned) cannot beat the K-th re-ranked score
once that score is higher than the last child score; until then, and while the child
returns full pages, the request doubles up to ``max(MAX_CANDIDATES, first request)``
(1,000). Within that cap the re-ranked top-K is exact.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError, TemporalValidationError
from tnsrag_db._indexes.temporal import Clock, TemporalIndex, check_clock, check_skew, now_from, utc_now
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
from tnsrag_db._strategies.explain import by_entry, explain_with, explanation_of, prefixed
from tnsrag_db._strategies.fusion import document_key
from tnsrag_db._types import RAGContext, RetrievedDocument, TemporalMetadata, parse_instant
from tnsrag_db._validate import is_number
from tnsrag_db.explain import Explanation, ScoreExplanation, TemporalExplanation

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["TemporalRAGStrategy"]


def _sort_key(doc: RetrievedDocument) -> tuple[float, str, str]:
    return (-doc.score, doc.metadata.get("entryId", ""), doc.content)


class TemporalRAGStrategy(WrappingStrategy):
    """Candidates from ``child_strategy`` re-ranked by freshness, timestamps from ``index``.

    ``allowed_sources``: the source fence (None or empty = no fence).
    ``clock``: zero-argument callable returning an aware datetime (default: now in UTC).
    ``half_life``: age at which the freshness bonus halves (default 30 days, > 0).
    ``relevance_floor``: multiplier of undated and very old entries, in [0, 1] (default 0.8).
    ``max_future_skew``: how far ahead of the clock a timestamp may be (default 5 minutes).
    Raises :class:`ConfigurationError` for a bad argument.

    Results keep the child's metadata and add ``freshness`` (the multiplier, rounded to six
    decimals) and, for dated entries, ``ageSeconds`` (whole seconds, 0 for a future
    timestamp within the skew).

    ``retrieve`` returns the child's candidates re-ranked by freshness: best first, at most
    ``max_results``, each ≥ ``min_score``. It raises :class:`TemporalValidationError` when a
    candidate's timestamp is too far in the future and :class:`ConfigurationError` when the
    clock returns a naive datetime; the child's errors propagate.
    """

    DEFAULT_HALF_LIFE = timedelta(days=30)
    DEFAULT_RELEVANCE_FLOOR = 0.8
    DEFAULT_MAX_FUTURE_SKEW = timedelta(minutes=5)
    #: First child request: max(MIN_CANDIDATES, CANDIDATE_FACTOR × max_results).
    MIN_CANDIDATES = 50
    CANDIDATE_FACTOR = 4
    #: Largest child request when refetching (or the first request, when larger).
    MAX_CANDIDATES = 1000

    def __init__(
        self,
        child_strategy: RAGStrategy,
        index: TemporalIndex,
        allowed_sources: Collection[str] | None = None,
        clock: Clock | None = None,
        half_life: timedelta = DEFAULT_HALF_LIFE,
        relevance_floor: float = DEFAULT_RELEVANCE_FLOOR,
        max_future_skew: timedelta = DEFAULT_MAX_FUTURE_SKEW,
    ) -> None:
        if not isinstance(child_strategy, RAGStrategy):
            raise ConfigurationError(f"child_strategy must be a RAGStrategy, got {type(child_strategy).__name__}")
        if not isinstance(index, TemporalIndex):
            raise ConfigurationError(f"index must be a TemporalIndex, got {type(index).__name__}")
        if not isinstance(half_life, timedelta) or half_life <= timedelta(0):
            raise ConfigurationError(f"half_life must be a timedelta > 0, got {half_life!r}")
        if not is_number(relevance_floor) or not math.isfinite(relevance_floor) or not 0 <= relevance_floor <= 1:
            raise ConfigurationError(f"relevance_floor must be a number in [0, 1], got {relevance_floor!r}")
        fence = source_fence(allowed_sources)
        super().__init__(child_strategy)
        self._index = index
        self._fence = fence
        self._clock: Clock = check_clock(clock) or utc_now
        self._half_life = half_life
        self._floor = float(relevance_floor)
        self._skew = check_skew(max_future_skew)

    @property
    def name(self) -> str:
        """``"temporal"``."""
        return "temporal"

    @property
    def allowed_sources(self) -> frozenset[str]:
        """The source fence (empty = no fence)."""
        return self._fence or frozenset()

    @property
    def plan_store(self) -> Store:
        """The temporal index's :class:`Store` (the child's plan runs on it too)."""
        return self._index.store

    @property
    def half_life(self) -> timedelta:
        """Age at which the freshness bonus halves."""
        return self._half_life

    @property
    def relevance_floor(self) -> float:
        """The multiplier of undated and very old entries."""
        return self._floor

    @property
    def max_future_skew(self) -> timedelta:
        """How far ahead of the clock a timestamp may be at retrieval."""
        return self._skew

    def __repr__(self) -> str:
        return (f"TemporalRAGStrategy(child={self._child.name!r}, half_life={self._half_life!r}, "
                f"relevance_floor={self._floor}, max_future_skew={self._skew!r})")

    def multiplier(self, timestamp: datetime | None, now: datetime) -> float:
        """The freshness multiplier of an entry stamped ``timestamp`` at time ``now``.

        Undated: the floor. Raises :class:`TemporalValidationError` for a timestamp more
        than ``max_future_skew`` ahead of ``now``.
        """
        age = self._age(timestamp, now, "timestamp")
        return self._floor if age is None else self._freshness(age)

    def _age(self, timestamp: datetime | None, now: datetime, what: str) -> timedelta | None:
        if timestamp is None:
            return None
        age = now - timestamp
        if age < timedelta(0):
            if -age > self._skew:
                raise TemporalValidationError(
                    f"{what}: timestamp {timestamp.isoformat()} is more than {self._skew} ahead of the clock "
                    f"({now.isoformat()})")
            return timedelta(0)
        return age

    def _freshness(self, age: timedelta) -> float:
        decay: float = 0.5 ** (age / self._half_life)
        return self._floor + (1.0 - self._floor) * decay

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as an I/O-free :data:`~tnsrag_db._db.statement.Plan`: the child's
        plan (or its ``retrieve``, for a child without one), then the candidates' timestamps."""
        check_query(query)
        ctx = resolve_context(context)
        now = now_from(self._clock)

        def rerank(candidates: list[RetrievedDocument]) -> Plan[list[RetrievedDocument]]:
            return [r.doc for r in (yield from self._rerank(candidates, ctx, now))]

        return (yield from self._plan(query, ctx, lambda q, c: child_plan(self._child, q, c), rerank))

    def _plan(self, query: str, ctx: RAGContext, fetch: Callable[[str, RAGContext], Plan[list[RetrievedDocument]]],
              rerank: Callable[[list[RetrievedDocument]], Plan[list[RetrievedDocument]]]
              ) -> Plan[list[RetrievedDocument]]:
        k = ctx.max_results
        # The multiplier is in [floor, 1]: a non-negative child score below min_score
        # stays below it; a negative score s rises at most to s × floor.
        if ctx.min_score >= 0:
            child_min = ctx.min_score
        elif self._floor > 0:
            child_min = ctx.min_score / self._floor
        else:
            child_min = -sys.float_info.max
        return (yield from overfetch_plan(
            lambda n: fetch(query, RAGContext(n, child_min, ctx.metadata_filters)),
            rerank,
            lambda last: last if last >= 0 else last * self._floor,
            k, min_candidates=self.MIN_CANDIDATES, factor=self.CANDIDATE_FACTOR, max_candidates=self.MAX_CANDIDATES))

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`TemporalExplanation`: the child's
        score (and the child's explanation of it), the timestamp, the age and the freshness
        multiplier, the score being their product. Errors as :meth:`retrieve`."""
        check_query(query)
        ctx = resolve_context(context)
        now = now_from(self._clock)
        children: list[Explanation] = []
        scored: dict[str, _Rescored] = {}

        def fetch(q: str, c: RAGContext) -> list[RetrievedDocument]:
            explained = explain_with(self._child, q, c)
            children[:] = [explained]
            return explained.documents

        def rerank(candidates: list[RetrievedDocument]) -> Plan[list[RetrievedDocument]]:
            out = yield from self._rerank(candidates, ctx, now)
            scored.clear()
            scored.update((document_key(r.doc), r) for r in out)
            return [r.doc for r in out]

        docs = run_apart(self._index.store, self._plan(query, ctx, lambda q, c: returned(fetch, q, c), rerank))
        child_details = by_entry(children[0]) if children else {}
        hl = self._half_life.total_seconds()
        explanations: list[ScoreExplanation] = []
        for doc in docs:
            r = scored[document_key(doc)]
            child = child_details.get(document_key(r.child))
            explanations.append(TemporalExplanation(
                doc.score, r.child.score, r.multiplier, r.timestamp,
                None if r.age is None else r.age / timedelta(seconds=1), hl, self._floor,
                None if child is None else child.explanation))
        plans = prefixed(children[0].plans, "child") if children else []
        return explanation_of(self.name, query, docs, explanations, plans)

    def _rerank(self, candidates: list[RetrievedDocument], ctx: RAGContext, now: datetime) -> Plan[list[_Rescored]]:
        if self._fence is not None:
            candidates = [c for c in candidates if c.source in self._fence]
        ids = [c.metadata["entryId"] for c in candidates if "entryId" in c.metadata]
        stamps = self._index.timestamps_of((yield self._index.timestamps_statement(ids))) if ids else {}
        out: list[_Rescored] = []
        for doc in candidates:
            entry_id = doc.metadata.get("entryId")
            if entry_id is not None and entry_id in stamps:
                ts = stamps[entry_id]
            else:  # not an entry of this corpus: trust the document's own timestamp metadata, if any
                raw = doc.metadata.get(TemporalMetadata.TIMESTAMP)
                ts = parse_instant(raw) if raw is not None else None
            age = self._age(ts, now, f"entry {entry_id!r}" if entry_id is not None else "document")
            if age is None:
                mult = self._floor
                extra = {"freshness": str(round(mult, 6))}
            else:
                mult = self._freshness(age)
                extra = {"freshness": str(round(mult, 6)), "ageSeconds": str(age // timedelta(seconds=1))}
            scored = RetrievedDocument(doc.content, doc.source, doc.score * mult, {**doc.metadata, **extra})
            if scored.score >= ctx.min_score:
                out.append(_Rescored(scored, doc, mult, ts, age))
        out.sort(key=lambda r: _sort_key(r.doc))
        return out


@dataclass(frozen=True, slots=True)
class _Rescored:
    """A re-ranked document with what made its score: the child's document, the multiplier,
    the timestamp and the age (None when undated)."""

    doc: RetrievedDocument
    child: RetrievedDocument
    multiplier: float
    timestamp: datetime | None
    age: timedelta | None
