"""What following only the edges valid at the read's instant costs a graph walk.

The graph of ``bench.bench_graph`` (100,000 entries, 999,550 edges, 50 hubs), vacuumed and
analysed, walked from 10 ordinary or 10 hub seeds at depth 2 and 3 (default budget, top
10). Each walk runs this release's statement and the same statement as the release
before edge validity ran it (one plain read of a node's heaviest edges: the gate on the
corpus's bounded edges and the per-edge test removed), alternating, in the same run: the
ratio of their medians is what validity costs. Two states of the same edges:
``none`` (no edge states a validity, as after the upgrade) and ``stated`` (every edge
valid from 2020 on, a tenth until a year ahead: all valid now, so both statements walk the
same edges).

Usage::

    python -m bench.bench_edge_validity [--url URL] [--runs 40] [--reuse]

With no ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The data is loaded into the corpus ``bench_graph`` (replaced).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from bench._common import database_url
from bench.bench_graph import CORPUS, HUB_DEGREE, N_ENTRIES, N_HUBS, ORDINARY_DEGREE, SEEDS_PER_QUERY, load, node_id
from tnsrag_db._db.statement import Statement, one
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._store.validity import edge_valid, edges_bounded
from tnsrag_db._strategies.graph import GraphRAGStrategy
from tnsrag_db._types import RAGContext

_STATES = {
    "none": "UPDATE edges SET valid_from = NULL, valid_until = NULL WHERE corpus = :c",
    "stated": ("UPDATE edges SET valid_from = '2020-01-01T00:00:00Z', valid_until = CASE WHEN hashtext(src || dst) % 10 = 0 "
               "THEN now() + interval '1 year' END WHERE corpus = :c"),
}


def _vacuum(store: Store) -> None:
    with store.pool.connect(autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) edges")


def run(store: Store, runs: int, reuse: bool) -> None:
    gs = GraphStore(store)
    total = N_HUBS * HUB_DEGREE + (N_ENTRIES - N_HUBS) * ORDINARY_DEGREE
    if reuse and gs.count() == total:
        with store.session.transaction() as conn:
            hubs = [int(h[1:]) for h in conn.execute(
                "SELECT src FROM edges WHERE corpus = :c GROUP BY src HAVING count(*) > 100 ORDER BY src",
                {"c": store.corpus}).scalars()]
    else:
        hubs, _ = load(store)
    ordinary = sorted(set(range(N_ENTRIES)) - set(hubs))
    rng = np.random.default_rng(11)
    ctx = RAGContext(max_results=10)
    condition, gate = edge_valid("ed"), edges_bounded(":c")
    print(f"{'state':>7} {'depth':>5} {'seeds':>8} | {'with ms':>8} {'without ms':>10} {'ratio':>6}")
    for state, update in _STATES.items():
        with store.session.transaction() as conn:
            conn.execute(update, {"c": store.corpus})
        _vacuum(store)
        for depth in (2, 3):
            strategy = GraphRAGStrategy("bench", gs, None, depth, GraphRAGStrategy.DEFAULT_DEPTH_DECAY,
                                        GraphRAGStrategy.DEFAULT_MAX_VISITED_NODES)
            for kind, pool in (("ordinary", ordinary), ("hub", hubs)):
                seeds = [{node_id(int(p)): float(SEEDS_PER_QUERY - k)
                          for k, p in enumerate(rng.choice(pool, size=SEEDS_PER_QUERY, replace=False))}
                         for _ in range(runs)]
                times: dict[bool, list[float]] = {True: [], False: []}
                for n, s in enumerate(seeds * 2):  # the first round warms the cache
                    statement = strategy._statement(s, ctx)
                    unbounded, tested = f"AND NOT {gate}", f"AND {gate} AND {condition}"
                    assert unbounded in statement.sql and tested in statement.sql
                    # The first branch as the plain read it was, the second never run.
                    bare = Statement(statement.sql.replace(unbounded, "").replace(tested, "AND FALSE"),
                                     statement.params, statement.columns)
                    for with_condition in ((True, False) if n % 2 else (False, True)):
                        t = time.perf_counter()
                        store.run(one(statement if with_condition else bare))
                        if n >= runs:
                            times[with_condition].append((time.perf_counter() - t) * 1000)
                w, wo = statistics.median(times[True]), statistics.median(times[False])
                print(f"{state:>7} {depth:>5} {kind:>8} | {w:8.2f} {wo:10.2f} {w / wo:6.3f}")
    print(f"{runs} walks each, medians; load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--reuse", action="store_true", help="reuse a loaded bench_graph corpus")
    args = parser.parse_args()
    with database_url(args.url) as url, \
            connect(url, corpus=CORPUS, auto_migrate=True, pool_size=1, max_overflow=0) as store:
        run(store, args.runs, args.reuse)


if __name__ == "__main__":
    main()
