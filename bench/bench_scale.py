"""How cost grows with the corpus: 10k, 100k and 1M entries, one table and a log-log plot.

Usage::

    python -m bench.bench_scale [--url URL] [--sizes 10000,100000,1000000] [--dim 384]
                                [--queries 100] [--plot bench_scale.png] [--reuse]

Each size gets its own schema (``bench_scale_<n>``, migrated by the script), so the
database size on disk is that schema's tables and indexes alone. The corpus is
``bench_vector``'s generator (:func:`bench._corpus.generate_corpus`): ~40-word texts,
384-d clustered unit vectors, tiers 70/20/9/1 %, a ``group`` key at 1 % / 0.1 %, plus
3 random out-edges per entry for the graph walk. For each size it prints medians and
p99 of:

* BM25 (``KeywordRAGStrategy``) on 2-3 words of a random entry;
* vector top-10 (``VectorRAGStrategy``), recall@10 against exact search in numpy;
* filtered vector top-10 at 9 % (``tier=WORKING``) and 1 % (``group=g1pct``), recall@10
  against exact filtered search and whether every query returned min(k, matches) rows;
* hybrid (``HybridRAGStrategy``) on the BM25 texts;
* a graph walk of depth 2 from 10 seeds (``GraphRAGStrategy.traverse``);
* bulk ingest rows/s (``VectorMemoryStore.add_all`` with precomputed vectors, batches of
  100k, then the HNSW build; both phases timed) and the schema's size on disk.

Then it checks the 1M targets against the 100k figures of the same run (BM25 median
≤ 3x, vector median ≤ 1.5x with recall@10 ≥ 0.95, filtered 1 % and hybrid medians ≤ 3x,
filtered 1 % at 100k ≤ 10 ms, filtered rows always min(k, matches) at recall ≥ 0.99,
and with a smaller size in the run, ingest rows/s at the largest ≥ 0.7x the smallest's)
and writes the plot (matplotlib, the ``bench`` extra). A target missed is printed with the
plan (``EXPLAIN (ANALYZE, BUFFERS)``) of the operation's real statement. Without ``--url`` (or
``TNSRAG_DATABASE_URL``) an embedded server in a temporary directory is used, its memory
sized for the machine as the default server's is.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import psycopg

from bench._common import database_url
from bench._corpus import GROUP_1PCT, Corpus, generate_corpus
from bench.bench_vector import Lookup, exact_top, ms
from tnsrag_db._db.runner import add_statement_listener, remove_statement_listener
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.graph import GraphRAGStrategy
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryTier, RAGContext

K = 10
BATCH = 100_000
OUT_EDGES = 3
CORPUS = "scale"


@dataclass
class SizeResult:
    """The figures of one corpus size: operation -> per-query seconds, plus scalars, and the
    plan of each operation's first query (printed for a missed target)."""

    n: int
    plans: dict[str, list[str]] = field(default_factory=dict)
    times: dict[str, list[float]] = field(default_factory=dict)
    recall: dict[str, float] = field(default_factory=dict)
    full_rows: dict[str, bool] = field(default_factory=dict)
    ingest_rows_per_s: float = 0.0
    write_s: float = 0.0
    index_s: float = 0.0
    size_mb: float = 0.0
    tables_mb: dict[str, float] = field(default_factory=dict)


def timed_each(fn: Callable[[int], object], count: int) -> tuple[list[float], list[object]]:
    """Call ``fn(i)`` for i < count; per-call seconds and results (after 5 warm-up calls)."""
    for i in range(min(5, count)):
        fn(i)
    out, times = [], []
    for i in range(count):
        t = time.perf_counter()
        out.append(fn(i))
        times.append(time.perf_counter() - t)
    return times, out


def load(store: Store, corpus: Corpus, lookup: Lookup, result: SizeResult) -> None:
    """Bulk-load entries with their vectors (no automatic index build), then build HNSW, then edges."""
    writer = VectorMemoryStore(store, lookup, name="scale", index_threshold=None)
    n = len(corpus.entries)
    t = time.perf_counter()
    for start in range(0, n, BATCH):
        writer.add_all(corpus.entries[start:start + BATCH], embeddings=corpus.embeddings[start:start + BATCH])
        print(f"  wrote {min(n, start + BATCH):,}/{n:,} entries ({time.perf_counter() - t:.0f} s)", flush=True)
    result.write_s = time.perf_counter() - t
    t = time.perf_counter()
    writer.build_index()
    result.index_s = time.perf_counter() - t
    result.ingest_rows_per_s = n / (result.write_s + result.index_s)
    rng = np.random.default_rng(7)
    graph = GraphStore(store)
    ids = [e.id for e in corpus.entries]
    for start in range(0, n, BATCH):
        stop = min(n, start + BATCH)
        dst = rng.integers(0, n, size=(stop - start, OUT_EDGES))
        w = rng.random((stop - start, OUT_EDGES))
        graph.add_edges(Edge(ids[start + i], ids[int(d)], "related", float(w[i, j]))
                        for i, row in enumerate(dst) for j, d in enumerate(row) if int(d) != start + i)
    with store.session.autocommit() as conn:
        conn.execute("VACUUM (ANALYZE)")


def table_sizes_mb(store: Store) -> dict[str, float]:
    """Each table of the store's schema with its indexes and TOAST, in MB, largest first."""
    with store.session.transaction() as conn:
        rows = conn.execute((
            "SELECT c.relname, pg_total_relation_size(c.oid) AS size FROM pg_class c "
            "JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = :s AND c.relkind IN ('r', 'm') "
            "ORDER BY size DESC"), {"s": store.schema}).all()
    return {str(r.relname): float(r.size) / 2**20 for r in rows}


def measure(store: Store, corpus: Corpus, queries: int, seed: int, result: SizeResult) -> None:
    n = len(corpus.entries)
    qv = corpus.query_vectors(queries, seed=seed)
    rng = np.random.default_rng(seed + 1)
    texts: list[str] = []
    lookup = Lookup(qv, {})
    for i in range(queries):
        words = corpus.entries[int(rng.integers(0, n))].content.rstrip(".").lower().split()
        text = " ".join(rng.choice(words, size=int(rng.integers(2, 4)), replace=False).tolist())
        texts.append(text)
        lookup.extra[text] = qv[i]
    vectors = VectorMemoryStore(store, lookup, name="scale")
    keyword = KeywordRAGStrategy(BM25Index(store))
    vector = VectorRAGStrategy(vectors)
    hybrid = HybridRAGStrategy(BM25Index(store), vectors)
    ids = [e.id for e in corpus.entries]
    ctx = RAGContext(max_results=K)

    result.times["bm25"], _ = timed_each(lambda i: keyword.retrieve(texts[i], ctx), queries)
    result.plans["bm25"] = explain_last(store, lambda: keyword.retrieve(texts[0], ctx))
    result.times["vector"], got = timed_each(lambda i: vector.retrieve(f"q:{i}", ctx), queries)
    result.plans["vector"] = explain_last(store, lambda: vector.retrieve("q:0", ctx))
    result.recall["vector"] = float(np.mean([
        len({d.metadata["entryId"] for d in docs} & set(exact_top(corpus.embeddings, ids, qv[i], K))) / K
        for i, docs in enumerate(got)]))  # type: ignore[attr-defined]
    for label, filters, keep in (
            ("filtered 9%", {"tier": MemoryTier.WORKING.name},
             np.array([e.tier is MemoryTier.WORKING for e in corpus.entries])),
            ("filtered 1%", {"group": GROUP_1PCT},
             np.array([e.metadata.get("group") == GROUP_1PCT for e in corpus.entries]))):
        fctx = RAGContext(max_results=K, metadata_filters=filters)
        result.times[label], got = timed_each(lambda i, c=fctx: vector.retrieve(f"q:{i}", c), queries)
        sub_ids = [ids[j] for j in np.flatnonzero(keep)]
        sub_emb = corpus.embeddings[keep]
        want = min(K, len(sub_ids))
        recalls = []
        full = True
        for i, docs in enumerate(got):
            assert isinstance(docs, list)
            exact = exact_top(sub_emb, sub_ids, qv[i], K)
            recalls.append(len({d.metadata["entryId"] for d in docs} & set(exact)) / max(1, len(exact)))
            full = full and len(docs) == want
        result.recall[label] = float(np.mean(recalls))
        result.full_rows[label] = full
        result.plans[label] = explain_last(store, lambda c=fctx: vector.retrieve("q:0", c))
    result.times["hybrid"], _ = timed_each(lambda i: hybrid.retrieve(texts[i], ctx), queries)
    result.plans["hybrid"] = explain_last(store, lambda: hybrid.retrieve(texts[0], ctx))
    graph = GraphRAGStrategy("scale", GraphStore(store), None, 2, GraphRAGStrategy.DEFAULT_DEPTH_DECAY,
                             GraphRAGStrategy.DEFAULT_MAX_VISITED_NODES)
    seeds = [{ids[int(j)]: float(10 - r) for r, j in enumerate(rng.choice(n, size=10, replace=False))}
             for _ in range(queries)]
    result.times["graph depth 2"], _ = timed_each(lambda i: graph.traverse(seeds[i], ctx), queries)
    result.tables_mb = table_sizes_mb(store)
    result.size_mb = sum(result.tables_mb.values())


def explain_last(store: Store, run: Callable[[], object]) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the last read statement ``run()`` sends, with its
    parameters (as the plan runner sent them: ``$n`` text and positional values)."""
    sent: list[tuple[str, Sequence[object]]] = []

    def capture(text: str, values: Sequence[object]) -> None:
        sent.append((text, values))

    add_statement_listener(capture)
    try:
        run()
    finally:
        remove_statement_listener(capture)
    text, values = next((t, v) for t, v in reversed(sent) if t.lstrip().upper().startswith(("WITH", "SELECT")))
    raw = store.pool.raw_connection()
    try:
        with psycopg.RawCursor(raw.driver_connection) as cursor:  # type: ignore[arg-type]
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {text}", values)
            lines = [row[0] for row in cursor.fetchall()]
        raw.driver_connection.rollback()  # type: ignore[union-attr]
        return lines
    finally:
        raw.close()


def report(results: Sequence[SizeResult]) -> list[str]:
    """Print the table; return the targets missed at the largest size against 100k."""
    ops = list(results[0].times)
    head = ["entries", *[f"{op} med/p99 ms" for op in ops], "recall@10 vec / 9% / 1%", "rows ok",
            "ingest rows/s (write+index s)", "size MB"]
    rows = []
    for r in results:
        rows.append([f"{r.n:,}", *[f"{ms(r.times[op]):.2f} / {ms(r.times[op], .99):.2f}" for op in ops],
                     " / ".join(f"{r.recall[x]:.3f}" for x in ("vector", "filtered 9%", "filtered 1%")),
                     str(all(r.full_rows.values())), f"{r.ingest_rows_per_s:,.0f} ({r.write_s:.0f}+{r.index_s:.0f})",
                     f"{r.size_mb:,.0f}"])
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    print()
    for row in [head, ["-" * w for w in widths], *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
    for r in results:
        shown = ", ".join(f"{t} {mb:,.0f}" for t, mb in r.tables_mb.items() if mb >= 0.5)
        print(f"{r.n:,} entries, MB by table: {shown}")
    missed: list[str] = []
    by_n = {r.n: r for r in results}
    big, base = max(by_n), 100_000
    if big > base and base in by_n:
        b, r = by_n[base], by_n[big]
        checks: list[tuple[str, bool, list[str]]] = [
            (f"BM25 median {ms(r.times['bm25']):.2f} ms <= 3x {ms(b.times['bm25']):.2f} ms",
             ms(r.times["bm25"]) <= 3 * ms(b.times["bm25"]), r.plans["bm25"]),
            (f"vector median {ms(r.times['vector']):.2f} ms <= 1.5x {ms(b.times['vector']):.2f} ms",
             ms(r.times["vector"]) <= 1.5 * ms(b.times["vector"]), r.plans["vector"]),
            (f"vector recall@10 {r.recall['vector']:.3f} >= 0.95", r.recall["vector"] >= 0.95, r.plans["vector"]),
            (f"filtered 1% median {ms(r.times['filtered 1%']):.2f} ms <= 3x {ms(b.times['filtered 1%']):.2f} ms",
             ms(r.times["filtered 1%"]) <= 3 * ms(b.times["filtered 1%"]), r.plans["filtered 1%"]),
            (f"filtered 1% median at {base:,} {ms(b.times['filtered 1%']):.2f} ms <= 10 ms",
             ms(b.times["filtered 1%"]) <= 10, b.plans["filtered 1%"]),
            (f"hybrid median {ms(r.times['hybrid']):.2f} ms <= 3x {ms(b.times['hybrid']):.2f} ms",
             ms(r.times["hybrid"]) <= 3 * ms(b.times["hybrid"]), r.plans["hybrid"]),
            ("filtered rows == min(k, matches) at every query", all(r.full_rows.values()),
             r.plans["filtered 1%"] + r.plans["filtered 9%"]),
            (f"filtered recall {min(r.recall['filtered 9%'], r.recall['filtered 1%']):.3f} >= 0.99",
             min(r.recall["filtered 9%"], r.recall["filtered 1%"]) >= 0.99,
             r.plans["filtered 1%"] + r.plans["filtered 9%"]),
        ]
        small = min(by_n)
        if small < base and r.ingest_rows_per_s and by_n[small].ingest_rows_per_s:  # both loaded in this run
            ratio = r.ingest_rows_per_s / by_n[small].ingest_rows_per_s
            checks.append((f"ingest {r.ingest_rows_per_s:,.0f} rows/s >= 0.7x {by_n[small].ingest_rows_per_s:,.0f} "
                           f"rows/s at {small:,} ({ratio:.2f}x)", ratio >= 0.7, []))
        print(f"\ntargets at {big:,} against {base:,} (same run):")
        for text, ok, plan_lines in checks:
            print(f"  {'met   ' if ok else 'MISSED'} {text}")
            if not ok:
                missed.append(text)
                print("\n".join(f"      {line}" for line in plan_lines))
    return missed


def plot(results: Sequence[SizeResult], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = [r.n for r in results]
    for op in results[0].times:
        ax.plot(sizes, [ms(r.times[op]) for r in results], marker="o", label=op)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("entries")
    ax.set_ylabel("median latency (ms)")
    ax.set_title("tnsrag_db: query cost by corpus size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nplot written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    ap.add_argument("--sizes", default="10000,100000,1000000",
                    help="comma-separated corpus sizes (default 10000,100000,1000000)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100, help="queries per operation and size")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--plot", default="bench_scale.png", help="PNG path ('' for no plot)")
    ap.add_argument("--reuse", action="store_true", help="reuse a size's schema when it holds the whole corpus")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    results = []
    with database_url(args.url) as url:
        for n in sizes:
            print(f"{n:,} entries: generating", flush=True)
            corpus = generate_corpus(n, dim=args.dim, seed=args.seed)
            result = SizeResult(n)
            with connect(url, corpus=CORPUS, schema=f"bench_scale_{n}", auto_migrate=True) as store:
                if not (args.reuse and store.count() == n):
                    store.clear()
                    load(store, corpus, Lookup(corpus.embeddings[:0], {}), result)
                print(f"{n:,} entries: measuring", flush=True)
                measure(store, corpus, args.queries, args.seed + 1, result)
            results.append(result)
            del corpus
    missed = report(results)
    if args.plot:
        plot(results, args.plot)
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    if missed:
        print(f"{len(missed)} target(s) missed (plans above)")


if __name__ == "__main__":
    main()
