"""The explained ranking: :class:`Explanation` of :class:`ExplainedDocument` results with
the :class:`SearchPlan` of every ranking statement, and the :class:`ExplainableStrategy` protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db.explain._derived import ScoreExplanation

__all__ = ["ExplainableStrategy", "ExplainedDocument", "Explanation", "SearchPlan"]


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """How one ranking statement ran.

    ``stream`` names the search (``"keyword"``, ``"vector"``, ...; nested strategies
    prefix their child's); ``method`` is ``"bm25"``, ``"exact"`` (exact cosine scan),
    ``"hnsw"`` (HNSW with strict-order iterative scan), ``"graph"``, ``"tree"`` or
    ``"none"`` (nothing to search); ``filtered`` whether a metadata filter ran in the
    statement. For vector searches: ``index`` the HNSW index (None: none), ``matches_counted``
    the matching entries the statement counted to choose the path (it stops at
    ``exact_threshold + 1``; None when it did not count), ``fallback`` True when HNSW
    returned fewer than k rows and the exact scan answered, ``ef_search`` the HNSW
    candidate list. ``detail`` is one human-readable line.
    """

    stream: str
    method: str
    filtered: bool
    index: str | None = None
    matches_counted: int | None = None
    exact_threshold: int | None = None
    fallback: bool = False
    ef_search: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {"stream": self.stream, "method": self.method, "filtered": self.filtered, "index": self.index,
                "matches_counted": self.matches_counted, "exact_threshold": self.exact_threshold,
                "fallback": self.fallback, "ef_search": self.ef_search, "detail": self.detail}

    def with_stream(self, stream: str) -> SearchPlan:
        """A copy named ``stream``."""
        return SearchPlan(stream, self.method, self.filtered, self.index, self.matches_counted,
                          self.exact_threshold, self.fallback, self.ef_search, self.detail)

    def line(self) -> str:
        """One human-readable line."""
        parts = [f"{self.stream}: {self.method}"]
        if self.filtered:
            parts.append("filtered")
        if self.index:
            parts.append(f"index {self.index}")
        if self.ef_search is not None:
            parts.append(f"ef_search {self.ef_search}")
        if self.matches_counted is not None:
            more = self.exact_threshold is not None and self.matches_counted > self.exact_threshold
            parts.append(f"matches counted {'> ' + str(self.exact_threshold) if more else self.matches_counted}"
                         + (f" (exact up to {self.exact_threshold})" if self.exact_threshold is not None else ""))
        if self.fallback:
            parts.append("fallback: exact scan")
        if self.detail:
            parts.append(self.detail)
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class ExplainedDocument:
    """One result with its rank (1-based), the document ``retrieve`` returns and how its
    score arose (``explanation.score == document.score``)."""

    rank: int
    document: RetrievedDocument
    explanation: ScoreExplanation

    @property
    def score(self) -> float:
        """The document's score."""
        return self.document.score

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        d = self.document
        return {"rank": self.rank, "score": d.score, "entryId": d.metadata.get("entryId"), "source": d.source,
                "content": d.content, "metadata": dict(d.metadata), "explanation": self.explanation.to_dict()}


@dataclass(frozen=True, slots=True)
class Explanation:
    """What ``explain`` returns: the ``strategy``'s results for ``query``, explained.

    ``results`` are the documents ``retrieve`` returns, in order; ``plans`` the search plan
    of every ranking statement run; ``queries`` the queries run (multi-query: the original
    and its variants; otherwise just the query).
    """

    strategy: str
    query: str
    results: tuple[ExplainedDocument, ...]
    plans: tuple[SearchPlan, ...] = ()
    queries: tuple[str, ...] = ()

    @property
    def documents(self) -> list[RetrievedDocument]:
        """The documents, as ``retrieve`` returns them."""
        return [r.document for r in self.results]

    def to_dict(self) -> dict[str, Any]:
        """The whole explanation as a JSON-ready dict."""
        return {"strategy": self.strategy, "query": self.query, "queries": list(self.queries),
                "plans": [p.to_dict() for p in self.plans], "results": [r.to_dict() for r in self.results]}

    def to_text(self) -> str:
        """A human-readable rendering (several lines)."""
        out = [f"{self.strategy}: {len(self.results)} result(s) for {self.query!r}"]
        if len(self.queries) > 1:
            out.append("queries: " + " | ".join(repr(q) for q in self.queries))
        for plan in self.plans:
            out.append("plan " + plan.line())
        for r in self.results:
            d = r.document
            out.append(f"[{r.rank}] {d.score:.6g}  {d.metadata.get('entryId', '')}  {d.content[:80]!r}")
            out.extend("    " + line for line in r.explanation.lines())
        return "\n".join(out)


@runtime_checkable
class ExplainableStrategy(Protocol):
    """A strategy that can explain its ranking (all eight strategies are)."""

    @property
    def name(self) -> str:
        """The strategy's name."""
        ...

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """As :class:`~tnsrag_db._strategies.base.RAGStrategy`."""
        ...

    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of ``retrieve(query, context)``, explained."""
        ...
