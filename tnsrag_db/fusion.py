"""Reciprocal rank fusion (RRF) of any number of rankings.

A document's fused score is the sum, over the rankings it appears in, of
``1 / (k + rank)`` with 1-based ranks and ``k`` 60 by default (Cormack, Clarke and
Büttcher, 2009). Hybrid and multi-query retrieval both fuse through this one function.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from tnsrag_db.errors import ConfigurationError, ValidationError
from tnsrag_db.types import RetrievedDocument

__all__ = ["DEFAULT_RRF_K", "document_key", "reciprocal_rank_fusion"]

#: The RRF constant the spec uses for hybrid and multi-query fusion.
DEFAULT_RRF_K = 60


def document_key(doc: RetrievedDocument) -> str:
    """The identity of ``doc`` in fusion: its ``entryId`` metadata, else its source and content."""
    entry_id = doc.metadata.get("entryId")
    if entry_id is not None:
        return f"entry:{entry_id}"
    # JSON keeps the pair unambiguous whatever characters source or content hold; the
    # prefixes keep an entry id from ever equalling a source/content key.
    return "doc:" + json.dumps([doc.source, doc.content], ensure_ascii=False)


def reciprocal_rank_fusion(
    *rankings: Sequence[RetrievedDocument],
    k: int = DEFAULT_RRF_K,
    key: Callable[[RetrievedDocument], str] | None = None,
) -> list[RetrievedDocument]:
    """Fuse ``rankings`` (each best first, ranks 1-based) by RRF with constant ``k`` (default 60).

    Each document (identified by ``key``, default :func:`document_key`) scores the sum of
    ``1 / (k + rank)`` over the rankings it appears in, added in ranking order; within one
    ranking only its best (first) position counts, and a repeat still occupies its
    position. A fused document is its first appearance (content, source, metadata) with
    the fused score. Output: fused score descending, then best rank in any ranking, then
    key. Raises :class:`ConfigurationError` unless ``k`` is a positive int and
    :class:`ValidationError` for a ranking that is not a sequence of documents or a key
    that is not a str.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigurationError(f"RRF constant k must be a positive int, got {k!r}")
    key_of = document_key if key is None else key
    scores: dict[str, float] = {}
    first: dict[str, RetrievedDocument] = {}
    best_rank: dict[str, int] = {}
    for r_index, ranking in enumerate(rankings):
        if isinstance(ranking, (str, bytes)) or not isinstance(ranking, Sequence):
            raise ValidationError(f"ranking {r_index} must be a sequence of RetrievedDocument, "
                                  f"got {type(ranking).__name__}")
        seen: set[str] = set()
        for rank, doc in enumerate(ranking, start=1):
            if not isinstance(doc, RetrievedDocument):
                raise ValidationError(f"ranking {r_index}, rank {rank}: expected RetrievedDocument, "
                                      f"got {type(doc).__name__}")
            ident = key_of(doc)
            if not isinstance(ident, str):
                raise ValidationError(f"fusion key must return a str, got {type(ident).__name__}")
            if ident in seen:
                continue
            seen.add(ident)
            # One addition per ranking, in ranking order, so the score equals the plain
            # left-to-right sum 1/(k+r1) + 1/(k+r2) + ... bit for bit.
            term = 1 / (k + rank)
            if ident in scores:
                scores[ident] += term
                best_rank[ident] = min(best_rank[ident], rank)
            else:
                scores[ident] = term
                first[ident] = doc
                best_rank[ident] = rank
    order = sorted(scores, key=lambda ident: (-scores[ident], best_rank[ident], ident))
    return [first[ident].with_score(scores[ident]) for ident in order]
