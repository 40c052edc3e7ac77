"""Consolidation: duplicates of a tier found in SQL (the same text, or vectors at least as
similar as a threshold), merged into a survivor whose aliases reads resolve, or linked by
edges; promotion between tiers by a rule; nothing written on a dry run or a failure."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace

import pytest
from sqlalchemy.engine import URL

from tnsrag_db._errors import ConfigurationError, DanglingReferenceError, ValidationError
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import content_hash
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext

#: A direction per topic; a text's vector leans by its "~n" marker (n degrees off its topic).
TOPICS = {"deploy": 0.0, "lunch": 90.0}


def _embed(text: str) -> list[float]:
    topic = next((t for t in TOPICS if t in text), None)
    if topic is None:
        return [0.0, 0.0, 1.0]
    lean = float(text.split("~")[1].split()[0]) if "~" in text else 0.0
    angle = math.radians(TOPICS[topic] + lean)
    return [math.cos(angle), math.sin(angle), 0.0]


def _entries() -> list[MemoryEntry]:
    return [
        MemoryEntry("d1", "the deploy runs at five", MemoryTier.WORKING, metadata={"who": "ann"}),
        MemoryEntry("d2", "the deploy runs at five", MemoryTier.WORKING, metadata={"who": "bob"}),
        MemoryEntry("d3", "deploy at five o'clock ~5", MemoryTier.WORKING),  # cos 5° = 0.996
        MemoryEntry("d4", "deploy is at 5 pm ~30", MemoryTier.WORKING),      # cos 30° = 0.866
        MemoryEntry("l1", "lunch is at noon", MemoryTier.WORKING),
        MemoryEntry("s1", "the deploy runs at five", MemoryTier.SEMANTIC),  # another tier: never paired
        MemoryEntry("o1", "an unrelated note", MemoryTier.WORKING),
        MemoryEntry("c1", "a detail under the second copy", MemoryTier.EPISODIC, parent_id="d2"),
    ]


@pytest.fixture
def memory(store: Store) -> tuple[Store, VectorMemoryStore]:
    vectors = VectorMemoryStore(store, _embed)
    vectors.add_all(_entries())
    GraphStore(store).add_edges([Edge("l1", "d2", "mentions"), Edge("d3", "o1", "cites"), Edge("d2", "d1", "same")])
    return store, vectors


def _count(store: Store, table: str, column: str, ids: Sequence[str]) -> int:
    return int(store.read(f"SELECT count(*) AS n FROM {table} WHERE corpus = :c AND {column} = ANY(:ids)",
                          {"c": store.corpus, "ids": list(ids)})[0].n)


def test_identical_texts_merge_into_the_first_written_and_its_aliases_resolve(memory: tuple[Store, VectorMemoryStore]
                                                                              ) -> None:
    store, _ = memory
    report = store.consolidate("WORKING")
    assert [(g.survivor, g.others, g.similarity) for g in report.groups] == [("d1", ("d2",), 1.0)]
    assert (report.pairs, report.merged, report.skipped, report.examined) == (1, 1, 0, 6)
    # d2 is gone through the delete path: no row, posting or vector of it is left.
    assert store.read("SELECT id FROM entries WHERE corpus = :c AND id = 'd2'", {"c": store.corpus}) == []
    assert _count(store, "bm25_postings", "entry_id", ["d2"]) == 0
    assert _count(store, "embeddings", "entry_id", ["d2"]) == 0
    # Its id resolves to the survivor; the other tier's copy is untouched.
    got = store.get("d2")
    assert got is not None and got.id == "d1" and got.metadata == {"who": "ann"}
    assert {k: v.id for k, v in store.get_many(["d1", "d2", "nope"]).items()} == {"d1": "d1", "d2": "d1"}
    assert store.get("s1") is not None
    # Its edges moved to the survivor (the one between the two is gone, not a self-loop).
    graph = GraphStore(store)
    assert [(e.src, e.dst, e.relation) for e in graph.neighbours("l1")] == [("l1", "d1", "mentions")]
    assert graph.neighbours("d1") == []
    # New edges naming the alias reach the survivor; its neighbours are the survivor's.
    assert graph.add_edge("d2", "o1", "cites").inserted == 1
    assert graph.add_edges([Edge("l1", "d2", "mentions", 2.0)]).updated == 1
    assert [(e.src, e.dst, e.weight) for e in graph.neighbours("d2")] == [("d1", "o1", 1.0)]
    assert [(e.dst, e.weight) for e in graph.neighbours("l1")] == [("d1", 2.0)]
    with pytest.raises(ValidationError, match="same entry once aliases are resolved"):
        graph.add_edge("d2", "d1")
    with pytest.raises(DanglingReferenceError, match="'nope'"):
        graph.add_edge("d2", "nope")
    # d2's child now hangs under the survivor (rewritten: its change hash is the new entry's).
    child = store.get("c1")
    assert child is not None and child.parent_id == "d1"
    assert store.content_hashes(["c1"])["c1"] == content_hash(child)
    # A second run finds nothing more.
    assert store.consolidate("WORKING").groups == ()


def test_near_duplicates_above_the_threshold_merge_through_the_application_function(
        memory: tuple[Store, VectorMemoryStore]) -> None:
    store, vectors = memory
    seen: list[list[str]] = []

    def merge(entries: Sequence[MemoryEntry]) -> MemoryEntry:
        seen.append([e.id for e in entries])
        # Keep the last one's id, with every text in it and the metadata of all.
        metadata: dict[str, str] = {}
        for e in entries:
            metadata.update(e.metadata)
        return replace(entries[-1], content="merged ~20 " + " / ".join(e.content for e in entries),
                       metadata=metadata)

    dry = store.consolidate("WORKING", threshold=0.99, vectors=vectors, dry_run=True)
    assert [(g.survivor, g.others) for g in dry.groups] == [("d1", ("d2", "d3"))]
    assert dry.merged == 0 and store.count() == 8 and seen == []  # a dry run writes nothing, merges nothing
    report = store.consolidate("WORKING", threshold=0.99, vectors=vectors, merge=merge)
    assert seen == [["d1", "d2", "d3"]]
    assert [(g.survivor, g.others) for g in report.groups] == [("d3", ("d1", "d2"))]
    assert report.merged == 2 and round(report.groups[0].similarity, 3) == 0.996
    survivor = store.get("d1")
    assert survivor is not None and survivor.id == "d3" and survivor.metadata == {"who": "bob"}
    assert survivor.content.count("deploy") == 3
    # The merged text was embedded again through vectors=, and search finds it by its new words.
    stored = vectors.stored_vectors(["d3"], 3)["d3"]
    assert stored.tolist() == pytest.approx(_embed("deploy ~20"), abs=1e-6)
    keyword = build_strategy("keyword", store)
    assert [d.metadata["entryId"] for d in keyword.retrieve("o'clock", RAGContext(5))] == ["d3"]
    # d4 (cos 0.866) stays: below the threshold.
    assert store.get("d4") is not None and store.get("d4").id == "d4"  # type: ignore[union-attr]


def test_linking_writes_edges_both_ways_and_deletes_nothing(memory: tuple[Store, VectorMemoryStore]) -> None:
    store, vectors = memory
    report = store.consolidate("WORKING", threshold=0.85, mode="link", relation="similar")
    assert report.merged == 0 and report.linked == 2 * report.pairs and store.count() == 8
    assert [(g.survivor, g.others) for g in report.groups] == [("d1", ("d2", "d3", "d4"))]
    graph = GraphStore(store)
    similar = {(e.src, e.dst): e.weight for e in graph.neighbours("d4", relation="similar")}
    assert set(similar) == {("d4", "d1"), ("d4", "d2"), ("d4", "d3")}
    assert round(similar[("d4", "d3")], 3) == round(math.cos(math.radians(25)), 3)
    # A walk from a duplicate reaches the others over the links.
    graph_strategy = build_strategy("graph", store, embedding=_embed)
    assert "d4" in {d.metadata["entryId"] for d in graph_strategy.retrieve("deploy", RAGContext(10))}
    # Linking again changes nothing.
    assert store.consolidate("WORKING", threshold=0.85, mode="link", relation="similar").linked == report.linked
    assert graph.count() == 3 + report.linked


def test_a_merge_function_that_raises_leaves_everything_as_it_was(memory: tuple[Store, VectorMemoryStore]) -> None:
    store, vectors = memory
    calls = []

    def merge(entries: Sequence[MemoryEntry]) -> MemoryEntry:
        calls.append(entries[0].id)
        raise RuntimeError("the model is down")

    before = store.read("SELECT id, content_hash FROM entries WHERE corpus = :c ORDER BY id", {"c": store.corpus})
    with pytest.raises(RuntimeError, match="the model is down"):
        store.consolidate("WORKING", threshold=0.8, vectors=vectors, merge=merge)
    assert calls == ["d1"]
    assert store.read("SELECT id, content_hash FROM entries WHERE corpus = :c ORDER BY id",
                      {"c": store.corpus}) == before
    assert store.read("SELECT alias FROM entry_aliases WHERE corpus = :c", {"c": store.corpus}) == []
    assert GraphStore(store).count() == 3
    # A result that is not one of the group's entries is refused, nothing written either.
    with pytest.raises(ValidationError, match="not one of the group's"):
        store.consolidate("WORKING", merge=lambda es: replace(es[0], id="elsewhere"))
    with pytest.raises(ValidationError, match="not a MemoryEntry"):
        store.consolidate("WORKING", merge=lambda es: "text")  # type: ignore[arg-type,return-value]
    assert store.count() == 8
    # None leaves a group alone.
    report = store.consolidate("WORKING", merge=lambda es: None)
    assert (report.merged, report.skipped, store.count()) == (0, 1, 8)


def test_bad_options_are_refused_before_anything_is_read(store: Store) -> None:
    for bad in ("working", "NOPE", 3, None):
        with pytest.raises(ValidationError, match="tier"):
            store.consolidate(bad)  # type: ignore[arg-type]
    for bad in (0, -0.5, 1.5, float("nan"), True, "0.9"):
        with pytest.raises(ValidationError, match="threshold"):
            store.consolidate("WORKING", threshold=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="mode"):
        store.consolidate("WORKING", mode="fuse")
    with pytest.raises(ValidationError, match="mode='merge' only"):
        store.consolidate("WORKING", mode="link", merge=lambda es: es[0])
    with pytest.raises(ValidationError, match="neighbors"):
        store.consolidate("WORKING", neighbors=0)
    with pytest.raises(ValidationError, match="from_tier and to_tier are both"):
        store.promote("WORKING", "WORKING")
    with pytest.raises(ValidationError, match="to_tier"):
        store.promote("WORKING", "LONG_TERM")


def test_a_threshold_needs_one_space(memory: tuple[Store, VectorMemoryStore]) -> None:
    store, _ = memory
    with pytest.raises(ConfigurationError, match="no embedding space 'other'"):
        store.consolidate("WORKING", threshold=0.9, space="other")
    VectorMemoryStore(store, _embed, name="second").add(MemoryEntry("x", "deploy ~1"))
    with pytest.raises(ConfigurationError, match="several embedding spaces"):
        store.consolidate("WORKING", threshold=0.9)
    assert store.consolidate("WORKING", threshold=0.99, space="second", dry_run=True).pairs == 1  # d1 = d2 only


def test_aliases_follow_a_second_merge_and_go_with_the_survivor(memory: tuple[Store, VectorMemoryStore]) -> None:
    store, vectors = memory
    store.consolidate("WORKING")                         # d2 -> d1
    vectors.add(MemoryEntry("d0", "deploy at five o'clock ~5", MemoryTier.WORKING))  # the same text as d3
    report = store.consolidate("WORKING", threshold=0.99, vectors=vectors)
    assert [(g.survivor, g.others) for g in report.groups] == [("d1", ("d3", "d0"))]  # in the order written
    assert {a: e.id for a, e in store.get_many(["d0", "d2", "d3"]).items()} == {"d0": "d1", "d2": "d1", "d3": "d1"}
    assert [(e.src, e.dst) for e in GraphStore(store).neighbours("d1")] == [("d1", "o1")]  # d3's edge moved
    # Forgetting the survivor forgets its aliases.
    assert store.delete("d1")
    assert store.get("d2") is None and store.get_many(["d0", "d2", "d3"]) == {}
    assert store.read("SELECT alias FROM entry_aliases WHERE corpus = :c", {"c": store.corpus}) == []


def test_an_entry_changed_meanwhile_skips_its_group(memory: tuple[Store, VectorMemoryStore]) -> None:
    store, _ = memory

    def merge(entries: Sequence[MemoryEntry]) -> MemoryEntry:
        # Another writer changes a member after the group was read.
        store.add(replace(entries[1], metadata={"who": "carl"}))
        return entries[0]

    report = store.consolidate("WORKING", merge=merge)
    assert (report.merged, report.skipped) == (0, 1)
    assert store.get("d2").metadata == {"who": "carl"}  # type: ignore[union-attr]


def test_promotion_by_a_rule_over_metadata_and_age(store: Store) -> None:
    from datetime import datetime, timedelta, timezone

    store.add_all([MemoryEntry("w1", "note one", MemoryTier.WORKING, metadata={"keep": "yes"},
                               expires_at=datetime(2999, 1, 1, tzinfo=timezone.utc)),
                   MemoryEntry("w2", "note two", MemoryTier.WORKING),
                   MemoryEntry("e1", "note three", MemoryTier.EPISODIC, metadata={"keep": "yes"})])
    dry = store.promote("WORKING", MemoryTier.EPISODIC, filters={"keep": "yes"}, dry_run=True)
    assert (dry.matched, dry.promoted, dry.ids) == (1, 0, ("w1",))
    assert store.get("w1").tier is MemoryTier.WORKING  # type: ignore[union-attr]
    assert store.promote("WORKING", "EPISODIC", older_than=timedelta(days=1)).matched == 0
    report = store.promote("WORKING", "EPISODIC", filters={"keep": "yes"})
    assert (report.matched, report.promoted, report.skipped) == (1, 1, 0)
    moved = store.get("w1")
    assert moved is not None and moved.tier is MemoryTier.EPISODIC and moved.content == "note one"
    assert moved.expires_at == datetime(2999, 1, 1, tzinfo=timezone.utc)
    assert store.count({"tier": "EPISODIC"}) == 2 and store.count({"tier": "WORKING"}) == 1


def test_db_consolidate_command(memory: tuple[Store, VectorMemoryStore], db_url: URL) -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    store, _ = memory
    url = db_url.render_as_string(hide_password=False)
    args = ["db", "consolidate", "--url", url, "--corpus", store.corpus, "--tier", "WORKING", "--threshold", "0.99"]
    result = CliRunner().invoke(main_group, [*args, "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["dry_run"] is True and out["groups"] == [{"survivor": "d1", "others": ["d2", "d3"],
                                                         "similarity": pytest.approx(0.996195, abs=1e-5)}]
    assert store.count() == 8
    result = CliRunner().invoke(main_group, args)
    assert result.exit_code == 0, result.output
    assert "merged 2 entries" in result.output and store.count() == 6
    result = CliRunner().invoke(main_group, ["db", "consolidate", "--url", url, "--corpus", store.corpus,
                                             "--tier", "WORKING", "--threshold", "2"])
    assert result.exit_code != 0 and "threshold" in result.output
    result = CliRunner().invoke(main_group, ["db", "promote", "--url", url, "--corpus", store.corpus,
                                             "--from", "WORKING", "--to", "SEMANTIC", "--filter", "who=ann", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["promoted"] == 1
    assert store.get("d1").tier is MemoryTier.SEMANTIC  # type: ignore[union-attr]


def test_the_async_store_consolidates_promotes_and_resolves_aliases(store: Store) -> None:
    import asyncio

    from tnsrag_db import AsyncStore

    store.add_all([MemoryEntry("a", "same words", MemoryTier.WORKING), MemoryEntry("b", "same words", MemoryTier.WORKING)])

    async def scenario() -> tuple[int, str | None, int]:
        astore = AsyncStore(store)
        try:
            merged = (await astore.consolidate("WORKING")).merged
            got = await astore.get("b")
            promoted = (await astore.promote("WORKING", "SEMANTIC")).promoted
            return merged, got.id if got is not None else None, promoted
        finally:
            await astore.close()

    assert asyncio.run(scenario()) == (1, "a", 1)
