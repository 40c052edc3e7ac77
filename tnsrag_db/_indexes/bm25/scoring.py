"""The Okapi BM25 formula as small pure functions (the model: bm25s ``scoring.py``).

A query term ``t`` adds to the score of a document ``d`` holding it ``tf`` times::

    idf(t)  = ln(1 + (N − df + 0.5) / (df + 0.5))
    part    = idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl))

with ``N`` entries, ``df`` of them holding ``t``, ``dl`` the document's length and
``avgdl`` the average length, all in terms. The factorisation below is the one the SQL
statement of :mod:`tnsrag_db._indexes.bm25.sql` computes, operation for operation, so
Python figures (explanations, the lexical tree navigator, the reference tests) are the
very float8 summands of the database's scores: the term's weight
``wt = idf·(k1 + 1)`` (also the term's upper bound, since ``tf / (tf + norm) < 1``), the
length factor ``kbl = k1·b / avgdl`` and the constant ``k1·(1 − b)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._validate import check_number

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "check_bm25_parameters",
    "contribution",
    "idf",
    "length_factor",
    "length_norm",
    "score",
    "term_weight",
    "tf_saturation",
]

#: Default term-frequency saturation.
DEFAULT_K1 = 1.2
#: Default document-length normalisation.
DEFAULT_B = 0.75


def check_bm25_parameters(k1: object, b: object) -> tuple[float, float]:
    """Return ``(k1, b)`` as floats: both finite, ``k1 >= 0``, ``0 <= b <= 1``; :class:`ConfigurationError` otherwise."""
    k1_value = check_number(k1, "k1", error=ConfigurationError)
    b_value = check_number(b, "b", error=ConfigurationError)
    if k1_value < 0:
        raise ConfigurationError(f"k1 must be >= 0, got {k1!r}")
    if not 0.0 <= b_value <= 1.0:
        raise ConfigurationError(f"b must be between 0 and 1, got {b!r}")
    return k1_value, b_value


def idf(n: float, df: float) -> float:
    """``ln(1 + (N − df + 0.5) / (df + 0.5))``: always > 0 for ``0 <= df <= N``."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def term_weight(term_idf: float, k1: float) -> float:
    """``wt = idf · (k1 + 1)``, a term's weight and the bound of its part of any score."""
    return term_idf * (k1 + 1.0)


def length_factor(n: float, total_len: float, k1: float, b: float) -> float:
    """``kbl = k1·b / avgdl`` with ``avgdl = total_len / N`` (0 for an empty corpus)."""
    return k1 * b * n / total_len if total_len > 0 else 0.0


def length_norm(doc_len: float, kbl: float, k1: float, b: float) -> float:
    """``k1·(1 − b + b·dl/avgdl)``, written ``k1·(1 − b) + kbl·dl``: the document-length normalisation."""
    return k1 * (1.0 - b) + kbl * doc_len


def tf_saturation(tf: float, norm: float) -> float:
    """``tf / (tf + norm)``, the saturated term frequency in [0, 1)."""
    return tf / (tf + norm)


def contribution(wt: float, kbl: float, tf: float, doc_len: float, k1: float, b: float) -> float:
    """One term's part of a score, ``wt·tf / (tf + k1·(1 − b) + kbl·dl)``, in the SQL's order of operations."""
    return wt * tf / (tf + k1 * (1.0 - b) + kbl * doc_len)


def score(counts: Mapping[str, int], terms: Iterable[str], df: Mapping[str, int], n: float, total_len: float,
          k1: float = DEFAULT_K1, b: float = DEFAULT_B) -> float:
    """The BM25 score of a document with term counts ``counts`` for the distinct ``terms``,
    given each term's document frequency ``df`` (a missing term counts 0), ``N`` and the
    corpus's total length; terms the document or the corpus lacks add nothing. The document's
    length is the sum of its counts."""
    doc_len = float(sum(counts.values()))
    kbl = length_factor(n, total_len, k1, b)
    total = 0.0
    for term in sorted(set(terms)):
        tf, term_df = counts.get(term, 0), df.get(term, 0)
        if tf > 0 and term_df > 0:
            total += contribution(term_weight(idf(n, term_df), k1), kbl, tf, doc_len, k1, b)
    return total
