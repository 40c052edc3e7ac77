"""One corpus on a single server and on a Citus cluster: ingest, query latencies, router against fan-out, sizes.

Usage::

    python -m bench.bench_citus_scale --citus-url URL [--url URL] [--n 100000] [--queries 100]

``--citus-url`` is a Citus coordinator (with its workers added, and ``vector`` and
``btree_gin`` on every node); the script migrates and distributes a schema of its own there
(``tnsrag_bench_scale``, dropped first) with ``tnsrag db distribute --citus``'s function.
``--url`` is the single server (default: an embedded server in a temporary directory).
Both get the same corpus of ``--n`` generated entries (``bench/_corpus.py``, 64-d) written
in batches of 2,000 through ``VectorMemoryStore.add_all`` (entries, postings, vectors; the
postings merged into blocks as a store does every 10,000 entries), then its HNSW index.

Printed, each side in the same run:

* ingest: entries per second of the writes (merges included), and the HNSW build's seconds;
* medians over ``--queries`` queries, single and cluster alternating: keyword, vector, hybrid,
  keyword and vector filtered by a metadata value of 1 % of the corpus, top 10;
* router against fan-out: one tiny statement routed to the corpus's shard
  (``bm25_merge_state`` by corpus) and the same over every shard (no corpus), and the exact
  vector top 10 of the corpus routed against the same over every shard: the difference is
  what each shard a statement reaches costs the coordinator;
* sizes on the single server (the corpus is the only one there): bytes per entry of the
  entries, the postings (blocks), the vectors and the HNSW index.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench._common import database_url
from bench._corpus import GROUP_1PCT, generate_corpus
from bench.bench_citus_router import Lookup
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.citus import distribute
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import RAGContext

SCHEMA = "tnsrag_bench_scale"
CORPUS = "scale"
BATCH = 2000
#: Settings printed for each side (the cluster's workers are set as its coordinator).
_SHOWN = ("shared_buffers", "work_mem", "maintenance_work_mem", "fsync", "synchronous_commit")


def _citus_schema(url: str) -> None:
    """A fresh schema on the coordinator, migrated and distributed by corpus."""
    pool = Pool(url, schema=SCHEMA, pool_size=1)
    try:
        with pool.begin() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        migrate.upgrade(pool, schema=SCHEMA)
        distribute(pool, schema=SCHEMA)
    finally:
        pool.close()


def _write(store: Store, vectors: VectorMemoryStore, corpus: Any) -> tuple[float, float]:
    """Seconds of the writes (merges included) and of the HNSW build."""
    started = time.perf_counter()
    for i in range(0, len(corpus.entries), BATCH):
        vectors.add_all(corpus.entries[i:i + BATCH], embeddings=corpus.embeddings[i:i + BATCH])
    store.merge_postings()
    written = time.perf_counter() - started
    started = time.perf_counter()
    vectors.build_index()
    return written, time.perf_counter() - started


def _sizes(store: Store) -> dict[str, int]:
    """Bytes of the corpus's tables and of its HNSW index (the only corpus of the server),
    after a VACUUM (the merge's deleted rows of postings are free space then, not counted
    by a table that is truncated at its end)."""
    with store.pool.connect(autocommit=True) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}")
        conn.execute("VACUUM entries, bm25_blocks, bm25_docs, bm25_df, bm25_postings, embeddings")
        sizes = {t: int(conn.execute("SELECT pg_total_relation_size(CAST(:t AS regclass))",
                                     {"t": f"{SCHEMA}.{t}"}).scalar_one())
                 for t in ("entries", "bm25_blocks", "bm25_docs", "bm25_df", "bm25_postings", "embeddings")}
        sizes["hnsw"] = int(conn.execute((
            "SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'hnsw' "
            "AND c.relnamespace = CAST(:s AS regnamespace)"), {"s": SCHEMA}).scalar_one())
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citus-url", required=True)
    parser.add_argument("--url", default=None)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()

    corpus = generate_corpus(args.n, dim=64, seed=42)
    queries = corpus.query_vectors(args.queries)
    words = [" ".join(e.content.split()[:3]) for e in corpus.entries[: args.queries]]
    texts = {e.content: corpus.embeddings[i] for i, e in enumerate(corpus.entries)}
    lookup = Lookup(queries, {**texts, **{w: queries[i] for i, w in enumerate(words)}})
    top = RAGContext(10, -1.0)
    filtered = RAGContext(10, -1.0, {"group": GROUP_1PCT})
    _citus_schema(args.citus_url)
    with database_url(args.url) as single_url:
        runs: dict[str, dict[str, Callable[[int], object]]] = {}
        stores: dict[str, Store] = {}
        for label, url in (("single", single_url), ("citus", args.citus_url)):
            store = connect(url, corpus=CORPUS, schema=SCHEMA, auto_migrate=(label == "single"))
            store.drop_corpus()
            vectors = VectorMemoryStore(store, lookup, index_threshold=None)
            written, built = _write(store, vectors, corpus)
            with store.pool.connect() as conn:
                shown = {name: conn.execute(f"SHOW {name}").scalar_one() for name in _SHOWN}
            print(f"{label}: {args.n} entries written in {written:.1f} s ({args.n / written:.0f} entries/s), "
                  f"HNSW built in {built:.1f} s; coordinator {shown}", flush=True)
            keyword, vector = KeywordRAGStrategy(BM25Index(store)), VectorRAGStrategy(vectors)
            hybrid = HybridRAGStrategy(BM25Index(store), vectors)
            space = int(store.read("SELECT space_id FROM embedding_spaces WHERE corpus = :c", {"c": CORPUS})[0][0])
            probe = (f"SELECT v.entry_id FROM embeddings v WHERE {{pin}} v.space_id = {space} "
                     "ORDER BY v.embedding <=> CAST(:q AS vector) LIMIT 10")

            def sql(text: str, params: Callable[[int], dict[str, Any]], s: Store = store) -> Callable[[int], object]:
                def run(i: int) -> object:
                    with s.pool.connect() as conn:
                        return conn.execute(text, params(i)).all()
                return run

            def qv(i: int) -> dict[str, Any]:
                return {"q": "[" + ",".join(f"{x:.6f}" for x in queries[i]) + "]", "c": CORPUS}

            runs[label] = {
                "keyword": lambda i, s=keyword: s.retrieve(words[i], top),
                "vector": lambda i, s=vector: s.retrieve(f"q:{i}", top),
                "hybrid": lambda i, s=hybrid: s.retrieve(words[i], top),
                "keyword 1 %": lambda i, s=keyword: s.retrieve(words[i], filtered),
                "vector 1 %": lambda i, s=vector: s.retrieve(f"q:{i}", filtered),
                "tiny, router": sql("SELECT count(*) FROM bm25_merge_state WHERE corpus = :c", lambda i: {"c": CORPUS}),
                "tiny, fan-out": sql("SELECT count(*) FROM bm25_merge_state", lambda i: {}),
                "exact, router": sql(probe.format(pin="v.corpus = :c AND"), qv),
                "exact, fan-out": sql(probe.format(pin=""), qv),
            }
            stores[label] = store
        names = list(runs["single"])
        for label in runs:  # warm both
            for name in names:
                for i in range(min(10, args.queries)):
                    runs[label][name](i)
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.queries):
            for label in (("single", "citus") if i % 2 == 0 else ("citus", "single")):
                for name in names:
                    started = time.perf_counter()
                    runs[label][name](i)
                    times.setdefault((label, name), []).append((time.perf_counter() - started) * 1000)
        sizes = _sizes(stores["single"])
        for store in stores.values():
            store.close()
    print(f"one corpus of {args.n} entries (64-d, HNSW), {args.queries} queries, top 10, medians (ms)")
    print(f"{'query':16} {'single':>8} {'citus':>8} {'ratio':>6}")
    for name in names:
        single, citus = statistics.median(times[("single", name)]), statistics.median(times[("citus", name)])
        print(f"{name:16} {single:8.2f} {citus:8.2f} {citus / single:6.2f}")
    print("bytes per entry on the single server: " + ", ".join(f"{k} {v / args.n:.0f}" for k, v in sizes.items()))


if __name__ == "__main__":
    main()
