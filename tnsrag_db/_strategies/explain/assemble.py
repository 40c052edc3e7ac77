"""What strategies build their explanations with: assemble one, fall back for a child
without ``explain``, key results by entry, prefix a child's plans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tnsrag_db._strategies.fusion import document_key
from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db.explain._derived import ScoreExplanation
from tnsrag_db.explain._results import ExplainedDocument, Explanation, SearchPlan
from tnsrag_db.explain._scores import UnexplainedScore

__all__ = ["by_entry", "explain_with", "explanation_of", "prefixed"]


def explanation_of(strategy: str, query: str, docs: Sequence[RetrievedDocument],
                   explanations: Sequence[ScoreExplanation], plans: Sequence[SearchPlan] = (),
                   queries: Sequence[str] = ()) -> Explanation:
    """Assemble an :class:`Explanation` (ranks from 1)."""
    results = tuple(ExplainedDocument(n, d, e) for n, (d, e) in enumerate(zip(docs, explanations, strict=True), 1))
    return Explanation(strategy, query, results, tuple(plans), tuple(queries) or (query,))


def explain_with(strategy: object, query: str, context: RAGContext | None) -> Explanation:
    """``strategy.explain(query, context)``, or, for a strategy without ``explain``, its
    ``retrieve`` results each with an :class:`UnexplainedScore`."""
    explain = getattr(strategy, "explain", None)
    if callable(explain):
        result = explain(query, context)
        if isinstance(result, Explanation):
            return result
    name = str(getattr(strategy, "name", type(strategy).__name__))
    docs = strategy.retrieve(query, context)  # type: ignore[attr-defined]
    return explanation_of(name, query, docs, [UnexplainedScore(d.score, name) for d in docs])


def by_entry(explanation: Explanation) -> Mapping[str, ExplainedDocument]:
    """The results of ``explanation`` keyed by fusion identity (``entry:<id>`` or source and content)."""
    out: dict[str, ExplainedDocument] = {}
    for r in explanation.results:
        out.setdefault(document_key(r.document), r)
    return out


def prefixed(plans: Sequence[SearchPlan], prefix: str) -> list[SearchPlan]:
    """``plans`` with their stream names prefixed (``"temporal/keyword"``)."""
    return [p.with_stream(f"{prefix}/{p.stream}") for p in plans]
