"""OpenTelemetry on a real database: a span per retrieve (every strategy, sync and async)
with its corpus, strategy, k, result count and statement timings, client spans of the
statements, spans of writes, deletes, merges and sweeps, and the metrics; nothing
recorded without a provider, and nothing of OpenTelemetry imported by the library when it
is not installed or the application does not import it.

The in-process tests hand the library providers of their own (the SDK's in-memory span
exporter and metric reader) instead of setting the process's global ones, which can be set
only once; the subprocess tests use the global ones, as an application does."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.engine import URL

from tests.db.test_explain import _corpus
from tnsrag_db import HashingEmbedding, MemoryEntry, RAGContext, _telemetry
from tnsrag_db._errors import ValidationError
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import STRATEGY_NAMES, build_strategy

ROOT = Path(__file__).resolve().parents[2]
QUERY = "hybrid retrieval fuses keyword and vector rankings"


class Recorded:
    """What the library recorded in a test: finished spans and metrics."""

    def __init__(self, exporter: InMemorySpanExporter, reader: InMemoryMetricReader) -> None:
        self.exporter = exporter
        self.reader = reader

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def clear(self) -> None:
        self.exporter.clear()

    def metrics(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        found: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                assert scope.scope.name == "tnsrag_db"
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(_telemetry, "_otel", _telemetry._Otel(tracer_provider, meter_provider))
    yield Recorded(exporter, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def _children(recorded: Recorded, parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in recorded.spans() if s.parent is not None and s.parent.span_id == parent.context.span_id]


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_a_retrieve_by_each_strategy_is_a_span_with_its_attributes(store: Store, recorded: Recorded,
                                                                    name: str) -> None:
    _corpus(store)
    strategy = build_strategy(name, store, embedding=HashingEmbedding())
    recorded.clear()
    docs = strategy.retrieve(QUERY, RAGContext(4))
    [span] = [s for s in recorded.spans("tnsrag.retrieve") if s.attributes["tnsrag.strategy"] == name]
    attributes = dict(span.attributes or {})
    assert attributes["tnsrag.corpus"] == store.corpus
    assert attributes["tnsrag.k"] == 4
    assert attributes["tnsrag.results"] == len(docs) > 0
    assert attributes["tnsrag.operation"] == "retrieve"
    durations = attributes["tnsrag.statement_durations_ms"]
    assert durations and all(d >= 0 for d in durations)
    assert attributes["tnsrag.statements"] == len(durations)
    # Each read statement is a client span under the retrieve (or under a strategy it wraps).
    statements = recorded.spans("SELECT")
    assert len(statements) == len(durations)
    for statement in statements:
        assert statement.attributes["db.system.name"] == "postgresql"
        assert statement.attributes["db.operation.name"] == "SELECT"
        assert statement.attributes["db.response.returned_rows"] >= 0
        assert statement.parent is not None
    assert _children(recorded, span)
    # No query text, no values, no content in any attribute.
    for recorded_span in recorded.spans():
        for value in (recorded_span.attributes or {}).values():
            assert "hybrid retrieval" not in str(value) and "FROM" not in str(value)


def test_aretrieve_is_a_span_too(store: Store, recorded: Recorded) -> None:
    _corpus(store)
    strategy = build_strategy("keyword", store)
    recorded.clear()
    docs = asyncio.run(strategy.aretrieve(QUERY))  # type: ignore[attr-defined]
    [span] = recorded.spans("tnsrag.retrieve")
    assert span.attributes["tnsrag.strategy"] == "keyword"
    assert span.attributes["tnsrag.k"] == RAGContext().max_results
    assert span.attributes["tnsrag.results"] == len(docs)
    assert span.attributes["tnsrag.corpus"] == store.corpus
    assert [s.parent.span_id for s in recorded.spans("SELECT")] == [span.context.span_id]  # type: ignore[union-attr]


def test_a_failed_retrieve_is_an_error_span(store: Store, recorded: Recorded) -> None:
    strategy = build_strategy("keyword", store)
    with pytest.raises(ValidationError):
        strategy.retrieve("   ")
    [span] = recorded.spans("tnsrag.retrieve")
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "ValidationError"
    assert not span.events  # no exception message: it may quote the query


def test_writes_deletes_merges_and_sweeps_are_spans(store: Store, recorded: Recorded) -> None:
    past = datetime.now(timezone.utc) - timedelta(days=1)
    store.add_all([MemoryEntry("a", "alpha beta"), MemoryEntry("b", "beta gamma"),
                   MemoryEntry("old", "expired words", expires_at=past)])
    [write] = recorded.spans("tnsrag.write")
    assert write.attributes["tnsrag.corpus"] == store.corpus
    assert write.attributes["tnsrag.entries"] == 3 and write.attributes["tnsrag.batch"] == 3
    # The write transaction's statements (sent by SQLAlchemy) are client spans under it, timed.
    statements = _children(recorded, write)
    assert statements and all(s.attributes["db.system.name"] == "postgresql" for s in statements)
    assert len(write.attributes["tnsrag.statement_durations_ms"]) >= len(statements)

    store.add_all([MemoryEntry("c", "gamma delta")])
    report = store.merge_postings()
    merges = recorded.spans("tnsrag.merge")
    assert merges[-1].attributes["tnsrag.entries"] == report.entries
    assert merges[-1].attributes["tnsrag.corpus"] == store.corpus

    recorded.clear()
    swept = store.sweep()
    [sweep] = recorded.spans("tnsrag.sweep")
    assert sweep.attributes["tnsrag.entries"] == swept.deleted == 1
    assert sweep.attributes["tnsrag.tombstones"] == swept.tombstones
    [delete] = recorded.spans("tnsrag.delete")  # the sweep's own delete, under it
    assert delete.parent is not None and delete.parent.span_id == sweep.context.span_id

    recorded.clear()
    assert store.delete("a")
    [delete] = recorded.spans("tnsrag.delete")
    assert delete.attributes["tnsrag.entries"] == 1

    metrics = recorded.metrics()
    operations = {p.attributes["tnsrag.operation"] for p in metrics["tnsrag.operation.duration"]}
    assert {"write", "merge", "sweep", "delete"} <= operations
    written = [p.value for p in metrics["tnsrag.operation.entries"] if p.attributes["tnsrag.operation"] == "write"]
    assert written == [4]


def test_retrieve_metrics_by_strategy(store: Store, recorded: Recorded) -> None:
    _corpus(store)
    keyword = build_strategy("keyword", store)
    found = sum(len(keyword.retrieve(QUERY, RAGContext(3))) for _ in range(3))
    metrics = recorded.metrics()
    [duration] = [p for p in metrics["tnsrag.operation.duration"]
                  if p.attributes == {"tnsrag.operation": "retrieve", "tnsrag.strategy": "keyword"}]
    assert duration.count == 3
    [entries] = [p for p in metrics["tnsrag.operation.entries"] if p.attributes.get("tnsrag.strategy") == "keyword"]
    assert entries.value == found
    statements = metrics["db.client.operation.duration"]
    assert sum(p.count for p in statements) >= 3
    assert all(p.attributes["db.system.name"] == "postgresql" for p in statements)


def _child(code: str, url: URL, corpus: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, url.render_as_string(hide_password=False), corpus],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


_WORK = """
import sys
from tnsrag_db import connect, MemoryEntry, RAGContext
from tnsrag_db._strategies.registry import build_strategy

def work():
    with connect(sys.argv[1], corpus=sys.argv[2]) as store:
        store.add_all([MemoryEntry("a", "alpha beta"), MemoryEntry("b", "beta gamma")])
        found = build_strategy("keyword", store).retrieve("beta", RAGContext(5))
        store.merge_postings()
        store.sweep()
        store.delete("a")
        return len(found)
"""


def test_without_a_provider_nothing_is_recorded(db_url: URL, store: Store) -> None:
    code = _WORK + """
import json, sys
from tnsrag_db import _telemetry

before_import = work()  # OpenTelemetry installed, not imported by the application: the library leaves it
assert "opentelemetry.trace" not in sys.modules and _telemetry._otel is None
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

before = work()
assert _telemetry._otel is not None  # the API is in use, with its no-op provider
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
recorded_before = len(exporter.get_finished_spans())
trace.set_tracer_provider(provider)  # as an application does: the library's tracer follows
work()
names = sorted({s.name for s in exporter.get_finished_spans()})
print(json.dumps({"before": before + before_import, "recorded_before": recorded_before, "names": names}))
"""
    result = _child(code, db_url, store.corpus)
    assert result["before"] == 4
    assert result["recorded_before"] == 0
    assert {"tnsrag.write", "tnsrag.retrieve", "tnsrag.merge", "tnsrag.sweep", "tnsrag.delete",
            "SELECT"} <= set(result["names"])


def test_without_opentelemetry_the_library_works_and_imports_none_of_it(db_url: URL, store: Store) -> None:
    code = """
import sys
sys.modules["opentelemetry"] = None  # as if not installed: any import of it fails
""" + _WORK + """
import json
from tnsrag_db import _telemetry
found = work()
loaded = sorted(name for name, module in sys.modules.items() if name.startswith("opentelemetry") and module is not None)
print(json.dumps({"found": found, "loaded": loaded, "otel": _telemetry._otel is not None}))
"""
    result = _child(code, db_url, store.corpus)
    assert result == {"found": 2, "loaded": [], "otel": False}


def test_an_operation_lists_its_first_statement_durations_and_counts_them_all(recorded: Recorded) -> None:
    with _telemetry.operation("merge", "c"):
        for _ in range(_telemetry.MAX_DURATIONS + 5):
            with _telemetry.statement("SELECT 1") as sent:
                sent.rows([(1,)])
    [span] = recorded.spans("tnsrag.merge")
    assert span.attributes["tnsrag.statements"] == _telemetry.MAX_DURATIONS + 5
    assert len(span.attributes["tnsrag.statement_durations_ms"]) == _telemetry.MAX_DURATIONS
