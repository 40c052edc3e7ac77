"""Bad input gets a typed error or is stored verbatim; nothing is executed, nothing half-written."""

from __future__ import annotations

from datetime import datetime

import pytest

from tnsrag_db._errors import ConfigurationError, InvalidEntryError, InvalidFilterError, TemporalValidationError
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry

NASTY = ["'; DROP TABLE entries; --", 'a"b', "x') OR 1=1 --", "$1", "%(c)s", ":c", "\\", "ü🙂"]


def test_blank_ids_rejected() -> None:
    for bad in ["", "   ", None, 7]:
        with pytest.raises(InvalidEntryError):
            MemoryEntry(bad, "text")  # type: ignore[arg-type]


def test_nul_bytes_unknown_tier_naive_timestamp_non_string_metadata() -> None:
    with pytest.raises(InvalidEntryError, match="NUL"):
        MemoryEntry("a", "x\x00y")
    with pytest.raises(InvalidEntryError, match="unknown memory tier"):
        MemoryEntry("a", "x", "LONG_TERM")  # type: ignore[arg-type]
    with pytest.raises(TemporalValidationError, match="time zone"):
        MemoryEntry("a", "x", timestamp=datetime(2024, 1, 1))
    with pytest.raises(InvalidEntryError, match="must be a string"):
        MemoryEntry("a", "x", metadata={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidEntryError, match="reserved"):
        MemoryEntry("a", "x", metadata={"tier": "SEMANTIC"})


def test_metacharacters_are_stored_verbatim(make_store: object) -> None:
    for corpus in NASTY[:3]:
        store: Store = make_store(corpus)  # type: ignore[operator]
        entries = [MemoryEntry(v, f"content {v}", metadata={v: v}, source=v) for v in NASTY]
        assert store.add_all(entries).inserted == len(NASTY)
        for v in NASTY:
            assert store.get(v) == MemoryEntry(v, f"content {v}", metadata={v: v}, source=v)
            assert store.count({v: v}) == 1
            assert store.count({"entryId": v, "source": v}) == 1
        assert store.count() == len(NASTY)


def test_invalid_corpus_and_filters(store: Store) -> None:
    with pytest.raises(ConfigurationError):
        store.with_corpus("  ")
    with pytest.raises(InvalidFilterError):
        store.count({"": "x"})
    with pytest.raises(InvalidFilterError):
        store.count({"k": " "})


def test_failed_batch_leaves_database_unchanged(store: Store) -> None:
    store.add_all([MemoryEntry("a", "one"), MemoryEntry("b", "two")])
    before = {e.id: e for e in store.iter_entries()}
    with pytest.raises(InvalidEntryError) as info:
        store.add_all([MemoryEntry("a", "changed"), MemoryEntry("c", "new"), "not an entry"])  # type: ignore[list-item]
    assert info.value.index == 2
    assert {e.id: e for e in store.iter_entries()} == before
