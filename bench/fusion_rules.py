"""Which rule fuses hybrid search's two streams best: measured, with one set of weights.

For every query of the by-name collections (:mod:`bench.by_name`) this reads, once, what
hybrid search fuses: every candidate either stream proposes at 100 results (pools of 400),
scored by both streams, with each stream's reference figures over its first 50 rows
(:meth:`~tnsrag_db._strategies.hybrid.HybridMemoryRetriever.candidates_statement`, the
shipped model). Each rule then ranks those candidates in Python:

* ``keyword`` / ``vector``: one stream's own list;
* ``rrf``: the SPI's Reciprocal Rank Fusion over the streams' own lists (k = 60);
* ``rrf full``: RRF over complete information (each stream's rank among all candidates);
* ``minmax`` / ``zscore``: normalised score fusion
  (:func:`~tnsrag_db._strategies.fusion.score_fusion`), as the hybrid statement computes it.

Each fusion rule runs with the keyword:vector weights 1:1, 3:2, 2:1, 5:2 and 3:1. The
rule and its weights are chosen on the development collections (Cranfield and stdlib)
and checked on the others (debian, CACM, manpages); never per collection. Per rule: nDCG@10 and recall@100 with 95 % bootstrap intervals, and against
``keyword`` the difference and a paired randomisation test
(:func:`tnsrag_db.evaluation.evaluate_runs`).

Usage::

    python -m bench.fusion_rules [--url URL] [--collection NAME ...] [--cache DIR] [--latency N]

With ``--latency N`` it instead times hybrid search through the strategy (the query
embedded each time), the default rule against RRF in alternation, over the first N
queries of each collection at ``top_k`` 5 and 100: medians and their ratio.

The candidates of each collection are cached as JSON in ``--cache`` (default
``/tmp/tnsrag_fusion_rules``): a second run only recomputes the rules.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.by_name import COLLECTIONS, embed_all, load_collection
from bench.cranfield import shipped_model
from tnsrag_db import evaluation
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.fusion import DEFAULT_RRF_K, Reference, score_fusion
from tnsrag_db._strategies.hybrid import HybridMemoryRetriever
from tnsrag_db._types import RAGContext

DEPTH = 100
WEIGHTS = ((1.0, 1.0), (3.0, 2.0), (2.0, 1.0), (5.0, 2.0), (3.0, 1.0))

#: Per query: candidate -> [(score, rank) of stream 1, of stream 2], and the two references.
Candidates = dict[str, Any]


def fetch(url: str | None, name: str) -> dict[str, Any]:
    """The candidates of every query of collection ``name`` and its judgements."""
    model, why = shipped_model()
    if model is None:
        raise SystemExit(f"this benchmark needs the shipped model: {why}")
    with connect(url, corpus=f"bench_byname_{name}", auto_migrate=True if url else None) as store:
        queries, qrels, entries = load_collection(store, name, True)
        embed_all(store, entries)
        retriever = HybridMemoryRetriever(BM25Index(store), VectorMemoryStore(store, model))
        out: dict[str, Any] = {}
        for query in queries:
            context = RAGContext(DEPTH)
            vector = retriever.vectors.embed_query(query.text)
            rows = store.read(*_sql(retriever.candidates_statement(query.text, context, vector, (1.0, 1.0))))
            scores: dict[str, list[list[float | int | None]]] = {}
            refs: list[list[float] | None] = [None, None]
            for r in rows:
                per = scores.setdefault(r.entry_id, [[None, None], [None, None]])
                per[r.stream - 1] = [None if r.score is None else float(r.score), r.rank]
                if r.hi is not None:
                    refs[r.stream - 1] = [float(r.hi), float(r.lo), float(r.mu), float(r.sd)]
            out[query.id] = {"scores": scores, "refs": refs}
        return {"candidates": out, "qrels": qrels}


def _sql(statement: Any) -> tuple[str, Mapping[str, Any]]:
    return statement.sql, statement.params


def _own(per: Mapping[str, Sequence[Sequence[Any]]], stream: int) -> list[str]:
    ranked = [(v[stream][1], k) for k, v in per.items() if v[stream][1] is not None]
    return [k for _, k in sorted(ranked)]


def rank(rule: str, data: Mapping[str, Any], weights: tuple[float, float]) -> list[str]:
    """The candidates of one query ranked by ``rule``."""
    per = data["scores"]
    if rule == "keyword":
        return _own(per, 0)
    if rule == "vector":
        return _own(per, 1)
    best = {k: min(r for r in (v[0][1], v[1][1]) if r is not None) for k, v in per.items()}
    if rule in ("rrf", "rrf full"):
        totals: dict[str, float] = {}
        for s in (0, 1):
            if rule == "rrf":
                order = _own(per, s)
            else:
                order = sorted(per, key=lambda k: (-(per[k][s][0] if per[k][s][0] is not None else -9.0), k))
            for n, k in enumerate(order, 1):
                totals[k] = totals.get(k, 0.0) + weights[s] / (DEFAULT_RRF_K + n)
        return sorted(totals, key=lambda k: (-totals[k], best[k], k))
    refs = [None if r is None else Reference(*r) for r in data["refs"]]
    fused = score_fusion({k: (v[0][0], v[1][0]) for k, v in per.items()}, refs, method=rule, weights=weights,
                         best=best)
    return [k for k, _, _ in fused]


def evaluate(name: str, data: Mapping[str, Any], resamples: int) -> evaluation.EvaluationReport:
    runs: dict[str, dict[str, list[str]]] = {}
    for rule in ("keyword", "vector"):
        runs[rule] = {q: rank(rule, c, (1.0, 1.0))[:DEPTH] for q, c in data["candidates"].items()}
    for rule in ("rrf", "rrf full", "zscore", "minmax"):
        for w in WEIGHTS:
            label = f"{rule} {w[0]:g}:{w[1]:g}"
            runs[label] = {q: rank(rule, c, w)[:DEPTH] for q, c in data["candidates"].items()}
    qrels = {q: g for q, g in data["qrels"].items() if q in data["candidates"]}
    return evaluation.evaluate_runs(runs, qrels, baseline="keyword", resamples=resamples, permutations=resamples)


def latency(url: str | None, name: str, count: int) -> None:
    """Median times of hybrid search by the default rule and by RRF, in alternation."""
    from tnsrag_db._strategies.hybrid import HybridRAGStrategy

    model, why = shipped_model()
    if model is None:
        raise SystemExit(f"this benchmark needs the shipped model: {why}")
    with connect(url, corpus=f"bench_byname_{name}", auto_migrate=True if url else None) as store:
        queries, _, _ = load_collection(store, name, True)
        keywords, vectors = BM25Index(store), VectorMemoryStore(store, model)
        rules = {"default": HybridRAGStrategy(keywords, vectors), "rrf": HybridRAGStrategy(keywords, vectors,
                                                                                           fusion="rrf")}
        for top_k in (5, 100):
            times: dict[str, list[float]] = {rule: [] for rule in rules}
            for query in queries[:count]:
                for rule, strategy in rules.items():
                    strategy.retrieve(query.text, RAGContext(top_k))  # warm: the same query's plan and cache
                    start = time.perf_counter()
                    strategy.retrieve(query.text, RAGContext(top_k))
                    times[rule].append((time.perf_counter() - start) * 1000)
            new, old = statistics.median(times["default"]), statistics.median(times["rrf"])
            print(f"{name} top_k {top_k}: default {new:.1f} ms, rrf {old:.1f} ms, ratio {new / old:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--collection", nargs="*", choices=COLLECTIONS, default=list(COLLECTIONS))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/tnsrag_fusion_rules"))
    parser.add_argument("--resamples", type=int, default=2_000)
    parser.add_argument("--latency", type=int, default=0, help="time N queries per collection instead")
    args = parser.parse_args()
    if args.latency:
        for name in args.collection:
            latency(args.url, name, args.latency)
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    for name in args.collection:
        path = args.cache / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
        else:
            data = fetch(args.url, name)
            path.write_text(json.dumps(data))
        report = evaluate(name, data, args.resamples)
        print(f"{name}: {len(data['candidates'])} queries, {report.queries} judged")
        print(report.table())


if __name__ == "__main__":
    main()
