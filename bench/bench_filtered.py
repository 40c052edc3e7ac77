"""Filtered vector search on two data sets: speed, recall@10 and rows, against a same-run baseline.

Usage::

    python -m bench.bench_filtered [--url URL] [--n 100000] [--data uniform,correlated]
                                   [--queries 100] [--baseline OLD_SQL_PY] [--queries-only] [--explain]

Data sets (384-d, tiers 70/20/9/1 %, ``group`` at 1 % / 0.1 %):

* ``uniform``: ``bench_vector``'s generator (:func:`bench._corpus.generate_corpus`):
  clusters in low-dimensional subspaces, the filter independent of the vector;
* ``correlated``: :func:`bench._corpus.generate_correlated_corpus`: 50 isotropic Gaussian
  clusters whose tiers and groups follow the clusters, so that a filter selects regions
  of the space and a query's matches are often in clusters far from it (what makes an
  HNSW iterative scan miss).

Each data set is written once as corpus ``bench_filtered_<data>_<n>`` (entries with
precomputed vectors, HNSW built, ``VACUUM (ANALYZE)``); ``--queries-only`` reuses it.
Queries are drawn like the corpus (most of them therefore land in 70 % clusters). For
each filter (``tier`` at 1 %, 9 % and 70 %, ``group`` at 1 %) it prints the median and p99
of ``VectorRAGStrategy.retrieve`` (top 10), recall@10 against exact filtered search in
numpy, whether every query returned min(10, matches) rows and the path taken. With
``--baseline`` (the path of another version's ``tnsrag_db/_indexes/vector/sql.py``, e.g.
from ``git show main:tnsrag_db/_indexes/vector/sql.py > /tmp/old_sql.py``) the same
queries also run that version's statement (exact threshold 5,000, ``ef_search`` 200),
alternating query by query with this version's, both through ``Store.read``: the ratio
column is this version's median over that one. ``--explain`` prints ``EXPLAIN (ANALYZE,
BUFFERS)`` of the first query of each filter.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from bench._corpus import GROUP_1PCT, generate_corpus, generate_correlated_corpus
from bench.bench_vector import Lookup, exact_top
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext

K = 10
PROVIDER = "bench-filtered"
FILTERS: tuple[tuple[str, dict[str, str]], ...] = (
    ("1 % tier", {"tier": "PROCEDURAL"}), ("1 % group", {"group": GROUP_1PCT}),
    ("9 % tier", {"tier": "WORKING"}), ("70 % tier", {"tier": "SEMANTIC"}))


def load_old(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_old_vector_sql", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def ms(values: Sequence[float], q: float = 0.5) -> float:
    return float(np.quantile(np.array(values), q) * 1000)


def data_set(name: str, n: int, dim: int) -> tuple[list[MemoryEntry], npt.NDArray[np.float32],
                                                    Callable[[int, int], npt.NDArray[np.float32]]]:
    if name == "uniform":
        u = generate_corpus(n, dim=dim, seed=42)
        return u.entries, u.embeddings, lambda m, seed: u.query_vectors(m, seed=seed)
    c = generate_correlated_corpus(n, dim=dim, seed=7)
    return c.entries, c.embeddings, lambda m, seed: c.query_vectors(m, seed=seed)


def prepare(url: str | None, name: str, n: int, dim: int, queries_only: bool,
            entries: list[MemoryEntry], emb: npt.NDArray[np.float32], lookup: Lookup) -> tuple[Store, VectorMemoryStore]:
    store = connect(url, corpus=f"bench_filtered_{name}_{n}", auto_migrate=True)
    vectors = VectorMemoryStore(store, lookup, name=PROVIDER, index_threshold=None)
    if queries_only:
        if store.count() != n:
            raise SystemExit(f"--queries-only: corpus {store.corpus!r} does not hold {n} entries")
        return store, vectors
    store.drop_corpus()
    t = time.perf_counter()
    vectors.add_all(entries, embeddings=emb)
    t_write = time.perf_counter() - t
    t = time.perf_counter()
    vectors.build_index()
    print(f"  {name}: wrote {n} entries in {t_write:.0f} s, HNSW in {time.perf_counter() - t:.0f} s", flush=True)
    with store.session.autocommit() as conn:
        conn.execute("VACUUM (ANALYZE) entries, embeddings, entry_filter_pairs")
    return store, vectors


def explain(store: Store, sql: str, params: dict[str, Any]) -> list[str]:
    with store.session.transaction() as conn:
        return [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--data", default="uniform,correlated")
    ap.add_argument("--filters", default="", help="comma-separated labels of FILTERS to run (default all)")
    ap.add_argument("--baseline", help="path of another version's tnsrag_db/_indexes/vector/sql.py")
    ap.add_argument("--queries-only", action="store_true")
    ap.add_argument("--explain", action="store_true")
    args = ap.parse_args()
    old = load_old(args.baseline) if args.baseline else None
    table: list[tuple[str, ...]] = []
    for name in args.data.split(","):
        entries, emb, draw = data_set(name, args.n, args.dim)
        qv = draw(args.queries, 1001)
        lookup = Lookup(qv, {})
        store, vectors = prepare(args.url, name, args.n, args.dim, args.queries_only, entries, emb, lookup)
        strategy = VectorRAGStrategy(vectors)
        ids = [e.id for e in entries]
        for label, filters in FILTERS:
            if args.filters and label not in args.filters.split(","):
                continue
            ctx = RAGContext(max_results=K, min_score=-1.0, metadata_filters=filters)
            keep = np.array([ctx.matches({"tier": e.tier.name, **e.metadata}) for e in entries])
            sub_ids = [ids[j] for j in np.flatnonzero(keep)]
            sub = emb[keep]
            truth = [exact_top(sub, sub_ids, q, K) for q in qv]

            def ours(i: int) -> list[str]:
                return [str(d.metadata["entryId"]) for d in strategy.retrieve(f"q:{i}", ctx)]

            def theirs(i: int) -> list[str]:
                assert old is not None
                space = vectors._space_for_query(args.dim)  # noqa: SLF001 - the bench times the old statement
                assert space is not None
                r = old.Ranking(store.corpus, space.space_id, space.dimension, space.index_name, qv[i], K, filters,
                                -1.0, "v", 200, 5000, False)
                sql, params = old.ranking_sql(r)
                return [str(row.entry_id) for row in store.read(old.documents_sql(sql, "v"), params)]

            runs: dict[str, Callable[[int], list[str]]] = {"ours": ours}
            if old is not None:
                runs["old"] = theirs
            for run in runs.values():  # warm-up
                for i in range(min(10, args.queries)):
                    run(i)
            lat: dict[str, list[float]] = {r: [] for r in runs}
            got: dict[str, list[list[str]]] = {r: [] for r in runs}
            order = list(runs)
            for i in range(args.queries):
                for r in (order if i % 2 else order[::-1]):
                    t = time.perf_counter()
                    out = runs[r](i)
                    lat[r].append(time.perf_counter() - t)
                    got[r].append(out)
            paths: dict[str, int] = {}
            for i in range(min(args.queries, 30)):
                plan = vectors.explain_plan(lambda st: store.read(st.sql, dict(st.params)), qv[i], K,
                                            filters=filters, min_score=-1.0)
                key = plan.method + (" fell back" if plan.fallback else "")
                paths[key] = paths.get(key, 0) + 1
            for r in runs:
                recall = float(np.mean([len(set(g) & set(x)) / max(1, len(x)) for g, x in zip(got[r], truth)]))
                worst = min(len(set(g) & set(x)) / max(1, len(x)) for g, x in zip(got[r], truth))
                full = all(len(g) == min(K, len(sub_ids)) for g in got[r])
                ratio = f"{ms(lat[r]) / ms(lat['old']):.2f}x" if "old" in lat and r == "ours" else ""
                table.append((name, f"{label} ({len(sub_ids)})", r, f"{ms(lat[r]):.2f}", f"{ms(lat[r], .99):.2f}",
                              ratio, f"{recall:.3f} (min {worst:.1f})", str(full),
                              ", ".join(f"{k} {v}" for k, v in sorted(paths.items())) if r == "ours" else ""))
                print(" | ".join(table[-1]), flush=True)
            if args.explain:
                sql, params = vectors.candidates_sql(qv[0], K, filters=filters, min_score=-1.0)
                print("\n".join(explain(store, sql, params)))
        store.close()
    head = ("data", "filter (matches)", "version", "median ms", "p99 ms", "ratio", "recall@10", "rows ok",
            "path (first 30 queries)")
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    print()
    print(f"n={args.n} dim={args.dim} queries={args.queries} k={K}")
    for r in [head, tuple("-" * w for w in widths), *table]:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
