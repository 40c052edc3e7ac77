"""Unit tests of tnsrag_db._strategies.fusion (no database)."""

from __future__ import annotations

import pytest

from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._strategies.fusion import DEFAULT_RRF_K, document_key, reciprocal_rank_fusion
from tnsrag_db._types import RetrievedDocument


def doc(entry_id: str, score: float = 0.0, **metadata: str) -> RetrievedDocument:
    return RetrievedDocument(f"content of {entry_id}", "src", score, {"entryId": entry_id, **metadata})


def ids(docs: list[RetrievedDocument]) -> list[str]:
    return [d.metadata["entryId"] for d in docs]


def test_default_k_is_60() -> None:
    assert DEFAULT_RRF_K == 60


def test_two_rankings_exact_sums() -> None:
    a, b, c = doc("a"), doc("b"), doc("c")
    fused = reciprocal_rank_fusion([a, b], [b, c])
    by_id = {d.metadata["entryId"]: d.score for d in fused}
    assert by_id["a"] == 1 / (60 + 1)
    assert by_id["b"] == 1 / (60 + 2) + 1 / (60 + 1)
    assert by_id["c"] == 1 / (60 + 2)
    assert ids(fused) == ["b", "a", "c"]


def test_ranks_are_one_based() -> None:
    (only,) = reciprocal_rank_fusion([doc("a")])
    assert only.score == 1 / 61


def test_custom_k() -> None:
    fused = reciprocal_rank_fusion([doc("a"), doc("b")], [doc("b")], k=1)
    assert {d.metadata["entryId"]: d.score for d in fused} == {"a": 1 / 2, "b": 1 / 3 + 1 / 2}


def test_three_rankings_sum_in_ranking_order() -> None:
    r1 = [doc("x"), doc("y"), doc("z")]
    r2 = [doc("z"), doc("x")]
    r3 = [doc("y"), doc("w"), doc("x")]
    fused = reciprocal_rank_fusion(r1, r2, r3)
    scores = {d.metadata["entryId"]: d.score for d in fused}
    assert scores["x"] == 1 / 61 + 1 / 62 + 1 / 63
    assert scores["y"] == 1 / 62 + 1 / 61
    assert scores["z"] == 1 / 63 + 1 / 61
    assert scores["w"] == 1 / 62
    assert ids(fused) == ["x", "y", "z", "w"]


def test_many_rankings() -> None:
    rankings = [[doc("a"), doc("b")] if i % 2 else [doc("b"), doc("a")] for i in range(5)]
    fused = reciprocal_rank_fusion(*rankings)
    expected_b = 0.0
    for i in range(5):
        expected_b += 1 / 62 if i % 2 else 1 / 61
    assert {d.metadata["entryId"]: d.score for d in fused}["b"] == expected_b
    assert ids(fused) == ["b", "a"]


def test_duplicate_within_one_ranking_counts_once_at_best_rank() -> None:
    fused = reciprocal_rank_fusion([doc("a"), doc("b"), doc("a")], [doc("c")])
    scores = {d.metadata["entryId"]: d.score for d in fused}
    assert scores["a"] == 1 / 61
    # The repeat still occupies its position: b keeps rank 2.
    assert scores["b"] == 1 / 62
    assert len(fused) == 3


def test_duplicate_across_rankings_adds() -> None:
    fused = reciprocal_rank_fusion([doc("a")], [doc("a")], [doc("a")])
    assert [d.score for d in fused] == [1 / 61 + 1 / 61 + 1 / 61]


def filler(prefix: str, n: int) -> list[RetrievedDocument]:
    return [doc(f"{prefix}{i:02d}") for i in range(n)]


def test_equal_scores_broken_by_best_rank() -> None:
    # 1/(60+3) + 1/(60+24) == 1/(60+12) + 1/(60+12) exactly (both are 1/36 in floats).
    assert 1 / 63 + 1 / 84 == 1 / 72 + 1 / 72
    r1 = filler("f", 2) + [doc("zzz")] + filler("g", 8) + [doc("aaa")]  # zzz rank 3, aaa rank 12
    r2 = filler("h", 11) + [doc("aaa")] + filler("i", 11) + [doc("zzz")]  # aaa rank 12, zzz rank 24
    fused = reciprocal_rank_fusion(r1, r2)
    top = [d for d in fused if d.metadata["entryId"] in {"aaa", "zzz"}]
    assert top[0].score == top[1].score
    # zzz wins on its best rank (3 < 12) although its key sorts after aaa.
    assert ids(top) == ["zzz", "aaa"]


def test_equal_scores_and_best_rank_broken_by_key() -> None:
    fused = reciprocal_rank_fusion([doc("q"), doc("b")], [doc("p"), doc("a")])
    assert [d.score for d in fused] == [1 / 61, 1 / 61, 1 / 62, 1 / 62]
    assert ids(fused) == ["p", "q", "a", "b"]


def test_order_does_not_depend_on_ranking_order_for_ties() -> None:
    r1, r2 = [doc("q")], [doc("p")]
    assert ids(reciprocal_rank_fusion(r1, r2)) == ids(reciprocal_rank_fusion(r2, r1)) == ["p", "q"]


def test_first_appearance_metadata_and_content_win() -> None:
    first = RetrievedDocument("first text", "s1", 0.9, {"entryId": "e", "stream": "bm25"})
    second = RetrievedDocument("second text", "s2", 0.1, {"entryId": "e", "stream": "vector"})
    (fused,) = reciprocal_rank_fusion([first], [second])
    assert fused.metadata == {"entryId": "e", "stream": "bm25"}
    assert fused.content == "first text"
    assert fused.source == "s1"
    assert fused.score == 1 / 61 + 1 / 61


def test_identity_falls_back_to_source_and_content() -> None:
    a1 = RetrievedDocument("same", "src", 1.0)
    a2 = RetrievedDocument("same", "src", 0.5, {"x": "y"})
    b = RetrievedDocument("same", "other", 1.0)
    fused = reciprocal_rank_fusion([a1, b], [a2])
    assert len(fused) == 2
    assert fused[0].source == "src" and fused[0].score == 1 / 61 + 1 / 61
    assert fused[0].metadata == {}


def test_entry_id_and_fallback_keys_never_collide() -> None:
    with_id = RetrievedDocument("c", "s", 0.0, {"entryId": '["s", "c"]'})
    without = RetrievedDocument("c", "s", 0.0)
    assert document_key(with_id) != document_key(without)
    assert len(reciprocal_rank_fusion([with_id], [without])) == 2


def test_custom_key() -> None:
    d1 = RetrievedDocument("A", None, 0.0)
    d2 = RetrievedDocument("a", None, 0.0)
    fused = reciprocal_rank_fusion([d1], [d2], key=lambda d: d.content.lower())
    assert len(fused) == 1 and fused[0].content == "A"


def test_no_rankings_and_empty_rankings() -> None:
    assert reciprocal_rank_fusion() == []
    assert reciprocal_rank_fusion([], []) == []
    assert ids(reciprocal_rank_fusion([], [doc("a")])) == ["a"]


def test_inputs_are_not_modified() -> None:
    ranking = [doc("a", 0.7)]
    reciprocal_rank_fusion(ranking)
    assert ranking[0].score == 0.7


@pytest.mark.parametrize("bad", [0, -1, 1.5, "60", True, None])
def test_k_must_be_positive_int(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="k must be a positive int"):
        reciprocal_rank_fusion([doc("a")], k=bad)  # type: ignore[arg-type]


def test_bad_rankings_rejected() -> None:
    with pytest.raises(ValidationError, match="ranking 0"):
        reciprocal_rank_fusion("abc")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="ranking 1, rank 2"):
        reciprocal_rank_fusion([doc("a")], [doc("b"), {"x": 1}])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="key must return a str"):
        reciprocal_rank_fusion([doc("a")], key=lambda d: 1)  # type: ignore[arg-type,return-value]
