"""Validity in time, ``as_of`` and kept versions: an entry outside its validity is found by
nothing, a corpus that keeps history keeps what its writes replace and its deletes close,
and an answer ``as_of`` an instant equals the answer of a fresh corpus holding exactly the
entries a replay of the history says were valid and recorded then."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy.engine import URL

import tnsrag_db
from tnsrag_db._errors import InvalidContextError, InvalidEntryError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store import expiry
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import STRATEGY_NAMES, build_strategy
from tnsrag_db._types import MemoryEntry, RAGContext
from tnsrag_db.admin import export_corpus

PAST = datetime(2020, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2999, 1, 1, tzinfo=timezone.utc)
WORDS = ("zebra", "horse", "stripes", "stable", "plains", "river")


def _embed(text: str) -> list[float]:
    """Word counts over :data:`WORDS` and a constant: no two vectors point apart (cosine > 0)."""
    words = text.split()
    return [1.0, *(float(words.count(w)) for w in WORDS)]


def _keys(docs: Any) -> set[str]:
    """The entries of results, a kept version named by the entry it was a version of."""
    return {d.metadata.get("versionOf", d.metadata["entryId"]) for d in docs}


def _found(store: Store, name: str, query: str, as_of: datetime | None = None) -> set[str]:
    strategy = build_strategy(name, store, embedding=_embed)
    return _keys(strategy.retrieve(query, RAGContext(100, as_of=as_of)))


def _clock(store: Store) -> datetime:
    return store.read("SELECT clock_timestamp() AS t", {})[0].t  # type: ignore[no-any-return]


@pytest.fixture
def memory(store: Store) -> Store:
    VectorMemoryStore(store, _embed).add_all([
        MemoryEntry("root", "zebra plains"),
        MemoryEntry("now", "zebra stripes now", parent_id="root", valid_from=PAST, valid_until=FUTURE),
        MemoryEntry("was", "zebra stripes were", parent_id="root", valid_until=PAST),
        MemoryEntry("later", "zebra stripes later", parent_id="root", valid_from=FUTURE),
        MemoryEntry("child", "zebra foal under the past one", parent_id="was"),
    ])
    return store


def test_entries_state_their_validity_and_refuse_a_bad_one() -> None:
    assert MemoryEntry("a", "x", valid_from=PAST).valid_from == PAST
    with pytest.raises(InvalidEntryError, match="valid_from .* has no time zone"):
        MemoryEntry("a", "x", valid_from=datetime(2030, 1, 1))
    with pytest.raises(InvalidEntryError, match="valid_until must be a datetime"):
        MemoryEntry("a", "x", valid_until="2030-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidEntryError, match="is not before valid_until"):
        MemoryEntry("a", "x", valid_from=FUTURE, valid_until=PAST)
    with pytest.raises(InvalidEntryError, match="U\\+001E"):
        MemoryEntry("a\x1e1", "x")
    with pytest.raises(InvalidContextError, match="as_of must be a timezone-aware datetime"):
        RAGContext(as_of=datetime(2030, 1, 1))
    assert RAGContext(as_of=PAST).with_max_results(3).as_of == PAST
    with pytest.raises(ValidationError, match="has no time zone"):
        with tnsrag_db.as_of(datetime(2030, 1, 1)):
            pass


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_no_strategy_returns_an_entry_outside_its_validity(memory: Store, name: str) -> None:
    found = _found(memory, name, "zebra stripes")
    assert found and not found & {"was", "later"}
    explained = build_strategy(name, memory, embedding=_embed).explain(  # type: ignore[attr-defined]
        "zebra stripes", RAGContext(10))
    assert not {r.document.metadata["entryId"] for r in explained.results} & {"was", "later"}


def test_reads_and_exports_answer_at_their_instant(memory: Store) -> None:
    assert memory.get("was") is None and memory.get("later") is None
    assert memory.get("now").valid_from == PAST  # type: ignore[union-attr]
    assert memory.count() == 3 and set(memory.get_many(["was", "now"])) == {"now"}
    out = io.StringIO()
    export_corpus(memory, out)  # every entry, whatever its validity (below)
    assert {json.loads(line)["id"] for line in out.getvalue().splitlines()} == {"root", "now", "was", "later", "child"}
    # An instant before the entries were written: nothing was recorded then.
    with tnsrag_db.as_of(PAST - timedelta(days=1)):
        assert memory.count() == 0 and memory.get("root") is None
    assert _found(memory, "keyword", "zebra", as_of=PAST - timedelta(days=1)) == set()


def test_query_command_answers_as_of(store: Store, db_url: URL) -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    store.set_history()
    store.add(MemoryEntry("pref", "zebra light"))
    between = _clock(store)
    store.add(MemoryEntry("pref", "zebra dark"))
    url = db_url.render_as_string(hide_password=False)
    base = ["query", "zebra", "--url", url, "--corpus", store.corpus, "--strategy", "keyword", "--json"]
    for extra, expected in (([], ["zebra dark"]), (["--as-of", between.isoformat()], ["zebra light"]),
                            (["--as-of", "2020-01-01T00:00:00Z"], [])):
        result = CliRunner().invoke(main_group, base + extra)
        assert result.exit_code == 0, result.output
        assert [d["content"] for d in json.loads(result.output)["results"]] == expected, extra
    result = CliRunner().invoke(main_group, [*base, "--as-of", "2020-01-01"])
    assert result.exit_code != 0 and "--as-of" in result.output
    # For people, the kept version is named by its entry's id and number, with no control character.
    result = CliRunner().invoke(main_group, [*base[:-1], "--as-of", between.isoformat()])
    assert result.exit_code == 0 and "pref (kept version 1)" in result.output, result.output
    assert "\x1e" not in result.output


def test_export_keeps_the_validity_and_ingest_reads_it_back(memory: Store, tmp_path: Any) -> None:
    from tnsrag_db._loaders import FileLoader

    out = io.StringIO()
    export_corpus(memory, out)
    records = {r["id"]: r for r in map(json.loads, out.getvalue().splitlines())}
    assert records["now"]["validFrom"] == PAST.isoformat() and records["now"]["validUntil"] == FUTURE.isoformat()
    assert "validFrom" not in records["root"]
    path = tmp_path / "memory.jsonl"
    path.write_text(out.getvalue() + json.dumps({"id": "bad", "content": "x", "validFrom": 5}) + "\n")
    with pytest.raises(InvalidEntryError, match="'validFrom' must be an ISO-8601 string"):
        list(FileLoader(path).load())
    path.write_text(out.getvalue())
    entries = {e.id: e for e in FileLoader(path).load()}
    assert (entries["now"].valid_from, entries["now"].valid_until) == (PAST, FUTURE)
    assert entries["root"].valid_from is None


def test_an_export_carries_every_entry_whatever_its_validity_and_the_restore_answers_alike(
        memory: Store, tmp_path: Any) -> None:
    """An entry true only in the past or from a later instant is still the corpus's: an
    ``as_of`` read finds it, so the export carries it (as it carries every edge), and so
    does a re-embedding (``iter_entries``); the child of a past entry is restored under it."""
    from tnsrag_db.admin import restore_corpus

    assert [e.id for e in memory.iter_entries()] == ["child", "later", "now", "root", "was"]
    path = tmp_path / "memory.jsonl"
    with path.open("w") as out:
        export_corpus(memory, out)
    restored = memory.with_corpus(memory.corpus + "_restored")
    try:
        restore_corpus(restored, path, embedding=_embed)
        assert [e.id for e in restored.iter_entries()] == ["child", "later", "now", "root", "was"]
        assert restored.get("child").parent_id == "was"  # type: ignore[union-attr]
        later = FUTURE + timedelta(days=1)
        for name in ("keyword", "vector", "hierarchical"):
            assert _found(restored, name, "zebra stripes") == _found(memory, name, "zebra stripes"), name
            assert _found(restored, name, "zebra stripes", as_of=later) == _found(memory, name, "zebra stripes",
                                                                                  as_of=later), name
        assert "later" in _found(restored, "keyword", "zebra stripes", as_of=later)
    finally:
        restored.drop_corpus()


def test_rewriting_an_entry_sets_or_clears_its_validity(store: Store) -> None:
    store.add(MemoryEntry("a", "text", valid_until=PAST))
    assert store.get("a") is None
    assert store.add(MemoryEntry("a", "text")).updated == 1  # the validity is a stored field
    assert store.get("a") is not None and store.get("a").valid_until is None  # type: ignore[union-attr]
    assert store.add(MemoryEntry("a", "text", valid_from=FUTURE)).updated == 1
    assert store.get("a") is None


def test_a_corpus_without_history_writes_over_and_deletes_outright(store: Store) -> None:
    store.add(MemoryEntry("pref", "light mode"))
    store.add(MemoryEntry("pref", "dark mode"))
    assert [v.entry.content for v in store.history("pref")] == ["dark mode"]
    assert store.delete("pref") and store.history("pref") == []
    assert not store.keeps_history()


def test_a_corpus_that_keeps_history_keeps_versions(store: Store) -> None:
    vectors = VectorMemoryStore(store, _embed)
    store.set_history()
    assert store.keeps_history()
    vectors.add_all([MemoryEntry("pref", "zebra light", metadata={"user": "7"})])
    t1 = _clock(store)
    assert vectors.add_all([MemoryEntry("pref", "zebra light", metadata={"user": "7"})]).unchanged == 1  # no version
    vectors.add_all([MemoryEntry("pref", "horse dark", metadata={"user": "7"})])
    t2 = _clock(store)
    assert store.get("pref").content == "horse dark"  # type: ignore[union-attr]
    assert store.count() == 1 and _found(store, "keyword", "zebra") == set()
    with tnsrag_db.as_of(t1):
        assert store.get("pref").content == "zebra light"  # type: ignore[union-attr]
        assert store.get("pref").metadata == {"user": "7"}  # type: ignore[union-attr]
        assert store.count({"user": "7"}) == 1
    for name in ("keyword", "vector", "hybrid"):
        assert _found(store, name, "zebra", as_of=t1) == {"pref"}
    assert _found(store, "keyword", "horse", as_of=t1) == set()
    versions = store.history("pref")
    assert [(v.entry.content, v.current) for v in versions] == [("zebra light", False), ("horse dark", True)]
    assert versions[0].recorded_until == versions[1].recorded_at and versions[1].recorded_until is None
    assert versions[0].entry.id == "pref" and versions[0].entry.metadata == {"user": "7"}
    # A delete is a version too: the entry is closed, found at t2 still.
    assert store.delete("pref") and store.get("pref") is None and not store.delete("pref")
    assert store.delete_where({"user": "7"}) == 0 and store.count() == 0
    with tnsrag_db.as_of(t2):
        assert store.get("pref").content == "horse dark"  # type: ignore[union-attr]
    assert _found(store, "vector", "horse", as_of=t2) == {"pref"}
    assert store.history("pref")[-1].recorded_until is not None
    # Writing it again opens a new version after the closed one.
    vectors.add_all([MemoryEntry("pref", "horse dark", metadata={"user": "7"})])
    assert [v.entry.content for v in store.history("pref")] == ["zebra light", "horse dark", "horse dark"]
    assert store.get("pref") is not None and _found(store, "keyword", "horse") == {"pref"}
    assert store.content_hashes(["pref"])  # an open entry: an identical write would be skipped
    store.delete("pref")
    assert store.content_hashes(["pref"]) == {}  # a closed one: writing it again is not skipped
    vectors.add_all([MemoryEntry("pref", "horse dark", metadata={"user": "7"})])
    # Opting out: deletes remove the entry outright; the versions kept stay.
    store.set_history(False)
    assert store.delete("pref") and store.get("pref") is None
    assert [v.current for v in store.history("pref")] == [False, False, False]
    assert store.clear() == 3 and store.history("pref") == []


def test_a_kept_version_keeps_its_vectors_and_postings(store: Store) -> None:
    store.set_history()
    vectors = VectorMemoryStore(store, _embed)
    vectors.add_all([MemoryEntry("k", "zebra stripes")])
    vectors.add_all([MemoryEntry("k", "horse stable")])
    with store.session.transaction() as conn:
        rows = conn.execute(("SELECT e.id, e.version_of, (SELECT count(*) FROM embeddings v WHERE v.corpus = "
                                    "e.corpus AND v.entry_id = e.id) AS vectors, cardinality(e.lexemes) AS terms "
                                    "FROM entries e WHERE e.corpus = :c ORDER BY e.id"), {"c": store.corpus}).all()
    assert [(r.id, r.version_of, r.vectors, r.terms) for r in rows] == [("k", None, 1, 2), ("k\x1e1", "k", 1, 2)]


def test_sweep_deletes_expired_versions_outright(store: Store) -> None:
    store.set_history()
    store.add(MemoryEntry("k", "old", expires_at=PAST))
    store.add(MemoryEntry("k", "new"))
    assert len(store.history("k")) == 2
    assert store.sweep().deleted == 1
    assert [v.entry.content for v in store.history("k")] == ["new"]


def test_the_async_store_keeps_history_and_answers_as_of(store: Store) -> None:
    import asyncio

    from tnsrag_db._store.aio import AsyncStore

    async def scenario() -> tuple[list[str], str | None, str | None]:
        async with AsyncStore(store) as a:
            await a.set_history()
            await a.add(MemoryEntry("k", "first"))
            between = _clock(store)
            await a.add(MemoryEntry("k", "second"))
            now = await a.get("k")
            with tnsrag_db.as_of(between):
                then = await a.get("k")
            return ([v.entry.content for v in await a.history("k")], now and now.content, then and then.content)

    assert asyncio.run(scenario()) == (["first", "second"], "second", "first")


def test_set_history_refuses_a_bad_value(store: Store) -> None:
    with pytest.raises(ValidationError, match="keep must be a bool"):
        store.set_history("yes")  # type: ignore[arg-type]


# -- as_of equals a replay of the history --------------------------------------------

@dataclass
class _Version:
    content: str
    valid_from: datetime | None
    valid_until: datetime | None
    expires_at: datetime | None
    since: int  # the checkpoint after which it is recorded
    until: int | None = None  # the checkpoint after which it is closed

    def same(self, other: _Version) -> bool:
        return (self.content, self.valid_from, self.valid_until, self.expires_at) == (
            other.content, other.valid_from, other.valid_until, other.expires_at)


@dataclass
class _Replay:
    versions: dict[str, list[_Version]] = field(default_factory=dict)

    def write(self, key: str, version: _Version) -> None:
        kept = self.versions.setdefault(key, [])
        if kept and kept[-1].until is None:
            if kept[-1].same(version):
                return  # an identical write is no new version
            kept[-1].until = version.since
        kept.append(version)

    def delete(self, key: str, at: int) -> None:
        kept = self.versions.get(key)
        if kept and kept[-1].until is None:
            kept[-1].until = at

    def at(self, checkpoint: int, instant: datetime) -> dict[str, str]:
        """The entries valid, recorded and not expired at ``instant``, the checkpoint after op ``checkpoint``."""
        out = {}
        for key, kept in self.versions.items():
            for v in kept:
                if (v.since <= checkpoint and (v.until is None or v.until > checkpoint)
                        and (v.valid_from is None or v.valid_from <= instant)
                        and (v.valid_until is None or v.valid_until > instant)
                        and (v.expires_at is None or v.expires_at > instant)):
                    out[key] = v.content
        return out


_OFFSET = st.one_of(st.none(), st.integers(-400, 1500))  # ms from the last checkpoint
_OPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from("abcd"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
              _OFFSET, _OFFSET, _OFFSET),
    st.tuples(st.just("delete"), st.sampled_from("abcd")),
    st.tuples(st.just("merge")),
), min_size=3, max_size=12)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=_OPS, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=2))
def test_as_of_answers_equal_a_replay_of_the_history(make_store: Any, ops: list[tuple[Any, ...]],
                                                     query: list[str]) -> None:
    store: Store = make_store(merge_after_entries=10**9)
    store.set_history()
    vectors = VectorMemoryStore(store, _embed)
    replay = _Replay()
    checkpoints = [_clock(store)]

    def offset(ms: int | None) -> datetime | None:
        return None if ms is None else checkpoints[-1] + timedelta(milliseconds=ms)

    for i, op in enumerate(ops, start=1):
        if op[0] == "write":
            _, key, words, a, b, e = op
            start, end = offset(a), offset(b)
            if start is not None and end is not None and start >= end:
                start, end = end - timedelta(milliseconds=1), start + timedelta(milliseconds=1)
            version = _Version(" ".join(words), start, end, offset(e), i)
            vectors.add_all([MemoryEntry(key, version.content, valid_from=start, valid_until=end,
                                         expires_at=version.expires_at)])
            replay.write(key, version)
        elif op[0] == "delete":
            store.delete(op[1])
            replay.delete(op[1], i)
        else:
            store.merge_postings()
        checkpoints.append(_clock(store))
    text = " ".join(query)
    for j, instant in enumerate(checkpoints):
        expected = replay.at(j, instant)
        fresh: Store = make_store()
        try:
            VectorMemoryStore(fresh, _embed).add_all([MemoryEntry(k, c) for k, c in expected.items()])
            for name in ("keyword", "vector", "hybrid"):
                assert _found(store, name, text, as_of=instant) == _found(fresh, name, text), (name, j, ops)
            with tnsrag_db.as_of(instant):
                assert store.count() == len(expected)
                assert {k: e.content for k in expected if (e := store.get(k)) is not None} == expected
        finally:
            fresh.drop_corpus()
    store.drop_corpus()


def _checked(store: Store, statement: tuple[str, dict[str, Any]]) -> tuple[int, list[str]]:
    """The rows ``statement`` (a ranking) probed to check them (the loops of the check's entry
    scan, alias ``xr``) and the ids it returned."""
    with store.session.transaction() as conn:
        plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement[0]}", statement[1]).scalar_one()
        ids = sorted(r[0] for r in conn.execute(statement[0], statement[1]))

    def probes(node: dict[str, Any]) -> int:
        own = int(node.get("Actual Loops", 0)) if str(node.get("Alias", "")).startswith("xr") else 0
        return own + sum(probes(child) for child in node.get("Plans", []))

    return probes(plan[0]["Plan"]), ids


def test_where_only_kept_versions_are_out_a_read_tells_them_by_their_ids(store: Store) -> None:
    """A read now of a corpus whose only rows left out are kept versions probes no row (the
    versions' ids tell them apart); a delete, an ``as_of`` or an expired entry brings the
    probes back, and the answers are the same either way."""
    store.set_history()
    vectors = VectorMemoryStore(store, _embed)
    vectors.add_all([MemoryEntry(f"k{i}", "zebra stripes" if i % 2 else "zebra plains") for i in range(6)])
    vectors.add_all([MemoryEntry("k0", "horse stable"), MemoryEntry("k1", "horse river")])  # two versions
    t = _clock(store)

    def rankings() -> list[tuple[str, dict[str, Any]]]:
        keyword = BM25Index(store).ranking_statement("zebra", 10)
        return [(keyword.sql, dict(keyword.params)), vectors.candidates_sql(_embed("zebra"), 10)]

    def exclusion() -> int:
        return int(store.read(f"SELECT {expiry.exclusion(':c')} AS s", {"c": store.corpus})[0].s)

    assert exclusion() == 1
    for statement, live in zip(rankings(), (["k2", "k3", "k4", "k5"], [f"k{i}" for i in range(6)]), strict=True):
        assert _checked(store, statement) == (0, live)
    store.delete("k5")  # an entry a delete closed: its id is no version's
    assert exclusion() == 2
    for statement, live in zip(rankings(), (["k2", "k3", "k4"], [f"k{i}" for i in range(5)]), strict=True):
        probes, ids = _checked(store, statement)
        assert probes > 0 and ids == live, (probes, ids)
    assert _found(store, "keyword", "zebra") == {"k2", "k3", "k4"}
    assert _found(store, "keyword", "zebra", as_of=t) == {"k2", "k3", "k4", "k5"}  # an as_of: gate 2
