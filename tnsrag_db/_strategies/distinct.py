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
from collections.abc import Sequence
from dataclasses import replace

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._strategies.base import (
    FETCH_CAP,
    RAGStrategy,
    WrappingStrategy,
    check_query,
    child_plan,
    collapsing_plan,
    resolve_context,
    returned,
    run_own_io,
)
from tnsrag_db._strategies.explain import explain_with
from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db.explain import ExplainedDocument, Explanation, SearchPlan

__all__ = ["DUPLICATES_KEY", "FETCH_CAP", "DistinctContentRAGStrategy", "collapse_duplicates"]

#: Metadata key of a kept document listing the ids of its collapsed copies (a JSON array).
DUPLICATES_KEY = "duplicateIds"


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


class DistinctContentRAGStrategy(WrappingStrategy):
    """Wraps ``base``; results with identical content collapse to the best-scored one (see the
    module docstring). ``name`` is the base's. Raises :class:`ConfigurationError` for a base
    without ``retrieve``. It runs on the base's store (its plan is the base's, asked again
    for more when needed)."""

    def __init__(self, base: RAGStrategy) -> None:
        if not callable(getattr(base, "retrieve", None)):
            raise ConfigurationError(f"base strategy must have retrieve(), got {type(base).__name__}")
        super().__init__(base)

    @property
    def name(self) -> str:
        """The wrapped strategy's name (collapsing is not a strategy of its own)."""
        return self._child.name

    @property
    def base(self) -> RAGStrategy:
        """The wrapped strategy."""
        return self._child

    def __repr__(self) -> str:
        return f"DistinctContentRAGStrategy({self._child!r})"

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as a plan: the base's own plan (its ``retrieve`` for a base without
        one), asked again for more when needed."""
        text, ctx = check_query(query), resolve_context(context)
        docs = yield from collapsing_plan(lambda n: child_plan(self._child, text, ctx.with_max_results(n)),
                                          _documents, _distinct, ctx.max_results)
        return collapse_duplicates(docs)[0][:ctx.max_results]

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The base's explanation of the same candidates, collapsed as :meth:`retrieve` collapses
        them, with a ``distinct`` plan saying how many copies of which ids were folded."""
        text, ctx = check_query(query), resolve_context(context)
        want = ctx.max_results
        base = run_own_io(collapsing_plan(
            lambda n: returned(explain_with, self._child, text, ctx.with_max_results(n)),
            lambda explained: explained.documents, _distinct, want))
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


def _documents(docs: list[RetrievedDocument]) -> list[RetrievedDocument]:
    return docs


def _distinct(docs: Sequence[RetrievedDocument]) -> list[RetrievedDocument]:
    return collapse_duplicates(docs)[0]
