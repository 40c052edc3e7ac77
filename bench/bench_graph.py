"""Graph traversal benchmark: bounded recursive CTE vs a naive one, on 100k entries and 1M edges.

The graph (seeded, reproducible): 100,000 entries; 50 hubs with out-degree 2,000
(100,000 edges); each of the other 99,950 entries has 9 out-edges (899,550 edges; 999,550 in all) to random
entries, 5 % of them into a hub. Weights are uniform in [0, 1).

For depth 2 and 3, from 10 ordinary seeds and from 10 hub seeds, with the default
budget of 1,024 visited nodes and the default fan-out cap, it times
``GraphRAGStrategy.traverse`` (explicit seeds: traversal alone, one round trip,
top-10 results), and a naive recursive CTE (``UNION ALL`` + ``CYCLE``, no caps,
best score per node, top-10) as the baseline, which is cut off by a statement
timeout. It then prints the largest row count any plan node produced
(``EXPLAIN ANALYZE`` actual rows × loops) for both.

Usage::

    python -m bench.bench_graph [--url URL] [--runs 25] [--timeout-ms 5000]

With no ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The data is loaded into the corpus ``bench_graph`` (replaced).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench._common import database_url
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.graph import GraphRAGStrategy
from tnsrag_db._types import RAGContext

N_ENTRIES = 100_000
N_HUBS = 50
HUB_DEGREE = 2_000
ORDINARY_DEGREE = 9
HUB_TARGET_SHARE = 0.05
SEEDS_PER_QUERY = 10
CORPUS = "bench_graph"

_NAIVE_SQL = """
WITH RECURSIVE w (id, score, depth) AS (
  SELECT x.id, x.score, 0 FROM unnest(CAST(:ids AS text[]), CAST(:scores AS float8[])) AS x(id, score)
  UNION ALL
  SELECT e.dst, w.score * CAST(:decay AS float8), w.depth + 1
  FROM w JOIN edges e ON e.corpus = :c AND e.src = w.id
  WHERE w.depth < :depth
) CYCLE id SET is_cycle USING route
SELECT id, max(score) AS score FROM w GROUP BY id ORDER BY score DESC, id LIMIT 10
"""


def node_id(i: int) -> str:
    return f"n{i:06d}"


def load(store: Store, seed: int = 7) -> tuple[list[int], list[int]]:
    """Load the graph; returns (hub indexes, ordinary indexes)."""
    rng = np.random.default_rng(seed)
    hubs = sorted(rng.choice(N_ENTRIES, size=N_HUBS, replace=False).tolist())
    hub_set = set(hubs)
    ordinary = [i for i in range(N_ENTRIES) if i not in hub_set]
    started = time.perf_counter()
    store.drop_corpus()
    with store.session.transaction() as conn:
        store.writer.corpus.text_config(conn)  # the corpus row, and its write lock
        raw = conn.driver
        assert raw is not None
        with raw.cursor() as cur, cur.copy(
                "COPY entries (corpus, id, content, tier, source, content_hash) FROM STDIN") as copy:
            for i in range(N_ENTRIES):
                # Entries are written directly (no BM25 postings): traversal takes explicit seeds.
                copy.write_row((store.corpus, node_id(i), f"entry {i}", "SEMANTIC", "kb", b"\x00"))
    t_entries = time.perf_counter() - started

    edges: list[Edge] = []
    for h in hubs:
        targets = rng.choice(N_ENTRIES, size=HUB_DEGREE + 1, replace=False)
        targets = [t for t in targets.tolist() if t != h][:HUB_DEGREE]
        weights = rng.random(HUB_DEGREE)
        edges.extend(Edge(node_id(h), node_id(t), weight=float(w)) for t, w in zip(targets, weights))
    hub_arr = np.array(hubs)
    for i in ordinary:
        picks = rng.integers(0, N_ENTRIES, size=ORDINARY_DEGREE + 3)
        to_hub = rng.random(ORDINARY_DEGREE + 3) < HUB_TARGET_SHARE
        picks = np.where(to_hub, hub_arr[rng.integers(0, N_HUBS, size=picks.size)], picks)
        chosen = list(dict.fromkeys(p for p in picks.tolist() if p != i))[:ORDINARY_DEGREE]
        weights = rng.random(len(chosen))
        edges.extend(Edge(node_id(i), node_id(t), weight=float(w)) for t, w in zip(chosen, weights))
    t_gen = time.perf_counter()
    counts = GraphStore(store).add_edges(edges)
    t_edges = time.perf_counter() - t_gen
    with store.session.transaction() as conn:
        conn.execute("ANALYZE entries")
        conn.execute("ANALYZE edges")
    print(f"loaded {N_ENTRIES:,} entries in {t_entries:.1f} s (COPY); {counts.total:,} edges in {t_edges:.1f} s "
          f"via GraphStore.add_edges ({counts.total / t_edges:,.0f} edges/s)")
    return hubs, ordinary


def backend_cpu_ms(pid: int) -> float | None:
    """CPU time (user + system) the server process ``pid`` has used, when it runs on this machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def timed(fn: Callable[[], Any], runs: int, pid: int) -> tuple[float, float | None]:
    """Median wall-clock ms of ``fn`` and the server's mean CPU ms per call (None if not measurable)."""
    fn()  # warm-up
    times = []
    cpu0 = backend_cpu_ms(pid)
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    cpu1 = backend_cpu_ms(pid)
    cpu = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / runs
    return statistics.median(times), cpu


def naive(store: Store, seeds: Mapping[str, float], depth: int, timeout_ms: int, *,
          explain: bool = False) -> Any:
    params = {"c": store.corpus, "ids": list(seeds), "scores": list(seeds.values()), "decay": 0.85, "depth": depth}
    with store.pool.connect() as conn:
        conn.execute(f"SET statement_timeout = {int(timeout_ms)}")
        try:
            if explain:
                plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _NAIVE_SQL, params).scalar_one()
                return max_rows(plan[0]["Plan"])
            return conn.execute(_NAIVE_SQL, params).all()
        except psycopg.OperationalError as exc:
            if "statement timeout" not in str(exc):
                raise
            return None
        finally:
            conn.rollback()


def max_rows(node: Mapping[str, Any]) -> int:
    own = round(float(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 0)))
    return max([own, *(max_rows(c) for c in node.get("Plans", ()))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--timeout-ms", type=int, default=5000, help="statement timeout for the naive baseline")
    parser.add_argument("--reuse", action="store_true", help="reuse a loaded bench_graph corpus")
    args = parser.parse_args()

    with database_url(args.url) as url:
        # One pooled connection: every query runs in the same server process, whose CPU time is measured.
        with connect(url, corpus=CORPUS, auto_migrate=True, pool_size=1, max_overflow=0) as store:
            run(store, args)


def run(store: Store, args: argparse.Namespace) -> None:
    gs = GraphStore(store)
    rng = np.random.default_rng(11)
    if args.reuse and gs.count() == N_HUBS * HUB_DEGREE + (N_ENTRIES - N_HUBS) * ORDINARY_DEGREE:
        with store.session.transaction() as conn:
            hub_ids = list(conn.execute(
                "SELECT src FROM edges WHERE corpus = :c GROUP BY src HAVING count(*) > 100 ORDER BY src",
                {"c": store.corpus}).scalars())
        hubs = [int(h[1:]) for h in hub_ids]
        ordinary = sorted(set(range(N_ENTRIES)) - set(hubs))
    else:
        hubs, ordinary = load(store)

    def seed_sets(pool: list[int], n: int) -> list[dict[str, float]]:
        out = []
        for _ in range(n):
            picks = rng.choice(pool, size=min(SEEDS_PER_QUERY, len(pool)), replace=False)
            out.append({node_id(int(p)): float(SEEDS_PER_QUERY - k) for k, p in enumerate(picks)})
        return out

    with store.session.transaction() as conn:
        pid = int(conn.execute("SELECT pg_backend_pid()").scalar_one())
    ctx = RAGContext(max_results=10)
    budget = GraphRAGStrategy.DEFAULT_MAX_VISITED_NODES
    rows = []
    for depth in (2, 3):
        strategy = GraphRAGStrategy("bench", gs, None, depth, GraphRAGStrategy.DEFAULT_DEPTH_DECAY, budget)
        for kind, pool in (("ordinary", ordinary), ("hub", hubs)):
            sets = seed_sets(pool, args.runs + 1)
            it = iter(sets * 2)
            t_bounded, cpu = timed(lambda: strategy.traverse(next(it), ctx), args.runs, pid)
            plan = strategy.explain_traversal(sets[0], ctx)
            bounded_rows = max(n["rows"] for n in plan)
            edge_rows = sum(n["rows"] for n in plan if "edges" in n["node"])
            visited = len(strategy.traverse(sets[0], RAGContext(max_results=budget)))
            # The naive baseline: a few runs only (it can take seconds), cut off by the timeout.
            naive_times = []
            for s in sets[:3]:
                t = time.perf_counter()
                result = naive(store, s, depth, args.timeout_ms)
                naive_times.append(None if result is None else (time.perf_counter() - t) * 1000)
            done = [x for x in naive_times if x is not None]
            t_naive = statistics.median(done) if len(done) == len(naive_times) else None
            naive_rows = naive(store, sets[0], depth, args.timeout_ms, explain=True)
            rows.append((depth, kind, t_bounded, cpu, visited, bounded_rows, edge_rows, t_naive, naive_rows))

    print()
    print(f"budget {budget} visited nodes, max fan-out {GraphRAGStrategy.DEFAULT_MAX_FAN_OUT}, "
          f"{SEEDS_PER_QUERY} seeds, top-10, {args.runs} runs; naive baseline timeout {args.timeout_ms} ms")
    header = (f"{'depth':>5} {'seeds':>8} | {'bounded ms':>10} {'server CPU ms':>13} {'visited':>7} "
              f"{'max node rows':>13} {'edge rows':>9} | {'naive ms':>10} {'naive max rows':>14} | {'speed-up':>8}")
    print(header)
    print("-" * len(header))
    for depth, kind, tb, cpu, visited, brows, erows, tn, nrows in rows:
        naive_ms = f"{tn:10.1f}" if tn is not None else f"{'>' + str(args.timeout_ms):>10}"
        naive_r = f"{nrows:14,}" if nrows is not None else f"{'(timeout)':>14}"
        ratio = f"{tn / tb:7.0f}x" if tn is not None else f"{'>' + format(args.timeout_ms / tb, '.0f') + 'x':>8}"
        cpu_s = f"{cpu:13.1f}" if cpu is not None else f"{'n/a':>13}"
        print(f"{depth:>5} {kind:>8} | {tb:10.2f} {cpu_s} {visited:>7} {brows:13,} {erows:9,} | {naive_ms} {naive_r} | "
              f"{ratio}")
    print()
    print("max node rows: the most rows any plan node produced (EXPLAIN ANALYZE actual rows x loops);")
    print(f"edge rows: edge index rows read by the whole bounded statement (bound: 3 x budget = "
          f"{3 * budget:,} per level).")
    print("server CPU ms: the database process's CPU time per query (load-independent); bounded ms: median "
          "wall-clock per query, client included.")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
