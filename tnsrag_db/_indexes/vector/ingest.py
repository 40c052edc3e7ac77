"""The streaming ingest loop of :meth:`VectorMemoryStore.ingest`: batches read one ahead,
embedded on a worker thread while the previous batch is written, Ctrl-C as a clean stop.

The loop knows nothing of SQL: the view hands it ``prepare`` (a batch's vectors),
``write`` (one batch in its own transaction) and ``build`` (the index at the end).
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from tnsrag_db._counts import IngestCounts
from tnsrag_db._errors import IngestInterrupted, InvalidEntryError, TnsragError
from tnsrag_db._indexes.vector.progress import IngestProgress
from tnsrag_db._indexes.vector.spaces import Space
from tnsrag_db._store.write import ValidatedBatch, WriteReport
from tnsrag_db._types import MemoryEntry

__all__ = ["Stopped", "batch_sizes", "run_ingest"]


_R = TypeVar("_R")
Vectors = dict[str, npt.NDArray[np.float32]]


class Stopped(Exception):
    """Raised inside an ingest's write once a stop was requested (rolls the batch back)."""


class _Job(Generic[_R]):
    """``fn(arg)`` on a daemon worker thread; :meth:`wait` returns its result or raises its error."""

    def __init__(self, fn: Callable[[ValidatedBatch], _R], arg: ValidatedBatch) -> None:
        self._done = threading.Event()
        self._result: _R | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._result = fn(arg)
            except BaseException as exc:  # handed to the waiting thread
                self._error = exc
            finally:
                self._done.set()

        threading.Thread(target=run, name="tnsrag-ingest-embed", daemon=True).start()

    def wait(self, stop: threading.Event) -> _R:
        """The result, polling ``stop`` (raises :class:`Stopped` once it is set)."""
        while not self._done.wait(0.05):
            if stop.is_set():
                raise Stopped
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # set when no error

    def join(self) -> None:
        """Wait until ``fn`` has returned or raised (its outcome is dropped). A process must
        not exit while the worker is inside a native call (an ONNX session's run): the
        runtime's threads would be torn down under it and the process abort."""
        while not self._done.wait(0.05):  # a timed wait keeps a second Ctrl-C deliverable
            pass


@contextlib.contextmanager
def _deferred_sigint(stop: threading.Event, on_stop: Callable[[], None] | None = None) -> Iterator[None]:
    """While inside, the first SIGINT sets ``stop`` and calls ``on_stop`` instead of raising
    KeyboardInterrupt (the second raises it). Only on the main thread with Python's default
    handler in place."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        if on_stop is not None:
            on_stop()

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def batch_sizes(first: int, largest: int | None = None) -> Iterator[int]:
    """The sizes of an ingest's batches: ``first``, then doubling up to ``largest`` (None,
    or not above ``first``: always ``first``). The first batch commits early (the first
    keyword answer waits for it); the later ones, when nothing is embedded between them,
    are sized by the write's own cost, which per entry falls with the batch (the per-batch
    statements and commit, and the document-frequency upserts of the terms batches share)."""
    size = first
    while True:
        yield size
        if largest is not None and size < largest:
            size = min(2 * size, largest)


def run_ingest(entries: Iterable[MemoryEntry], batch_size: int, progress: IngestProgress | None,
               prepare: Callable[[ValidatedBatch, Callable[[int], None]], Vectors],
               write: Callable[[ValidatedBatch, Vectors, threading.Event],
                               tuple[WriteReport, Space | None]],
               build: Callable[[Space, Callable[[str, int, int], None]], None],
               on_stop: Callable[[], None] | None = None, max_batch_size: int | None = None) -> IngestCounts:
    """Run the ingest described at :meth:`VectorMemoryStore.ingest` and return its counts.

    ``prepare(batch, embedded)`` returns a batch's vectors (calling ``embedded(done)``
    as they are ready; it runs on the worker thread), ``write(batch, vectors, stop)``
    writes one batch in its own transaction, ``build(space, advance)`` builds the
    space's index once everything is written. ``on_stop`` is called at the first Ctrl-C.
    Batches are of ``batch_size`` entries, or grow from it to ``max_batch_size``
    (:func:`batch_sizes`)."""
    total = len(entries) if isinstance(entries, Sized) else None
    sizes = batch_sizes(batch_size, max_batch_size)
    # Entries checked as a whole already (ids distinct) are cut into batches unchecked.
    whole = entries if isinstance(entries, ValidatedBatch) else None
    stop = threading.Event()
    committed = IngestCounts()
    stream = iter(entries)
    seen: dict[str, int] = {}
    counters = {"read": 0, "embed": 0}

    def report(phase: str, done: int, of: int | None = total) -> None:
        if progress is not None:
            progress(phase, done, of)

    def read_batch() -> ValidatedBatch:
        start = counters["read"]
        if whole is not None:
            if stop.is_set():
                raise Stopped
            batch = whole.part(start, start + next(sizes))
            counters["read"] = start + len(batch)
            if batch:
                report("read", counters["read"])
            return batch
        raw = []
        for entry in itertools.islice(stream, next(sizes)):  # reading a large file stops between entries
            if stop.is_set():
                raise Stopped
            raw.append(entry)
        try:
            batch = ValidatedBatch(raw)
        except InvalidEntryError as exc:
            where = None if exc.index is None else start + exc.index
            raise InvalidEntryError(str(exc).replace(f"batch item {exc.index} ", f"entry {where} ")
                                    if where is not None else str(exc), entry_id=exc.entry_id,
                                    index=where) from None
        for offset, entry in enumerate(batch):
            first = seen.setdefault(entry.id, start + offset)
            if first != start + offset:
                raise InvalidEntryError(f"entry {start + offset}: duplicate id {entry.id!r} "
                                        f"(first at entry {first})", entry_id=entry.id, index=start + offset)
        counters["read"] = start + len(batch)
        if batch:
            report("read", counters["read"])
        return batch

    def prepared(batch: ValidatedBatch) -> Vectors:
        base = counters["embed"]

        def embedded(done: int) -> None:
            if stop.is_set():
                raise Stopped  # ends this worker at the next chunk instead of embedding on
            report("embed", base + done)

        vectors = prepare(batch, embedded)
        counters["embed"] = base + len(batch)
        report("embed", counters["embed"])
        return vectors

    space: Space | None = None
    jobs: list[_Job[Vectors]] = []  # started, possibly still running
    in_progress = True  # a batch read and not yet committed, or more to read

    def start(batch: ValidatedBatch) -> _Job[Vectors] | None:
        if not batch:
            return None
        job = _Job(prepared, batch)
        jobs.append(job)
        return job

    try:
        with _deferred_sigint(stop, on_stop):
            try:
                batch = read_batch()
                job = start(batch)
                while job is not None:
                    vectors = job.wait(stop)
                    if stop.is_set():  # the embedding ended as the stop came: its batch is not written
                        raise Stopped
                    following = read_batch()
                    next_job = start(following)
                    written, batch_space = write(batch, vectors, stop)
                    space = batch_space or space
                    committed = committed + written.counts
                    report("write", committed.total)
                    batch, job = following, next_job
                in_progress = False
                # A stop that came after the last batch's statements (during its commit, or
                # while the end of the stream was read) still stops the call: it was
                # promised, and what follows (the index build, a caller's next pass) is not run.
                if stop.is_set():
                    raise Stopped
            finally:
                stop.set()  # whatever ends the loop, no worker may outlive it
                for started in jobs:
                    started.join()
        if space is not None:
            build(space, lambda phase, done, of: report("index", done, of))
    except (Stopped, KeyboardInterrupt):
        rest = "the batch in progress was rolled back" if in_progress else "every batch read was written"
        raise IngestInterrupted(f"interrupted: {committed.total} entries committed, {rest}",
                                committed=committed, rolled_back=in_progress) from None
    except TnsragError as exc:
        raise IngestInterrupted(
            f"{exc} ({committed.total} entries committed before, the batch in progress was rolled back)",
            committed=committed) from exc
    return committed
