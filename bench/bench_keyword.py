"""Keyword (true BM25) benchmark: tnsrag_db against a bare ``ts_rank_cd`` OR-query in the same run.

Usage::

    python -m bench.bench_keyword [--url URL] [--n 100000] [--queries 300] [--explain]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The script writes the corpus ``bench_keyword_<n>`` (the seeded
generator of ``bench/_corpus.py``: ~40-word texts over a Zipf-like vocabulary, tiers
70/20/9/1 %), replacing it unless ``--reuse``, and a scratch table
``public.bench_keyword_tsv`` (``to_tsvector`` stored, GIN index) built in the same run
and dropped at the end. It prints one table: median and p99 latency of 2–3-term
queries for

* ``BM25Index.search`` (ids and scores, top 10) and ``KeywordRAGStrategy.retrieve``
  (documents, top 10; unfiltered and filtered at 9 % and 1 %),
* the bare baseline ``ts_rank_cd(tsv, 'a | b | c')`` over a GIN ``@@`` match, top 10 (ids
  and ranks), and the same query returning the entry rows the strategy returns,
* the same BM25 calls with frequent-term pruning switched off ("unpruned": every
  posting of every query term scored, the plain statement alone),

for three query mixes: terms drawn from a random document (so frequent words are
frequent in queries too), terms drawn uniformly from the vocabulary, and two rare terms
(each held by 100-300 entries). Queries are timed one by one, every variant in rotating
order, so the machine's drift hits all variants alike.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext

K = 10
#: Document frequencies of the "rare terms" query mix.
RARE_DF = (100, 300)
SCRATCH = "public.bench_keyword_tsv"


def pct(values: Sequence[float], q: float) -> float:
    return float(np.quantile(np.array(values), q) * 1000)


def ingest(store: Store, entries: list[MemoryEntry], reuse: bool) -> float | None:
    """Write the corpus (replacing it unless ``reuse`` finds it complete); entries/s or None when reused."""
    if reuse and store.count() == len(entries):
        return None
    store.clear()
    started = time.perf_counter()
    for i in range(0, len(entries), 5000):
        store.add_all(entries[i:i + 5000])
    rate = len(entries) / (time.perf_counter() - started)
    with store.pool.connect(autocommit=True) as conn:
        for table in ("entries", "bm25_postings", "bm25_stats"):
            # Index-only scans of the postings need an up-to-date visibility map.
            conn.execute(f"VACUUM ANALYZE {table}")
    return rate


def build_baseline(store: Store) -> float:
    """The scratch ``to_tsvector`` table with its GIN index; seconds."""
    started = time.perf_counter()
    with store.session.transaction() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {SCRATCH}")
        conn.execute((f"CREATE TABLE {SCRATCH} AS SELECT id, to_tsvector('english', content) AS tsv "
                             "FROM entries WHERE corpus = :c"), {"c": store.corpus})
        conn.execute(f"CREATE INDEX ON {SCRATCH} USING gin (tsv)")
    with store.pool.connect(autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {SCRATCH}")
    return time.perf_counter() - started


def make_queries(entries: list[MemoryEntry], m: int, seed: int, index: BM25Index) -> dict[str, list[str]]:
    rng = random.Random(seed)
    vocab = sorted({w.strip(".").lower() for e in entries[:20000] for w in e.content.split()})
    df = index.document_frequency(vocab)
    rare = [w for w in vocab if RARE_DF[0] <= df.get(w, 0) <= RARE_DF[1]]
    from_docs, uniform, rare_pairs = [], [], []
    for _ in range(m):
        words = sorted({w.strip(".").lower() for w in rng.choice(entries).content.split()})
        from_docs.append(" ".join(rng.sample(words, rng.choice((2, 3)))))
        uniform.append(" ".join(rng.sample(vocab, rng.choice((2, 3)))))
        rare_pairs.append(" ".join(rng.sample(rare, 2)))
    return {"terms from a document": from_docs, "uniform vocabulary terms": uniform,
            f"two rare terms (df {RARE_DF[0]}-{RARE_DF[1]})": rare_pairs}


def measure(variants: Sequence[tuple[str, Callable[[str], object]]], queries: Sequence[str]) -> list[list[float]]:
    """Seconds per variant and query: query by query, the variants in rotating order (the
    machine's drift hits all of them alike), after 10 warm-up queries each."""
    for _, fn in variants:
        for q in queries[:10]:  # warm-up (caches, prepared statements)
            fn(q)
    times: list[list[float]] = [[] for _ in variants]
    for i, q in enumerate(queries):
        order = list(range(len(variants)))
        for v in order[i % len(order):] + order[:i % len(order)]:
            started = time.perf_counter()
            variants[v][1](q)
            times[v].append(time.perf_counter() - started)
    return times


def run(store: Store, args: argparse.Namespace) -> None:
    corpus = generate_corpus(args.n, seed=args.seed)
    rate = ingest(store, corpus.entries, args.reuse)
    baseline_build = build_baseline(store)
    index = BM25Index(store)
    keyword = KeywordRAGStrategy(index)
    # Frequent-term pruning off: every posting of every term scored (the "before").
    unpruned_index = BM25Index(store, prune_min_df=2**62)
    unpruned_keyword = KeywordRAGStrategy(unpruned_index)
    pool = store.pool
    with store.session.transaction() as conn:
        # From the document frequencies: the postings as rows and in blocks alike (a merged corpus has no rows).
        postings = conn.execute("SELECT coalesce(sum(df), 0) FROM bm25_df WHERE corpus = :c",
                                {"c": store.corpus}).scalar_one()
    print(f"corpus {store.corpus}: {args.n} entries, {postings} postings"
          + (f", ingested at {rate:,.0f} entries/s" if rate else " (reused)")
          + f"; baseline tsvector table + GIN built in {baseline_build:.1f} s")

    bare_sql = (f"SELECT id, ts_rank_cd(tsv, q) AS r FROM {SCRATCH}, to_tsquery('english', :q) AS q "
                       "WHERE tsv @@ q ORDER BY r DESC, id LIMIT :k")

    bare_docs_sql = (
        f"SELECT b.r, e.id, e.content, e.tier, e.source, e.metadata FROM (SELECT id, ts_rank_cd(tsv, q) AS r "
        f"FROM {SCRATCH}, to_tsquery('english', :q) AS q WHERE tsv @@ q ORDER BY r DESC, id LIMIT :k) b "
        "JOIN entries e ON e.corpus = :c AND e.id = b.id ORDER BY b.r DESC, b.id")

    def bare(q: str) -> object:
        with pool.connect() as conn:
            return conn.execute(bare_sql, {"q": " | ".join(q.split()), "k": K}).all()

    def bare_docs(q: str) -> object:
        with pool.connect() as conn:
            return conn.execute(bare_docs_sql, {"q": " | ".join(q.split()), "k": K, "c": store.corpus}).all()

    def bm25(q: str) -> object:
        return index.search(q, K)

    def strategy(ctx: RAGContext, chosen: KeywordRAGStrategy = keyword) -> Callable[[str], object]:
        return lambda q: chosen.retrieve(q, ctx)

    mixes = make_queries(corpus.entries, args.queries, args.seed + 1, index)
    if args.explain:
        sample = mixes["terms from a document"][0]
        sql, params = index.candidates_sql(sample, K)
        with store.session.transaction() as conn:
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).scalars()
        print(f"\nEXPLAIN (ANALYZE, BUFFERS) of the BM25 statement for {sample!r}:")
        print("\n".join(plan))
        print()
    variants: list[tuple[str, Callable[[str], object]]] = [
        ("bare ts_rank_cd OR (baseline)", bare),
        ("bare ts_rank_cd OR + entry rows", bare_docs),
        ("BM25Index.search, unpruned (before)", lambda q: unpruned_index.search(q, K)),
        ("BM25Index.search", bm25),
        ("BM25Index.search top 50, unpruned", lambda q: unpruned_index.search(q, 50)),
        ("BM25Index.search top 50", lambda q: index.search(q, 50)),
        ("KeywordRAGStrategy.retrieve", strategy(RAGContext(K))),
        ("  tier=WORKING (9 %), unpruned", strategy(RAGContext(K, 0.0, {"tier": "WORKING"}), unpruned_keyword)),
        ("  filtered tier=WORKING (9 %)", strategy(RAGContext(K, 0.0, {"tier": "WORKING"}))),
        ("  tier=PROCEDURAL (1 %), unpruned", strategy(RAGContext(K, 0.0, {"tier": "PROCEDURAL"}), unpruned_keyword)),
        ("  filtered tier=PROCEDURAL (1 %)", strategy(RAGContext(K, 0.0, {"tier": "PROCEDURAL"}))),
    ]
    print(f"{'query mix':<30} {'variant':<36} {'median ms':>10} {'p99 ms':>8} {'× baseline':>11}")
    for mix, queries in mixes.items():
        timings = measure(variants, queries)
        base = pct(timings[0], 0.5)
        for (name, _), times in zip(variants, timings):
            med, p99 = pct(times, 0.5), pct(times, 0.99)
            print(f"{mix:<30} {name:<36} {med:10.2f} {p99:8.2f} {med / base:11.2f}")
    with store.session.transaction() as conn:
        dfs = conn.execute(("SELECT max(n) AS mx, percentile_cont(0.5) WITHIN GROUP (ORDER BY n) AS md "
                                   "FROM (SELECT sum(df) AS n FROM bm25_df WHERE corpus = :c "
                                   "GROUP BY lexeme) d"), {"c": store.corpus}).one()
    print(f"(document frequency per term: max {dfs.mx}, median {dfs.md:.0f}; {args.queries} queries per mix, "
          "each timed once after 10 warm-up runs, variants in rotating order; top 10)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--n", type=int, default=100_000, help="number of entries (default 100000)")
    parser.add_argument("--queries", type=int, default=300, help="queries per mix (default 300)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--reuse", action="store_true", help="reuse a complete corpus of the same size")
    parser.add_argument("--keep", action="store_true", help="keep the scratch baseline table")
    parser.add_argument("--explain", action="store_true", help="print EXPLAIN (ANALYZE, BUFFERS) of one query")
    args = parser.parse_args()

    with database_url(args.url) as url:
        with connect(url, corpus=f"bench_keyword_{args.n}", auto_migrate=True) as store:
            try:
                run(store, args)
            finally:
                if not args.keep:
                    with store.session.transaction() as conn:
                        conn.execute(f"DROP TABLE IF EXISTS {SCRATCH}")


if __name__ == "__main__":
    main()
