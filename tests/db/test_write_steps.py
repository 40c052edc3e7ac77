"""The entry write pipeline step by step (store.write), and extensions joining its transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tnsrag_db._db.pool import Connection
from tnsrag_db._errors import InvalidEntryError, ValidationError
from tnsrag_db._store import write
from tnsrag_db._store.corpus import Corpus
from tnsrag_db._store.staging import prepare_stage_tables
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import WriteExtension, WriteReport
from tnsrag_db._types import MemoryEntry


class _Rollback(Exception):
    pass


def _in_rolled_back_transaction(store: Store, work: Any) -> Any:
    """Run ``work(conn, corpus)`` in a transaction that is rolled back; return its result."""
    out: list[Any] = []
    with pytest.raises(_Rollback):
        with store.session.transaction(prepare=prepare_stage_tables) as conn:
            out.append(work(conn, Corpus(store.corpus, schema=store.schema, text_config="english")))
            raise _Rollback
    return out[0]


def _states(conn: Connection) -> dict[str, str | None]:
    return {r.id: r.state for r in conn.execute("SELECT id, state FROM tnsrag_stage_entries")}


def test_the_steps_classify_new_changed_and_unchanged(store: Store) -> None:
    store.add_all([MemoryEntry("same", "kept as it is"), MemoryEntry("text", "old words here"),
                   MemoryEntry("meta", "metadata only", metadata={"k": "1"})])
    batch = [MemoryEntry("same", "kept as it is"), MemoryEntry("text", "new words instead"),
             MemoryEntry("meta", "metadata only", metadata={"k": "2"}), MemoryEntry("fresh", "a new entry")]

    def work(conn: Connection, corpus: Corpus) -> dict[str, Any]:
        cfg = corpus.text_config(conn)
        staged = write.stage(conn, batch)
        assert staged == write.StagedBatch(4, False)
        staged_rows = conn.execute("SELECT count(*) FROM tnsrag_stage_entries").scalar_one()
        write.stage_terms(conn, staged, cfg)
        lens = {r.id: r.doc_len for r in conn.execute(
            "SELECT s.id, l.doc_len FROM tnsrag_stage_lens l JOIN tnsrag_stage_entries s USING (ord)")}
        report, old_len = write.classify(conn, corpus.name, staged)
        states = _states(conn)
        write.rewrite_changed(conn, corpus.name, report)
        old_postings = conn.execute(("SELECT count(*) FROM bm25_postings WHERE corpus = :c AND "
                                            "entry_id = 'text' AND lexeme = 'old'"), {"c": corpus.name}).scalar_one()
        write.write_postings(conn, corpus.name, report, old_len)
        new_postings = conn.execute(("SELECT count(*) FROM bm25_postings WHERE corpus = :c AND "
                                            "entry_id IN ('text', 'fresh')"), {"c": corpus.name}).scalar_one()
        n_docs = conn.execute("SELECT sum(n_docs) FROM bm25_stats WHERE corpus = :c",
                              {"c": corpus.name}).scalar_one()
        return {"rows": staged_rows, "lens": lens, "report": report, "old_len": old_len, "states": states,
                "old_postings": old_postings, "new_postings": new_postings, "n_docs": n_docs}

    out = _in_rolled_back_transaction(store, work)
    assert out["rows"] == 4
    assert out["lens"]["fresh"] == 2 and out["lens"]["text"] == 3  # "a" is a stop word
    report: WriteReport = out["report"]
    assert report.inserted == ["fresh"]
    assert sorted(report.updated) == ["meta", "text"] and report.content_changed == ["text"]
    assert report.unchanged == ["same"]
    assert out["old_len"] == 2  # "old words here": old, word (here is a stop word)
    assert out["states"] == {"same": "n", "text": "c", "meta": "u", "fresh": "i"}
    assert out["old_postings"] == 0  # rewrite dropped the old text's postings
    assert out["new_postings"] == 3 + 2
    assert out["n_docs"] == 4
    # Rolled back: the stored corpus is as before.
    old = store.get("text")
    assert old is not None and old.content == "old words here" and store.get("fresh") is None


def test_validate_names_the_entry_before_any_io(store: Store) -> None:
    with pytest.raises(InvalidEntryError, match="appears twice") as caught:
        write.validate_batch([MemoryEntry("a", "x"), MemoryEntry("b", "y"), MemoryEntry("a", "z")])
    assert caught.value.index == 2 and caught.value.entry_id == "a"
    with pytest.raises(InvalidEntryError, match="batch item 1 is a str"):
        write.validate_batch([MemoryEntry("a", "x"), "not an entry"])  # type: ignore[list-item]


def test_a_second_write_in_one_transaction_starts_from_an_empty_stage(store: Store) -> None:
    def work(conn: Connection) -> tuple[WriteReport, WriteReport]:
        first = store.writer.write_in(conn, [MemoryEntry("one", "first write")])
        second = store.writer.write_in(conn, [MemoryEntry("two", "second write")])
        return first, second

    first, second = store.writer.transaction(work)
    assert first.inserted == ["one"] and second.inserted == ["two"]
    assert store.count() == 2


class _Recorder(WriteExtension):
    analyze = ("edges",)

    def __init__(self, calls: list[str], fail_in: str | None = None) -> None:
        self.calls = calls
        self.fail_in = fail_in
        self.seen: WriteReport | None = None

    def _maybe_fail(self, where: str, label: str | None = None) -> None:
        self.calls.append(label or where)
        if where == self.fail_in:
            raise ValidationError(f"refused in {where}")

    def validate(self, batch: Sequence[MemoryEntry]) -> None:
        self._maybe_fail("validate")

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        self._maybe_fail("before")

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        # Inside the same transaction: the entries are visible, uncommitted.
        n = conn.execute("SELECT count(*) FROM entries WHERE corpus = :c", {"c": self.corpus}).scalar_one()
        self.seen = report
        self._maybe_fail("after", f"after:{n}")

    def finish(self, conn: Connection) -> None:
        self.calls.append("finish")

    corpus = ""


def test_extensions_run_in_order_inside_the_write(store: Store) -> None:
    calls: list[str] = []
    first, second = _Recorder(calls), _Recorder(calls)
    first.corpus = second.corpus = store.corpus
    report = store.write([MemoryEntry("a", "alpha"), MemoryEntry("b", "beta")], extensions=[first, second])
    assert report.inserted == ["a", "b"] and first.seen is report
    assert calls == ["validate", "validate", "before", "before", "after:2", "after:2", "finish", "finish"]


@pytest.mark.parametrize("where", ["validate", "before", "after"])
def test_an_extension_failure_rolls_the_whole_write_back(store: Store, where: str) -> None:
    calls: list[str] = []
    extension = _Recorder(calls, fail_in=where)
    extension.corpus = store.corpus
    with pytest.raises(ValidationError, match=f"refused in {where}"):
        store.write([MemoryEntry("a", "alpha")], extensions=[extension])
    assert store.count() == 0
    if where == "validate":
        assert calls == ["validate"]  # nothing else ran: no transaction was opened
    else:
        assert calls[-1] == "finish"  # cleaned up whatever before() set up


def test_an_empty_batch_runs_the_extensions_alone(store: Store) -> None:
    calls: list[str] = []
    extension = _Recorder(calls)
    extension.corpus = store.corpus
    assert store.write([], extensions=[extension]) == WriteReport()
    assert calls == ["validate", "before", "after:0", "finish"]
    assert store.write([]) == WriteReport()


class _HierarchyCheck(WriteExtension):
    """HierarchyIndex.add_all's check as an extension (the shape its module can move to)."""

    def __init__(self, index: Any) -> None:
        self.index = index

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        self.index.check_written(conn, [e.id for e in batch])


def test_a_hierarchy_check_joins_the_write_as_an_extension(store: Store) -> None:
    from tnsrag_db._errors import HierarchyError
    from tnsrag_db._indexes.hierarchy import HierarchyIndex

    check = _HierarchyCheck(HierarchyIndex(store))
    store.write([MemoryEntry("root", "the root"), MemoryEntry("leaf", "a leaf", parent_id="root")], extensions=[check])
    with pytest.raises(HierarchyError) as caught:
        store.write([MemoryEntry("orphan", "no parent", parent_id="missing")], extensions=[check])
    assert "orphan" in caught.value.ids or "missing" in str(caught.value)
    assert sorted(e.id for e in store.iter_entries()) == ["leaf", "root"]


def test_a_validated_batch_is_checked_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidEntryError, match="appears twice") as caught:
        write.ValidatedBatch([MemoryEntry("a", "x"), MemoryEntry("a", "y")])
    assert caught.value.index == 1  # the same error validate_batch raises
    batch = write.ValidatedBatch(MemoryEntry(f"v{i}", f"validated {i}") for i in range(3))
    assert write.ValidatedBatch(batch) is batch and isinstance(batch, tuple)
    checked: list[int] = []
    real = write.validate_batch

    def counting(entries: Any) -> list[MemoryEntry]:
        out = real(entries)
        checked.append(len(out))
        return out

    monkeypatch.setattr(write, "validate_batch", counting)
    assert store.write(batch).inserted == ["v0", "v1", "v2"]
    assert checked == []  # Store.write took the batch as validated
    store.write([MemoryEntry("plain", "a plain list")])
    assert checked == [1]  # anything else is validated
