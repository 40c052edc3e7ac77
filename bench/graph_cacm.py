"""Does hybrid's graph stream earn its place on real edges? CACM's citation links, measured.

CACM (:mod:`bench.cacm`: 3,204 abstracts, 52 judged queries, 6,165 citation links as
12,330 edges, one each way) in one corpus with the shipped embedding model. Rows:

* ``keyword``: BM25 alone;
* ``hybrid, no graph``: BM25 + vector, the two-stream hybrid (what hybrid by name ranks
  on a corpus without edges): the baseline of the differences and p-values;
* ``hybrid + graph, weight W``: the same plus the graph stream as hybrid by name builds
  it (BM25 seeds, depth 2, decay 0.85, the reached entries only), fused with weights
  (1, 1, W); with ``--depths`` also walks of other depths, with ``--hybrid-seeds`` also
  a graph stream seeded by the two-stream hybrid instead of BM25;
* ``hybrid by name``: ``build_strategy("hybrid", store)``, as the CLI runs it;
* ``graph by name``: the graph strategy alone (seeds and the entries they reach).

nDCG@10, recall@100 and MRR@10 with 95 % bootstrap intervals over the queries, and a
paired randomisation test against the two-stream hybrid
(:func:`tnsrag_db.evaluation.evaluate_strategies`).

Usage::

    python -m bench.graph_cacm [--url URL] [--data DIR] [--weights 0.25 0.5 1 2] [--depths 2] [--hybrid-seeds]
                               [--reuse] [--json]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) the embedded server of ``connect()`` is
used, with the corpus ``bench_graph_cacm`` (replaced unless ``--reuse`` finds it whole).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench.cacm import DEFAULT_DATA, load_cacm
from bench.cranfield import shipped_model
from tnsrag_db import evaluation
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._strategies.compose import GRAPH_PROVIDER_NAME
from tnsrag_db._strategies.graph import GraphRAGStrategy
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.registry import build_strategy

CORPUS = "bench_graph_cacm"
BASELINE = "hybrid, no graph"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory holding the CACM files")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0],
                        help="graph stream weights to measure (keyword and vector: 1)")
    parser.add_argument("--depths", type=int, nargs="+", default=[2], help="walk depths to measure (default 2)")
    parser.add_argument("--hybrid-seeds", action="store_true",
                        help="also seed the graph stream with the two-stream hybrid's results")
    parser.add_argument("--reuse", action="store_true", help="reuse the corpus when it holds every entry and edge")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples and test permutations")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    entries, edges, queries, qrels = load_cacm(args.data)
    model, why = shipped_model()
    if model is None:
        raise SystemExit(f"this benchmark needs the shipped model: {why}")
    with connect(args.url, corpus=CORPUS, auto_migrate=True if args.url else None) as store:
        graph = GraphStore(store)
        if not (args.reuse and store.count() == len(entries) and graph.count() == len(edges)):
            store.clear()
            graph.add_with_edges(entries, edges)
            with store.session.autocommit() as conn:
                conn.execute("VACUUM ANALYZE bm25_postings")
                conn.execute("ANALYZE edges")
        vectors = VectorMemoryStore(store, model)
        vectors.add_all(entries)  # embeds only what lacks a vector in this space
        keywords = BM25Index(store)
        rows: dict[str, RAGStrategy] = {
            "keyword": KeywordRAGStrategy(keywords),
            BASELINE: HybridRAGStrategy(keywords, vectors),
        }
        two_streams = rows[BASELINE]
        for depth in args.depths:
            for seeds in ("BM25", "hybrid") if args.hybrid_seeds else ("BM25",):
                label = ", ".join(([] if depth == 2 else [f"depth {depth}"])
                                  + ([] if seeds == "BM25" else ["hybrid seeds"]))
                for weight in args.weights:
                    walk = GraphRAGStrategy(
                        GRAPH_PROVIDER_NAME, graph, None, depth, GraphRAGStrategy.DEFAULT_DEPTH_DECAY,
                        GraphRAGStrategy.DEFAULT_MAX_VISITED_NODES, include_seeds=False,
                        seed_strategy=two_streams if seeds == "hybrid" else None)
                    rows[f"hybrid + graph{f' ({label})' if label else ''}, weight {weight:g}"] = HybridRAGStrategy(
                        keywords, vectors, walk, weights=(1.0, 1.0, weight))
        rows["hybrid by name"] = build_strategy("hybrid", store)
        rows["graph by name"] = build_strategy("graph", store)
        report = evaluation.evaluate_strategies(rows, queries, qrels, baseline=BASELINE,
                                                resamples=args.resamples, permutations=args.resamples)
        if args.json:
            print(json.dumps(report.to_dict(per_query=False), indent=2))
        else:
            print(f"CACM: {store.count()} entries, {graph.count()} edges, {report.queries} judged queries; "
                  f"intervals: {report.confidence:.0%} bootstrap over queries, p: paired randomisation test "
                  f"against {BASELINE!r}")
            print(report.table())


if __name__ == "__main__":
    main()
