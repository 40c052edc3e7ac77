"""``DistinctContentRAGStrategy``: identical contents collapse to one result.

A corpus often holds the same text under several ids: a package's changelog shipped
twice, a file ingested under two prefixes, a note remembered again. Those copies take
several of the top slots of any strategy. This wrapper asks its base strategy for more
candidates than it returns, keeps the best-scored document of each content (exactly
equal text; ties keep the base's order) and returns the first ``max_results`` of those,
each with the base's score. A kept document's metadata lists the ids it stands for,
best first and itself excluded, under :data:`DUPLICATES_KEY` (a JSON array); documents
without copies carry no such key.

The base is asked for ``max(2 × k, k + 4)`` candidates, doubling while fewer than ``k``
distinct contents came back and the base returned a full page, up to
:data:`FETCH_CAP` (or ``k``, if larger). ``explain`` explains the kept documents with the
base's own explanations and adds a ``distinct`` plan naming what was collapsed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._strategies.base import (
    RAGStrategy,
    check_query,
    child_plan,
    resolve_context,
    returned,
    run_own_io,
    widen_plan,
)
from tnsrag_db._strategies.explain import explain_with
from tnsrag_db._telemetry import traced_retrieve
from tnsrag_db._types import MAX_RESULTS, RAGContext, RetrievedDocument
from tnsrag_db.explain import ExplainedDocument, Explanation, SearchPlan

__all__ = ["DUPLICATES_KEY", "FETCH_CAP", "DistinctContentRAGStrategy", "collapse_duplicates"]

#: Metadata key of a kept document listing the ids of its collapsed copies (a JSON array).
DUPLICATES_KEY = "duplicateIds"
#: Most candidates the base is asked for (unless ``max_results`` is larger).
FETCH_CAP = 1024


def _entry_id(doc: RetrievedDocument) -> str:
    return doc.metadata.get("entryId") or doc.source or ""


def collapse_duplicates(docs: Sequence[RetrievedDocument]) -> tuple[list[RetrievedDocument], dict[str, list[str]]]:
    """``docs`` (best first) with each content kept once, at its first (best) place, and, by
    kept id, the ids of the copies collapsed into it (best first). A kept document with
    copies gets :data:`DUPLICATES_KEY` in its metadata."""
    first: dict[str, int] = {}
    copies: dict[int, list[str]] = {}
    kept: list[RetrievedDocument] = []
    for doc in docs:
        at = first.get(doc.content)
        if at is None:
            first[doc.content] = len(kept)
            kept.append(doc)
        else:
            copies.setdefault(at, []).append(_entry_id(doc))
    collapsed: dict[str, list[str]] = {}
    for at, ids in copies.items():
        doc = kept[at]
        collapsed[_entry_id(doc)] = ids
        metadata = dict(doc.metadata)
        metadata[DUPLICATES_KEY] = json.dumps(ids, ensure_ascii=False)
        kept[at] = replace(doc, metadata=metadata)
    return kept, collapsed


class DistinctContentRAGStrategy:
    """Wraps ``base``; results with identical content collapse to the best-scored one (see the
    module docstring). ``name`` is the base's. Raises :class:`ConfigurationError` for a base
    without ``retrieve``."""

    def __init__(self, base: RAGStrategy) -> None:
        if not callable(getattr(base, "retrieve", None)):
            raise ConfigurationError(f"base strategy must have retrieve(), got {type(base).__name__}")
        self._base = base

    @property
    def name(self) -> str:
        """The wrapped strategy's name (collapsing is not a strategy of its own)."""
        return self._base.name

    @property
    def base(self) -> RAGStrategy:
        """The wrapped strategy."""
        return self._base

    def __repr__(self) -> str:
        return f"DistinctContentRAGStrategy({self._base!r})"

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as a plan: the base's own plan (asked again for more when needed),
        for a wrapping strategy that runs plans."""
        text, ctx = check_query(query), resolve_context(context)
        docs, _ = yield from _collapsing(lambda n: child_plan(self._base, text, ctx.with_max_results(n)), ctx)
        return docs

    @traced_retrieve
    @honours_as_of
    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """The base's results for ``query`` with identical contents collapsed, at most ``max_results``."""
        text, ctx = check_query(query), resolve_context(context)
        plan = _collapsing(lambda n: returned(self._base.retrieve, text, ctx.with_max_results(n)), ctx)
        return run_own_io(plan)[0]

    @traced_retrieve
    async def aretrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """:meth:`retrieve` through the base's ``aretrieve`` (in a thread for a base without one)."""
        text, ctx = check_query(query), resolve_context(context)
        fetch = getattr(self._base, "aretrieve", None)
        if not callable(fetch):
            import asyncio

            return await asyncio.to_thread(self.retrieve, text, ctx)
        want, asked, cap = ctx.max_results, _first_request(ctx.max_results), _cap(ctx.max_results)
        while True:  # widen_plan's loop, awaiting the base between rounds
            docs = await fetch(text, ctx.with_max_results(asked))
            if asked >= cap or _settled(docs, want, asked):
                return collapse_duplicates(docs)[0][:want]
            asked = min(cap, asked * 2)

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The base's explanation of the same candidates, collapsed as :meth:`retrieve` collapses
        them, with a ``distinct`` plan saying how many copies of which ids were folded."""
        text, ctx = check_query(query), resolve_context(context)
        want = ctx.max_results
        base, _ = run_own_io(widen_plan(lambda n: returned(explain_with, self._base, text, ctx.with_max_results(n)),
                                        lambda e, n: _settled(e.documents, want, n), _first_request(want), _cap(want)))
        kept, collapsed = collapse_duplicates(base.documents)
        by_id = {_entry_id(r.document): r for r in base.results}
        results = tuple(ExplainedDocument(n, doc, by_id[_entry_id(doc)].explanation)
                        for n, doc in enumerate(kept[:want], start=1))
        shown = {_entry_id(r.document) for r in results}
        folded = {k: v for k, v in collapsed.items() if k in shown}
        detail = ("no identical contents among the results" if not folded else
                  f"{sum(map(len, folded.values()))} result(s) with identical content folded: " + "; ".join(
                      f"{k} stands for {', '.join(v)}" for k, v in folded.items()))
        plans = (*base.plans, SearchPlan("distinct", "none", bool(ctx.metadata_filters), detail=detail))
        return Explanation(base.strategy, base.query, results, plans, base.queries)


def _first_request(want: int) -> int:
    return min(_cap(want), max(2 * want, want + 4))


def _cap(want: int) -> int:
    return min(MAX_RESULTS, max(FETCH_CAP, want))


def _settled(docs: Sequence[RetrievedDocument], want: int, asked: int) -> bool:
    """Whether a round's documents are final: ``want`` distinct contents, or all the base has."""
    return len(docs) < asked or len(collapse_duplicates(docs)[0]) >= want


def _collapsing(fetch: Callable[[int], Plan[list[RetrievedDocument]]], ctx: RAGContext
                ) -> Plan[tuple[list[RetrievedDocument], int]]:
    """Ask ``fetch(n)`` for candidates until ``ctx.max_results`` distinct contents (or all there
    are) came back; the collapsed documents and the last request size."""
    want = ctx.max_results
    docs, asked = yield from widen_plan(fetch, lambda d, n: _settled(d, want, n), _first_request(want), _cap(want))
    return collapse_duplicates(docs)[0][:want], asked
