"""Explained rankings: how each result's score arose (``strategy.explain(query, context)``).

Every strategy's ``explain`` returns an :class:`Explanation`: the same documents, in the
same order and with the same scores as ``retrieve`` would return at that moment, each
with a typed score explanation whose figures give the score:

* :class:`BM25Explanation`: per query term tf, df, idf and contribution; the
  contributions sum to the score (float rounding aside);
* :class:`CosineExplanation`: the cosine similarity and the embedding space;
* :class:`FusionExplanation`: each stream's rank and RRF share ``weight / (k + rank)``,
  summed in stream order they give the score exactly, each with the stream's own
  explanation;
* :class:`GraphExplanation`: the seed's score and one :class:`GraphHop` per edge walked,
  each multiplying by the decay;
* :class:`HierarchyExplanation`: the hit's score times ``decay`` once per level;
* :class:`TemporalExplanation`: the child's score times the freshness multiplier;
* :class:`ReasoningExplanation`: the product of the sibling shares along the path;
* :class:`UnexplainedScore`: a child strategy without ``explain`` (the score as given).

Besides, :attr:`Explanation.plans` lists the search plan of every statement that ranked
(:class:`SearchPlan`: exact scan or HNSW iterative scan, matches counted, fallback
taken). Explaining costs more than retrieving (it runs the retrieval and then the
statements that collect the figures); retrieval itself is unchanged. The base
strategies (keyword, vector, hybrid) run all their statements in one read-only
REPEATABLE READ transaction, so the figures and the ranking come from one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Union, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db.errors import DatabaseError, TnsragError
from tnsrag_db.fusion import document_key
from tnsrag_db.types import RAGContext, RetrievedDocument

if TYPE_CHECKING:
    from tnsrag_db.store.store import Store

__all__ = [
    "BM25Explanation",
    "BM25TermScore",
    "CosineExplanation",
    "ExplainableStrategy",
    "ExplainedDocument",
    "Explanation",
    "FusionExplanation",
    "GraphExplanation",
    "GraphHop",
    "HierarchyExplanation",
    "ReasoningExplanation",
    "ReasoningStep",
    "ScoreExplanation",
    "SearchPlan",
    "StreamShare",
    "TemporalExplanation",
    "UnexplainedScore",
    "explain_with",
    "snapshot",
]


def _fmt(value: float) -> str:
    return f"{value:.6g}"


@dataclass(frozen=True, slots=True)
class BM25TermScore:
    """One query term's part of a BM25 score.

    ``tf`` is the term's count in the entry (0: the entry lacks it, contribution 0),
    ``df`` the number of entries holding it, ``idf = ln(1 + (N − df + 0.5) / (df + 0.5))``
    and ``contribution = idf·tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))``.
    """

    term: str
    tf: int
    df: int
    idf: float
    contribution: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {"term": self.term, "tf": self.tf, "df": self.df, "idf": self.idf, "contribution": self.contribution}


@dataclass(frozen=True, slots=True)
class BM25Explanation:
    """A BM25 score: the sum of the terms' contributions.

    ``doc_len`` is the entry's length in terms, ``n_docs`` and ``avg_doc_len`` the
    corpus statistics, ``k1`` and ``b`` the index parameters; ``terms`` holds every
    analysed query term (sorted), matched or not.
    """

    kind: ClassVar[str] = "bm25"
    score: float
    doc_len: int
    n_docs: int
    avg_doc_len: float
    k1: float
    b: float
    terms: tuple[BM25TermScore, ...]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "doc_len": self.doc_len, "n_docs": self.n_docs,
                "avg_doc_len": self.avg_doc_len, "k1": self.k1, "b": self.b,
                "terms": [t.to_dict() for t in self.terms]}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"bm25 {_fmt(self.score)} = sum of term contributions (doc length {self.doc_len}, "
               f"N {self.n_docs}, avgdl {_fmt(self.avg_doc_len)}, k1 {self.k1:g}, b {self.b:g})"]
        for t in self.terms:
            if t.tf:
                out.append(f"  {t.term!r}: tf {t.tf}, df {t.df}, idf {_fmt(t.idf)} -> {_fmt(t.contribution)}")
            else:
                out.append(f"  {t.term!r}: not in entry (df {t.df})")
        return out


@dataclass(frozen=True, slots=True)
class CosineExplanation:
    """A vector score: cosine similarity in [-1, 1] in embedding space ``provider`` × ``dimension``
    (``space_id`` its row in ``embedding_spaces``)."""

    kind: ClassVar[str] = "cosine"
    score: float
    cosine: float
    provider: str
    dimension: int
    space_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "cosine": self.cosine, "provider": self.provider,
                "dimension": self.dimension, "space_id": self.space_id}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        return [f"cosine {_fmt(self.cosine)} in space {self.provider!r} ({self.dimension}-d)"]


@dataclass(frozen=True, slots=True)
class UnexplainedScore:
    """The score of a strategy that offers no ``explain`` (``strategy`` is its name)."""

    kind: ClassVar[str] = "unexplained"
    score: float
    strategy: str

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "strategy": self.strategy}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        return [f"{_fmt(self.score)} from {self.strategy!r} (no explanation offered)"]


@dataclass(frozen=True, slots=True)
class StreamShare:
    """One stream's part of a fused score.

    ``stream`` names it (``"keyword"``, ``"vector"``, ``"graph"``, or the query text for
    multi-query), ``rank`` is the document's 1-based rank in it, ``weight`` the stream's
    fusion weight and ``share = weight / (k + rank)``; ``explanation`` is how the stream
    scored the document (``stream_score`` is that score).
    """

    stream: str
    rank: int
    weight: float
    share: float
    stream_score: float
    explanation: ScoreExplanation | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {"stream": self.stream, "rank": self.rank, "weight": self.weight, "share": self.share,
                "stream_score": self.stream_score,
                "explanation": None if self.explanation is None else self.explanation.to_dict()}


@dataclass(frozen=True, slots=True)
class FusionExplanation:
    """A reciprocal-rank-fusion score: the sum of the streams' shares (in stream order).

    ``k`` is the RRF constant; ``streams`` lists only the streams the document appears in.
    """

    kind: ClassVar[str] = "rrf"
    score: float
    k: int
    streams: tuple[StreamShare, ...]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "k": self.k, "streams": [s.to_dict() for s in self.streams]}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"rrf {_fmt(self.score)} = sum of weight/({self.k} + rank) over {len(self.streams)} stream(s)"]
        for s in self.streams:
            out.append(f"  {s.stream}: rank {s.rank}, weight {s.weight:g} -> {_fmt(s.share)}")
            if s.explanation is not None:
                out.extend("    " + line for line in s.explanation.lines())
        return out


@dataclass(frozen=True, slots=True)
class GraphHop:
    """One edge of a graph path: ``src`` → ``dst`` (the heaviest such edge, its ``relation``
    and ``weight``); the score after the hop is ``score`` (the previous one × decay)."""

    src: str
    dst: str
    relation: str | None
    weight: float | None
    decay: float
    score: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {"src": self.src, "dst": self.dst, "relation": self.relation, "weight": self.weight,
                "decay": self.decay, "score": self.score}


@dataclass(frozen=True, slots=True)
class GraphExplanation:
    """A graph score: ``seed_score`` times ``decay`` once per hop (``hops``, seed first).

    ``seed`` is the seed entry's id, ``seed_explanation`` how the seed strategy scored it.
    """

    kind: ClassVar[str] = "graph"
    score: float
    seed: str
    seed_score: float
    decay: float
    hops: tuple[GraphHop, ...]
    seed_explanation: ScoreExplanation | None

    @property
    def path(self) -> tuple[str, ...]:
        """The entry ids from the seed to the result."""
        return (self.seed,) + tuple(h.dst for h in self.hops)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "seed": self.seed, "seed_score": self.seed_score,
                "decay": self.decay, "depth": len(self.hops), "path": list(self.path),
                "hops": [h.to_dict() for h in self.hops],
                "seed_explanation": None if self.seed_explanation is None else self.seed_explanation.to_dict()}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"graph {_fmt(self.score)} = seed {self.seed!r} {_fmt(self.seed_score)} "
               f"x {self.decay:g}^{len(self.hops)}"]
        for h in self.hops:
            out.append(f"  {h.src} -[{h.relation}, {h.weight}]-> {h.dst}: x {h.decay:g} = {_fmt(h.score)}")
        if self.seed_explanation is not None:
            out.append("  seed:")
            out.extend("    " + line for line in self.seed_explanation.lines())
        return out


@dataclass(frozen=True, slots=True)
class HierarchyExplanation:
    """A hierarchical score: the hit ``child_of`` scored ``child_score``, times ``decay`` once
    per ``level`` (0 for the hit itself, n for its n-th parent)."""

    kind: ClassVar[str] = "hierarchy"
    score: float
    child_of: str | None
    child_score: float
    level: int
    decay: float
    child_explanation: ScoreExplanation | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "child_of": self.child_of, "child_score": self.child_score,
                "level": self.level, "decay": self.decay,
                "child_explanation": None if self.child_explanation is None else self.child_explanation.to_dict()}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"hierarchy {_fmt(self.score)} = hit {self.child_of!r} {_fmt(self.child_score)} "
               f"x {self.decay:g}^{self.level}"]
        if self.child_explanation is not None:
            out.extend("  " + line for line in self.child_explanation.lines())
        return out


@dataclass(frozen=True, slots=True)
class TemporalExplanation:
    """A temporal score: ``child_score × multiplier`` with
    ``multiplier = floor + (1 − floor) × 0.5 ** (age / half_life)``, or the floor when
    undated (``timestamp`` and ``age_seconds`` None). Ages are in seconds."""

    kind: ClassVar[str] = "temporal"
    score: float
    child_score: float
    multiplier: float
    timestamp: datetime | None
    age_seconds: float | None
    half_life_seconds: float
    relevance_floor: float
    child_explanation: ScoreExplanation | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``; the timestamp in ISO-8601)."""
        return {"kind": self.kind, "score": self.score, "child_score": self.child_score,
                "multiplier": self.multiplier,
                "timestamp": None if self.timestamp is None else self.timestamp.isoformat(),
                "age_seconds": self.age_seconds, "half_life_seconds": self.half_life_seconds,
                "relevance_floor": self.relevance_floor,
                "child_explanation": None if self.child_explanation is None else self.child_explanation.to_dict()}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        age = "undated" if self.age_seconds is None else f"age {self.age_seconds / 86400:.3g} d"
        out = [f"temporal {_fmt(self.score)} = {_fmt(self.child_score)} x freshness {_fmt(self.multiplier)} "
               f"({age}, half-life {self.half_life_seconds / 86400:g} d, floor {self.relevance_floor:g})"]
        if self.child_explanation is not None:
            out.extend("  " + line for line in self.child_explanation.lines())
        return out


@dataclass(frozen=True, slots=True)
class ReasoningStep:
    """One level of a descent: the navigator scored ``node`` ``navigator_score`` among siblings
    whose positive scores sum to ``sibling_total``; ``share`` is their ratio."""

    node: str
    navigator_score: float
    sibling_total: float
    share: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {"node": self.node, "navigator_score": self.navigator_score, "sibling_total": self.sibling_total,
                "share": self.share}


@dataclass(frozen=True, slots=True)
class ReasoningExplanation:
    """A reasoning score: the product of the shares along the root-to-node path (``steps``,
    root first) as ranked by navigator model ``model``."""

    kind: ClassVar[str] = "reasoning"
    score: float
    model: str
    steps: tuple[ReasoningStep, ...]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "model": self.model, "steps": [s.to_dict() for s in self.steps]}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"reasoning {_fmt(self.score)} = product of sibling shares along the path ({self.model})"]
        for s in self.steps:
            out.append(f"  {s.node}: {_fmt(s.navigator_score)} / {_fmt(s.sibling_total)} = {_fmt(s.share)}")
        return out


#: Any of the typed score explanations.
ScoreExplanation = Union[BM25Explanation, CosineExplanation, FusionExplanation, GraphExplanation,
                         HierarchyExplanation, TemporalExplanation, ReasoningExplanation, UnexplainedScore]


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
        """As :class:`~tnsrag_db.strategies.base.RAGStrategy`."""
        ...

    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of ``retrieve(query, context)``, explained."""
        ...


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


@contextmanager
def snapshot(store: Store) -> Iterator[Connection]:
    """One read-only REPEATABLE READ transaction: every statement of an explanation sees
    the same committed data. Driver errors become :class:`DatabaseError`."""
    try:
        with store.engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
            conn.execute(sa.text("SET TRANSACTION READ ONLY"))
            yield conn
    except TnsragError:
        raise
    except sa.exc.SQLAlchemyError as exc:
        raise DatabaseError(f"database error in corpus {store.corpus!r}: {exc}") from exc
