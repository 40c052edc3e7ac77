"""Fusion of rankings: reciprocal rank fusion (RRF) and normalised score fusion.

RRF: a document's fused score is the sum, over the rankings it appears in, of
``weight / (k + rank)`` with 1-based ranks, ``k`` 60 and every weight 1 by default
(Cormack, Clarke and Büttcher, 2009; the SPI's fusion score). Multi-query retrieval and
hybrid search with ``fusion="rrf"`` (or a graph stream) fuse through this one function;
:func:`fuse` also reports each ranking's share.

Normalised score fusion (:func:`score_fusion`, hybrid search's default rule) needs
complete information: every candidate scored by every stream. Each stream's score is
normalised against the stream's *reference figures*, taken from its own first rows (a
fixed number, whatever the number of results asked, so the order never depends on it):
by default its z-score, floored at three deviations below the mean (:func:`normalize`).
The fused score is the weighted sum of the normalised scores, keyword 1.8 to vector 1 by
default (:data:`DEFAULT_SCORE_WEIGHTS`).
The hybrid statement computes the same figures in SQL; these functions are its
reference, and what benchmarks and explanations compute with.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._types import RetrievedDocument
from tnsrag_db._validate import is_int, is_number

__all__ = ["DEFAULT_FUSION", "DEFAULT_RRF_K", "DEFAULT_SCORE_WEIGHTS", "FUSION_RULES", "ZSCORE_FLOOR", "FusedDocument",
           "RankShare", "Reference", "check_fusion", "check_weights", "default_weights", "document_key", "fuse",
           "normalization_of", "normalize", "reciprocal_rank_fusion", "reference_of", "score_fusion"]

#: The RRF constant of hybrid and multi-query fusion (docs/design.md, "The contract: the TnsAI RAG Strategy SPI").
DEFAULT_RRF_K = 60


#: Hybrid search's fusion rules: normalised score fusion of complete information by
#: z-score or min-max normalisation (:func:`score_fusion`), or the SPI's RRF over the
#: streams' own lists (:func:`reciprocal_rank_fusion`).
FUSION_RULES = ("zscore", "minmax", "rrf")
#: Hybrid search's default rule, chosen by measurement (docs/performance.md, "Fusion rules").
DEFAULT_FUSION = "zscore"
#: The default weights (keyword, vector) of a score fusion, 9 to 5, fixed on the development
#: collections with the default embedding's contextual texts
#: (docs/performance.md, "Fusion rules"); RRF's are 1 and 1.
DEFAULT_SCORE_WEIGHTS = (1.8, 1.0)
#: How many standard deviations below its reference mean a z-scored stream bottoms out
#: (there its normalised score is 0).
ZSCORE_FLOOR = 3.0


def check_fusion(fusion: object) -> str:
    """``fusion`` if it names one of :data:`FUSION_RULES`; else :class:`ConfigurationError`."""
    if not isinstance(fusion, str) or fusion not in FUSION_RULES:
        raise ConfigurationError(f"fusion must be one of {', '.join(FUSION_RULES)}, got {fusion!r}")
    return fusion


def default_weights(fusion: str, streams: int) -> tuple[float, ...]:
    """The weights of ``streams`` streams fused by rule ``fusion`` when none are given:
    :data:`DEFAULT_SCORE_WEIGHTS` for a score fusion of the two streams, else all 1."""
    if fusion != "rrf" and streams == 2:
        return DEFAULT_SCORE_WEIGHTS
    return (1.0,) * streams


@dataclass(frozen=True, slots=True)
class Reference:
    """A stream's reference figures over its first rows: the best score ``hi``, the lowest
    ``lo``, the mean ``mu`` and the population standard deviation ``sd``."""

    hi: float
    lo: float
    mu: float
    sd: float


def reference_of(scores: Sequence[float]) -> Reference | None:
    """The :class:`Reference` of a stream's first rows' ``scores``; None without any."""
    if not scores:
        return None
    mu = math.fsum(scores) / len(scores)
    return Reference(max(scores), min(scores), mu, math.sqrt(math.fsum((x - mu) ** 2 for x in scores) / len(scores)))


def normalization_of(reference: Reference, method: str) -> tuple[float, float, float]:
    """``(center, scale, floor)`` of a stream's normalisation: a score ``s`` normalises to
    ``max((s - center) / scale + floor, 0)``. ``minmax``: the reference's lowest, its range
    and 0 (the best reference row scores 1, the lowest 0); ``zscore``: its mean, its
    standard deviation and :data:`ZSCORE_FLOOR` (the z-score, 0 at three deviations below
    the mean)."""
    if method == "minmax":
        return reference.lo, reference.hi - reference.lo, 0.0
    return reference.mu, reference.sd, ZSCORE_FLOOR


def normalize(score: float | None, reference: Reference | None, method: str) -> float:
    """A stream's ``score`` normalised against its ``reference`` (``method`` ``"zscore"`` or
    ``"minmax"``): ``max((score - center) / scale + floor, 0)`` (:func:`normalization_of`);
    with a zero scale 1 at or above the reference's best, else 0; 0 without a reference or
    a score. Never negative."""
    if reference is None or score is None:
        return 0.0
    center, scale, floor = normalization_of(reference, method)
    if scale > 0:
        return max((score - center) / scale + floor, 0.0)
    return 1.0 if score >= reference.hi else 0.0


def score_fusion(scores: Mapping[str, Sequence[float | None]], references: Sequence[Reference | None], *,
                 method: str = DEFAULT_FUSION, weights: Sequence[float] | None = None,
                 best: Mapping[str, int] | None = None) -> list[tuple[str, float, tuple[float, ...]]]:
    """Normalised score fusion of complete information: ``scores`` maps each candidate to
    its score in every stream (None: the stream cannot score it), ``references`` holds each
    stream's :class:`Reference` (None: the stream has no rows). A candidate's fused score
    is ``sum(weight × normalize(score, reference))`` over the streams, added in stream order
    (``weights`` default all 1); ``best`` (a candidate's best rank in any stream's own
    list) breaks ties, then the key. Returns ``(key, fused score, shares)`` best first, each
    share ``weight × normalised``. Raises :class:`ConfigurationError` for bad weights or a
    method that is not a score fusion.
    """
    if method not in ("minmax", "zscore"):
        raise ConfigurationError(f"score fusion method must be zscore or minmax, got {method!r}")
    w = check_weights(weights, len(references), per="stream")
    fused: list[tuple[str, float, tuple[float, ...]]] = []
    for key, per_stream in scores.items():
        shares = tuple(w[i] * normalize(per_stream[i], references[i], method) for i in range(len(references)))
        total = shares[0]
        for share in shares[1:]:
            total += share
        fused.append((key, total, shares))
    ranks = best or {}
    fused.sort(key=lambda f: (-f[1], ranks.get(f[0], 0), f[0]))
    return fused


def document_key(doc: RetrievedDocument) -> str:
    """The identity of ``doc`` in fusion: its ``entryId`` metadata, else its source and content."""
    entry_id = doc.metadata.get("entryId")
    if entry_id is not None:
        return f"entry:{entry_id}"
    # JSON keeps the pair unambiguous whatever characters source or content hold; the
    # prefixes keep an entry id from ever equalling a source/content key.
    return "doc:" + json.dumps([doc.source, doc.content], ensure_ascii=False)


def check_weights(weights: object, streams: int, what: str = "weights", per: str = "stream") -> tuple[float, ...]:
    """``weights`` as a tuple of floats, one per stream; None means ``(1.0,) * streams``.

    Each weight must be a finite real number ≥ 0 and at least one must be > 0. Raises
    :class:`ConfigurationError` (naming ``what``; ``per`` names what a weight belongs to)
    for anything else, including a length other than ``streams``.
    """
    if weights is None:
        return (1.0,) * streams
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ConfigurationError(f"{what} must be a sequence of numbers, one per {per}, "
                                 f"got {type(weights).__name__}")
    if len(weights) != streams:
        raise ConfigurationError(f"{what} must have one weight per {per} ({streams}), got {len(weights)}")
    out: list[float] = []
    for i, w in enumerate(weights):
        if not is_number(w) or not math.isfinite(w) or w < 0:
            raise ConfigurationError(f"{what}[{i}] must be a finite number >= 0, got {w!r}")
        out.append(float(w))
    if not any(out):
        raise ConfigurationError(f"{what} must not all be zero, got {list(weights)!r}")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RankShare:
    """One ranking's part of a fused score: ``share = weight / (k + rank)``.

    ``ranking`` is the ranking's 0-based position among the fused rankings, ``rank`` the
    document's 1-based rank in it.
    """

    ranking: int
    rank: int
    weight: float
    share: float


@dataclass(frozen=True, slots=True)
class FusedDocument:
    """A fused document (with its fused score) and the shares that sum to that score,
    in ranking order."""

    document: RetrievedDocument
    shares: tuple[RankShare, ...]


def _fuse(rankings: Sequence[Sequence[RetrievedDocument]], k: int, weights: object,
          key: Callable[[RetrievedDocument], str] | None,
          record: bool) -> tuple[list[str], dict[str, float], dict[str, RetrievedDocument],
                                 dict[str, list[RankShare]]]:
    if not is_int(k) or k < 1:
        raise ConfigurationError(f"RRF constant k must be a positive int, got {k!r}")
    w = check_weights(weights, len(rankings), per="ranking") if weights is not None else None
    key_of = document_key if key is None else key
    scores: dict[str, float] = {}
    first: dict[str, RetrievedDocument] = {}
    best_rank: dict[str, int] = {}
    shares: dict[str, list[RankShare]] = {}
    for r_index, ranking in enumerate(rankings):
        if isinstance(ranking, (str, bytes)) or not isinstance(ranking, Sequence):
            raise ValidationError(f"ranking {r_index} must be a sequence of RetrievedDocument, "
                                  f"got {type(ranking).__name__}")
        weight = 1.0 if w is None else w[r_index]
        seen: set[str] = set()
        for rank, doc in enumerate(ranking, start=1):
            if not isinstance(doc, RetrievedDocument):
                raise ValidationError(f"ranking {r_index}, rank {rank}: expected RetrievedDocument, "
                                      f"got {type(doc).__name__}")
            if weight == 0.0:
                continue  # a ranking weighted 0 takes no part in the fusion
            ident = key_of(doc)
            if not isinstance(ident, str):
                raise ValidationError(f"fusion key must return a str, got {type(ident).__name__}")
            if ident in seen:
                continue
            seen.add(ident)
            # One addition per ranking, in ranking order, so the score equals the plain
            # left-to-right sum w1/(k+r1) + w2/(k+r2) + ... bit for bit (1.0/(k+r) is
            # exactly 1/(k+r), so unweighted scores are unchanged).
            term = weight / (k + rank)
            if ident in scores:
                scores[ident] += term
                best_rank[ident] = min(best_rank[ident], rank)
            else:
                scores[ident] = term
                first[ident] = doc
                best_rank[ident] = rank
            if record:
                shares.setdefault(ident, []).append(RankShare(r_index, rank, weight, term))
    order = sorted(scores, key=lambda ident: (-scores[ident], best_rank[ident], ident))
    return order, scores, first, shares


def reciprocal_rank_fusion(
    *rankings: Sequence[RetrievedDocument],
    k: int = DEFAULT_RRF_K,
    key: Callable[[RetrievedDocument], str] | None = None,
    weights: Sequence[float] | None = None,
) -> list[RetrievedDocument]:
    """Fuse ``rankings`` (each best first, ranks 1-based) by RRF with constant ``k`` (default 60).

    Each document (identified by ``key``, default :func:`document_key`) scores the sum of
    ``weight / (k + rank)`` over the rankings it appears in, added in ranking order;
    ``weights`` holds one weight per ranking (default: all 1, the plain RRF sum; see
    :func:`check_weights`), and a ranking weighted 0 is left out (its documents enter only
    through other rankings). Within one ranking only a document's best (first) position
    counts, and a repeat still occupies its position. A fused document is its first
    appearance (content, source, metadata) with the fused score. Output: fused score
    descending, then best rank in any ranking, then key. Raises
    :class:`ConfigurationError` unless ``k`` is a positive int or for bad weights, and
    :class:`ValidationError` for a ranking that is not a sequence of documents or a key
    that is not a str.
    """
    order, scores, first, _ = _fuse(rankings, k, weights, key, False)
    return [first[ident].with_score(scores[ident]) for ident in order]


def fuse(
    *rankings: Sequence[RetrievedDocument],
    k: int = DEFAULT_RRF_K,
    key: Callable[[RetrievedDocument], str] | None = None,
    weights: Sequence[float] | None = None,
) -> list[FusedDocument]:
    """:func:`reciprocal_rank_fusion` with each result's shares: the same documents, order and
    scores, each with the :class:`RankShare` of every ranking it appears in (summed in
    that order, they give the fused score exactly). Errors as :func:`reciprocal_rank_fusion`.
    """
    order, scores, first, shares = _fuse(rankings, k, weights, key, True)
    return [FusedDocument(first[ident].with_score(scores[ident]), tuple(shares[ident])) for ident in order]
