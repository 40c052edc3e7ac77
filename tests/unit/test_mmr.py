"""Maximal marginal relevance: the selection against a hand-computed example and LangChain's reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from langchain_core.vectorstores.utils import maximal_marginal_relevance as langchain_mmr

from tnsrag_db._errors import ValidationError
from tnsrag_db._strategies.mmr import maximal_marginal_relevance

# Unit vectors. Similarity to the query q: d 0.96, b 0.936, a 0.8, c 0.6.
# Between candidates: a·b 0.96, a·c 0, a·d 0.6, b·c 0.28, b·d 0.8, c·d 0.8.
Q = [0.8, 0.6]
A, B, C, D = [1.0, 0.0], [0.96, 0.28], [0.0, 1.0], [0.6, 0.8]


def test_hand_computed_selection() -> None:
    # lambda 0.5: first d (0.96). Then 0.5·sim(q) − 0.5·sim(d): a 0.4−0.3 = 0.1, b 0.468−0.4 = 0.068,
    # c 0.3−0.4 = −0.1 → a. Then the max over {d, a}: b 0.468−0.48 = −0.012, c 0.3−0.4 = −0.1 → b, then c.
    assert maximal_marginal_relevance(Q, [A, B, C, D], k=4, lambda_mult=0.5) == [3, 0, 1, 2]
    # lambda 1: relevance alone.
    assert maximal_marginal_relevance(Q, [A, B, C, D], k=4, lambda_mult=1.0) == [3, 1, 0, 2]
    # lambda 0: the first pick by relevance, then diversity alone: a (−0.6 beats −0.8, −0.8),
    # then c (max(0.8, 0) = 0.8 beats b's 0.96), then b.
    assert maximal_marginal_relevance(Q, [A, B, C, D], k=4, lambda_mult=0.0) == [3, 0, 2, 1]
    assert maximal_marginal_relevance(Q, [A, B, C, D], k=2) == [3, 0]
    # Lengths do not matter (cosine), k beyond the candidates selects them all.
    assert maximal_marginal_relevance([8, 6], [[5, 0], B, C, [3, 4]], k=10) == [3, 0, 1, 2]


def test_ties_zero_vectors_and_empty_inputs() -> None:
    assert maximal_marginal_relevance(Q, [A, A, A], k=3, lambda_mult=1.0) == [0, 1, 2]
    # A zero vector is similar to nothing (0), as in the vector index; not NaN.
    assert maximal_marginal_relevance(Q, [[0.0, 0.0], A], k=2) == [1, 0]
    assert maximal_marginal_relevance([0.0, 0.0], [A, C], k=2) == [0, 1]
    assert maximal_marginal_relevance(Q, [], k=4) == []
    assert maximal_marginal_relevance(Q, [A], k=0) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"k": -1}, "k must be >= 0"),
    ({"k": 2.0}, "k must be an int"),
    ({"k": 2, "lambda_mult": 1.5}, "lambda_mult must be a number in \\[0, 1\\]"),
    ({"k": 2, "lambda_mult": float("nan")}, "lambda_mult"),
    ({"k": 2, "lambda_mult": True}, "lambda_mult"),
])
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        maximal_marginal_relevance(Q, [A, B], **kwargs)  # type: ignore[arg-type]


def test_bad_vectors() -> None:
    with pytest.raises(ValidationError, match="query's dimension 2"):
        maximal_marginal_relevance(Q, [[1.0, 0.0, 0.0]], k=1)
    with pytest.raises(ValidationError, match="one non-empty vector"):
        maximal_marginal_relevance([Q], [A], k=1)
    with pytest.raises(ValidationError, match="finite"):
        maximal_marginal_relevance(Q, [[float("inf"), 0.0]], k=1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), k=st.integers(1, 12),
       lam=st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.0]))
def test_same_selection_as_langchain_reference(seed: int, n: int, k: int, lam: float) -> None:
    rng = np.random.default_rng(seed)
    query, candidates = rng.normal(size=5), rng.normal(size=(n, 5))
    expected = langchain_mmr(query, candidates.tolist(), lambda_mult=lam, k=k)
    assert maximal_marginal_relevance(query, candidates, k, lam) == expected
