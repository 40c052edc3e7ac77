"""``TemporalIndex``: the timestamps of a corpus, checked against a clock at write time.

An entry's timestamp is its ``ts`` column (``MemoryEntry.timestamp``, or the metadata
key ``TemporalMetadata.TIMESTAMP`` as an ISO-8601 instant with a zone). Invalid and
zone-less timestamps are already rejected when the ``MemoryEntry`` is built; writes
through this index also reject a timestamp further in the future than
``max_future_skew`` relative to the clock, with :class:`TemporalValidationError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.statement import Statement, one
from tnsrag_db._errors import ConfigurationError, TemporalValidationError, ValidationError
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import ValidatedBatch, WriteExtension
from tnsrag_db._types import MemoryEntry

__all__ = ["Clock", "TemporalIndex", "check_clock", "check_skew", "now_from", "utc_now"]

#: A zero-argument callable returning the current time as an aware datetime.
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time in UTC (the default clock)."""
    return datetime.now(timezone.utc)


def now_from(clock: Clock) -> datetime:
    """Call ``clock``; :class:`ConfigurationError` unless it returns an aware datetime."""
    now = clock()
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise ConfigurationError(f"clock must return a timezone-aware datetime, got {now!r}")
    return now


def check_skew(skew: object, what: str = "max_future_skew") -> timedelta:
    """Return ``skew`` if it is a non-negative ``timedelta``; :class:`ConfigurationError` otherwise."""
    if not isinstance(skew, timedelta) or skew < timedelta(0):
        raise ConfigurationError(f"{what} must be a timedelta >= 0, got {skew!r}")
    return skew


def check_clock(clock: object) -> Clock | None:
    """Return ``clock`` if it is None or callable; :class:`ConfigurationError` otherwise."""
    if clock is not None and not callable(clock):
        raise ConfigurationError(f"clock must be a zero-argument callable returning an aware datetime, got {clock!r}")
    return clock


class TemporalIndex:
    """The timestamps of one corpus; writes reject timestamps too far in the future.

    ``max_future_skew`` (default 5 minutes) is how far ahead of the clock a timestamp
    may be. ``clock`` (default: now in UTC) is the clock writes compare against unless
    a write passes its own. No I/O at construction; :class:`ConfigurationError` for a
    bad argument.
    """

    DEFAULT_MAX_FUTURE_SKEW = timedelta(minutes=5)

    def __init__(self, store: Store, *, max_future_skew: timedelta = DEFAULT_MAX_FUTURE_SKEW,
                 clock: Clock | None = None) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"TemporalIndex needs a Store, got {type(store).__name__}")
        self._store = store
        self._skew = check_skew(max_future_skew)
        self._clock = check_clock(clock) or utc_now

    @property
    def store(self) -> Store:
        """The store (and corpus) this index reads and writes."""
        return self._store

    @property
    def max_future_skew(self) -> timedelta:
        """How far ahead of the clock a written timestamp may be."""
        return self._skew

    def __repr__(self) -> str:
        return f"TemporalIndex(corpus={self._store.corpus!r}, max_future_skew={self._skew!r})"

    def add(self, entry: MemoryEntry, *, clock: Clock | None = None) -> IngestCounts:
        """Write one entry (an upsert by id); see :meth:`add_all`."""
        return self.add_all([entry], clock=clock)

    def add_all(self, entries: Iterable[MemoryEntry], *, clock: Clock | None = None) -> IngestCounts:
        """Write a batch in one transaction after checking every timestamp against the clock.

        ``clock`` overrides the index's clock for this write. Raises
        :class:`TemporalValidationError` naming the first entry whose timestamp is more
        than ``max_future_skew`` ahead of the clock, :class:`InvalidEntryError` for an
        invalid entry; nothing is written then.
        """
        batch = ValidatedBatch(entries)
        if not batch:
            return IngestCounts()
        return self._store.write(batch, extensions=[_TimestampCheck(self, clock)]).counts

    def check_timestamps(self, entries: Iterable[MemoryEntry], *, clock: Clock | None = None) -> None:
        """Check, without writing, that no timestamp of ``entries`` is more than
        ``max_future_skew`` ahead of the clock (``clock`` overrides the index's; read once).

        The check :meth:`add_all` runs before it writes, for callers that write through
        another path. Undated entries pass. Raises :class:`TemporalValidationError` naming
        the first offending entry, :class:`ConfigurationError` for a bad clock.
        """
        batch = list(entries)
        if not batch:
            return
        now = now_from(check_clock(clock) or self._clock)
        limit = now + self._skew
        for entry in batch:
            if entry.timestamp is not None and entry.timestamp > limit:
                raise TemporalValidationError(
                    f"entry {entry.id!r}: timestamp {entry.timestamp.isoformat()} is more than "
                    f"{self._skew} ahead of the clock ({now.isoformat()})")

    def timestamps(self, entry_ids: Sequence[str]) -> dict[str, datetime | None]:
        """The timestamp of each existing entry of ``entry_ids`` (None when undated); unknown ids are left out."""
        statement = self.timestamps_statement(entry_ids)
        if not statement.params["ids"]:
            return {}
        return self.timestamps_of(self._store.run(one(statement)))

    def timestamps_statement(self, entry_ids: Sequence[str]) -> Statement:
        """The statement of :meth:`timestamps` (rows ``id, ts``; no I/O); turn its rows into the
        mapping with :meth:`timestamps_of`. Raises :class:`ValidationError` for ``entry_ids``
        that is not a collection of strings."""
        if isinstance(entry_ids, str) or not isinstance(entry_ids, Iterable):
            raise ValidationError(f"entry_ids must be a collection of ids, not {type(entry_ids).__name__}")
        ids = list(dict.fromkeys(entry_ids))
        if any(not isinstance(i, str) for i in ids):
            raise ValidationError("entry_ids must hold strings")
        return Statement("SELECT id, ts FROM entries WHERE corpus = :c AND id = ANY(:ids)",
                         {"c": self._store.corpus, "ids": ids}, ("id", "ts"))

    @staticmethod
    def timestamps_of(rows: Iterable[Any]) -> dict[str, datetime | None]:
        """Entry id to timestamp (None when undated) from the rows of :meth:`timestamps_statement`."""
        return {r.id: r.ts for r in rows}


class _TimestampCheck(WriteExtension):
    """:meth:`TemporalIndex.check_timestamps` as the write's check before any I/O."""

    def __init__(self, index: TemporalIndex, clock: Clock | None) -> None:
        self._index = index
        self._clock = clock

    def validate(self, batch: Sequence[MemoryEntry]) -> None:
        self._index.check_timestamps(batch, clock=self._clock)
