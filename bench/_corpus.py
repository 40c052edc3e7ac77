"""A seeded synthetic corpus for the benchmarks (shared by every ``bench/`` script).

``generate_corpus(n)`` returns ``n`` entries with ~40-word texts, tiers skewed
70/20/9/1 % (SEMANTIC/EPISODIC/WORKING/PROCEDURAL), a ``group`` metadata key and
``dim``-dimensional clustered, unit-length float32 embeddings. Texts share topic words
with their embedding's cluster, so keyword and vector rankings are related.

Selectivities for filter benchmarks:

* ``tier=WORKING`` 9 %, ``tier=PROCEDURAL`` 1 %;
* ``group=`` :data:`GROUP_1PCT` 1 %, :data:`GROUP_01PCT` 0.1 %, every other entry one
  of 89 ``r<nn>`` groups (≈ 1.1 % each).

``generate_correlated_corpus(n)`` is a second, differently built data set for filtered
search: isotropic Gaussian clusters (no shared topic direction, no low-dimensional
subspace) whose tiers and ``group`` follow the clusters (most of a cluster's entries
share one tier), so a filter selects regions of the space, not a random sample of it:
a query from a 70 % cluster filtered to the 1 % tier has its matches in other clusters.

Everything is a pure function of the seed: two runs build identical corpora.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tnsrag_db._types import MemoryEntry, MemoryTier

__all__ = ["GROUP_01PCT", "GROUP_1PCT", "TIER_SHARES", "Corpus", "generate_corpus", "generate_correlated_corpus"]

#: Tier of each share of the corpus (fractions sum to 1).
TIER_SHARES: tuple[tuple[MemoryTier, float], ...] = (
    (MemoryTier.SEMANTIC, 0.70), (MemoryTier.EPISODIC, 0.20), (MemoryTier.WORKING, 0.09),
    (MemoryTier.PROCEDURAL, 0.01),
)
#: ``group`` value carried by 1 % of the entries.
GROUP_1PCT = "g1pct"
#: ``group`` value carried by 0.1 % of the entries.
GROUP_01PCT = "g01pct"

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pra", "den", "gul", "ox", "tri", "zen", "bel", "qua")


def _vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        parts = rng.integers(0, len(_SYLLABLES), size=int(rng.integers(2, 5)))
        words.add("".join(_SYLLABLES[p] for p in parts))
    return sorted(words)


@dataclass(frozen=True)
class _Model:
    centers: npt.NDArray[np.float32]
    bases: npt.NDArray[np.float32]
    spread: float
    noise: float

    def sample(self, which: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.float32]:
        m, (dim, latent) = len(which), self.bases.shape[1:]
        z = rng.standard_normal((m, latent)).astype(np.float32) * self.spread
        x = self.centers[which].copy()
        for c in np.unique(which):
            rows = which == c
            x[rows] += z[rows] @ self.bases[c].T
        x += rng.standard_normal((m, dim)).astype(np.float32) * self.noise
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x.astype(np.float32)


@dataclass
class Corpus:
    """A generated corpus: entries, their embeddings (row i belongs to entry i) and the cluster model."""

    entries: list[MemoryEntry]
    embeddings: npt.NDArray[np.float32]
    model: _Model = field(repr=False)
    seed: int

    def query_vectors(self, m: int, *, seed: int | None = None) -> npt.NDArray[np.float32]:
        """``m`` unit query vectors drawn like the corpus (``seed`` defaults to the corpus seed + 1)."""
        rng = np.random.default_rng(self.seed + 1 if seed is None else seed)
        return self.model.sample(rng.integers(0, self.model.centers.shape[0], size=m), rng)


def generate_corpus(n: int, *, dim: int = 384, seed: int = 42, clusters: int = 100, latent: int = 16,
                    words: int = 40, spread: float = 0.25, noise: float = 0.005, id_prefix: str = "doc") -> Corpus:
    """Generate ``n`` entries (ids ``<id_prefix>-0000000``...) with ``words``-word texts and
    ``dim``-d unit embeddings: one of ``clusters`` random unit centers, plus an offset in
    the cluster's own ``latent``-dimensional subspace (per-axis deviation ``spread``), plus
    isotropic noise (per-coordinate deviation ``noise``). Real text embeddings have a low
    intrinsic dimension; isotropic noise alone would make every neighbour equidistant.
    """
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(5000, rng)
    # Clusters are grouped under a few topics that share a common direction, as sentence
    # embeddings are (typical unrelated texts still score 0.1-0.3): mutually orthogonal,
    # tight clusters would give an HNSW graph islands no real corpus has.
    common_dir = rng.standard_normal(dim)
    topics = rng.standard_normal((max(1, clusters // 10), dim)) + common_dir * 0.5
    top = (topics[rng.integers(0, topics.shape[0], size=clusters)] * 0.8
           + rng.standard_normal((clusters, dim))).astype(np.float32)
    top /= np.linalg.norm(top, axis=1, keepdims=True)
    bases = np.linalg.qr(rng.standard_normal((clusters, dim, latent)))[0].astype(np.float32)
    model = _Model(top, bases, spread, noise)
    which = rng.integers(0, clusters, size=n)
    emb = model.sample(which, rng)
    # Zipf-like shared vocabulary plus each cluster's own topic words.
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    p = 1.0 / ranks
    p /= p.sum()
    common = rng.choice(len(vocab), size=(n, words), p=p)
    topic_words = rng.integers(0, len(vocab), size=(clusters, 8))
    n_topic = words // 4
    topical = topic_words[which[:, None], rng.integers(0, 8, size=(n, n_topic))]
    common[:, :n_topic] = topical
    tiers = rng.choice(len(TIER_SHARES), size=n, p=[s for _, s in TIER_SHARES])
    u = rng.random(n)
    rest = rng.integers(0, 89, size=n)
    entries = []
    for i in range(n):
        toks = [vocab[t] for t in common[i]]
        rng_order = (i * 7919) % words  # cheap deterministic rotation instead of a shuffle
        text = " ".join(toks[rng_order:] + toks[:rng_order]).capitalize() + "."
        group = GROUP_01PCT if u[i] < 0.001 else GROUP_1PCT if u[i] < 0.011 else f"r{rest[i]:02d}"
        entries.append(MemoryEntry(f"{id_prefix}-{i:07d}", text, TIER_SHARES[tiers[i]][0], source=f"src{i % 50}",
                                   metadata={"group": group}))
    return Corpus(entries, emb, model, seed)


@dataclass(frozen=True)
class _Gaussian:
    """Isotropic Gaussian clusters: ``centers`` plus per-coordinate noise ``radius / sqrt(dim)``."""

    centers: npt.NDArray[np.float32]
    radius: npt.NDArray[np.float32]

    def sample(self, which: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.float32]:
        dim = self.centers.shape[1]
        x = self.centers[which] + rng.standard_normal((len(which), dim)).astype(np.float32) \
            * (self.radius[which] / np.sqrt(dim))[:, None]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x.astype(np.float32)


@dataclass
class CorrelatedCorpus:
    """A corpus of :func:`generate_correlated_corpus`: entries, embeddings, each entry's cluster."""

    entries: list[MemoryEntry]
    embeddings: npt.NDArray[np.float32]
    clusters: npt.NDArray[np.int64]
    model: _Gaussian = field(repr=False)
    seed: int

    def query_vectors(self, m: int, *, seed: int | None = None) -> npt.NDArray[np.float32]:
        """``m`` unit query vectors drawn like the corpus (``seed`` defaults to the corpus seed + 1)."""
        rng = np.random.default_rng(self.seed + 1 if seed is None else seed)
        return self.model.sample(rng.integers(0, self.model.centers.shape[0], size=m), rng)


def generate_correlated_corpus(n: int, *, dim: int = 384, seed: int = 7, clusters: int = 50,
                               radius: tuple[float, float] = (0.6, 1.2), mixing: float = 0.05,
                               id_prefix: str = "cor") -> CorrelatedCorpus:
    """Generate ``n`` entries in ``clusters`` isotropic Gaussian clusters of ``dim``-d unit
    vectors (random unit centers; each cluster's noise has norm about a radius drawn from
    ``radius``, so in-cluster cosines are about 1 / (1 + radius²)). Tiers follow the
    clusters: the clusters are ranked at random and an entry's position in that ranking
    (its cluster's rank plus a uniform offset) picks the tier at 70/20/9/1 %; a share
    ``mixing`` of the entries takes a tier drawn independently instead. ``group`` is
    :data:`GROUP_1PCT` for 1 % and :data:`GROUP_01PCT` for 0.1 % of the entries, placed
    the same way along a second ranking of the clusters. Texts are short and carry the
    cluster number, so keyword search has something to find.
    """
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dim)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    radii = rng.uniform(radius[0], radius[1], size=clusters).astype(np.float32)
    model = _Gaussian(centers, radii)
    which = rng.integers(0, clusters, size=n)
    emb = model.sample(which, rng)
    shares = np.cumsum([s for _, s in TIER_SHARES])
    by_rank = rng.permutation(clusters)
    position = (by_rank[which] + rng.random(n)) / clusters
    tier_index = np.minimum(np.searchsorted(shares, position, side="right"), len(TIER_SHARES) - 1)
    mixed = rng.random(n) < mixing
    tier_index[mixed] = rng.choice(len(TIER_SHARES), size=int(mixed.sum()), p=[s for _, s in TIER_SHARES])
    group_rank = rng.permutation(clusters)
    g = (group_rank[which] + rng.random(n)) / clusters
    entries = []
    for i in range(n):
        group = GROUP_01PCT if g[i] >= 0.999 else GROUP_1PCT if g[i] >= 0.989 else f"r{int(g[i] * 89):02d}"
        entries.append(MemoryEntry(f"{id_prefix}-{i:07d}", f"Entry {i} of cluster c{which[i]}.",
                                   TIER_SHARES[tier_index[i]][0], source=f"src{i % 50}", metadata={"group": group}))
    return CorrelatedCorpus(entries, emb, which, model, seed)
