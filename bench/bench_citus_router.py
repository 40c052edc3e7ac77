"""Router queries on a Citus cluster against one server: keyword and vector medians.

Usage::

    python -m bench.bench_citus_router --citus-url URL [--url URL] [--n 20000] [--corpora 4] [--queries 200]

``--citus-url`` is a Citus coordinator whose schema ``tnsrag`` is migrated and distributed
(``tnsrag db upgrade`` then ``tnsrag db distribute --citus``); ``--url`` the single server
to compare with (default: an embedded server in a temporary directory). The script writes
the same ``--corpora`` corpora of ``--n`` entries each (the seeded generator of
``bench/_corpus.py``, 64-d embeddings, an HNSW index per corpus) into both, then times
``KeywordRAGStrategy`` and ``VectorRAGStrategy`` top 10 on one of them, query by query in
alternating order, and prints the medians and the cluster / single-server ratios. On the
cluster each query is one task on the worker holding the corpus: the difference is the
coordinator's planning and its round trip to the worker.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import RAGContext


class Lookup:
    """An embedding function over precomputed vectors: ``q:<i>`` is query i, else the text's row."""

    def __init__(self, queries: npt.NDArray[np.float32], texts: dict[str, npt.NDArray[np.float32]]) -> None:
        self.queries, self.texts = queries, texts

    def __call__(self, text: str) -> list[float]:
        if text.startswith("q:"):
            return [float(x) for x in self.queries[int(text[2:])]]
        return [float(x) for x in self.texts[text]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citus-url", required=True)
    parser.add_argument("--url", default=None)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--corpora", type=int, default=4)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    corpora = [generate_corpus(args.n, dim=64, seed=42 + k, id_prefix=f"c{k}") for k in range(args.corpora)]
    queries = corpora[0].query_vectors(args.queries)
    texts = {e.content: c.embeddings[i] for c in corpora for i, e in enumerate(c.entries)}
    lookup = Lookup(queries, texts)
    words = [e.content.split()[:3] for e in corpora[0].entries[: args.queries]]
    ctx = RAGContext(10, -1.0)
    with database_url(args.url) as single_url:
        runs: dict[str, dict[str, Callable[[int], object]]] = {}
        for label, url in (("single", single_url), ("citus", args.citus_url)):
            strategies: dict[str, Callable[[int], object]] = {}
            for k, corpus in enumerate(corpora):
                store = connect(url, corpus=f"bench_router_{k}", auto_migrate=(label == "single"))
                vectors = VectorMemoryStore(store, lookup, index_threshold=None)
                if store.count() != args.n:
                    store.drop_corpus()
                    started = time.perf_counter()
                    vectors.add_all(corpus.entries, embeddings=corpus.embeddings)
                    vectors.build_index()
                    print(f"{label}: corpus {k} written in {time.perf_counter() - started:.1f} s")
                if k == 0:
                    keyword, vector = KeywordRAGStrategy(BM25Index(store)), VectorRAGStrategy(vectors)

                    def by_keyword(i: int, s: KeywordRAGStrategy = keyword) -> object:
                        return s.retrieve(" ".join(words[i]), ctx)

                    def by_vector(i: int, s: VectorRAGStrategy = vector) -> object:
                        return s.retrieve(f"q:{i}", ctx)

                    strategies = {"keyword": by_keyword, "vector": by_vector}
            runs[label] = strategies
        for label in runs:  # warm both
            for name in ("keyword", "vector"):
                for i in range(min(20, args.queries)):
                    runs[label][name](i)
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.queries):
            for label in (("single", "citus") if i % 2 == 0 else ("citus", "single")):
                for name in ("keyword", "vector"):
                    started = time.perf_counter()
                    runs[label][name](i)
                    times.setdefault((label, name), []).append((time.perf_counter() - started) * 1000)
    print(f"{args.corpora} corpora x {args.n} entries, {args.queries} queries, top 10, medians (ms)")
    print(f"{'query':10} {'single':>8} {'citus':>8} {'ratio':>6}")
    for name in ("keyword", "vector"):
        single, citus = statistics.median(times[("single", name)]), statistics.median(times[("citus", name)])
        print(f"{name:10} {single:8.2f} {citus:8.2f} {citus / single:6.2f}")


if __name__ == "__main__":
    main()
