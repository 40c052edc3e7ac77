"""Fusion weights: ``reciprocal_rank_fusion(..., weights=...)`` and :func:`fuse` (no database)."""

from __future__ import annotations

import math
import random

import pytest

from tnsrag_db import ConfigurationError, FusedDocument, fuse, reciprocal_rank_fusion
from tnsrag_db._strategies.fusion import check_weights
from tnsrag_db._types import RetrievedDocument


def doc(entry_id: str) -> RetrievedDocument:
    return RetrievedDocument(f"content of {entry_id}", "src", 0.0, {"entryId": entry_id})


def ids(docs: list[RetrievedDocument]) -> list[str]:
    return [d.metadata["entryId"] for d in docs]


def reference(rankings: list[list[str]], weights: list[float], k: int = 60) -> dict[str, float]:
    """A plain weighted RRF: sum of weight / (k + rank) over the rankings holding the id."""
    scores: dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        if w == 0:
            continue
        for rank, entry_id in enumerate(ranking, start=1):
            scores[entry_id] = scores.get(entry_id, 0.0) + w / (k + rank)
    return scores


def random_rankings(rng: random.Random, n: int) -> list[list[str]]:
    pool = [f"d{i}" for i in range(30)]
    return [rng.sample(pool, rng.randint(1, 20)) for _ in range(n)]


def test_default_weights_equal_the_unweighted_sum_bit_for_bit() -> None:
    rng = random.Random(5)
    for _ in range(50):
        rankings = [[doc(i) for i in r] for r in random_rankings(rng, rng.randint(1, 4))]
        plain = reciprocal_rank_fusion(*rankings)
        assert reciprocal_rank_fusion(*rankings, weights=[1.0] * len(rankings)) == plain
        assert reciprocal_rank_fusion(*rankings, weights=[1] * len(rankings)) == plain


def test_weighted_scores_and_order_match_a_reference() -> None:
    rng = random.Random(7)
    for _ in range(50):
        raw = random_rankings(rng, rng.randint(1, 4))
        weights = [rng.choice([0.0, 0.25, 1.0, 2.5]) for _ in raw]
        if not any(weights):
            weights[0] = 1.0
        fused = reciprocal_rank_fusion(*[[doc(i) for i in r] for r in raw], weights=weights, k=10)
        expected = reference(raw, weights, k=10)
        assert set(ids(fused)) == set(expected)
        for d in fused:
            assert math.isclose(d.score, expected[d.metadata["entryId"]], rel_tol=1e-12)
        assert [d.score for d in fused] == sorted((d.score for d in fused), reverse=True)


def test_a_heavier_ranking_wins() -> None:
    a, b = doc("a"), doc("b")
    assert ids(reciprocal_rank_fusion([a, b], [b, a])) == ["a", "b"]  # tie: best rank, then key
    assert ids(reciprocal_rank_fusion([a, b], [b, a], weights=[1.0, 2.0])) == ["b", "a"]
    (score_b, score_a) = (d.score for d in reciprocal_rank_fusion([a, b], [b, a], weights=[1.0, 2.0]))
    assert score_b == 1.0 / 62 + 2.0 / 61 and score_a == 1.0 / 61 + 2.0 / 62


def test_a_ranking_weighted_zero_takes_no_part() -> None:
    fused = reciprocal_rank_fusion([doc("a")], [doc("b"), doc("a")], weights=[1.0, 0.0])
    assert ids(fused) == ["a"] and fused[0].score == 1 / 61


def test_fuse_reports_shares_that_sum_to_the_score() -> None:
    rng = random.Random(11)
    for _ in range(30):
        raw = random_rankings(rng, 3)
        weights = [0.5, 1.0, 2.0]
        rankings = [[doc(i) for i in r] for r in raw]
        explained = fuse(*rankings, weights=weights)
        assert [f.document for f in explained] == reciprocal_rank_fusion(*rankings, weights=weights)
        for f in explained:
            assert isinstance(f, FusedDocument)
            total = 0.0
            for share in f.shares:
                assert raw[share.ranking][share.rank - 1] == f.document.metadata["entryId"]
                assert share.weight == weights[share.ranking]
                assert share.share == share.weight / (60 + share.rank)
                total += share.share
            assert total == f.document.score
            assert [s.ranking for s in f.shares] == sorted(s.ranking for s in f.shares)


@pytest.mark.parametrize("weights, message", [
    ([1.0], r"one weight per ranking \(2\), got 1"),
    ([1.0, 1.0, 1.0], r"one weight per ranking \(2\), got 3"),
    ([1.0, -0.5], r"weights\[1\] must be a finite number >= 0, got -0.5"),
    ([float("nan"), 1.0], r"weights\[0\] must be a finite number >= 0"),
    ([float("inf"), 1.0], r"weights\[0\] must be a finite number >= 0"),
    ([True, 1.0], r"weights\[0\] must be a finite number >= 0, got True"),
    (["1", 1.0], r"weights\[0\]"),
    ([0, 0.0], "must not all be zero"),
    ("11", "must be a sequence of numbers"),
    (2.0, "must be a sequence of numbers"),
])
def test_bad_weights_are_configuration_errors(weights: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        reciprocal_rank_fusion([doc("a")], [doc("b")], weights=weights)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=message):
        fuse([doc("a")], [doc("b")], weights=weights)  # type: ignore[arg-type]


def test_check_weights_defaults_and_names_the_option() -> None:
    assert check_weights(None, 3) == (1.0, 1.0, 1.0)
    assert check_weights((2, 0.5), 2) == (2.0, 0.5)
    with pytest.raises(ConfigurationError, match=r"^hybrid weights must have one weight"):
        check_weights([1.0], 2, "hybrid weights")
