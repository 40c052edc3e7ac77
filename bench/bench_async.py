"""Async vs threads: 64 concurrent ``aretrieve`` calls on one event loop against the same
calls through 64 threads on the sync API, in the same run.

Usage::

    python -m bench.bench_async [--url URL] [--n 5000] [--concurrency 64] [--calls 1280]
                                [--repeats 5] [--pool-size 16] [--strategy keyword]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The script writes the corpus ``bench_async_<n>`` (the seeded
generator of ``bench/_corpus.py``), then per repetition, in alternating order:

* **async**: one event loop, ``--concurrency`` tasks, each awaiting
  ``strategy.aretrieve`` for its share of ``--calls`` queries one after the other
  (psycopg async connections, :mod:`tnsrag_db._db.aio`);
* **threads**: ``--concurrency`` threads, each calling ``strategy.retrieve`` for the
  same share of the same queries (the sync pool).

Both pools have ``--pool-size`` connections and no overflow, so both drivers queue for
the same number of server backends. It prints one table: medians over the repetitions
of throughput (calls/s) and of each repetition's median and p99 call latency (from the
call's start, queueing for a connection included), with the async/threads ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import MemoryEntry, RAGContext
from tnsrag_db.embeddings import HashingEmbedding

CONTEXT = RAGContext(10)


def make_queries(entries: list[MemoryEntry], m: int, seed: int = 7) -> list[str]:
    """``m`` queries of 2-3 words drawn from random entries (frequent words stay frequent)."""
    rng = random.Random(seed)
    queries = []
    for _ in range(m):
        words = rng.choice(entries).content.split()
        queries.append(" ".join(rng.sample(words, rng.randint(2, 3))))
    return queries


def shares(queries: Sequence[str], workers: int) -> list[list[str]]:
    return [list(queries[i::workers]) for i in range(workers)]


def run_async(strategy: Any, queries: Sequence[str], workers: int) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def worker(mine: list[str]) -> None:
        for q in mine:
            started = time.perf_counter()
            await strategy.aretrieve(q, CONTEXT)
            latencies.append(time.perf_counter() - started)

    async def main() -> float:
        await strategy.aretrieve(queries[0], CONTEXT)  # this loop's pool opens outside the timing
        started = time.perf_counter()
        await asyncio.gather(*(worker(m) for m in shares(queries, workers)))
        return time.perf_counter() - started

    wall = asyncio.run(main())
    return len(queries) / wall, latencies


def run_threads(strategy: Any, queries: Sequence[str], workers: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(workers + 1)

    def worker(mine: list[str]) -> None:
        start.wait()
        for q in mine:
            began = time.perf_counter()
            strategy.retrieve(q, CONTEXT)
            took = time.perf_counter() - began
            with lock:
                latencies.append(took)

    threads = [threading.Thread(target=worker, args=(m,)) for m in shares(queries, workers)]
    for t in threads:
        t.start()
    start.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return len(queries) / (time.perf_counter() - started), latencies


def ms(values: Sequence[float], q: float) -> float:
    return float(np.quantile(np.array(values), q) * 1000)


def run(store: Store, args: argparse.Namespace) -> None:
    corpus = generate_corpus(args.n, dim=64, id_prefix="a")
    if store.count() != args.n:
        store.clear()
        for i in range(0, args.n, 5000):
            store.add_all(corpus.entries[i:i + 5000])
    strategy = build_strategy(args.strategy, store, embedding=HashingEmbedding())
    if not callable(getattr(strategy, "aretrieve", None)):
        raise SystemExit(f"strategy {args.strategy!r} has no aretrieve on this branch")
    queries = make_queries(corpus.entries, args.calls)
    rows: dict[str, list[tuple[float, float, float]]] = {"async": [], "threads": []}
    for rep in range(args.repeats):
        order = ("async", "threads") if rep % 2 == 0 else ("threads", "async")
        for mode in order:
            fn = run_async if mode == "async" else run_threads
            throughput, latencies = fn(strategy, queries, args.concurrency)
            rows[mode].append((throughput, ms(latencies, 0.5), ms(latencies, 0.99)))
            print(f"  rep {rep + 1} {mode:7s}: {throughput:7.0f} calls/s, median {ms(latencies, 0.5):6.1f} ms, "
                  f"p99 {ms(latencies, 0.99):6.1f} ms", flush=True)
    med = {mode: [statistics.median(r[i] for r in values) for i in range(3)] for mode, values in rows.items()}
    print()
    print(f"{args.strategy}: {args.n} entries, {args.concurrency} concurrent callers, {args.calls} calls per "
          f"repetition, pool {args.pool_size}, medians of {args.repeats} repetitions")
    print("| driver  | calls/s | median ms | p99 ms |")
    print("|---------|--------:|----------:|-------:|")
    for mode in ("async", "threads"):
        t, p50, p99 = med[mode]
        print(f"| {mode:7s} | {t:7.0f} | {p50:9.1f} | {p99:6.1f} |")
    a, s = med["async"], med["threads"]
    print(f"| ratio   | {a[0] / s[0]:6.2f}x | {a[1] / s[1]:8.2f}x | {a[2] / s[2]:5.2f}x |  (async / threads)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--calls", type=int, default=1280, help="calls per repetition (shared by the callers)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pool-size", type=int, default=16)
    parser.add_argument("--strategy", default="keyword")
    args = parser.parse_args()
    with database_url(args.url) as url:
        store = connect(url, corpus=f"bench_async_{args.n}", auto_migrate=True, pool_size=args.pool_size,
                        max_overflow=0)
        try:
            run(store, args)
        finally:
            store.close()


if __name__ == "__main__":
    main()
