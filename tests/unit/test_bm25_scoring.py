"""tnsrag_db._indexes.bm25.scoring against a textbook Okapi BM25 written independently."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import check_bm25_parameters, scoring


def textbook_bm25(docs: dict[str, Counter[str]], query: set[str], k1: float, b: float) -> dict[str, float]:
    """Okapi BM25 as usually written: idf · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))."""
    n = len(docs)
    avgdl = sum(sum(c.values()) for c in docs.values()) / n
    out: dict[str, float] = {}
    for doc_id, counts in docs.items():
        dl = sum(counts.values())
        total = 0.0
        for term in query:
            df = sum(1 for c in docs.values() if term in c)
            tf = counts.get(term, 0)
            if tf and df:
                term_idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                total += term_idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
        out[doc_id] = total
    return out


def random_corpus(rng: random.Random, n: int) -> dict[str, Counter[str]]:
    vocab = [f"w{i}" for i in range(30)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    return {f"d{i}": Counter(rng.choices(vocab, weights=weights, k=rng.randint(1, 60))) for i in range(n)}


@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (0.0, 0.0), (2.0, 1.0), (0.9, 0.4)])
def test_score_equals_the_textbook_formula(k1: float, b: float) -> None:
    rng = random.Random(11)
    docs = random_corpus(rng, 80)
    df = Counter(t for c in docs.values() for t in c)
    n, total = len(docs), float(sum(sum(c.values()) for c in docs.values()))
    for _ in range(30):
        query = set(rng.sample([f"w{i}" for i in range(35)], rng.randint(1, 4)))  # w30+ are unknown
        expected = textbook_bm25(docs, query, k1, b)
        for doc_id, counts in docs.items():
            got = scoring.score(counts, query, df, n, total, k1, b)
            assert got == pytest.approx(expected[doc_id], rel=1e-12, abs=1e-15), (query, doc_id)


def test_parts_of_the_formula() -> None:
    n, df = 1000.0, 10.0
    assert scoring.idf(n, df) == math.log(1 + 990.5 / 10.5)
    assert scoring.idf(n, n) > 0  # a term in every entry still adds a little
    assert scoring.term_weight(2.0, 1.2) == 2.0 * 2.2
    # avgdl = 20: the normalisation is k1 at average length, smaller below, larger above
    kbl = scoring.length_factor(50.0, 1000.0, 1.2, 0.75)
    assert scoring.length_norm(20.0, kbl, 1.2, 0.75) == pytest.approx(1.2)
    assert scoring.length_norm(10.0, kbl, 1.2, 0.75) < 1.2 < scoring.length_norm(40.0, kbl, 1.2, 0.75)
    assert scoring.length_factor(0.0, 0.0, 1.2, 0.75) == 0.0  # empty corpus
    # saturation: below 1, growing with tf; so a term's part stays below its weight
    sat = [scoring.tf_saturation(tf, 1.2) for tf in (1, 2, 5, 100)]
    assert sat == sorted(sat) and 0 < sat[0] and sat[-1] < 1
    wt = scoring.term_weight(scoring.idf(n, df), 1.2)
    for tf in (1, 3, 255):
        part = scoring.contribution(wt, kbl, tf, 20.0, 1.2, 0.75)
        assert 0 < part < wt
        assert part == pytest.approx(wt * scoring.tf_saturation(tf, scoring.length_norm(20.0, kbl, 1.2, 0.75)),
                                     rel=1e-15)
    # terms that the document or the corpus lack add nothing
    assert scoring.score(Counter(a=2), {"b"}, {"a": 1, "b": 3}, 10, 50.0) == 0.0
    assert scoring.score(Counter(a=2), {"a", "zz"}, {"a": 1}, 10, 50.0) == scoring.score(
        Counter(a=2), {"a"}, {"a": 1}, 10, 50.0) > 0


def test_parameter_checks_keep_their_messages() -> None:
    assert check_bm25_parameters(1, 0) == (1.0, 0.0)
    for k1, b, message in [(True, 0.5, "k1 must be a finite number"), (1.2, math.nan, "b must be a finite number"),
                           (-0.1, 0.5, "k1 must be >= 0"), (1.2, 1.5, "b must be between 0 and 1"),
                           ("1", 0.5, "k1 must be a finite number")]:
        with pytest.raises(ConfigurationError, match=message):
            check_bm25_parameters(k1, b)
