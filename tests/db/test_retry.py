"""retry_on_deadlock runs a whole transaction again after PostgreSQL broke a deadlock, and nothing else."""

from __future__ import annotations

import threading

import pytest

from tnsrag_db._db.session import DEADLOCK_RETRIES, retry_on_deadlock
from tnsrag_db._errors import DatabaseError
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry


def test_a_real_deadlock_is_retried_and_both_sides_commit(store: Store) -> None:
    store.add_all([MemoryEntry("a", "first"), MemoryEntry("b", "second")])
    barrier = threading.Barrier(2, timeout=30)
    runs = {"a": 0, "b": 0}  # attempts per side (keyed by the row it updates first)
    errors: list[BaseException] = []

    def side(first: str, second: str, text: str) -> None:
        def once() -> None:
            runs[first] += 1
            with store.session.transaction() as conn:
                conn.execute("UPDATE entries SET source = :t WHERE corpus = :c AND id = :id",
                             {"t": text, "c": store.corpus, "id": first})
                if runs[first] == 1:  # each side's first attempt holds one row, then wants the other
                    barrier.wait()
                conn.execute("UPDATE entries SET source = :t WHERE corpus = :c AND id = :id",
                             {"t": text, "c": store.corpus, "id": second})

        try:
            retry_on_deadlock(once)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=side, args=("a", "b", "left")),
               threading.Thread(target=side, args=("b", "a", "right"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    # At least one side was aborted as a deadlock victim and ran again; every attempt beyond
    # one per side was such a retry. How many depends on PostgreSQL's deadlock checks: on a
    # loaded machine a victim's next attempt can meet the other side again ([1, 3] seen
    # in CI), so the count is bounded, not exact.
    assert max(runs.values()) >= 2
    assert all(1 <= n <= 1 + DEADLOCK_RETRIES for n in runs.values()), runs
    a, b = store.get("a"), store.get("b")
    assert a is not None and b is not None
    assert a.source == b.source  # the retried side committed last, whole: both rows carry its text


def test_other_database_errors_are_not_retried(store: Store) -> None:
    calls = []

    def once() -> None:
        calls.append(1)
        with store.session.transaction() as conn:
            conn.execute("SELECT 1 / 0")

    with pytest.raises(DatabaseError, match="division by zero"):
        retry_on_deadlock(once)
    assert calls == [1]


def test_retries_are_bounded(store: Store) -> None:
    calls = []

    def once() -> None:
        calls.append(1)
        with store.session.transaction() as conn:
            conn.execute("DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '40P01'; END $$")

    with pytest.raises(DatabaseError, match="simulated"):
        retry_on_deadlock(once, retries=2)
    assert calls == [1, 1, 1]
