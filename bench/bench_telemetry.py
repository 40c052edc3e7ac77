"""The cost of the OpenTelemetry hooks: keyword and vector retrieve latency with OpenTelemetry
absent, installed but not imported, imported without a provider, and with the SDK
recording to memory.

Usage::

    python -m bench.bench_telemetry --n 5000 --queries 200 --rounds 5 [--url URL]

Writes a corpus of ``n`` generated entries (40 words each, vectors by
``HashingEmbedding``, 256 dimensions) into a scratch database, then runs, ``rounds`` times,
one child process per mode, in turn:

- ``absent``: ``opentelemetry`` blocked (``sys.modules["opentelemetry"] = None``), as
  when the ``otel`` extra is not installed: the hooks return at once;
- ``not imported``: installed, and not imported by the application (the library never
  imports it first): the hooks return at once;
- ``API, no provider``: the application imported the API but set no provider (the API's
  no-op tracer and meter);
- ``SDK in memory``: the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter`` and a ``MeterProvider`` with an ``InMemoryMetricReader``, set
  as the global providers (every span and metric recorded; the exporter cleared between
  queries, outside the timing).

Each child warms up (every query once), then times each query's keyword and vector
retrieve (``RAGContext(10)``), then the hooks alone: a strategy whose ``retrieve`` sends
nothing but goes through the hooks of a retrieve of one statement (its span, the
statement's span), called in batches of 2,000. The table gives each mode's median over
all rounds, the retrieves' difference to ``absent`` and the hooks' median time per call. Starts an embedded server unless ``--url`` names one (a
superuser URL: the script creates a database and drops it afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("absent", "not imported", "API, no provider", "SDK in memory")
CORPUS = "bench_otel"
DIMENSION = 256


def _child(mode: str, url: str, queries: list[str]) -> dict[str, list[float]]:
    if mode == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]
    exporter: Any = None
    if mode == "API, no provider":
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    if mode == "SDK in memory":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))

    from tnsrag_db import BM25Index, HashingEmbedding, KeywordRAGStrategy, RAGContext, VectorRAGStrategy, connect
    from tnsrag_db._indexes.vector import VectorMemoryStore

    times: dict[str, list[float]] = {"keyword": [], "vector": []}
    with connect(url, corpus=CORPUS) as store:
        strategies = {"keyword": KeywordRAGStrategy(BM25Index(store)),
                      "vector": VectorRAGStrategy(VectorMemoryStore(store, HashingEmbedding(DIMENSION)))}
        context = RAGContext(10)
        for query in queries:  # warm-up: plans, caches, the lazy import
            for strategy in strategies.values():
                strategy.retrieve(query, context)
        for query in queries:
            for name, strategy in strategies.items():
                start = time.perf_counter()
                found = strategy.retrieve(query, context)
                times[name].append(time.perf_counter() - start)
                assert found
                if exporter is not None:
                    assert exporter.get_finished_spans()
                    exporter.clear()
    times["hooks"] = _hooks_alone(exporter)
    if mode == "absent":
        assert not [name for name, module in sys.modules.items() if name.startswith("opentelemetry") and module]
    return times


def _hooks_alone(exporter: Any, calls: int = 2000, batches: int = 15) -> list[float]:
    """Seconds per call of a retrieve that does nothing but go through the hooks: its span
    (``traced_retrieve``) and one statement's (``_telemetry.statement``)."""
    from tnsrag_db import _telemetry

    class Nothing:
        name = "nothing"

        @_telemetry.traced_retrieve
        def retrieve(self, query: str, context: Any = None) -> list[Any]:
            _telemetry.read_corpus("bench")
            with _telemetry.statement("SELECT 1") as sent:
                sent.rows(())
            return []

    strategy, per_call = Nothing(), []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            strategy.retrieve("q")
        per_call.append((time.perf_counter() - start) / calls)
        if exporter is not None:
            exporter.clear()
    return per_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, url, queries = json.loads(args.child)
        print(json.dumps(_child(mode, url, queries)))
        return

    from bench._common import scratch_database
    from bench._corpus import generate_corpus
    from tnsrag_db import HashingEmbedding, connect
    from tnsrag_db._indexes.vector import VectorMemoryStore

    corpus = generate_corpus(args.n, dim=8)
    texts = [e.content for e in corpus.entries]
    queries = [" ".join(texts[(i * 7919) % len(texts)].split()[:4]) for i in range(args.queries)]
    with scratch_database(args.url, "bench_otel") as (db, _role):
        url = db.render_as_string(hide_password=False)
        with connect(url, corpus=CORPUS, auto_migrate=True) as store:
            VectorMemoryStore(store, HashingEmbedding(DIMENSION)).add_all(corpus.entries)
            store.merge_postings()
        times: dict[str, dict[str, list[float]]] = {m: {"keyword": [], "vector": []} for m in MODES}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        for _ in range(args.rounds):
            for mode in MODES:
                done = subprocess.run([sys.executable, "-m", "bench.bench_telemetry", "--child",
                                       json.dumps([mode, url, queries])], cwd=ROOT, env=env, check=True,
                                      capture_output=True, text=True)
                for name, values in json.loads(done.stdout.strip().splitlines()[-1]).items():
                    times[mode].setdefault(name, []).extend(values)
    print(f"n={args.n}, {args.queries} queries x {args.rounds} rounds per mode, RAGContext(10); median ms "
          "(difference to absent)")
    print("| mode | keyword retrieve | vector retrieve | the hooks alone, µs per retrieve |")
    print("|---|---:|---:|---:|")
    base = {name: statistics.median(times["absent"][name]) for name in ("keyword", "vector")}
    for mode in MODES:
        cells = []
        for name in ("keyword", "vector"):
            median = statistics.median(times[mode][name])
            delta = "" if mode == "absent" else f" ({(median - base[name]) * 1000:+.3f} ms)"
            cells.append(f"{median * 1000:.3f}{delta}")
        print(f"| {mode} | {cells[0]} | {cells[1]} | {statistics.median(times[mode]['hooks']) * 1e6:.1f} |")


if __name__ == "__main__":
    main()
