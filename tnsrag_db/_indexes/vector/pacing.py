"""Embedding calls sized by time, so an ingest can stop between them.

A provider that computes on this machine (it declares ``local_compute = True``, as the
shipped ONNX model and the hash fallback do) costs about its texts' worth per call, with
no round trip to amortise: a batch is cut into calls of about :data:`CALL_SECONDS` each,
the texts sorted by length first so each call pads little. A loaded machine makes the
calls smaller, a quiet one larger (at most the batch). Any other provider gets whole
batches, one call each, as before: a remote service may charge per call.

The size of a text is its characters (up to 8 per token of the model's window, the most a
truncated text costs) plus a fixed part per text; the rate is measured on the calls made.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

__all__ = ["CALL_SECONDS", "CallPacer", "is_local"]

#: Seconds one call of a local provider aims at (a stop waits for the call in progress).
CALL_SECONDS = 0.5
#: Texts in the first call, before any rate is known.
_FIRST_CALL = 4
#: Size every text costs besides its characters (the special tokens, the row of each call).
_PER_TEXT = 32
#: Characters a token stands for at most, to cap the cost of a text the model truncates.
_CHARS_PER_TOKEN = 8


def is_local(provider: object) -> bool:
    """Whether ``provider`` declares ``local_compute = True`` (see the module doc)."""
    return getattr(provider, "local_compute", False) is True


class CallPacer:
    """Cuts texts into calls of about ``seconds`` each, from the rate of the calls made
    (:meth:`record`); shared by every call of one view (thread-safe)."""

    def __init__(self, *, seconds: float = CALL_SECONDS, window_tokens: int | None = None) -> None:
        self._seconds = seconds
        self._cap = None if window_tokens is None else window_tokens * _CHARS_PER_TOKEN
        self._rate: float | None = None  # size per second
        self._lock = threading.Lock()

    def size(self, text: str) -> int:
        """What ``text`` counts for."""
        chars = len(text) if self._cap is None else min(len(text), self._cap)
        return chars + _PER_TEXT

    def calls(self, texts: Sequence[str], most: int) -> Iterator[list[int]]:
        """The indexes of ``texts``, shortest first, in calls of at most ``most`` texts, each
        sized when it is due (after the previous call was recorded)."""
        sizes = [self.size(t) for t in texts]
        order = sorted(range(len(texts)), key=sizes.__getitem__)
        start = 0
        while start < len(order):
            with self._lock:
                budget = None if self._rate is None else self._rate * self._seconds
            if budget is None:
                end = min(start + _FIRST_CALL, len(order))
            else:
                end, used = start, 0
                while end < len(order) and end - start < most and (end == start or used + sizes[order[end]] <= budget):
                    used += sizes[order[end]]
                    end += 1
            yield order[start:min(end, start + most)]
            start = min(end, start + most)

    def record(self, size: int, seconds: float) -> None:
        """A call of ``size`` took ``seconds``: the rate follows (at once when it was slow)."""
        if seconds <= 0:
            return
        rate = size / seconds
        with self._lock:
            if self._rate is None or seconds > 2 * self._seconds:
                self._rate = rate
            else:
                self._rate = (self._rate + rate) / 2
