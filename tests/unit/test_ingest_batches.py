"""The batches of the ingest loop: a first batch of ``batch_size``, then doubling up to
``max_batch_size`` (the write batch of a pass that embeds nothing)."""

from __future__ import annotations

import itertools
import threading

import pytest

from tnsrag_db._indexes.vector.ingest import batch_sizes, run_ingest
from tnsrag_db._store.write import ValidatedBatch, WriteReport
from tnsrag_db._types import MemoryEntry


def _written_batches(n: int, batch_size: int, max_batch_size: int | None) -> list[int]:
    sizes: list[int] = []

    def write(batch: ValidatedBatch, vectors: object, stop: threading.Event) -> tuple[WriteReport, None]:
        sizes.append(len(batch))
        return WriteReport(inserted=[e.id for e in batch]), None

    counts = run_ingest([MemoryEntry(f"e{i}", f"text {i}") for i in range(n)], batch_size, None,
                        lambda batch, embedded: {}, write, lambda space, advance: None,
                        max_batch_size=max_batch_size)
    assert counts.inserted == n
    return sizes


@pytest.mark.parametrize(("n", "first", "largest", "expected"), [
    (100, 10, None, [10] * 10),
    (100, 10, 10, [10] * 10),
    (100, 10, 5, [10] * 10),  # a cap below the first size: the first size throughout
    (100, 10, 40, [10, 20, 40, 30]),
    (200, 3, 25, [3, 6, 12, 24, 25, 25, 25, 25, 25, 25, 5]),
])
def test_batches_double_from_the_first_up_to_the_largest(n: int, first: int, largest: int | None,
                                                         expected: list[int]) -> None:
    assert _written_batches(n, first, largest) == expected
    assert sum(expected) == n


def test_batch_sizes_without_a_cap_stay_the_first() -> None:
    assert list(itertools.islice(batch_sizes(256), 4)) == [256] * 4
    assert list(itertools.islice(batch_sizes(256, 4096), 7)) == [256, 512, 1024, 2048, 4096, 4096, 4096]


def test_a_batch_checked_as_a_whole_is_cut_without_checking_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from tnsrag_db._store import write as write_module

    whole = ValidatedBatch(MemoryEntry(f"e{i}", f"text {i}") for i in range(50))
    checked: list[int] = []
    real = write_module.validate_batch
    monkeypatch.setattr(write_module, "validate_batch", lambda entries: checked.append(1) or real(entries))
    batches: list[ValidatedBatch] = []

    def write(batch: ValidatedBatch, vectors: object, stop: threading.Event) -> tuple[WriteReport, None]:
        batches.append(batch)
        return WriteReport(inserted=[e.id for e in batch]), None

    run_ingest(whole, 8, None, lambda batch, embedded: {}, write, lambda space, advance: None, max_batch_size=16)
    assert [len(b) for b in batches] == [8, 16, 16, 10]
    assert all(type(b) is ValidatedBatch for b in batches) and [e for b in batches for e in b] == list(whole)
    assert checked == []  # a list of the same entries is checked batch by batch
    _written_batches(20, 8, None)
    assert len(checked) == 4  # 8, 8, 4 and the empty read that ends the stream
    assert [e.id for e in whole.only({"e3", "e1", "nope"})] == ["e1", "e3"]
