"""Multi-phase progress on a terminal: one line per phase with counts, rate and ETA.

Shown only when the stream is a TTY; a ticker thread redraws every 0.2 s from the
first moment, so the lines are there at once and rates keep moving while a long
statement runs. Updates come from any thread (plain counters under a lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

__all__ = ["PhaseProgress"]


@dataclass
class _Phase:
    name: str
    unit: str
    done: int = 0
    total: int | None = None
    started: float | None = None
    finished: float | None = None
    note: str = ""


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class PhaseProgress:
    """Lines ``read``, ``embed``, ``write``, ``index`` (or the ``phases`` given) on ``stream``.

    ``enabled`` None means: when ``stream`` is a TTY. Use as a context manager; the final
    state stays on screen. ``clock`` is for tests.
    """

    def __init__(self, stream: TextIO, phases: dict[str, str], *, enabled: bool | None = None,
                 interval: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._enabled = (stream.isatty() if enabled is None else enabled)
        self._phases = {name: _Phase(name, unit) for name, unit in phases.items()}
        self._lock = threading.Lock()
        self._interval = interval
        self._clock = clock
        self._drawn = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        """Whether anything is drawn."""
        return self._enabled

    def update(self, phase: str, done: int, total: int | None = None, note: str | None = None) -> None:
        """Set ``phase``'s count (and total, and a short note such as a sub-phase name)."""
        with self._lock:
            p = self._phases[phase]
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

    def lines(self) -> list[str]:
        """The current lines (what a redraw writes)."""
        now = self._clock()
        out = []
        with self._lock:
            phases = list(self._phases.values())
        width = max(len(p.name) for p in phases)
        for p in phases:
            count = f"{p.done:,}" + (f"/{p.total:,}" if p.total is not None else "")
            parts = [f"{p.name:<{width}}  {count} {p.unit}"]
            if p.started is not None and p.done > 0:
                elapsed = max((p.finished or now) - p.started, 1e-6)
                rate = p.done / elapsed
                parts.append(f"{rate:,.1f} {p.unit}/s")
                if p.total is not None and p.done < p.total and rate > 0:
                    parts.append(f"ETA {_duration((p.total - p.done) / rate)}")
                elif p.total is not None and p.done >= p.total:
                    parts.append(f"done in {_duration(elapsed)}")
            if p.note:
                parts.append(p.note)
            out.append("  ".join(parts))
        return out

    def draw(self) -> None:
        """Redraw the lines in place."""
        if not self._enabled:
            return
        text = "".join(f"\r\x1b[2K{line}\n" for line in self.lines())
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        self._stream.write(up + text)
        self._stream.flush()
        self._drawn = len(self._phases)

    def _tick(self) -> None:
        while not self._stop.wait(self._interval):
            self.draw()

    def __enter__(self) -> PhaseProgress:
        if self._enabled:
            self.draw()
            self._thread = threading.Thread(target=self._tick, name="tnsrag-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.draw()
