"""``drop_corpus`` racing writers: nothing orphaned, later writes of the same ids succeed."""

from __future__ import annotations

import threading
import time

from tnsrag_db._db.pool import Connection
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry


def _wait_for_lock_wait(store: Store, timeout: float = 10.0) -> bool:
    """True once some session of this database waits for a lock (the blocked drop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = store.read("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                          "AND wait_event_type = 'Lock'", {})
        if rows[0].n:
            return True
        time.sleep(0.02)
    return False


def _leftovers(store: Store) -> dict[str, int]:
    counts = {}
    for table in ("entries", "bm25_postings", "bm25_df", "bm25_stats", "corpora"):
        counts[table] = store.read(f"SELECT count(*) AS n FROM {table} WHERE corpus = :c", {"c": store.corpus})[0].n
    return counts


def test_drop_corpus_beside_an_updating_writer_leaves_no_orphan_postings(store: Store) -> None:
    ids = [f"e{i}" for i in range(10)]
    store.add_all([MemoryEntry(i, f"first text of {i}") for i in ids])
    writer_in = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def rewrite(conn: Connection) -> None:
        # Only updates existing entries, then holds the transaction: new text (so new
        # postings) of the same terms, so no document frequency or length changes.
        store.writer.write_in(conn, [MemoryEntry(i, f"{i} of text first") for i in ids])
        writer_in.set()
        assert release.wait(20)

    def writer() -> None:
        try:
            store.writer.transaction(rewrite)
        except BaseException as exc:  # reported below
            errors.append(exc)
            writer_in.set()

    def dropper() -> None:
        try:
            store.drop_corpus()
        except BaseException as exc:
            errors.append(exc)

    w = threading.Thread(target=writer)
    w.start()
    assert writer_in.wait(20)
    d = threading.Thread(target=dropper)
    d.start()
    assert _wait_for_lock_wait(store), "drop_corpus did not wait for the writer"
    release.set()
    w.join(30)
    d.join(30)
    assert not errors
    assert _leftovers(store) == {"entries": 0, "bm25_postings": 0, "bm25_df": 0, "bm25_stats": 0, "corpora": 0}
    # The same ids can be written again, and their statistics are those of a fresh corpus.
    assert store.add_all([MemoryEntry(i, f"third {i}") for i in ids]).inserted == 10
    assert _leftovers(store)["bm25_postings"] == 20  # third, e<digit> (parts under two characters are no terms)


def _inconsistencies(store: Store) -> list[str]:
    """Differences between the stored BM25 bookkeeping and a recomputation from the entries
    (the attack suite's own check, which reads both layouts of the postings)."""
    from bench.attack._support import inconsistencies

    return [f"{n} {what}" for what, n in inconsistencies(store).items() if n]


def test_repeated_drops_beside_two_writers_fail_nothing_and_orphan_nothing(store: Store) -> None:
    ids = [f"d{i}" for i in range(20)]
    stop = threading.Event()
    errors: list[BaseException] = []
    writes = [0, 0]

    def writer(n: int) -> None:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            try:
                if round_ % 5 == 0:
                    store.delete_where({"entryId": ids[round_ % len(ids)]})
                else:
                    # Alternating word order: rewrites that keep every term (no df change).
                    words = ["alpha", "beta", f"w{n}"]
                    text = " ".join(words if round_ % 2 else words[::-1])
                    store.add_all([MemoryEntry(i, f"{text} {i}") for i in ids])
                writes[n] += 1
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(10):
            store.drop_corpus()
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[:3]
    assert min(writes) > 0
    assert _inconsistencies(store) == []
    assert store.add_all([MemoryEntry(i, f"again {i}") for i in ids]).total == len(ids)
    assert _inconsistencies(store) == []
