"""Every documented limit is checked before the database sees the value, naming the entry."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from tnsrag_db import GraphStore, HashingEmbedding, MemoryEntry, VectorMemoryStore
from tnsrag_db._errors import EmbeddingValidationError, InvalidEntryError, TemporalValidationError, ValidationError
from tnsrag_db._store.store import Store


def test_vectors_over_16000_values_are_rejected_before_the_write(store: Store) -> None:
    vectors = VectorMemoryStore(store, HashingEmbedding(8), name="wide", index_threshold=None)
    with pytest.raises(EmbeddingValidationError, match="16000"):
        vectors.add_all([MemoryEntry("w", "wide")], embeddings=np.ones((1, 16_001), dtype=np.float32))
    assert store.count() == 0
    vectors.add_all([MemoryEntry("w", "wide")], embeddings=np.ones((1, 16_000), dtype=np.float32))
    assert vectors.count() == 1


def test_naive_timestamp_is_an_invalid_entry_naming_it() -> None:
    with pytest.raises(InvalidEntryError, match="time zone") as info:
        MemoryEntry("dated", "x", timestamp=datetime(2024, 1, 1))
    assert info.value.entry_id == "dated"
    assert isinstance(info.value, TemporalValidationError)  # still what it was
    with pytest.raises(InvalidEntryError) as info:
        MemoryEntry("dated2", "x", metadata={"timestamp": "yesterday"})
    assert info.value.entry_id == "dated2"


def test_long_keys_fail_early_naming_the_entry(store: Store) -> None:
    with pytest.raises(InvalidEntryError, match="source of entry 's'") as info:
        MemoryEntry("s", "x", source="x" * 10_000)
    assert info.value.entry_id == "s"
    with pytest.raises(InvalidEntryError, match="parent_id of entry 'p'"):
        MemoryEntry("p", "x", parent_id="p" * 10_000)
    with pytest.raises(InvalidEntryError, match="entry id"):
        MemoryEntry("漢" * 400, "x")  # 400 characters, 1,200 bytes
    # CJK ids that fit an entry but not, two of them, one edge key.
    a, b = "甲" * 300, "乙" * 300
    store.add_all([MemoryEntry(a, "one"), MemoryEntry(b, "two")])
    with pytest.raises(ValidationError, match="UTF-8 bytes together"):
        GraphStore(store).add_edge(a, b)
    assert store.count() == 2


def test_a_wrong_dimension_query_vector_does_not_fix_the_views_dimension(store: Store) -> None:
    fresh = VectorMemoryStore(store, lambda text: [1.0, 0.5, float(len(text))], index_threshold=None)
    # No space of that dimension: an empty ranking, and the view's dimension stays open.
    sql, params = fresh.candidates_sql(np.ones(5, dtype=np.float32), 3)
    assert store.read(sql, params) == []
    assert fresh.add_all([MemoryEntry("q", "right dimension")]).inserted == 1
    assert fresh.count() == 1
    with pytest.raises(EmbeddingValidationError, match="expected 3"):
        fresh.candidates_sql(np.ones(5, dtype=np.float32), 3)
