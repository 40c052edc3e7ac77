"""Statistics by resampling the queries: a percentile bootstrap interval of a mean and the
paired randomisation test of a difference, both seeded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["Values", "bootstrap_interval", "paired_randomisation_test"]

#: Per-query metric values, in query order.
Values = Sequence[float] | npt.NDArray[np.float64]


def _values(values: Values) -> npt.NDArray[np.float64]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError("need a non-empty sequence of per-query values")
    return array


def bootstrap_interval(values: Values, *, confidence: float = 0.95, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling queries with
    replacement ``resamples`` times, seeded with ``seed``).

    Raises :class:`ValueError` for empty ``values``, ``confidence`` outside (0, 1) or
    ``resamples < 1``.
    """
    array = _values(values)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    # In blocks, so memory stays bounded for large query sets.
    block = max(1, 2_000_000 // array.size)
    for start in range(0, resamples, block):
        n = min(block, resamples - start)
        means[start:start + n] = array[rng.integers(0, array.size, size=(n, array.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def paired_randomisation_test(values: Values, baseline: Values, *, permutations: int = 10_000,
                              seed: int = 0) -> float:
    """Two-sided p-value of the paired randomisation (permutation) test of the mean
    difference ``values - baseline``: each permutation swaps the two systems' scores of a
    query with probability ½ (a random sign flip of its difference).

    The p-value is ``(1 + #{|permuted mean| ≥ |observed mean|}) / (1 + permutations)``,
    so it is never 0. Raises :class:`ValueError` for sequences of different lengths, empty
    ones or ``permutations < 1``.
    """
    a, b = _values(values), _values(baseline)
    if a.shape != b.shape:
        raise ValueError(f"paired test needs equal lengths, got {a.size} and {b.size}")
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    diff = a - b
    observed = abs(diff.mean())
    # Differences this close to the observed one count as ties (float sums differ in order).
    tolerance = 1e-12 * max(1.0, observed)
    rng = np.random.default_rng(seed)
    hits = 0
    block = max(1, 2_000_000 // diff.size)
    for start in range(0, permutations, block):
        n = min(block, permutations - start)
        signs = rng.integers(0, 2, size=(n, diff.size), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(np.abs((signs * diff).mean(axis=1)) >= observed - tolerance))
    return (1 + hits) / (1 + permutations)
