"""Per-query IR metrics, pure functions of one ranking and its judgements: nDCG@k,
recall@k and MRR@k, and :class:`Metric` naming one of them with its cutoff."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_METRICS", "Metric", "ndcg_at", "recall_at", "reciprocal_rank_at"]


def _unique(ranked: Sequence[str]) -> list[str]:
    """The ranking without repeats (a repeated document counts at its first rank only)."""
    return list(dict.fromkeys(ranked))


def ndcg_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k: DCG of the top ``k`` with linear gains (the grade, ≤ 0 counts 0) and a
    ``log2(rank + 1)`` discount, over the DCG of the ideal ordering of all judged grades.

    0.0 when no document is relevant. Raises :class:`ValueError` for ``k < 1``.
    """
    _check_k(k)
    top = _unique(ranked)[:k]
    dcg = sum(max(grades.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(top))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 100) -> float:
    """Share of the relevant documents (grade > 0) found in the top ``k``; 0.0 when none is relevant."""
    _check_k(k)
    relevant = {d for d, g in grades.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_unique(ranked)[:k])) / len(relevant)


def reciprocal_rank_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """1 / rank of the first relevant document (grade > 0) in the top ``k``; 0.0 when there is none."""
    _check_k(k)
    for i, d in enumerate(_unique(ranked)[:k], start=1):
        if grades.get(d, 0) > 0:
            return 1.0 / i
    return 0.0


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"cutoff k must be >= 1, got {k}")


@dataclass(frozen=True, slots=True)
class Metric:
    """A per-query metric: its ``kind`` (``ndcg``, ``recall`` or ``mrr``) and cutoff ``k``;
    called with a ranking and the query's grades it returns the value, ``name`` is its
    report name. Raises :class:`ValueError` for another kind or ``k < 1``."""

    kind: str
    k: int

    @property
    def name(self) -> str:
        """``nDCG@10``, ``recall@100`` or ``MRR@10``."""
        return {"ndcg": "nDCG", "recall": "recall", "mrr": "MRR"}[self.kind] + f"@{self.k}"

    def __call__(self, ranked: Sequence[str], grades: Mapping[str, int]) -> float:
        function = {"ndcg": ndcg_at, "recall": recall_at, "mrr": reciprocal_rank_at}[self.kind]
        return function(ranked, grades, self.k)

    def __post_init__(self) -> None:
        if self.kind not in ("ndcg", "recall", "mrr"):
            raise ValueError(f"metric kind must be 'ndcg', 'recall' or 'mrr', got {self.kind!r}")
        _check_k(self.k)


#: nDCG@10, recall@100 and MRR@10.
DEFAULT_METRICS = (Metric("ndcg", 10), Metric("recall", 100), Metric("mrr", 10))
