"""The shared strategy interface and helpers every strategy uses.

``RAGStrategy`` is the SPI contract: a ``name`` and ``retrieve(query, context)``.
Direct strategies build their results with
:func:`~tnsrag_db._store.reads.document_from_row`, so every
result carries ``tier``, ``entryId``, ``source`` (when set) and the entry's own
metadata, exactly the keys metadata filters apply to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from tnsrag_db._db.statement import Plan, Rows, Statement, one, run_plan
from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._types import MAX_RESULTS, RAGContext, RetrievedDocument
from tnsrag_db._validate import check_query_text

__all__ = [
    "overfetch",
    "overfetch_plan",
    "RAGStrategy",
    "check_query",
    "child_plan",
    "has_plan",
    "returned",
    "run_apart",
    "run_around",
    "run_own_io",
    "widen_plan",
    "resolve_context",
    "source_fence",
]

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

_T = TypeVar("_T")



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


def resolve_context(context: RAGContext | None) -> RAGContext:
    """``context`` or the default ``RAGContext()``; raises :class:`ValidationError` for another type."""
    if context is None:
        return RAGContext()
    if not isinstance(context, RAGContext):
        raise ValidationError(f"context must be a RAGContext or None, got {type(context).__name__}")
    return context


def check_query(query: object) -> str:
    """Return ``query`` if it is non-blank Unicode text without NUL characters; :class:`ValidationError` otherwise.

    A blank query (empty or whitespace only) has no meaning for any of the eight
    strategies (the SPI defines none): an error instead of arbitrary results.
    """
    text = check_query_text(query)  # neither NUL nor a lone surrogate is whitespace: order is free
    if not text.strip():
        raise ValidationError(f"query is blank ({text!r}); give some text to search for")
    return text


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


def overfetch(
    fetch: Callable[[int], list[RetrievedDocument]],
    rerank: Callable[[list[RetrievedDocument]], list[RetrievedDocument]],
    ceiling: Callable[[float], float],
    k: int,
    *,
    min_candidates: int = 50,
    factor: int = 4,
    max_candidates: int = 1000,
) -> list[RetrievedDocument]:
    """:func:`overfetch_plan` for a ``fetch`` and a ``rerank`` that do their own I/O."""
    return run_own_io(overfetch_plan(lambda n: returned(fetch, n), lambda c: returned(rerank, c), ceiling, k,
                                     min_candidates=min_candidates, factor=factor, max_candidates=max_candidates))


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


def has_plan(strategy: object) -> bool:
    """True when ``strategy`` offers ``plan(query, context)`` (its retrieval as a plan)."""
    return callable(getattr(strategy, "plan", None))


def child_plan(strategy: RAGStrategy, query: str, context: RAGContext) -> Plan[list[RetrievedDocument]]:
    """``strategy``'s retrieval inside a wrapping strategy's plan: its own :meth:`plan` when it
    has one (its statements then run on the wrapper's connection), else its ``retrieve``
    (which does its own I/O)."""
    if has_plan(strategy):
        docs: list[RetrievedDocument] = yield from strategy.plan(query, context)  # type: ignore[attr-defined]
        return docs
    return strategy.retrieve(query, context)


def run_apart(store: Store, plan: Plan[_T]) -> _T:
    """Drive ``plan`` with each statement on a connection of its own (a :meth:`Store.run` apiece), for
    plans that do other I/O between their statements (a child strategy without a plan,
    explanations): no pooled connection is held while that I/O waits for one."""
    return run_plan(plan, lambda statement: store.run(one(statement)))


def run_around(store: Store, child: object, plan: Plan[_T]) -> _T:
    """Run the plan of a strategy around ``child`` (hierarchical, temporal, MMR) in
    autocommit, so every statement sees the latest commit: on one connection when the
    child is a plan too; each statement apart when the child does its own I/O between
    them (no connection is held across it)."""
    if has_plan(child):
        return store.run(plan)
    return run_apart(store, plan)
