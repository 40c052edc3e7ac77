"""VectorMemoryStore.ingest: batches commit one at a time, embedding overlaps the writes, stops roll back."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from tests.db._watch import watch
from tnsrag_db._counts import IngestCounts
from tnsrag_db._errors import ExecutionError, IngestInterrupted, InvalidEntryError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import HashingEmbedding


def entries(n: int, prefix: str = "e") -> list[MemoryEntry]:
    return [MemoryEntry(f"{prefix}{i:03d}", f"text number {i} about topic {i % 7}") for i in range(n)]


class Recording:
    """Hash embedding that logs the start of every batch call ("embed", first text)."""

    name = "recording"

    def __init__(self, events: list[tuple[str, str]], on_batch: Any = None) -> None:
        self._hash = HashingEmbedding(16)
        self.events = events
        self.batches = 0
        self.on_batch = on_batch
        self.started: dict[str, threading.Event] = {}

    def started_event(self, text: str) -> threading.Event:
        return self.started.setdefault(text, threading.Event())

    def __call__(self, text: str) -> Sequence[float]:
        return self._hash(text)

    def embed_batch(self, texts: Sequence[str]) -> list[Sequence[float]]:
        self.batches += 1
        self.events.append(("embed", texts[0]))
        self.started_event(texts[0]).set()
        if self.on_batch is not None:
            self.on_batch(self.batches)
        return [self._hash(t) for t in texts]


def test_ingest_embeds_the_next_batch_before_the_previous_commit(store: Store) -> None:
    # The commit of batch i waits (bounded) for the embedding of batch i+1 to start: a
    # pipelined ingest lets it start, a serial one (embed, write, embed, write) cannot,
    # so the recorded order tells the two apart without measuring time.
    data = entries(6)
    events: list[tuple[str, str]] = []
    embedding = Recording(events)
    vectors = VectorMemoryStore(store, embedding)
    firsts = [data[i].content for i in range(0, 6, 2)]
    commits = 0

    def on_execute(conn: Any, statement: str, params: Any) -> None:
        if "INSERT INTO entries" in statement:
            conn.info["test_wrote"] = True

    def on_commit(conn: Any) -> None:
        nonlocal commits
        if not conn.info.pop("test_wrote", False):
            return
        if commits + 1 < len(firsts):
            embedding.started_event(firsts[commits + 1]).wait(10)
        events.append(("commit", firsts[commits]))
        commits += 1

    with watch(after=on_execute, commit=on_commit):
        counts = vectors.ingest(data, batch_size=2)
    assert counts == IngestCounts(inserted=6)
    order = [e for e in events if e[0] in ("embed", "commit")]
    for i in range(len(firsts) - 1):
        assert order.index(("embed", firsts[i + 1])) < order.index(("commit", firsts[i])), order
    assert store.count() == 6 and vectors.count() == 6


def test_ingest_reports_phases_and_is_idempotent(store: Store) -> None:
    data = entries(7)
    vectors = VectorMemoryStore(store, HashingEmbedding(16))
    seen: list[tuple[str, int, int | None]] = []
    assert vectors.ingest(data, batch_size=3, progress=lambda *a: seen.append(a)) == IngestCounts(inserted=7)
    for phase in ("read", "embed", "write"):
        done = [d for p, d, _ in seen if p == phase]
        assert done == sorted(done) and done[-1] == 7, (phase, seen)
        assert all(t == 7 for p, _, t in seen if p == phase)
    assert [d for p, d, _ in seen if p == "write"] == [3, 6, 7]
    changed = [*data[:6], MemoryEntry(data[6].id, "a new text")]
    again = vectors.ingest(iter(changed), batch_size=3, progress=lambda *a: seen.append(a))
    assert again == IngestCounts(updated=1, unchanged=6)
    assert seen[-1][2] is None  # an iterator has no length
    hits = vectors.search("a new text", 1)
    assert hits[0][0] == data[6].id and hits[0][1] == pytest.approx(1.0)


def test_fill_vectors_writes_only_the_vectors_of_entries_stored_with_their_text(store: Store) -> None:
    data = entries(7)
    VectorMemoryStore(store, HashingEmbedding(16)).ingest(data, batch_size=3, vectors=False)
    store.add(MemoryEntry(data[1].id, "another writer's text"))  # changed after the keyword pass
    store.delete(data[2].id)  # and deleted
    sql = "SELECT id, xmin::text AS x FROM entries WHERE corpus = :c"
    before = {r.id: r.x for r in store.read(sql, {"c": store.corpus})}
    postings = store.read("SELECT count(*) AS n FROM bm25_postings WHERE corpus = :c", {"c": store.corpus})[0].n
    events: list[tuple[str, str]] = []
    embedding = Recording(events)
    vectors = VectorMemoryStore(store, embedding)
    statements: list[str] = []

    def on_execute(conn: Any, statement: str, params: Any) -> None:
        statements.append(statement)

    with watch(after=on_execute):
        counts = vectors.fill_vectors(data, batch_size=3)
    assert counts == IngestCounts(unchanged=7)
    # Nothing staged, no entry row written: the entries and their postings are as they were.
    assert not any(("tnsrag_stage_entries" in s and "CREATE TEMP TABLE" not in s) or "INSERT INTO entries" in s
                   for s in statements)
    assert {r.id: r.x for r in store.read(sql, {"c": store.corpus})} == before
    assert store.read("SELECT count(*) AS n FROM bm25_postings WHERE corpus = :c", {"c": store.corpus})[0].n == postings
    # A vector for each entry stored with the text it was made of; none for the changed
    # text (its own writer's business) nor for the deleted entry (not written back).
    stored = vectors.stored_vectors([e.id for e in data], 16)
    assert sorted(stored) == [e.id for e in data if e.id not in (data[1].id, data[2].id)]
    for e in data:
        if e.id in stored:
            assert np.allclose(stored[e.id], HashingEmbedding(16)(e.content))
    assert store.get(data[2].id) is None and store.get(data[1].id).content == "another writer's text"
    # Again: the vectors are there, so only the changed and the deleted entry (both of the
    # first batch) are embedded, in one call, and get no vector again.
    events.clear()
    assert vectors.fill_vectors(data, batch_size=3) == IngestCounts(unchanged=7)
    assert events == [("embed", data[1].content)]
    assert sorted(vectors.stored_vectors([e.id for e in data], 16)) == sorted(stored)


def test_ingest_error_after_some_batches_keeps_them_and_names_the_cause(store: Store) -> None:
    def fail_third(n: int) -> None:
        if n == 3:
            raise RuntimeError("model crashed")

    vectors = VectorMemoryStore(store, Recording([], on_batch=fail_third))
    with pytest.raises(IngestInterrupted) as info:
        vectors.ingest(entries(10), batch_size=2)
    # Batch 3 fails while the main thread waits for it, after batches 1 and 2 committed.
    assert info.value.committed == IngestCounts(inserted=4)
    assert isinstance(info.value.__cause__, ExecutionError)
    assert "model crashed" in str(info.value) and "4 entries committed" in str(info.value)
    assert store.count() == 4 and vectors.count() == 4
    assert VectorMemoryStore(store, HashingEmbedding(16), name="recording").ingest(
        entries(10), batch_size=2) == IngestCounts(inserted=6, unchanged=4)


def test_ingest_duplicate_id_in_a_later_batch(store: Store) -> None:
    data = [*entries(3), MemoryEntry("e001", "again")]
    with pytest.raises(IngestInterrupted) as info:
        VectorMemoryStore(store, HashingEmbedding(16)).ingest(data, batch_size=2)
    cause = info.value.__cause__
    assert isinstance(cause, InvalidEntryError) and cause.entry_id == "e001" and cause.index == 3
    assert "duplicate id 'e001'" in str(info.value)
    # The second batch is read (and rejected) while the first one embeds: nothing written.
    assert info.value.committed == IngestCounts() and store.count() == 0


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the test, whatever the runner inherited (a runner
    started in the background of a non-interactive shell ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ingest_sigint_rolls_back_the_open_batch(store: Store, default_sigint: None) -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def interrupt(n: int) -> None:
        if n == 4:  # while batch 3 is written (or about to be)
            os.kill(os.getpid(), signal.SIGINT)

    data = entries(20)
    vectors = VectorMemoryStore(store, Recording([], on_batch=interrupt))
    with pytest.raises(IngestInterrupted) as info:
        vectors.ingest(data, batch_size=3)
    committed = info.value.committed
    assert info.value.__cause__ is None
    assert str(info.value) == (f"interrupted: {committed.total} entries committed, "
                               "the batch in progress was rolled back")
    # Whole batches only, and the handler is restored.
    assert committed.total % 3 == 0 and 0 < committed.total < 20
    assert store.count() == committed.total == vectors.count()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    again = VectorMemoryStore(store, HashingEmbedding(16), name="recording").ingest(data, batch_size=3)
    assert again == IngestCounts(inserted=20 - committed.total, unchanged=committed.total)
    assert np.isclose(vectors.search(data[19].content, 1)[0][1], 1.0)


def test_ingest_sigint_as_the_last_batch_commits_still_stops_the_call(store: Store, default_sigint: None) -> None:
    # The Ctrl-C comes as the last batch commits (here: as its commit is reported): no
    # statement of the loop is left to see it, yet the call stops as it said it would (the
    # HNSW build that was due is not run) instead of returning as if nothing had been asked.
    said: list[str] = []

    def progress(phase: str, done: int, total: int | None) -> None:
        if phase == "write" and done == 9:
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here

    def hnsw_indexes() -> int:
        return int(store.read("SELECT count(*) AS n FROM pg_indexes WHERE schemaname = current_schema() "
                              "AND indexdef LIKE '%hnsw%'", {})[0].n)

    before = hnsw_indexes()
    vectors = VectorMemoryStore(store, HashingEmbedding(16), index_threshold=5)
    with pytest.raises(IngestInterrupted) as info:
        vectors.ingest(iter(entries(9)), batch_size=3, progress=progress, on_stop=lambda: said.append("stopping"))
    assert said == ["stopping"] and info.value.__cause__ is None
    assert info.value.committed == IngestCounts(inserted=9) and not info.value.rolled_back
    assert str(info.value) == "interrupted: 9 entries committed, every batch read was written"
    assert store.count() == 9 == vectors.count() and hnsw_indexes() == before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # Run again, the same entries are unchanged and the index that was due is built.
    assert vectors.ingest(entries(9), batch_size=3) == IngestCounts(unchanged=9)
    assert hnsw_indexes() == before + 1


def test_cli_embed_embeds_the_next_batch_before_the_previous_commit(store: Store, db_url: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # `tnsrag embed` runs the ingest loop: as above, the commit of batch i's vectors waits
    # (bounded) for batch i+1's embedding to start, which only a pipelined loop allows.
    from click.testing import CliRunner

    import tnsrag_db._cli.embed as embed_cli
    from tests.fix_db import SCHEMA
    from tnsrag_db._cli import main_group

    data = entries(6)
    VectorMemoryStore(store, HashingEmbedding(16)).ingest(data, batch_size=6, vectors=False)
    events: list[tuple[str, str]] = []
    embedding = Recording(events)
    monkeypatch.setattr(embed_cli, "resolve_embedding", lambda name: embedding)
    firsts = [data[i].content for i in range(0, 6, 2)]
    commits = 0

    def on_execute(conn: Any, statement: str, params: Any) -> None:
        if "embeddings" in statement:
            conn.info["test_vectors"] = True

    def on_commit(conn: Any) -> None:
        nonlocal commits
        # The writes commit on the main thread (the worker only reads and embeds).
        if not conn.info.pop("test_vectors", False) or threading.current_thread() is not threading.main_thread():
            return
        if not embedding.batches or commits >= len(firsts):
            return  # set-up reads before the first batch, the final count after the last
        if commits + 1 < len(firsts):
            embedding.started_event(firsts[commits + 1]).wait(10)
        events.append(("commit", firsts[commits]))
        commits += 1

    with watch(after=on_execute, commit=on_commit):
        res = CliRunner().invoke(main_group, ["embed", "--url", db_url.render_as_string(hide_password=False),
                                              "--schema", SCHEMA, "--corpus", store.corpus, "--embedding",
                                              "recording", "--batch-size", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert '"embedded": 6' in res.stdout
    order = [e for e in events if e[0] in ("embed", "commit")]
    for i in range(len(firsts) - 1):
        assert order.index(("embed", firsts[i + 1])) < order.index(("commit", firsts[i])), order
    assert VectorMemoryStore(store, embedding).count() == 6


class LocalModel:
    """A provider computing "on this machine" (``local_compute``): hash vectors after a pause
    of ``pause`` seconds per text, every call's texts logged. The signal comes from inside a call."""

    name = "local"
    local_compute = True

    def __init__(self, pause: float = 0.0, signal_at_call: int | None = None) -> None:
        self._hash = HashingEmbedding(16)
        self.calls: list[list[str]] = []
        self.pause = pause
        self.signal_at_call = signal_at_call

    def __call__(self, text: str) -> Sequence[float]:
        return self._hash(text)

    def embed_batch(self, texts: Sequence[str]) -> list[Sequence[float]]:
        self.calls.append(list(texts))
        if len(self.calls) == self.signal_at_call:
            os.kill(os.getpid(), signal.SIGINT)
        threading.Event().wait(self.pause * len(texts))
        return [self._hash(t) for t in texts]


def test_a_local_model_embeds_in_calls_sorted_by_length_and_each_entry_gets_its_own_vector(store: Store) -> None:
    # Lengths shuffled: the calls take the shortest texts first, and the vectors go back to their entries.
    data = [MemoryEntry(f"v{i:02d}", " ".join(f"word{i}x{k}" for k in range((i * 7) % 23 + 1))) for i in range(40)]
    model = LocalModel()
    vectors = VectorMemoryStore(store, model)
    assert vectors.ingest(data, batch_size=16) == IngestCounts(inserted=40)
    first = model.calls[0]
    assert len(first) == 4 and sorted(first, key=len) == first  # the first call, before any rate: 4 texts
    assert [len(t) for t in first] == sorted(len(e.content) for e in data[:16])[:4]
    assert sum(len(c) for c in model.calls) >= 40 and all(len(c) <= 16 for c in model.calls)
    for entry in data:  # its own text finds it first, at cosine 1
        (found, score), = vectors.search(entry.content, 1)
        assert found == entry.id and np.isclose(score, 1.0), (entry.id, found, score)


def test_sigint_stops_a_local_model_between_two_calls_and_says_so_once(store: Store, default_sigint: None) -> None:
    # 0.2 s per text: calls of two or three texts (half a second each), smaller on a loaded machine.
    model = LocalModel(pause=0.2, signal_at_call=6)
    said: list[str] = []
    data = entries(48)
    vectors = VectorMemoryStore(store, model)
    with pytest.raises(IngestInterrupted) as info:
        vectors.ingest(data, batch_size=8, on_stop=lambda: said.append("stopping"))
    assert said == ["stopping"]
    # The call the signal came in finished, and no other one started.
    assert len(model.calls) == 6, [len(c) for c in model.calls]
    assert all(len(c) < 8 for c in model.calls[1:]), [len(c) for c in model.calls]
    committed = info.value.committed.total
    assert committed % 8 == 0 and committed < 48
    assert store.count() == committed == vectors.count()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
