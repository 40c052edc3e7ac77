"""The shared strategy interface, the strategies' one retrieval driver, and helpers every strategy uses.

``RAGStrategy`` is the SPI contract: a ``name`` and ``retrieve(query, context)``. The
library's strategies are :class:`PlannedStrategy` s: each writes its retrieval once, as a
:data:`~tnsrag_db._db.statement.Plan`, and names the store it runs on; ``retrieve`` and
``aretrieve`` are written once, here, as the two thin drivers of that plan (sync and async
connections). :class:`WrappingStrategy` is the base of a strategy around a child strategy.
Direct strategies build their results with
:func:`~tnsrag_db._store.reads.document_from_row`, so every
result carries ``tier``, ``entryId``, ``source`` (when set) and the entry's own
metadata, exactly the keys metadata filters apply to.
"""

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from tnsrag_db._db import aio
from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan, Rows, Statement, one, run_plan
from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._telemetry import traced_retrieve
from tnsrag_db._types import MAX_RESULTS, RAGContext, RetrievedDocument
from tnsrag_db._validate import check_query

__all__ = [
    "FETCH_CAP",
    "PlannedStrategy",
    "RAGStrategy",
    "WrappingStrategy",
    "aretrieve_with",
    "check_query",
    "child_plan",
    "collapsing_plan",
    "overfetch_plan",
    "plan_store_of",
    "planned",
    "resolve_context",
    "returned",
    "run_apart",
    "run_own_io",
    "source_fence",
    "widen_plan",
]

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

_T = TypeVar("_T")

#: Most candidates a strategy that collapses its child's results asks for (unless
#: ``max_results`` is larger): see :func:`collapsing_plan`.
FETCH_CAP = 1024


@runtime_checkable
class RAGStrategy(Protocol):
    """A retrieval strategy: ``name`` and ``retrieve(query, context=None)``."""

    @property
    def name(self) -> str:
        """The strategy's name, such as ``"vector"``."""
        ...

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """Documents for ``query``, best first, at most ``context.max_results``, each scoring ≥ ``min_score``."""
        ...


class PlannedStrategy(ABC):
    """A strategy whose retrieval is one plan: a subclass writes ``name``, :meth:`plan` and
    :attr:`plan_store` (and :attr:`own_io` when its plan may call a retrieval doing I/O of its
    own); :meth:`retrieve` and :meth:`aretrieve` drive that plan, the same statements on a
    sync or an async connection.

    The plan runs in autocommit, each statement on the latest committed data. A plan with
    I/O of its own (a child strategy without a plan, called through its ``retrieve``) runs
    each statement on a connection of its own, so none is held while that I/O waits for one,
    and :meth:`aretrieve` runs it whole in a worker thread, off the event loop.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """The strategy's name, such as ``"vector"``."""

    @abstractmethod
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as an I/O-free :data:`~tnsrag_db._db.statement.Plan` (validation
        happens when the plan starts): a wrapping strategy runs it inside its own."""

    @property
    @abstractmethod
    def plan_store(self) -> Store | None:
        """The store whose connections run the statements of :meth:`plan` (None: the plan sends none)."""

    @property
    def own_io(self) -> bool:
        """Whether :meth:`plan` calls a retrieval doing I/O of its own (a strategy without a plan)."""
        return False

    @traced_retrieve
    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """At most ``context.max_results`` documents for ``query``, best first, each scoring at
        least ``context.min_score`` and matching ``context.metadata_filters``.

        Raises :class:`ValidationError` for a bad query or context, the strategy's own errors
        (see the class), and :class:`DatabaseError` when the database fails.
        """
        return self._retrieve(query, context)

    @traced_retrieve
    async def aretrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """:meth:`retrieve` on an async connection: the same plan and statements, the same
        results and errors (a plan with I/O of its own runs in a worker thread)."""
        store = self.plan_store
        if store is None or self.own_io:
            return await asyncio.to_thread(self._retrieve, query, context)
        return await aio.arun(store, await self._aplan(query, context))

    @honours_as_of
    def _retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        store = self.plan_store
        plan = self.plan(query, context)
        if store is None:
            return run_own_io(plan)
        return run_apart(store, plan) if self.own_io else store.run(plan)

    async def _aplan(self, query: str, context: RAGContext | None) -> Plan[list[RetrievedDocument]]:
        """The plan :meth:`aretrieve` drives: :meth:`plan`, for a strategy with no blocking work
        to do before its statements (multi-query's expander does it here, in a worker thread)."""
        return self.plan(query, context)


class WrappingStrategy(PlannedStrategy):
    """A strategy around a child strategy (hierarchical, temporal, MMR, multi-query, distinct
    contents, the declarative de-duplication). Its plan asks the child through
    :func:`child_plan`: the child's own plan, whose statements then run on the wrapper's
    connection, or the ``retrieve`` of a child without one. It runs on the child's store
    unless it names its own (:attr:`plan_store`), and has I/O of its own exactly when the
    child does."""

    def __init__(self, child: RAGStrategy) -> None:
        self._child = child

    @property
    def plan_store(self) -> Store | None:
        """The child's store (a subclass reading its own index names that one's)."""
        return plan_store_of(self._child)

    @property
    def own_io(self) -> bool:
        """True when the child's retrieval is not a plan free of I/O of its own."""
        return not planned(self._child)


async def aretrieve_with(strategy: RAGStrategy, query: str, context: RAGContext) -> list[RetrievedDocument]:
    """``strategy``'s retrieval awaited: its ``aretrieve`` when it has one (async connections),
    else its ``retrieve`` in a worker thread (a strategy of an application's own). The one
    way the pipeline and the integrations reach a strategy from a coroutine."""
    aretrieve = getattr(strategy, "aretrieve", None)
    if aretrieve is not None and inspect.iscoroutinefunction(aretrieve):
        return list(await aretrieve(query, context))
    return list(await asyncio.to_thread(strategy.retrieve, query, context))


def planned(strategy: object) -> bool:
    """True when ``strategy``'s retrieval is a plan that does no I/O of its own."""
    return isinstance(strategy, PlannedStrategy) and not strategy.own_io


def plan_store_of(strategy: object) -> Store | None:
    """The store ``strategy``'s plan runs on; None for a strategy without a plan."""
    return strategy.plan_store if isinstance(strategy, PlannedStrategy) else None


def resolve_context(context: RAGContext | None) -> RAGContext:
    """``context`` or the default ``RAGContext()``; raises :class:`ValidationError` for another type."""
    if context is None:
        return RAGContext()
    if not isinstance(context, RAGContext):
        raise ValidationError(f"context must be a RAGContext or None, got {type(context).__name__}")
    return context


def source_fence(allowed_sources: object) -> frozenset[str] | None:
    """Normalise an ``allowed_sources`` argument: None or empty means no fence (returns None).

    Raises :class:`ConfigurationError` for a single string or a blank/non-string entry."""
    if allowed_sources is None:
        return None
    if isinstance(allowed_sources, str):
        raise ConfigurationError("allowed_sources must be a collection of source names, not a single string")
    fence = frozenset(allowed_sources)  # type: ignore[call-overload]
    for item in fence:
        if not isinstance(item, str) or not item.strip():
            raise ConfigurationError(f"allowed_sources entries must be non-blank strings, got {item!r}")
    return fence or None


def overfetch_plan(
    fetch: Callable[[int], Plan[list[RetrievedDocument]]],
    rerank: Callable[[list[RetrievedDocument]], Plan[list[RetrievedDocument]]],
    ceiling: Callable[[float], float],
    k: int,
    *,
    min_candidates: int = 50,
    factor: int = 4,
    max_candidates: int = 1000,
) -> Plan[list[RetrievedDocument]]:
    """Top ``k`` of a re-ranking strategy over a child, fetching more candidates only when needed.

    ``fetch(n)`` is the plan of the child's best ``n`` candidates; ``rerank`` the plan
    turning candidates into final results, best first; ``ceiling(score)`` is the best
    final score a candidate the child ranked below ``score`` could still reach. The
    first request is ``max(min_candidates, factor × k)``; it doubles, up to
    ``max(max_candidates, first)`` (never beyond :data:`~tnsrag_db._types.MAX_RESULTS`),
    while the child returns full pages and the k-th result does not beat that ceiling.
    Within the cap the top ``k`` is exact.
    """
    cap = min(MAX_RESULTS, max(max_candidates, min_candidates, factor * k))

    def ranked(n: int) -> Plan[tuple[list[RetrievedDocument], list[RetrievedDocument]]]:
        candidates = yield from fetch(n)
        results = yield from rerank(candidates)
        return candidates, results

    def settled(got: tuple[list[RetrievedDocument], list[RetrievedDocument]], asked: int) -> bool:
        candidates, results = got
        return len(candidates) < asked or (
            len(results) >= k and results[k - 1].score > ceiling(min(c.score for c in candidates)))

    (_, results), _ = yield from widen_plan(ranked, settled, max(min_candidates, factor * k), cap)
    return results[:k]


def widen_plan(fetch: Callable[[int], Plan[_T]], settled: Callable[[_T, int], bool], first: int, cap: int
               ) -> Plan[tuple[_T, int]]:
    """The one widen-and-retry loop of the strategies that wrap a child: ``fetch(n)`` for
    ``n = min(first, cap)``, doubling up to ``cap``, until ``settled(result, n)`` says the
    result is final or ``n`` reached the cap. Returns the last result and its ``n``."""
    asked = min(first, cap)
    while True:
        got = yield from fetch(asked)
        if asked >= cap or settled(got, asked):
            return got, asked
        asked = min(cap, asked * 2)


def collapsing_plan(fetch: Callable[[int], Plan[_T]], documents: Callable[[_T], Sequence[RetrievedDocument]],
                    collapse: Callable[[Sequence[RetrievedDocument]], Sequence[RetrievedDocument]],
                    want: int) -> Plan[_T]:
    """The widening of a strategy that collapses its child's results (identical contents,
    near duplicates) and still returns ``want`` documents: ``fetch(n)`` (its ``documents``)
    for ``n = max(2 × want, want + 4)``, doubling up to ``max(FETCH_CAP, want)``, until
    ``want`` documents survive ``collapse`` or the child returned fewer than ``n`` (it has no
    more). Returns the last fetch's result, through :func:`widen_plan`."""

    def settled(got: _T, asked: int) -> bool:
        docs = documents(got)
        return len(docs) < asked or len(collapse(docs)) >= want

    got, _ = yield from widen_plan(fetch, settled, max(2 * want, want + 4), min(MAX_RESULTS, max(FETCH_CAP, want)))
    return got


def returned(fn: Callable[..., _T], *args: Any) -> Plan[_T]:
    """The plan that yields no statement and returns ``fn(*args)`` (called when the plan runs):
    a step doing its own I/O, or none, inside a plan."""
    return fn(*args)
    yield  # pragma: no cover - makes this a generator


def run_own_io(plan: Plan[_T]) -> _T:
    """Drive a plan whose steps do their own I/O (child strategies' ``retrieve``, a fetch
    and rerank of their own): it yields no statement, and one would be a bug."""
    return run_plan(plan, _no_statements)


def _no_statements(statement: Statement) -> Rows:
    raise AssertionError(f"this plan was not expected to yield a statement: {statement.sql[:80]!r}")


def child_plan(strategy: RAGStrategy, query: str, context: RAGContext) -> Plan[list[RetrievedDocument]]:
    """``strategy``'s retrieval inside a wrapping strategy's plan: its own
    :meth:`~PlannedStrategy.plan` when it has one (its statements then run on the wrapper's
    connection), else its ``retrieve`` (which does its own I/O)."""
    if isinstance(strategy, PlannedStrategy):
        return (yield from strategy.plan(query, context))
    return strategy.retrieve(query, context)


def run_apart(store: Store, plan: Plan[_T]) -> _T:
    """Drive ``plan`` with each statement on a connection of its own (a :meth:`Store.run` apiece), for
    plans that do other I/O between their statements (a child strategy without a plan,
    explanations): no pooled connection is held while that I/O waits for one."""
    return run_plan(plan, lambda statement: store.run(one(statement)))
