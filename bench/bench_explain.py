"""What explaining costs: ``retrieve`` against ``explain`` of the same strategy, same queries, same run.

Usage::

    python -m bench.bench_explain [--url URL] [--n 5000] [--queries 100]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The script writes the corpus ``bench_explain_<n>`` (the seeded
generator of ``bench/_corpus.py``, embedded with the 128-dimensional hash fallback),
replacing it, and prints one table: per strategy (keyword, vector, hybrid, temporal over
keyword) the median and p99 milliseconds of ``retrieve`` and of ``explain`` for 2–3-term
queries drawn from random documents (top 10, unfiltered and filtered at 9 %), timed in
alternation query by query, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable

import numpy as np

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db import (
    BM25Index,
    HashingEmbedding,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    RAGContext,
    TemporalIndex,
    TemporalRAGStrategy,
    VectorMemoryStore,
    VectorRAGStrategy,
)
from tnsrag_db._store.store import connect


def _ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--n", type=int, default=5000, help="number of entries (default 5000)")
    parser.add_argument("--queries", type=int, default=100, help="queries per strategy (default 100)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    corpus = generate_corpus(args.n, dim=8, seed=args.seed)
    rng = random.Random(args.seed)
    queries = [" ".join(rng.sample(e.content.split(), rng.randint(2, 3)))
               for e in rng.sample(corpus.entries, args.queries)]
    with database_url(args.url) as url, connect(url, corpus=f"bench_explain_{args.n}", auto_migrate=True) as store:
        store.clear()
        vectors = VectorMemoryStore(store, HashingEmbedding(), index_threshold=None)
        vectors.add_all(corpus.entries)
        keywords = BM25Index(store)
        strategies = {
            "keyword": KeywordRAGStrategy(keywords),
            "vector": VectorRAGStrategy(vectors),
            "hybrid": HybridRAGStrategy(keywords, vectors),
            "temporal(keyword)": TemporalRAGStrategy(KeywordRAGStrategy(keywords), TemporalIndex(store)),
        }
        print(f"{'strategy':<20}{'context':<22}{'retrieve ms':>12}{'p99':>9}{'explain ms':>12}{'p99':>9}"
              f"{'explain/retrieve':>18}")
        for name, strategy in strategies.items():
            contexts = (("top 10", RAGContext(10)), ("tier=WORKING (9 %)", RAGContext(10, 0.0, {"tier": "WORKING"})))
            for label, ctx in contexts:
                for q in queries[:5]:  # warm-up
                    strategy.retrieve(q, ctx)
                    strategy.explain(q, ctx)
                plain: list[float] = []
                explained: list[float] = []
                for q in queries:
                    plain.append(_ms(lambda: strategy.retrieve(q, ctx)))  # noqa: B023
                    explained.append(_ms(lambda: strategy.explain(q, ctx)))  # noqa: B023
                p, e = float(np.median(plain)), float(np.median(explained))
                print(f"{name:<20}{label:<22}{p:>12.2f}{np.percentile(plain, 99):>9.2f}{e:>12.2f}"
                      f"{np.percentile(explained, 99):>9.2f}{e / p:>18.2f}")
        store.drop_corpus()


if __name__ == "__main__":
    main()
