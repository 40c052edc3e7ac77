"""Reciprocal rank fusion (RRF) of any number of rankings, optionally weighted.

A document's fused score is the sum, over the rankings it appears in, of
``weight / (k + rank)`` with 1-based ranks, ``k`` 60 and every weight 1 by default
(Cormack, Clarke and Büttcher, 2009; the SPI's fusion score). Hybrid and multi-query retrieval
both fuse through this one function; :func:`fuse` also reports each ranking's share.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._types import RetrievedDocument
from tnsrag_db._validate import is_int, is_number

__all__ = ["DEFAULT_RRF_K", "FusedDocument", "RankShare", "check_weights", "document_key", "fuse",
           "reciprocal_rank_fusion"]

#: The RRF constant of hybrid and multi-query fusion (docs/design.md, "The contract: the TnsAI RAG Strategy SPI").
DEFAULT_RRF_K = 60


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
