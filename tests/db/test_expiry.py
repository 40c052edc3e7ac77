"""Expiry and forgetting: an expired or deleted text is found by nothing (no strategy,
explain, get, count or export), and a sweep deletes the expired with their postings and
vectors."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy.engine import URL

from tnsrag_db._errors import ConfigurationError, InvalidEntryError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import STRATEGY_NAMES, build_strategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext
from tnsrag_db.admin import corpus_stats, export_corpus

PAST = datetime(2020, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2999, 1, 1, tzinfo=timezone.utc)


def _embed(text: str) -> list[float]:
    """Every text about zebras points one way, everything else another."""
    return [1.0, 0.0] if "zebra" in text else [0.0, 1.0]


def _ids(store: Store, name: str, query: str = "zebra stripes") -> set[str]:
    strategy = build_strategy(name, store, embedding=_embed)
    return {d.metadata["entryId"] for d in strategy.retrieve(query, RAGContext(10))}


@pytest.fixture
def memory(store: Store) -> Store:
    VectorMemoryStore(store, _embed).add_all([
        MemoryEntry("root", "Animals of the plains: zebra notes."),
        MemoryEntry("kept", "zebra stripes are kept", parent_id="root", expires_at=FUTURE),
        MemoryEntry("gone", "zebra stripes expired long ago", parent_id="root", expires_at=PAST),
        MemoryEntry("child", "a zebra foal under the expired one", parent_id="gone"),
        MemoryEntry("other", "horse stable"),
    ])
    return store


def test_entries_carry_their_expiry_and_refuse_a_bad_one() -> None:
    assert MemoryEntry("a", "x", ttl=5).ttl == 5.0
    with pytest.raises(InvalidEntryError, match="expires_at .* has no time zone"):
        MemoryEntry("a", "x", expires_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidEntryError, match="expires_at must be a datetime"):
        MemoryEntry("a", "x", expires_at="2030-01-01")  # type: ignore[arg-type]
    for bad in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(InvalidEntryError, match="ttl must be a positive finite number"):
            MemoryEntry("a", "x", ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidEntryError, match="expires_at or ttl, not both"):
        MemoryEntry("a", "x", expires_at=FUTURE, ttl=5)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_no_strategy_returns_an_expired_entry(memory: Store, name: str) -> None:
    found = _ids(memory, name)
    assert "gone" not in found
    assert found  # the others are still found


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_no_explanation_shows_an_expired_entry(memory: Store, name: str) -> None:
    strategy = build_strategy(name, memory, embedding=_embed)
    explained = strategy.explain("zebra stripes", RAGContext(10))  # type: ignore[attr-defined]
    assert "gone" not in {r.document.metadata["entryId"] for r in explained.results}


def test_reads_and_exports_leave_an_expired_entry_out(memory: Store) -> None:
    assert memory.get("gone") is None
    assert set(memory.get_many(["gone", "kept"])) == {"kept"}
    assert memory.get("kept").expires_at == FUTURE  # type: ignore[union-attr]
    assert memory.count() == 4 and memory.count({"tier": "SEMANTIC"}) == 4
    assert "gone" not in {e.id for e in memory.iter_entries()}
    out = io.StringIO()
    export_corpus(memory, out)
    assert "expired long ago" not in out.getvalue()
    assert [r[0] for r in BM25Index(memory).search("long ago", 10)] == []


def test_an_entry_is_found_until_it_expires(store: Store) -> None:
    store.add_all([MemoryEntry("soon", "a zebra for a moment", ttl=3600), MemoryEntry("stay", "a zebra for good")])
    assert _ids(store, "keyword") == {"soon", "stay"}
    # The clock is not waited for: the expiry is moved to the past, as time would.
    with store.session.transaction() as conn:
        conn.execute(("UPDATE entries SET expires_at = now() - interval '1 second' "
                             "WHERE corpus = :c AND id = 'soon'"), {"c": store.corpus})
    assert _ids(store, "keyword") == {"stay"}
    assert store.get("soon") is None


def test_writing_an_entry_again_sets_or_clears_its_expiry(store: Store) -> None:
    store.add(MemoryEntry("a", "text", expires_at=PAST))
    assert store.get("a") is None
    assert store.add(MemoryEntry("a", "text")).updated == 1  # no expiry now: it lives again
    assert store.get("a") is not None and store.get("a").expires_at is None  # type: ignore[union-attr]
    assert store.add(MemoryEntry("a", "text", ttl=60)).updated == 1
    assert store.add(MemoryEntry("a", "text", ttl=60)).updated == 1  # each write of a ttl renews it
    expires = store.get("a").expires_at  # type: ignore[union-attr]
    assert expires is not None and expires > datetime.now(timezone.utc)


def test_a_merged_expired_entry_is_not_scored(make_store: object) -> None:
    store = make_store(merge_after_entries=10**9)  # type: ignore[operator]
    store.add_all([MemoryEntry(f"d{i}", f"zebra number {i}", expires_at=PAST if i % 2 else None) for i in range(20)])
    store.merge_postings()
    found = [r[0] for r in BM25Index(store).search("zebra", 50)]
    assert sorted(found) == sorted(f"d{i}" for i in range(0, 20, 2))


@pytest.mark.parametrize("merged", [False, True])
def test_keyword_search_finds_the_live_entries_below_many_expired_better_ones(make_store: object, merged: bool) -> None:
    """The best 60 entries for the query expired: more than keyword search's candidates (it
    checks its best rows first), so it ranks on past them to the live ones, plain and pruned."""
    store = make_store(merge_after_entries=10**9)  # type: ignore[operator]
    words = [f"w{j}" for j in range(12)]
    store.add_all([MemoryEntry(f"x{i:02d}", f"zebra quagga quagga quagga n{i}", expires_at=PAST) for i in range(60)]
                  + [MemoryEntry(f"l{i}", " ".join(["zebra quagga", *words[:i]])) for i in range(10)]
                  + [MemoryEntry(f"z{i:03d}", f"zebra filler {i}") for i in range(100)])
    if merged:
        store.merge_postings()
    expected = [f"l{i}" for i in range(5)]  # live, shorter first
    for prune_min_df in (10**9, 10):  # the plain scoring, then the pruned (zebra is frequent)
        for query in ("quagga", "zebra quagga"):
            found = [r[0] for r in BM25Index(store, prune_min_df=prune_min_df).search(query, 5)]
            assert found == expected, (prune_min_df, query, found)


def _entry_probes(store: Store, query: str) -> tuple[int, list[str]]:
    """The probes of entry rows a keyword ranking of ``query`` made to check them (the check's
    alias ``xr``), and the ids it returned."""
    statement = BM25Index(store).ranking_statement(query, 5)
    with store.session.transaction() as conn:
        plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.sql}",
                            dict(statement.params)).scalar_one()
        ids = [r[0] for r in conn.execute(statement.sql, dict(statement.params))]

    def probes(node: dict[str, object]) -> int:
        own = int(node.get("Actual Loops", 0)) if str(node.get("Alias", "")).startswith("xr") else 0  # type: ignore[call-overload]
        return own + sum(probes(child) for child in node.get("Plans", []))  # type: ignore[attr-defined]

    return probes(plan[0]["Plan"]), ids


@pytest.mark.parametrize("merged", [False, True])
def test_keyword_search_checks_only_rows_it_returns_and_only_when_some_entry_is_out(make_store: object,
                                                                                  merged: bool) -> None:
    store = make_store(merge_after_entries=10**9)  # type: ignore[operator]
    store.add_all([MemoryEntry(f"d{i:03d}", "zebra note " + "word " * i) for i in range(200)])  # no two tie
    if merged:
        store.merge_postings()
    probes, before = _entry_probes(store, "zebra note")
    assert probes == 0 and len(before) == 5  # no entry has a bound: nothing is checked
    store.add(MemoryEntry("bounded", "an entry valid since 2020", valid_from=PAST, expires_at=FUTURE))
    assert _entry_probes(store, "zebra note") == (0, before)  # bounds, none outside them now
    store.add(MemoryEntry("gone", "zebra note zebra note", expires_at=PAST))  # the best match, expired
    probes, after = _entry_probes(store, "zebra note")
    # Its rows are checked in score order until five are live: a few probes, not one per entry.
    assert after == before and 0 < probes <= 20, probes


def _stored(store: Store, ids: list[str]) -> dict[str, int]:
    """Rows that still hold these entries: entries, postings (rows, and block numbers), vectors."""
    with store.session.transaction() as conn:
        def n(sql: str) -> int:
            return int(conn.execute(sql, {"c": store.corpus, "ids": ids}).scalar_one())

        return {
            "entries": n("SELECT count(*) FROM entries WHERE corpus = :c AND id = ANY(:ids)"),
            "postings": n("SELECT count(*) FROM bm25_postings WHERE corpus = :c AND entry_id = ANY(:ids)"),
            "docs": n("SELECT count(*) FROM bm25_docs WHERE corpus = :c AND entry_id = ANY(:ids)"),
            "embeddings": n("SELECT count(*) FROM embeddings WHERE corpus = :c AND entry_id = ANY(:ids)"),
            "tombstones": n("SELECT count(*) FROM bm25_tombstones WHERE corpus = :c"),
            "block_postings": n("SELECT coalesce(sum(n), 0) FROM bm25_blocks WHERE corpus = :c"),
        }


def test_sweep_deletes_the_expired_with_their_postings_and_vectors(make_store: object) -> None:
    store = make_store(merge_after_entries=10**9)  # type: ignore[operator]
    vectors = VectorMemoryStore(store, _embed)
    vectors.add_all([MemoryEntry(f"m{i}", f"zebra merged {i}", expires_at=PAST if i < 5 else None)
                     for i in range(10)])
    store.merge_postings()  # these in blocks
    vectors.add_all([MemoryEntry(f"r{i}", f"zebra rows {i}", expires_at=PAST if i < 5 else FUTURE)
                     for i in range(10)])  # these as rows
    gone = [f"m{i}" for i in range(5)] + [f"r{i}" for i in range(5)]
    before = _stored(store, gone)
    assert before["entries"] == 10 and before["postings"] > 0 and before["docs"] == 5 and before["embeddings"] == 10
    blocks_before = before["block_postings"]
    stats = corpus_stats(store)
    assert (stats.expired, stats.expiring, stats.next_expiry) == (10, 5, FUTURE)
    report = store.sweep()
    assert report.deleted == 10 and report.tombstones == 5
    after = _stored(store, gone)
    assert after == {"entries": 0, "postings": 0, "docs": 0, "embeddings": 0, "tombstones": 0,
                     # three terms each: the expired merged ones out, the merge moved the live rows in
                     "block_postings": blocks_before - 5 * 3 + 5 * 3}
    assert store.sweep().deleted == 0
    assert corpus_stats(store).expired == 0
    assert sorted(r[0] for r in BM25Index(store).search("zebra", 50)) == sorted(
        [f"m{i}" for i in range(5, 10)] + [f"r{i}" for i in range(5, 10)])


def test_forget_by_key_filter_and_age_leaves_nothing_to_find(memory: Store) -> None:
    memory.add_all([MemoryEntry("note1", "zebra diary one", source="diary"),
                    MemoryEntry("note2", "zebra diary two", source="diary")])
    with memory.session.transaction() as conn:  # "kept" was written a year ago
        conn.execute(("UPDATE entries SET created_at = now() - interval '365 days' "
                             "WHERE corpus = :c AND id = 'kept'"), {"c": memory.corpus})
    assert memory.delete_where({"source": "diary"}) == 2
    assert memory.delete_where(older_than=timedelta(days=30)) == 1
    assert memory.delete_where(older_than=datetime.now(timezone.utc) - timedelta(days=30)) == 0
    assert memory.delete("other") is True
    forgotten = ["note1", "note2", "kept", "other"]
    for name in STRATEGY_NAMES:
        assert not set(forgotten) & _ids(memory, name, "zebra stripes diary horse"), name
        explained = build_strategy(name, memory, embedding=_embed).explain(  # type: ignore[attr-defined]
            "zebra stripes diary horse", RAGContext(10))
        assert not set(forgotten) & {r.document.metadata["entryId"] for r in explained.results}, name
    out = io.StringIO()
    export_corpus(memory, out)
    assert not set(forgotten) & {json.loads(line).get("id") for line in out.getvalue().splitlines()}
    assert all(v == 0 for k, v in _stored(memory, forgotten).items() if k not in ("tombstones", "block_postings"))


def test_forget_refuses_a_bad_age(store: Store) -> None:
    with pytest.raises(ValidationError, match="older_than .* has no time zone"):
        store.delete_where(older_than=datetime(2020, 1, 1))
    with pytest.raises(ValidationError, match="older_than must be a positive timedelta"):
        store.delete_where(older_than=timedelta(0))
    with pytest.raises(ValidationError, match="older_than must be a datetime or a timedelta"):
        store.delete_where(older_than=30)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="at least one filter or older_than"):
        store.delete_where()


def test_db_sweep_command(memory: Store, db_url: URL) -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    url = db_url.render_as_string(hide_password=False)
    result = CliRunner().invoke(main_group, ["db", "sweep", "--url", url, "--corpus", memory.corpus, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["corpora"] == [
        {"corpus": memory.corpus, "deleted": 1, "tombstones_purged": 0, "vacuumed": False}]
    result = CliRunner().invoke(main_group, ["stats", "--url", url, "--corpus", memory.corpus])
    assert result.exit_code == 0, result.output
    assert "expiry:   0 expired" in result.output and "1 expiring, next at 2999-01-01" in result.output


def test_export_keeps_the_expiry_and_ingest_reads_it_back(memory: Store, make_store: object, tmp_path: object) -> None:
    from pathlib import Path

    from tnsrag_db._loaders import FileLoader

    out = io.StringIO()
    export_corpus(memory, out)
    records = {r["id"]: r for r in map(json.loads, out.getvalue().splitlines())}
    assert records["kept"]["expiresAt"] == FUTURE.isoformat() and "expiresAt" not in records["root"]
    path = Path(str(tmp_path)) / "memory.jsonl"
    path.write_text(out.getvalue() + json.dumps({"id": "brief", "content": "x", "ttlSeconds": 60}) + "\n")
    entries = {e.id: e for e in FileLoader(path).load()}
    assert entries["kept"].expires_at == FUTURE and entries["root"].expires_at is None
    assert entries["brief"].ttl == 60.0


def test_the_async_store_sweeps_and_forgets_by_age(store: Store) -> None:
    import asyncio

    from tnsrag_db import AsyncStore

    store.add_all([MemoryEntry("a", "old text", expires_at=PAST), MemoryEntry("b", "new text")])

    async def scenario() -> tuple[int, int, int]:
        astore = AsyncStore(store)
        try:
            swept = (await astore.sweep()).deleted
            aged = await astore.delete_where(older_than=timedelta(days=1))
            return swept, aged, await astore.count()
        finally:
            await astore.close()

    assert asyncio.run(scenario()) == (1, 0, 1)


def test_tnsrag_delete_older_than(memory: Store, db_url: URL) -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    with memory.session.transaction() as conn:
        conn.execute(("UPDATE entries SET created_at = now() - interval '40 days' "
                             "WHERE corpus = :c AND id IN ('root', 'other')"), {"c": memory.corpus})
    url = db_url.render_as_string(hide_password=False)
    base = ["delete", "--url", url, "--corpus", memory.corpus, "--json", "--older-than", "30"]
    dry = CliRunner().invoke(main_group, [*base, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["ids"] == ["other", "root"]
    done = CliRunner().invoke(main_group, [*base, "--filter", "source=nowhere"])
    assert json.loads(done.output)["deleted"] == 0
    done = CliRunner().invoke(main_group, base)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"corpus": memory.corpus, "deleted": 2, "older_than_days": 30.0}
    assert memory.get("root") is None and memory.get("kept") is not None
    refused = CliRunner().invoke(main_group, [*base, "--id-prefix", "x"])
    assert refused.exit_code != 0 and "--older-than" in refused.output


def test_a_corpus_default_ttl_per_tier_applies_to_entries_written_without_one(store: Store) -> None:
    store.set_expiry(3600, tiers={"WORKING": 60, MemoryTier.PROCEDURAL: None})
    assert store.expiry_policy() == {"ttl": 3600.0, "tiers": {"WORKING": 60.0, "PROCEDURAL": None}}
    store.add_all([MemoryEntry("w", "working note", MemoryTier.WORKING),
                   MemoryEntry("s", "semantic fact"),
                   MemoryEntry("p", "procedure", MemoryTier.PROCEDURAL),
                   MemoryEntry("own", "own expiry wins", MemoryTier.WORKING, expires_at=FUTURE)])
    with store.session.transaction() as conn:
        left = dict(conn.execute(
            "SELECT id, extract(epoch FROM expires_at - now()) FROM entries WHERE corpus = :c",
            {"c": store.corpus}).all())
    assert 0 < left["w"] <= 60 and 60 < left["s"] <= 3600 and left["p"] is None
    assert store.get("own").expires_at == FUTURE  # type: ignore[union-attr]
    assert corpus_stats(store).to_dict()["expiry"]["default"] == {"ttl": 3600.0,
                                                                  "tiers": {"WORKING": 60.0, "PROCEDURAL": None}}
    store.set_expiry()
    assert store.expiry_policy() is None and corpus_stats(store).default_expiry is None
    assert store.add(MemoryEntry("later", "written after the default went")).inserted == 1
    assert store.get("later").expires_at is None  # type: ignore[union-attr]
    assert store.get("w").expires_at is not None  # type: ignore[union-attr]  # written before: kept
    for bad, match in ((0, "ttl must be a positive"), (float("inf"), "ttl must be a positive")):
        with pytest.raises(ValidationError, match=match):
            store.set_expiry(bad)
    with pytest.raises(ValidationError, match="tiers"):
        store.set_expiry(tiers={"NOPE": 5})

