"""Core value types: RetrievedDocument, RAGContext, MemoryEntry, MemoryTier.

All are immutable. Mappings they hold are copied at construction and exposed as
read-only ``MappingProxyType`` views, so a caller mutating its own dict later
changes nothing here (a deliberate difference from the SPI's Java form, which exposes a
live view of the caller's map).
"""

from __future__ import annotations

import enum
import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from tnsrag_db._errors import (
    InvalidContextError,
    InvalidEntryError,
    InvalidFilterError,
    InvalidTimestampError,
    TemporalValidationError,
    ValidationError,
)
from tnsrag_db._validate import check_int, check_text, is_int, is_unicode_text

__all__ = [
    "MAX_CANDIDATES",
    "MAX_KEY_BYTES",
    "MAX_RESULTS",
    "RESERVED_METADATA_KEYS",
    "HierarchyMetadata",
    "MemoryEntry",
    "MemoryTier",
    "RAGContext",
    "RetrievedDocument",
    "TemporalMetadata",
    "is_unicode_text",
    "name_form",
    "validate_filters",
]

#: Result metadata keys that direct strategies fill in themselves; an entry's own
#: metadata may not use them.
RESERVED_METADATA_KEYS = frozenset({"tier", "entryId", "source"})

_EMPTY: Mapping[str, str] = MappingProxyType({})

#: Largest ``RAGContext.max_results``: a larger request is refused (InvalidContextError) rather
#: than holding a connection and memory for it. Strategies cap what they ask of a child here.
MAX_RESULTS = 10_000
#: Largest ``k`` of an index search (``BM25Index``, ``VectorMemoryStore``): strategies ask
#: their streams for a multiple of ``max_results``.
MAX_CANDIDATES = 100_000

#: Most UTF-8 bytes of an entry id, parent id or source (besides the 512-character limit of
#: ids). They are btree index keys, which PostgreSQL caps at about 2,700 bytes, beside a
#: corpus name of up to 800 bytes and, in the BM25 postings, a term: longer ones failed
#: late, with ProgramLimitExceeded naming no entry.
MAX_KEY_BYTES = 1024


def name_form(value: str) -> str:
    """``value`` in Unicode normal form NFC, the form names are stored and looked up in (entry
    ids, parent ids, edge ends, corpus names): ``café`` typed composed or decomposed is one
    name. Cheap when ``value`` already is NFC (ASCII always is)."""
    return value if value.isascii() or unicodedata.is_normalized("NFC", value) else unicodedata.normalize("NFC", value)


class MemoryTier(enum.Enum):
    """The memory tier of an entry; ``.name`` is what the ``tier`` metadata carries."""

    WORKING = "WORKING"
    EPISODIC = "EPISODIC"
    SEMANTIC = "SEMANTIC"
    PROCEDURAL = "PROCEDURAL"

    @classmethod
    def parse(cls, value: MemoryTier | str) -> MemoryTier:
        """Return the tier for a ``MemoryTier`` or its exact name; ``ValueError`` otherwise."""
        if isinstance(value, MemoryTier):
            return value
        if isinstance(value, str) and value in cls.__members__:
            return cls[value]
        raise ValueError(f"unknown memory tier {value!r}; expected one of {', '.join(cls.__members__)}")


class HierarchyMetadata:
    """Metadata keys understood by the hierarchy index."""

    #: An entry's parent id, accepted in metadata as an alternative to ``MemoryEntry.parent_id``.
    PARENT_ID = "parentId"


class TemporalMetadata:
    """Metadata keys understood by the temporal index."""

    #: An ISO-8601 instant with a zone, accepted as an alternative to ``MemoryEntry.timestamp``.
    TIMESTAMP = "timestamp"


def _is_blank(value: object) -> bool:
    return value is None or not isinstance(value, str) or not value.strip()


def validate_filters(filters: Mapping[str, str] | None) -> Mapping[str, str]:
    """Return a read-only copy of ``filters`` after checking every key and value.

    Raises :class:`InvalidFilterError` for a non-mapping, a None/blank/non-string key
    or value, a NUL character or a lone surrogate (which PostgreSQL text cannot hold).
    """
    if filters is None or filters is _EMPTY:
        return _EMPTY
    if not isinstance(filters, Mapping):
        raise InvalidFilterError(f"metadata filters must be a mapping of str to str, got {type(filters).__name__}")
    copied: dict[str, str] = {}
    for key, value in filters.items():
        if _is_blank(key):
            raise InvalidFilterError(f"metadata filter keys must be non-blank strings, got {key!r}")
        if _is_blank(value):
            raise InvalidFilterError(f"metadata filter value for {key!r} must be a non-blank string, got {value!r}")
        for text in (key, value):
            check_text(text, f"metadata filter {key!r}", blank_ok=True, error=InvalidFilterError)
        copied[key] = value
    return MappingProxyType(copied) if copied else _EMPTY


@dataclass(frozen=True, slots=True)
class RetrievedDocument:
    """One retrieval result: content, source, score and read-only metadata (str to str).

    Raises :class:`ValidationError` for non-string content, source, metadata keys or
    values, and for a score that is not a number or is NaN (±inf is allowed: some
    rerankers use it to pin results).
    """

    content: str
    source: str | None
    score: float
    metadata: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise ValidationError(f"RetrievedDocument content must be a string, got {type(self.content).__name__}")
        if self.source is not None and not isinstance(self.source, str):
            raise ValidationError(f"RetrievedDocument source must be a string or None, got {type(self.source).__name__}")
        score = self.score
        if not (is_int(score) or isinstance(score, float)) or math.isnan(score):
            raise ValidationError(f"RetrievedDocument score must be a number, not NaN, got {score!r}")
        md = self.metadata
        copied = MappingProxyType(dict(md)) if md else _EMPTY
        for key, value in copied.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValidationError(f"RetrievedDocument metadata maps str to str, got {key!r}: {value!r}")
        object.__setattr__(self, "metadata", copied)
        object.__setattr__(self, "score", float(score))

    @classmethod
    def _of_row(cls, content: object, source: object, score: float, metadata: dict[str, str]) -> RetrievedDocument:
        """A document of values read from the library's own rows: what the constructor
        builds, with ``metadata`` (a fresh dict the caller hands over) wrapped instead of
        copied. Anything the constructor would refuse goes to it, which says why."""
        if type(content) is str and (source is None or type(source) is str) and type(score) is float \
                and score == score and all(type(k) is str and type(v) is str for k, v in metadata.items()):
            doc = object.__new__(cls)
            setattr_ = object.__setattr__
            setattr_(doc, "content", content)
            setattr_(doc, "source", source)
            setattr_(doc, "score", score)
            setattr_(doc, "metadata", MappingProxyType(metadata) if metadata else _EMPTY)
            return doc
        return cls(content, source, score, metadata)  # type: ignore[arg-type]

    def with_score(self, score: float) -> RetrievedDocument:
        """Return a copy with another score."""
        return RetrievedDocument(self.content, self.source, score, self.metadata)

    def with_metadata(self, **extra: str) -> RetrievedDocument:
        """Return a copy whose metadata has ``extra`` added (or replaced)."""
        return RetrievedDocument(self.content, self.source, self.score, {**self.metadata, **extra})


@dataclass(frozen=True, slots=True, init=False)
class RAGContext:
    """Per-query options: ``max_results`` (default 10, at most :data:`MAX_RESULTS`, 10,000),
    inclusive ``min_score`` (default 0.0), exact metadata filters (default none) and the
    instant ``as_of`` the retrieval answers at (default None: now).

    Raises :class:`InvalidContextError` for ``max_results`` outside 1 to 10,000 or a non-finite
    ``min_score`` and :class:`InvalidFilterError` for a bad filter, at construction.
    """

    max_results: int
    min_score: float
    metadata_filters: Mapping[str, str]
    #: The instant the retrieval answers at (timezone-aware; None: now): from the entries
    #: valid, recorded and not expired then (docs/memory.md).
    as_of: datetime | None

    def __init__(
        self,
        max_results: int = 10,
        min_score: float = 0.0,
        metadata_filters: Mapping[str, str] | None = None,
        as_of: datetime | None = None,
    ) -> None:
        check_int(max_results, "max_results", minimum=1, maximum=MAX_RESULTS, error=InvalidContextError)
        if not (is_int(min_score) or isinstance(min_score, float)):
            raise InvalidContextError(f"min_score must be a number, got {min_score!r}")
        if not math.isfinite(min_score):
            raise InvalidContextError(f"min_score must be finite, got {min_score!r}")
        object.__setattr__(self, "max_results", max_results)
        object.__setattr__(self, "min_score", float(min_score))
        object.__setattr__(self, "metadata_filters", validate_filters(metadata_filters))
        if as_of is not None and (not isinstance(as_of, datetime) or as_of.tzinfo is None
                                  or as_of.utcoffset() is None):
            raise InvalidContextError(f"as_of must be a timezone-aware datetime or None, got {as_of!r}")
        object.__setattr__(self, "as_of", as_of)

    def with_max_results(self, max_results: int) -> RAGContext:
        """Return a new context with another ``max_results``."""
        return RAGContext(max_results, self.min_score, self.metadata_filters, self.as_of)

    def with_min_score(self, min_score: float) -> RAGContext:
        """Return a new context with another ``min_score``."""
        return RAGContext(self.max_results, min_score, self.metadata_filters, self.as_of)

    def with_metadata_filters(self, metadata_filters: Mapping[str, str] | None) -> RAGContext:
        """Return a new context whose filters are a copy of ``metadata_filters``."""
        return RAGContext(self.max_results, self.min_score, metadata_filters, self.as_of)

    def with_as_of(self, as_of: datetime | None) -> RAGContext:
        """Return a new context answering at ``as_of`` (None: now)."""
        return RAGContext(self.max_results, self.min_score, self.metadata_filters, as_of)

    def matches(self, metadata: Mapping[str, str]) -> bool:
        """True when every filter entry equals ``metadata``'s value exactly (a missing key excludes)."""
        return all(metadata.get(k) == v for k, v in self.metadata_filters.items())


def _check_text(value: Any, what: str, entry_id: str | None, index: int | None, *, blank_ok: bool = False) -> str:
    return check_text(value, what, blank_ok=blank_ok,
                      error=lambda message: InvalidEntryError(message, entry_id=entry_id, index=index))


def _check_key_bytes(value: str, what: str, entry_id: str | None, index: int | None) -> None:
    size = len(value.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise InvalidEntryError(f"{what} is {size} UTF-8 bytes long, more than {MAX_KEY_BYTES} (an index key)",
                                entry_id=entry_id, index=index)


def parse_instant(value: str) -> datetime:
    """Parse an ISO-8601 instant that carries a zone; :class:`TemporalValidationError` otherwise."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise TemporalValidationError(f"invalid ISO-8601 timestamp {value!r}") from exc
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise TemporalValidationError(f"timestamp {value!r} has no zone offset")
    return parsed


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """A unit of memory: ``id``, ``content``, ``tier`` and optional ``source``,
    ``parent_id``, timezone-aware ``timestamp`` and ``metadata`` (str to str), and an
    optional expiry: ``expires_at`` (a timezone-aware instant) or ``ttl`` (seconds from the
    write, by the database's clock), after which no read returns the entry, and an optional
    validity: ``valid_from`` (inclusive) and ``valid_until`` (exclusive), timezone-aware
    instants bounding the interval in which the entry is true; a read answers from the
    entries valid at its instant (now, or its ``as_of``; docs/memory.md).

    ``tier`` may be a :class:`MemoryTier` or its name. The metadata keys
    ``HierarchyMetadata.PARENT_ID`` and ``TemporalMetadata.TIMESTAMP`` are accepted as
    alternatives to ``parent_id`` and ``timestamp`` (they must agree when both are given).
    ``id`` and ``parent_id`` are kept in Unicode normal form NFC (:func:`name_form`), so one
    name typed composed or decomposed is one entry. Raises :class:`InvalidEntryError` at construction (for a malformed or zone-less timestamp
    its subclass :class:`InvalidTimestampError`, which is also a :class:`TemporalValidationError`).
    """

    id: str
    content: str
    tier: MemoryTier = MemoryTier.SEMANTIC
    source: str | None = None
    parent_id: str | None = None
    timestamp: datetime | None = None
    metadata: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    #: The instant from which no read returns the entry (timezone-aware), or None.
    expires_at: datetime | None = None
    #: Seconds the entry lives from the write that stores it (the database's clock), or None.
    ttl: float | None = None
    #: The first instant at which the entry is true (timezone-aware), or None: since ever.
    valid_from: datetime | None = None
    #: The instant from which the entry is no longer true (timezone-aware), or None: still.
    valid_until: datetime | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, index: int | None = None) -> None:
        """Check every field; ``index`` (a batch position) is carried in the error."""
        raw_id = self.id
        eid = raw_id if isinstance(raw_id, str) else None
        _check_text(raw_id, "entry id", eid, index)
        if "\x1e" in raw_id:  # the separator of kept versions' ids (tnsrag_db._store.history)
            raise InvalidEntryError("entry id contains U+001E (reserved for the ids of kept versions)",
                                    entry_id=eid, index=index)
        if len(raw_id) > 512:
            raise InvalidEntryError("entry id is longer than 512 characters", entry_id=eid, index=index)
        _check_key_bytes(raw_id, "entry id", eid, index)
        _check_text(self.content, f"content of entry {raw_id!r}", eid, index, blank_ok=True)
        try:
            object.__setattr__(self, "tier", MemoryTier.parse(self.tier))
        except ValueError as exc:
            raise InvalidEntryError(f"entry {raw_id!r}: {exc}", entry_id=eid, index=index) from None
        if self.source is not None:
            _check_text(self.source, f"source of entry {raw_id!r}", eid, index)
            _check_key_bytes(self.source, f"source of entry {raw_id!r}", eid, index)
        md = self.metadata if self.metadata is not None else {}
        if not isinstance(md, Mapping):
            raise InvalidEntryError(f"metadata of entry {raw_id!r} must be a mapping", entry_id=eid, index=index)
        clean: dict[str, str] = {}
        for key, value in md.items():
            if not isinstance(key, str) or not key.strip():
                raise InvalidEntryError(f"entry {raw_id!r}: metadata keys must be non-blank strings, got {key!r}",
                                        entry_id=eid, index=index)
            if key in RESERVED_METADATA_KEYS:
                raise InvalidEntryError(f"entry {raw_id!r}: metadata key {key!r} is reserved "
                                        f"({', '.join(sorted(RESERVED_METADATA_KEYS))})", entry_id=eid, index=index)
            if not isinstance(value, str):
                raise InvalidEntryError(f"entry {raw_id!r}: metadata value for {key!r} must be a string, "
                                        f"got {type(value).__name__}", entry_id=eid, index=index)
            _check_text(key, f"metadata key of entry {raw_id!r}", eid, index)
            _check_text(value, f"metadata value {key!r} of entry {raw_id!r}", eid, index, blank_ok=True)
            clean[key] = value
        parent = self.parent_id
        md_parent = clean.get(HierarchyMetadata.PARENT_ID)
        if parent is None and md_parent is not None and md_parent.strip():
            parent = md_parent
        elif parent is not None and md_parent is not None and name_form(md_parent) != name_form(parent):
            raise InvalidEntryError(f"entry {raw_id!r}: parent_id {parent!r} disagrees with metadata "
                                    f"{HierarchyMetadata.PARENT_ID}={md_parent!r}", entry_id=eid, index=index)
        object.__setattr__(self, "id", name_form(raw_id))
        if parent is not None:
            _check_text(parent, f"parent_id of entry {raw_id!r}", eid, index)
            _check_key_bytes(parent, f"parent_id of entry {raw_id!r}", eid, index)
            parent = name_form(parent)
            if parent == self.id:
                raise InvalidEntryError(f"entry {raw_id!r} is its own parent", entry_id=eid, index=index)
        object.__setattr__(self, "parent_id", parent)
        ts = self.timestamp
        md_ts = clean.get(TemporalMetadata.TIMESTAMP)
        if md_ts is not None:
            try:
                parsed = parse_instant(md_ts)
            except TemporalValidationError as exc:
                raise InvalidTimestampError(f"entry {raw_id!r}: {exc}", entry_id=eid, index=index) from None
            if ts is None:
                ts = parsed
            elif parsed != ts:
                raise InvalidEntryError(f"entry {raw_id!r}: timestamp disagrees with metadata "
                                        f"{TemporalMetadata.TIMESTAMP}={md_ts!r}", entry_id=eid, index=index)
        if ts is not None:
            if not isinstance(ts, datetime):
                raise InvalidEntryError(f"entry {raw_id!r}: timestamp must be a datetime, got {type(ts).__name__}",
                                        entry_id=eid, index=index)
            if ts.tzinfo is None or ts.utcoffset() is None:
                raise InvalidTimestampError(f"entry {raw_id!r}: timestamp {ts.isoformat()} has no time zone",
                                            entry_id=eid, index=index)
        object.__setattr__(self, "timestamp", ts)
        object.__setattr__(self, "metadata", MappingProxyType(clean) if clean else _EMPTY)
        self._validate_expiry(raw_id, eid, index)

    def _validate_expiry(self, raw_id: object, eid: str | None, index: int | None) -> None:
        expires, ttl = self.expires_at, self.ttl
        if expires is not None:
            if not isinstance(expires, datetime):
                raise InvalidEntryError(f"entry {raw_id!r}: expires_at must be a datetime, got {type(expires).__name__}",
                                        entry_id=eid, index=index)
            if expires.tzinfo is None or expires.utcoffset() is None:
                raise InvalidEntryError(f"entry {raw_id!r}: expires_at {expires.isoformat()} has no time zone",
                                        entry_id=eid, index=index)
        if ttl is not None:
            if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
                raise InvalidEntryError(f"entry {raw_id!r}: ttl must be a positive finite number of seconds, "
                                        f"got {ttl!r}", entry_id=eid, index=index)
            if expires is not None:
                raise InvalidEntryError(f"entry {raw_id!r}: give expires_at or ttl, not both", entry_id=eid,
                                        index=index)
            object.__setattr__(self, "ttl", float(ttl))
        for name in ("valid_from", "valid_until"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, datetime):
                raise InvalidEntryError(f"entry {raw_id!r}: {name} must be a datetime, got {type(value).__name__}",
                                        entry_id=eid, index=index)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise InvalidEntryError(f"entry {raw_id!r}: {name} {value.isoformat()} has no time zone",
                                        entry_id=eid, index=index)
        if self.valid_from is not None and self.valid_until is not None and self.valid_from >= self.valid_until:
            raise InvalidEntryError(f"entry {raw_id!r}: valid_from {self.valid_from.isoformat()} is not before "
                                    f"valid_until {self.valid_until.isoformat()}", entry_id=eid, index=index)

    def result_metadata(self) -> dict[str, str]:
        """The metadata a direct strategy attaches to a result: own metadata plus tier, entryId, source."""
        out = dict(self.metadata)
        out["tier"] = self.tier.name
        out["entryId"] = self.id
        if self.source is not None:
            out["source"] = self.source
        return out
