"""The scores a strategy computes itself: BM25 (per term), cosine, reasoning (per level),
and the score of a strategy that explains nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["BM25Explanation", "BM25TermScore", "CosineExplanation", "ReasoningExplanation", "ReasoningStep",
           "UnexplainedScore"]


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
