"""Scores made from a child strategy's score: fusion (stream shares), graph (hops),
hierarchy (levels) and temporal (freshness); and :data:`ScoreExplanation`, any kind."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Union

from tnsrag_db.explain._scores import (
    BM25Explanation,
    CosineExplanation,
    ReasoningExplanation,
    UnexplainedScore,
    _fmt,
)

__all__ = ["FusionExplanation", "GraphExplanation", "GraphHop", "HierarchyExplanation", "ScoreExplanation",
           "ScoreFusionExplanation", "StreamScore", "StreamShare", "TemporalExplanation"]


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
class StreamScore:
    """One stream's part of a normalised score fusion.

    ``stream`` names it (``"keyword"``, ``"vector"``); ``rank`` is the document's 1-based
    rank in the stream's own list, or None when the stream did not propose it and scored
    it only for the fusion (complete information); ``stream_score`` is the stream's score
    (None: no stored vector). ``normalized = max((stream_score - center) / scale + floor, 0)``
    with ``center``, ``scale`` and ``floor`` from the stream's reference rows (its first
    ``depth`` rows): their mean, standard deviation and 3 (z-score) or their lowest score,
    range and 0 (min-max); 0 without a score or reference rows, and with a zero scale 1 at
    or above the reference's best, else 0. ``share = weight × normalized``; ``explanation``
    is how the stream scored the document.
    """

    stream: str
    rank: int | None
    stream_score: float | None
    center: float | None
    scale: float | None
    floor: float | None
    normalized: float
    weight: float
    share: float
    explanation: ScoreExplanation | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {"stream": self.stream, "rank": self.rank, "stream_score": self.stream_score, "center": self.center,
                "scale": self.scale, "floor": self.floor, "normalized": self.normalized, "weight": self.weight,
                "share": self.share, "explanation": None if self.explanation is None else self.explanation.to_dict()}


@dataclass(frozen=True, slots=True)
class ScoreFusionExplanation:
    """A normalised score fusion: the sum of the streams' shares (in stream order).

    ``method`` is ``"zscore"`` or ``"minmax"``, ``depth`` the number of each stream's first
    rows its reference figures come from; ``streams`` lists every stream run, each having
    scored the document whether or not it proposed it.
    """

    kind: ClassVar[str] = "score_fusion"
    score: float
    method: str
    depth: int
    streams: tuple[StreamScore, ...]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (with ``kind``)."""
        return {"kind": self.kind, "score": self.score, "method": self.method, "depth": self.depth,
                "streams": [s.to_dict() for s in self.streams]}

    def lines(self) -> list[str]:
        """Human-readable lines."""
        out = [f"{self.method} fusion {_fmt(self.score)} = sum of weight x normalised score over "
               f"{len(self.streams)} stream(s) (references: each stream's first {self.depth} rows)"]
        for s in self.streams:
            where = f"rank {s.rank}" if s.rank is not None else "not in its list, scored"
            raw = "no score" if s.stream_score is None else _fmt(s.stream_score)
            out.append(f"  {s.stream}: {where}, score {raw} -> {_fmt(s.normalized)} x weight {s.weight:g} "
                       f"-> {_fmt(s.share)}")
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


#: Any of the typed score explanations.
ScoreExplanation = Union[BM25Explanation, CosineExplanation, FusionExplanation, ScoreFusionExplanation,
                         GraphExplanation, HierarchyExplanation, TemporalExplanation, ReasoningExplanation,
                         UnexplainedScore]
