"""Embedding throughput and query time with the shipped model (the ``embed`` extra).

Rows, each the median of ``--repeats`` runs:

* ``model``: the model alone, ``OnnxEmbedding.embed_batch`` over all texts (docs/s);
* ``ingest``: end to end into a fresh corpus (entries, BM25 terms and vectors written;
  docs/s) with ``VectorMemoryStore.ingest`` (batches commit while the next one embeds)
  and with ``add_all`` (embed everything, then write), each with its ratio to the
  ``model`` row, paired by repeat (target: ``ingest`` ≥ 0.9×);
* ``paced calls``: the model alone in the calls a store makes of a local model (about
  half a second each, shortest texts first), no database: what the pacing costs;
* ``vector pass``: what ``tnsrag ingest`` times after its keyword pass: the entries
  already written without vectors (not timed), ``fill_vectors`` embedding and writing
  their vectors, in calls of about half a second (target ≥ 0.9× the model alone);
* ``keyword-first``: both passes of ``tnsrag ingest`` timed together (``ingest`` with
  ``vectors=False``, then ``fill_vectors``);

on two text sets: the Cranfield abstracts (1,400 texts, ≈ 180 tokens on average) and
``--generated`` synthetic texts (default 10,000, ≈ 40 words, from ``bench/_corpus.py``).
Then query time on the Cranfield corpus: the model's embedding of one query, and a
whole hybrid search (BM25 + vector, RRF) including that embedding — medians over the
225 Cranfield queries. ``--methods`` picks the end-to-end rows (comma-separated),
``--no-cranfield`` keeps the generated texts only.

Usage::

    python -m bench.bench_embed [--url URL] [--data DIR] [--generated N] [--repeats R] [--limit N] [--no-queries]
        [--methods vector pass,keyword-first] [--no-cranfield]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) a throwaway embedded server is started.
The machine's other load moves these figures; compare rows of the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from bench._common import database_url
from bench._corpus import generate_corpus
from bench.cranfield import DEFAULT_DATA, load_documents, load_queries
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._indexes.vector.pacing import CallPacer
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext
from tnsrag_db.embeddings import OnnxEmbedding, default_model


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _ingest_once(url: str, model: OnnxEmbedding, entries: Sequence[MemoryEntry], method: str) -> float:
    corpus = f"bench_embed_{uuid.uuid4().hex[:8]}"
    with connect(url, corpus=corpus, auto_migrate=True) as store:
        try:
            vectors = VectorMemoryStore(store, model, index_threshold=None)
            if method == "vector pass":  # the keyword pass of tnsrag ingest first, not timed
                vectors.ingest(entries, vectors=False)
                method = "fill_vectors"
            started = time.perf_counter()
            if method == "keyword-first":  # both passes of tnsrag ingest, timed together
                vectors.ingest(entries, vectors=False)
                method = "fill_vectors"
            getattr(vectors, method)(entries)
            return time.perf_counter() - started
        finally:
            store.drop_corpus()


def _paced_once(model: OnnxEmbedding, texts: Sequence[str]) -> float:
    """The model over ``texts`` in the calls a store makes (:class:`CallPacer`, 256 at most)."""
    pacer = CallPacer(window_tokens=model.max_tokens)
    started = time.perf_counter()
    for rows in pacer.calls(texts, 256):
        call = time.perf_counter()
        model.embed_batch([texts[i] for i in rows])
        pacer.record(sum(pacer.size(texts[i]) for i in rows), time.perf_counter() - call)
    return time.perf_counter() - started


METHODS = ("paced calls", "ingest", "add_all", "vector pass", "keyword-first")


def throughput(url: str, model: OnnxEmbedding, label: str, entries: Sequence[MemoryEntry],
               repeats: int, methods: Sequence[str] = METHODS) -> list[tuple[str, str, float, str]]:
    """Each repeat runs the model alone, then each end-to-end method, back to back: a ratio
    is the median over the repeats of a method's rate over the model's rate of the same
    repeat (other jobs' load drifts less between neighbours than over a whole run)."""
    texts = [e.content for e in entries]
    model.embed_batch(texts[:64])  # warm-up: first-run allocations
    tokens = statistics.mean(min(model.count_tokens(t), model.max_tokens) for t in texts[:500])
    alone: list[float] = []
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(repeats):
        alone.append(_median_time(lambda: model.embed_batch(texts), 1))
        for method in methods:
            seconds[method].append(_paced_once(model, texts) if method == "paced calls"
                                   else _ingest_once(url, model, entries, method))
    model_rate = len(texts) / statistics.median(alone)
    rows = [(label, f"model alone ({len(texts)} texts, {tokens:.0f} tokens avg)", model_rate, "")]
    for method in methods:
        rate = len(texts) / statistics.median(seconds[method])
        ratio = statistics.median(a / b for a, b in zip(alone, seconds[method]))
        what = {"paced calls": "model in calls of ~0.5 s (no database)",
                "vector pass": "vector pass (tnsrag ingest)",
                "keyword-first": "both passes (tnsrag ingest)"}.get(method, f"end to end ({method})")
        rows.append((label, what, rate, f"{ratio:.2f}x model (paired)"))
    return rows


def query_times(url: str, model: OnnxEmbedding, documents: Sequence[MemoryEntry],
                queries: Sequence[str]) -> list[tuple[str, float]]:
    corpus = f"bench_embed_q_{uuid.uuid4().hex[:8]}"
    with connect(url, corpus=corpus, auto_migrate=True) as store:
        try:
            vectors = VectorMemoryStore(store, model)
            vectors.add_all(documents)
            hybrid = HybridRAGStrategy(BM25Index(store), vectors)
            context = RAGContext(max_results=10)
            for q in queries[:10]:  # warm caches
                hybrid.retrieve(q, context)
            embed_ms, search_ms = [], []
            for q in queries:
                started = time.perf_counter()
                model(q)
                embed_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                hybrid.retrieve(q, context)
                search_ms.append((time.perf_counter() - started) * 1000)
            return [("query embedding (model)", statistics.median(embed_ms)),
                    ("hybrid search incl. embedding", statistics.median(search_ms))]
        finally:
            store.drop_corpus()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="Cranfield directory")
    parser.add_argument("--generated", type=int, default=10_000, help="synthetic texts (default 10000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row (median; default 3)")
    parser.add_argument("--limit", type=int, default=None,
                        help="use only the first N Cranfield abstracts (default: all 1400; for busy machines)")
    parser.add_argument("--no-queries", action="store_true", help="skip the query times (throughput rows only)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated end-to-end rows to run (default: {','.join(METHODS)})")
    parser.add_argument("--no-cranfield", action="store_true", help="the generated texts only")
    args = parser.parse_args()
    model = default_model()
    documents = load_documents(args.data)[:args.limit]
    queries = [q.text for q in load_queries(args.data)]
    generated = generate_corpus(args.generated).entries
    print(f"model {model.name}: {model.dimension}-d, {model.pooling} pooling, window {model.max_tokens} tokens, "
          f"{os.cpu_count()} cores; medians of {args.repeats} runs")
    print(f"\n{'texts':<10} {'what':<48} {'docs/s':>8}  ratio", flush=True)
    with database_url(args.url) as url:
        sets = (("cranfield", documents), ("generated", generated))[1 if args.no_cranfield else 0:]
        for label, entries in sets:
            for label_, what, rate, ratio in throughput(url, model, label, entries, args.repeats,
                                                        args.methods.split(",")):
                print(f"{label_:<10} {what:<48} {rate:>8.1f}  {ratio}", flush=True)
        if args.no_queries:
            return
        timings = query_times(url, model, documents, queries)
    print(f"\n{f'query time ({len(documents)} abstracts, {len(queries)} queries)':<40} {'median ms':>10}")
    for what, ms in timings:
        print(f"{what:<40} {ms:>10.1f}")


if __name__ == "__main__":
    main()
