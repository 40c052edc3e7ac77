"""OpenTelemetry traces and metrics of the store's operations (the ``otel`` extra).

The library only uses OpenTelemetry's API (``trace.get_tracer("tnsrag_db", version)``,
``metrics.get_meter(...)``): it never configures a provider or an exporter. Until the
application sets one, the API's providers are no-ops and nothing is recorded or sent.
The hooks start once the process has imported the API (an application that sets a
provider has): before that, and without the ``opentelemetry`` package, every hook here
returns at once and the library imports nothing of it (see :func:`_get`).

What is recorded:

- a span per operation: ``tnsrag.retrieve`` (each strategy's ``retrieve`` and
  ``aretrieve``: attributes ``tnsrag.strategy``, ``tnsrag.k``, ``tnsrag.results`` and
  ``tnsrag.corpus``, the corpus its statements read), ``tnsrag.write``,
  ``tnsrag.delete``, ``tnsrag.merge`` and ``tnsrag.sweep`` (``tnsrag.corpus`` and
  ``tnsrag.entries``: entries written, deleted or merged), with ``tnsrag.statements``,
  the number of statements it sent, and ``tnsrag.statement_durations_ms``, their
  durations (the first :data:`MAX_DURATIONS`);
- a child span per statement (:func:`statement`), of the read runner and of the write
  path's connections (writes, maintenance; not the rows a write streams by COPY): a database client span,
  ``db.system.name`` ``postgresql``, ``db.operation.name``, ``db.response.returned_rows``
  (reads); never the query text or values, which carry user content;
- a failed operation or statement: status ERROR and ``error.type`` (the exception's class;
  not its message, which may quote user content);
- metrics: ``tnsrag.operation.duration`` (histogram, seconds, by ``tnsrag.operation``
  and ``tnsrag.strategy``), ``tnsrag.operation.entries`` (counter: results returned,
  entries written, deleted or merged, by the same attributes) and
  ``db.client.operation.duration`` (histogram, seconds) of the statements.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import time
from collections.abc import Callable, Sized
from contextvars import ContextVar
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar, cast

from tnsrag_db._types import RAGContext

__all__ = ["Operation", "operation", "read_corpus", "statement", "traced_retrieve"]

_F = TypeVar("_F", bound=Callable[..., Any])

_NAME = "tnsrag_db"
#: The most statement durations an operation's span lists (``tnsrag.statements`` counts them all).
MAX_DURATIONS = 128
#: Bucket bounds (seconds) of the duration histograms: OpenTelemetry's advice for
#: ``db.client.operation.duration``.
_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
_OPERATION = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|MERGE|EXPLAIN|VALUES|TABLE|SHOW|SET|RESET|COPY|"
                        r"ANALYZE|VACUUM|BEGIN|COMMIT|ROLLBACK|CALL)\b", re.IGNORECASE)


class _Otel:
    """The tracer and instruments (created once, from the API's global providers, which
    forward to whatever provider the application sets later, or from the providers given)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from opentelemetry import context, metrics, trace  # the otel extra: once the application has imported it

        ours = _version()
        self.context = context
        self.trace = trace
        self.error = trace.Status(trace.StatusCode.ERROR)
        # (providers other than the global ones: the tests' own)
        self.tracer = trace.get_tracer(_NAME, ours, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_NAME, ours, meter_provider=meter_provider)
        self.duration = _histogram(meter, "tnsrag.operation.duration",
                                   "Duration of tnsrag_db store operations (retrieve, write, delete, merge, sweep)")
        self.entries = meter.create_counter(
            "tnsrag.operation.entries", unit="{entry}",
            description="Entries returned by retrieves, written by writes, deleted by deletes and sweeps, "
                        "moved by merges")
        self.statements = _histogram(meter, "db.client.operation.duration",
                                     "Duration of the statements tnsrag_db sent")


def _histogram(meter: Any, name: str, description: str) -> Any:
    try:
        return meter.create_histogram(name, unit="s", description=description,
                                      explicit_bucket_boundaries_advisory=list(_BUCKETS))
    except TypeError:  # an API before 1.23: no advisory bounds
        return meter.create_histogram(name, unit="s", description=description)


def _version() -> str:
    try:
        return version("tnsrag-db")
    except PackageNotFoundError:
        return "0"


_otel: _Otel | None = None


def _get() -> _Otel | None:
    """The tracer and instruments once the process has imported OpenTelemetry's API, else
    None (a dictionary lookup per call).

    The library never imports OpenTelemetry itself first: an application that sets a
    provider (or uses the API at all) has imported it, and until one is set every span
    would be a no-op anyway. So a process that does not use OpenTelemetry pays nothing
    for it (no import, no no-op spans), installed or not."""
    if _otel is not None:
        return _otel
    if sys.modules.get("opentelemetry.trace") is None and sys.modules.get("opentelemetry.metrics") is None:
        return None
    return _load()


def _load() -> _Otel | None:
    global _otel
    try:
        _otel = _Otel()
    except ImportError:  # (imported in part, then blocked)
        return None
    return _otel


#: The operation running in this context (its statements' durations and corpus go to it).
_current: ContextVar[Operation | None] = ContextVar("tnsrag_telemetry_operation", default=None)


class Operation:
    """One store operation's span and metrics, as a context manager (see :func:`operation`)."""

    __slots__ = ("_attributes", "_count", "_durations", "_otel", "_parent", "_span", "_start", "_statements",
                 "_tokens")

    def __init__(self, otel: _Otel, name: str, attributes: dict[str, Any]) -> None:
        self._otel = otel
        self._attributes = attributes
        self._count: int | None = None
        self._durations: list[float] = []
        self._statements = 0
        self._span: Any = otel.tracer.start_span(f"tnsrag.{name}", attributes=attributes)
        self._start = 0.0
        self._tokens: tuple[Any, Any] | None = None
        self._parent: Operation | None = None

    def __enter__(self) -> Operation:
        otel = self._otel
        self._parent = _current.get()
        self._tokens = (otel.context.attach(otel.trace.set_span_in_context(self._span)), _current.set(self))
        self._start = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        elapsed = time.perf_counter() - self._start
        otel, span = self._otel, self._span
        if self._tokens is not None:
            context_token, current_token = self._tokens
            _current.reset(current_token)
            otel.context.detach(context_token)
        metric = {key: value for key, value in self._attributes.items()
                  if key in ("tnsrag.operation", "tnsrag.strategy")}
        if exc is not None:
            metric["error.type"] = type(exc).__qualname__
        otel.duration.record(elapsed, metric)
        if self._count is not None and exc is None:
            otel.entries.add(self._count, metric)
        if span.is_recording():
            if self._statements:
                span.set_attribute("tnsrag.statements", self._statements)
                span.set_attribute("tnsrag.statement_durations_ms", self._durations)
            if exc is not None:
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(otel.error)
        span.end()

    def set(self, key: str, value: Any) -> None:
        """Set attribute ``key`` of the span."""
        if key == "tnsrag.corpus":
            self._attributes[key] = value
        self._span.set_attribute(key, value)

    def count(self, entries: int, key: str = "tnsrag.entries") -> None:
        """The entries the operation returned, wrote, deleted or merged (span attribute ``key``)."""
        self._count = entries
        self._span.set_attribute(key, entries)

    def _statement(self, milliseconds: float) -> None:
        self._statements += 1
        if len(self._durations) < MAX_DURATIONS:
            self._durations.append(round(milliseconds, 3))


class _Nothing:
    """What the hooks hand out while OpenTelemetry is not in use: does nothing."""

    __slots__ = ()

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: Any) -> None:
        return None

    def count(self, entries: int, key: str = "tnsrag.entries") -> None:
        return None

    def rows(self, rows: Sized) -> None:
        return None


_NOTHING = _Nothing()


def operation(name: str, corpus: str, **attributes: Any) -> Operation | _Nothing:
    """A context manager around one store operation ``name`` of ``corpus``: its span (the
    current one inside the block), and its duration and entries (``.count(n)``) as metrics.
    ``attributes`` are added as ``tnsrag.<key>``. Does nothing without OpenTelemetry."""
    otel = _get()
    if otel is None:
        return _NOTHING
    named = {"tnsrag.operation": name, "tnsrag.corpus": corpus}
    named.update((f"tnsrag.{key}", value) for key, value in attributes.items() if value is not None)
    return Operation(otel, name, named)


def read_corpus(corpus: str) -> None:
    """Note that the current operation reads ``corpus`` (a retrieve's span learns its corpus
    from the store that runs its plans)."""
    if _otel is None:
        return
    current = _current.get()
    while current is not None and "tnsrag.corpus" not in current._attributes:  # (a wrapping strategy's too)
        current.set("tnsrag.corpus", corpus)
        current = current._parent


class _Statement:
    """One statement's client span and duration (see :func:`statement`)."""

    __slots__ = ("_operation", "_otel", "_span", "_start")

    def __init__(self, otel: _Otel, text: str) -> None:
        self._otel = otel
        name = _operation_name(text)
        attributes = {"db.system.name": "postgresql"}
        if name:
            attributes["db.operation.name"] = name
        self._span: Any = otel.tracer.start_span(name or "postgresql", kind=otel.trace.SpanKind.CLIENT,
                                                 attributes=attributes)
        self._operation = name
        self._start = 0.0

    def __enter__(self) -> _Statement:
        self._start = time.perf_counter()
        return self

    def rows(self, rows: Sized) -> None:
        """The number of rows the statement returned."""
        self._span.set_attribute("db.response.returned_rows", len(rows))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        elapsed = time.perf_counter() - self._start
        current = _current.get()
        while current is not None:  # a wrapping strategy's retrieve counts its children's statements
            current._statement(elapsed * 1000.0)
            current = current._parent
        attributes = {"db.system.name": "postgresql"}
        if self._operation:
            attributes["db.operation.name"] = self._operation
        span = self._span
        if exc is not None:
            attributes["error.type"] = type(exc).__qualname__
            if span.is_recording():
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(self._otel.error)
        self._otel.statements.record(elapsed, attributes)
        span.end()


@functools.lru_cache(maxsize=512)
def _operation_name(text: str) -> str | None:
    """The first operation a statement's text names (``SELECT`` for a ``WITH ... SELECT``),
    as OpenTelemetry's database conventions ask of a name parsed from the text."""
    match = _OPERATION.search(text)
    return match.group(1).upper() if match else None


def statement(text: str) -> _Statement | _Nothing:
    """A context manager around sending one statement (``text`` as sent; only the
    operation name it starts with is recorded): its client span, a child of the current
    span, and its duration for the current operation and the statement histogram."""
    otel = _get()
    if otel is None:
        return _NOTHING
    return _Statement(otel, text)



def _k(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    context = kwargs.get("context", args[1] if len(args) > 1 else None)
    if context is None:
        return RAGContext().max_results
    k = getattr(context, "max_results", None)
    return k if isinstance(k, int) else None


def traced_retrieve(method: _F) -> _F:
    """Decorate a strategy's ``retrieve(query, context)`` or ``async aretrieve(...)``: a
    ``tnsrag.retrieve`` span with the strategy's name, ``k`` (the context's
    ``max_results``) and the number of results (see :func:`operation`)."""
    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def traced_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _Retrieval(self, args, kwargs) as done:
                return done(await method(self, *args, **kwargs))

        return cast(_F, traced_async)

    @functools.wraps(method)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _Retrieval(self, args, kwargs) as done:
            return done(method(self, *args, **kwargs))

    return cast(_F, traced)


class _Retrieval:
    """The ``tnsrag.retrieve`` span of one retrieval, the same for ``retrieve`` and ``aretrieve``:
    entered, it gives ``done(docs)``, which counts the results and returns them. Nothing is
    recorded when no telemetry is set up."""

    __slots__ = ("_op",)

    def __init__(self, strategy: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._op = _retrieve(strategy, args, kwargs) if _get() is not None else None

    def __enter__(self) -> Callable[[Sized], Any]:
        if self._op is not None:
            self._op.__enter__()
        return self._done

    def _done(self, docs: Sized) -> Any:
        if self._op is not None:
            self._op.count(len(docs), "tnsrag.results")
        return docs

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._op is not None:
            self._op.__exit__(kind, exc, tb)


def _retrieve(strategy: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Operation:
    otel = _get()
    assert otel is not None
    attributes: dict[str, Any] = {"tnsrag.operation": "retrieve", "tnsrag.strategy": str(strategy.name)}
    k = _k(args, kwargs)
    if k is not None:
        attributes["tnsrag.k"] = k
    return Operation(otel, "retrieve", attributes)
