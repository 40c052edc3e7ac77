"""Multi-phase progress on stderr: one redrawn line per phase on a terminal, a plain line
every few seconds elsewhere (a log file, nohup, CI).

On a TTY a ticker thread redraws every 0.2 s from the first moment, so the lines are
there at once and rates keep moving while a long statement runs. Off a TTY the same
thread writes one line (every phase begun, with its count, rate and ETA) after
:data:`PLAIN_FIRST` seconds, then every :data:`PLAIN_INTERVAL` seconds, so a redirected
run is never silent for long; a run shorter than that writes nothing. Before any phase
has begun the line says what the run is doing (:meth:`PhaseProgress.status`). A phase
may count a second measure of its work (the bytes of the files read): its ETA is then
by that measure, which a few large files do not throw off as they do a count of files.
Updates come from any thread (plain counters under a lock).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TextIO

__all__ = ["PLAIN_FIRST", "PLAIN_INTERVAL", "PhaseProgress", "ingest_progress"]

#: Seconds between two plain progress lines off a terminal.
PLAIN_INTERVAL = 5.0
#: Seconds before the first plain line.
PLAIN_FIRST = 3.0


@dataclass
class _Phase:
    name: str
    unit: str
    done: int = 0
    total: int | None = None
    started: float | None = None
    finished: float | None = None
    note: str = ""
    reported: bool = False  # updated at least once (an optional phase is shown from then on)
    work_done: int = 0  # a second measure of the work (bytes), the ETA's when it has a total
    work_total: int | None = None
    work_unit: str = ""


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _megabytes(n: float) -> str:
    return f"{n / 1e6:,.1f}" if n >= 1e6 else f"{n / 1e6:.2f}"


class PhaseProgress:
    """Lines ``read``, ``embed``, ``write``, ``index`` (or the ``phases`` given) on ``stream``.

    ``enabled`` None means: when ``stream`` is a TTY. ``plain`` writes a plain line per
    ``interval`` seconds (default :data:`PLAIN_INTERVAL`) instead of redrawing in place
    every ``interval`` (default 0.2) seconds.
    Phases named in ``optional`` are shown only once they are updated (the ``index`` line
    of an ingest that builds no index never appears). Use as a context manager; the final
    state stays on screen. ``clock`` is for tests.
    """

    def __init__(self, stream: TextIO, phases: dict[str, str], *, enabled: bool | None = None,
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic,
                 plain: bool = False, optional: Collection[str] = ()) -> None:
        tty = _isatty(stream)
        self._stream = stream
        self._enabled = tty if enabled is None else enabled
        self._plain = plain
        self._phases = {name: _Phase(name, unit) for name, unit in phases.items()}
        self._optional = frozenset(optional)
        self._lock = threading.Lock()
        self._out = threading.RLock()  # one writer at a time (a signal handler's line may come mid-draw)
        self._interval = interval if interval is not None else (PLAIN_INTERVAL if self._plain else 0.2)
        self._first = min(PLAIN_FIRST, self._interval) if self._plain else self._interval
        self._status = "starting"
        self._entered = False
        self._clock = clock
        self._begun = clock()
        self._drawn = 0
        self._held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        """Whether anything is written."""
        return self._enabled

    @property
    def plain(self) -> bool:
        """Whether progress is plain lines every few seconds (else lines redrawn in place)."""
        return self._plain

    def status(self, text: str, *, announce: bool = False) -> None:
        """What the run is doing before any phase has begun (``loading the model ...``);
        ``announce`` writes the plain line at once off a terminal (a step known to take seconds)."""
        with self._lock:
            self._status = text
        if announce and self._plain and self._entered:
            self.draw()

    def update(self, phase: str, done: int, total: int | None = None, note: str | None = None, *,
               work: tuple[int, int | None] | None = None, work_unit: str = "MB") -> None:
        """Set ``phase``'s count (and total, and a short note such as a sub-phase name, and
        ``work``: a second measure done and total, e.g. bytes, shown in ``work_unit``
        (``MB``: bytes shown in megabytes), which the ETA then follows)."""
        with self._lock:
            p = self._phases[phase]
            if work is not None:
                p.work_done, p.work_total, p.work_unit = work[0], work[1], work_unit
            p.reported = True
            if p.started is None and done > 0:
                p.started = self._clock()
            p.done = done
            if total is not None:
                p.total = total
            if p.total is not None and done >= p.total:
                p.finished = p.finished or self._clock()
            else:
                p.finished = None
            if note is not None:
                p.note = note

    def start(self, phase: str) -> None:
        """Start ``phase``'s clock now (its rate counts from here)."""
        with self._lock:
            self._phases[phase].started = self._clock()

    def _shown(self) -> list[_Phase]:
        with self._lock:
            return [p for p in self._phases.values() if p.name not in self._optional or p.reported]

    def _parts(self, p: _Phase, now: float) -> list[str]:
        count = f"{p.done:,}" + (f"/{p.total:,}" if p.total is not None else "")
        parts = [f"{count} {p.unit}"]
        by_work = p.work_total is not None and (p.total is None or p.done < p.total)
        if by_work:
            assert p.work_total is not None
            parts.append(f"{_megabytes(p.work_done)}/{_megabytes(p.work_total)} {p.work_unit}")
        if p.started is not None and p.done > 0:
            elapsed = max((p.finished or now) - p.started, 1e-6)
            done, total, unit, shown = ((p.work_done, p.work_total, p.work_unit, _megabytes) if by_work
                                        else (p.done, p.total, p.unit, lambda n: f"{n:,.1f}"))
            rate = done / elapsed
            parts.append(f"{shown(rate)} {unit}/s")
            # No ETA from the first percent: a few small files, or the first short texts, say little.
            if total is not None and done < total and rate > 0 and done >= total / 100:
                parts.append(f"ETA {_duration((total - done) / rate)}")
            elif p.total is not None and p.done >= p.total:
                parts.append(f"done in {_duration(elapsed)}")
        if p.note:
            parts.append(p.note)
        return parts

    def lines(self) -> list[str]:
        """The current lines (what a redraw writes)."""
        now = self._clock()
        phases = self._shown()
        width = max(len(p.name) for p in phases)
        lines = ["  ".join([f"{p.name:<{width}}", *self._parts(p, now)]) for p in phases]
        if not any(p.reported or p.started is not None for p in phases):
            lines[0] += f"  ({self._status})"
        return lines

    def plain_line(self) -> str:
        """One line for a log: elapsed time, then each phase begun (``read 120/400 files,
        35.1 files/s, ETA 0:00:08; embed ...``)."""
        now = self._clock()
        begun = [p for p in self._shown() if p.reported or p.started is not None]
        shown = "; ".join(f"{p.name} " + ", ".join(self._parts(p, now)) for p in begun) or self._status
        return f"[{_duration(now - self._begun)}] {shown}"

    def draw(self) -> None:
        """Redraw the lines in place (on a terminal), or write one plain line."""
        if not self._enabled or self._held:
            return
        with self._out:
            if self._plain:
                self._stream.write(self.plain_line() + "\n")
                self._stream.flush()
                return
            lines = self.lines()
            text = "".join(f"\r\x1b[2K{line}\n" for line in lines)
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self._stream.write(up + text)
            self._stream.flush()
            self._drawn = len(lines)

    def say(self, text: str) -> None:
        """Write ``text`` as a line of its own at once, progress enabled or not (on a
        terminal below the lines drawn so far, which are drawn again below it)."""
        with self._out:
            self._stream.write(text + "\n")
            self._stream.flush()
            self._drawn = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Write nothing inside the block (a question asked on the terminal); the lines are
        drawn again below it afterwards."""
        self._held = True
        try:
            yield
        finally:
            self._drawn = 0
            self._held = False

    def _tick(self) -> None:
        wait = self._first
        while not self._stop.wait(wait):
            self.draw()
            wait = self._interval

    def __enter__(self) -> PhaseProgress:
        self._entered = True
        if self._enabled:
            if not self._plain:
                self.draw()
            self._thread = threading.Thread(target=self._tick, name="tnsrag-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self._plain and exc_type is not SystemExit:  # after "aborted: ..." the lines are stale
            self.draw()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def ingest_progress(stream: TextIO, *, quiet: bool, clock: Callable[[], float] = time.monotonic) -> PhaseProgress:
    """The progress of ``tnsrag ingest`` on ``stream``: read (files), write (entries written,
    keyword-searchable), embed (entries with their vectors) and (once an HNSW build reports) index; redrawn on a terminal, plain lines every :data:`PLAIN_INTERVAL`
    seconds elsewhere, nothing with ``quiet``."""
    return PhaseProgress(stream, {"read": "files", "write": "entries", "embed": "entries", "index": "blocks"},
                         enabled=not quiet, plain=not _isatty(stream), clock=clock, optional={"index"})
