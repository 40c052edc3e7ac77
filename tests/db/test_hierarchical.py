"""HierarchyIndex validation and HierarchicalRAGStrategy expansion on a real database."""

from __future__ import annotations

import pytest

from tests.db._helpers import FixedScores, ids_of
from tnsrag_db._counts import IngestCounts
from tnsrag_db._errors import ConfigurationError, HierarchyError, InvalidEntryError
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.hierarchical import HierarchicalRAGStrategy
from tnsrag_db._types import HierarchyMetadata, MemoryEntry, MemoryTier, RAGContext, RetrievedDocument


def entry(eid: str, parent: str | None = None, source: str | None = None, **metadata: str) -> MemoryEntry:
    return MemoryEntry(eid, f"text of {eid}", MemoryTier.SEMANTIC, source=source, parent_id=parent, metadata=metadata)


def scores_of(docs: list[RetrievedDocument]) -> list[float]:
    return [d.score for d in docs]


def by_id(docs: list[RetrievedDocument]) -> dict[str, RetrievedDocument]:
    return {d.metadata["entryId"]: d for d in docs}


# -- HierarchyIndex: validation at write -------------------------------------------------

def test_parents_in_the_same_batch_and_in_the_corpus_are_accepted(store: Store) -> None:
    index = HierarchyIndex(store)
    assert index.store is store
    # The child comes before its parent in the batch; the parent key may also be metadata.
    assert index.add_all([entry("leaf", "sec"), entry("sec", "root"), entry("root")]) == IngestCounts(inserted=3)
    assert index.add(MemoryEntry("leaf2", "x", metadata={HierarchyMetadata.PARENT_ID: "sec"})) == IngestCounts(1)
    assert store.get("leaf2").parent_id == "sec"  # type: ignore[union-attr]
    index.validate()


def test_duplicate_ids_in_a_batch_are_rejected_and_nothing_is_written(store: Store) -> None:
    index = HierarchyIndex(store)
    with pytest.raises(HierarchyError, match="duplicate ids") as info:
        index.add_all([entry("a"), entry("b", "a"), entry("a", None), entry("c")])
    assert info.value.ids == ("a",)
    assert store.count() == 0


def test_missing_parent_is_rejected_naming_the_child_and_nothing_is_written(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add(entry("root"))
    with pytest.raises(HierarchyError, match="'orphan' -> 'ghost'") as info:
        index.add_all([entry("ok", "root"), entry("orphan", "ghost")])
    assert info.value.ids == ("orphan",)
    assert store.count() == 1 and store.get("ok") is None


def test_cycle_in_a_batch_names_every_id_on_it(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add(entry("root"))
    batch = [entry("a", "c"), entry("b", "a"), entry("c", "b"), entry("tail", "a"), entry("fine", "root")]
    with pytest.raises(HierarchyError, match="cycle") as info:
        index.add_all(batch)
    assert set(info.value.ids) == {"a", "b", "c"}
    assert len(info.value.ids) == 3
    assert store.count() == 1


def test_cycle_closed_by_an_update_through_untouched_entries(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add_all([entry("x"), entry("a", "x"), entry("b", "a"), entry("c", "b"), entry("d", "c")])
    # Only "a" is written; the cycle runs through b, c and d, which the batch does not touch.
    with pytest.raises(HierarchyError) as info:
        index.add(entry("a", "d"))
    assert set(info.value.ids) == {"a", "b", "c", "d"}
    # Two written entries on one cycle, separated by untouched ones.
    with pytest.raises(HierarchyError) as info:
        index.add_all([entry("a", "d"), MemoryEntry("c", "changed text", parent_id="b")])
    assert set(info.value.ids) == {"a", "b", "c", "d"}
    assert store.get("a").parent_id == "x"  # type: ignore[union-attr]
    assert store.get("c").content == "text of c"  # type: ignore[union-attr]
    index.validate()


def test_self_parent_is_rejected_at_construction() -> None:
    with pytest.raises(InvalidEntryError, match="own parent"):
        entry("a", "a")


def test_long_chain_in_one_batch(store: Store) -> None:
    index = HierarchyIndex(store)
    chain = [entry("n0")] + [entry(f"n{i}", f"n{i - 1}") for i in range(1, 1000)]
    assert index.add_all(chain).inserted == 1000
    index.validate()
    assert index.ancestors("n999", 4) == ["n998", "n997", "n996", "n995"]
    with pytest.raises(HierarchyError) as info:
        index.add(entry("n0", "n999"))
    assert len(info.value.ids) == 1000


def test_validate_checks_the_whole_corpus(store: Store) -> None:
    index = HierarchyIndex(store)
    index.validate()  # empty corpus
    # Written through the plain store, which does not check the hierarchy.
    store.add_all([entry("root"), entry("p", "q"), entry("q", "p"), entry("t", "p"), entry("m", "ghost"),
                   entry("k", "root")])
    with pytest.raises(HierarchyError) as info:
        index.validate()
    assert info.value.ids == ("m", "p", "q")
    assert "'m' -> 'ghost'" in str(info.value) and "cycle 'p' -> 'q' -> 'p'" in str(info.value)
    store.delete("m")
    store.add(entry("q", "root"))
    index.validate()


def test_children_roots_and_ancestors(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add_all([entry("r1"), entry("r2"), entry("s", "r1"), entry("l2", "s"), entry("l1", "s")])
    assert index.roots() == ["r1", "r2"]
    assert index.children(["s", "r1", "r2", "nope"]) == {"s": ["l1", "l2"], "r1": ["s"], "r2": [], "nope": []}
    assert index.ancestors("l1", 3) == ["s", "r1"]
    assert index.ancestors("l1", 1) == ["s"]
    assert index.ancestors("l1") == ["s", "r1"]
    assert index.ancestors("r1", 3) == [] and index.ancestors("unknown", 3) == []


# -- HierarchicalRAGStrategy ---------------------------------------------------------------

@pytest.fixture
def tree(store: Store) -> HierarchyIndex:
    """root <- sec <- {leaf1, leaf2}; root <- other; a 5-level chain c4 <- c3 <- c2 <- c1 <- c0."""
    index = HierarchyIndex(store)
    index.add_all([
        entry("root", kind="doc"), entry("sec", "root", kind="section"),
        entry("leaf1", "sec", kind="leaf"), entry("leaf2", "sec", kind="leaf"), entry("other", "root", kind="leaf"),
        entry("c4"), entry("c3", "c4"), entry("c2", "c3"), entry("c1", "c2"), entry("c0", "c1"),
    ])
    return index


def test_decay_per_level_and_best_child_wins(tree: HierarchyIndex) -> None:
    child = FixedScores(tree.store, {"leaf1": 1.0, "leaf2": 0.5, "other": 0.6})
    strategy = HierarchicalRAGStrategy(child, tree)
    assert strategy.name == "hierarchical"
    assert (strategy.max_parent_depth, strategy.decay) == (3, 0.85)
    docs = strategy.retrieve("q")
    assert ids_of(docs) == ["leaf1", "sec", "root", "other", "leaf2"]
    got = by_id(docs)
    assert got["leaf1"].score == 1.0
    assert got["sec"].score == pytest.approx(0.85, abs=1e-12)
    assert got["root"].score == pytest.approx(0.7225, abs=1e-12)
    # sec is reached from leaf1 (0.85) and leaf2 (0.425): the best child wins.
    assert dict(got["sec"].metadata) == {"tier": "SEMANTIC", "entryId": "sec", "kind": "section",
                                         "depth": "1", "childOf": "leaf1"}
    assert (got["root"].metadata["depth"], got["root"].metadata["childOf"]) == ("2", "leaf1")
    assert (got["leaf2"].metadata["depth"], got["leaf2"].metadata["childOf"]) == ("0", "leaf2")
    assert got["sec"].content == "text of sec"
    # The child is asked without the filter, over-fetching.
    assert child.calls[0].metadata_filters == {} and child.calls[0].max_results == 50


def test_depth_limit(tree: HierarchyIndex) -> None:
    child = FixedScores(tree.store, {"c0": 1.0})
    deep = HierarchicalRAGStrategy(child, tree)
    docs = deep.retrieve("q")
    assert ids_of(docs) == ["c0", "c1", "c2", "c3"]
    assert scores_of(docs) == pytest.approx([1.0, 0.85, 0.7225, 0.614125], abs=1e-12)
    assert [d.metadata["depth"] for d in docs] == ["0", "1", "2", "3"]
    one = HierarchicalRAGStrategy(child, tree, max_parent_depth=1, decay=0.5)
    docs = one.retrieve("q")
    assert (ids_of(docs), scores_of(docs)) == (["c0", "c1"], [1.0, 0.5])
    assert ids_of(HierarchicalRAGStrategy(child, tree, max_parent_depth=0).retrieve("q")) == ["c0"]


def test_parent_that_is_also_a_hit_appears_once_with_its_best_score(tree: HierarchyIndex) -> None:
    strong = HierarchicalRAGStrategy(FixedScores(tree.store, {"leaf1": 1.0, "sec": 0.9}), tree)
    docs = strong.retrieve("q")
    assert ids_of(docs) == ["leaf1", "sec", "root"]
    assert (docs[1].score, docs[1].metadata["depth"], docs[1].metadata["childOf"]) == (0.9, "0", "sec")
    # root: 0.9 × 0.85 from sec beats 1.0 × 0.85² from leaf1.
    assert docs[2].score == pytest.approx(0.765) and docs[2].metadata["childOf"] == "sec"
    weak = HierarchicalRAGStrategy(FixedScores(tree.store, {"leaf1": 1.0, "sec": 0.5}), tree)
    docs = weak.retrieve("q")
    assert ids_of(docs) == ["leaf1", "sec", "root"]
    assert docs[1].score == pytest.approx(0.85)
    assert (docs[1].metadata["depth"], docs[1].metadata["childOf"]) == ("1", "leaf1")


def test_filter_applies_to_final_results_after_expansion_before_top_k(tree: HierarchyIndex) -> None:
    child = FixedScores(tree.store, {"leaf1": 1.0, "leaf2": 0.9, "other": 0.95})
    strategy = HierarchicalRAGStrategy(child, tree)
    # The hits are leaves; the filter keeps only their parent, found by walking from them.
    docs = strategy.retrieve("q", RAGContext(max_results=1, metadata_filters={"kind": "section"}))
    assert ids_of(docs) == ["sec"] and docs[0].score == pytest.approx(0.85)
    assert all(c.metadata_filters == {} for c in child.calls)
    # Top-K after filtering: the best leaf, not the best result overall.
    docs = strategy.retrieve("q", RAGContext(max_results=2, metadata_filters={"kind": "leaf"}))
    assert ids_of(docs) == ["leaf1", "other"]
    # Filters see depth/childOf too: root is reached best from other (0.95 × 0.85 > 0.85²).
    docs = strategy.retrieve("q", RAGContext(metadata_filters={"childOf": "other"}))
    assert [(d.metadata["entryId"], d.metadata["depth"]) for d in docs] == [("other", "0"), ("root", "1")]
    assert docs[1].score == pytest.approx(0.8075, abs=1e-12)


def test_min_score_is_inclusive(tree: HierarchyIndex) -> None:
    strategy = HierarchicalRAGStrategy(FixedScores(tree.store, {"c0": 1.0}), tree, decay=0.5)
    assert ids_of(strategy.retrieve("q", RAGContext(min_score=0.25))) == ["c0", "c1", "c2"]


def test_source_fence_applies_to_hits_and_parents(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add_all([entry("top", source="a"), entry("mid", "top", source="b"), entry("low", "mid", source="a"),
                   entry("p2", source="a"), entry("hit2", "p2", source="b"), entry("solo", "top", source="a")])
    child = FixedScores(store, {"low": 1.0, "hit2": 0.9, "solo": 0.5})
    fenced = HierarchicalRAGStrategy(child, index, allowed_sources={"a"})
    assert fenced.allowed_sources == {"a"}
    # mid is fenced out, so top is not reached through it; hit2 is fenced out and not walked from.
    docs = fenced.retrieve("q")
    assert ids_of(docs) == ["low", "solo", "top"]
    assert scores_of(docs) == pytest.approx([1.0, 0.5, 0.425], abs=1e-12)
    assert by_id(docs)["top"].metadata["childOf"] == "solo"
    assert all(d.source == "a" for d in docs)
    no_fences: tuple[set[str] | None, ...] = (None, set())
    for no_fence in no_fences:
        open_docs = HierarchicalRAGStrategy(child, index, allowed_sources=no_fence).retrieve("q")
        assert ids_of(open_docs) == ["low", "hit2", "mid", "p2", "top", "solo"]


def test_refetches_until_the_filtered_top_k_is_final(store: Store) -> None:
    index = HierarchyIndex(store)
    entries = [entry(f"e{i:03}", kind="common") for i in range(119)] + [entry("e119", kind="rare")]
    index.add_all(entries)
    child = FixedScores(store, {f"e{i:03}": 1.0 - i / 200 for i in range(120)})
    strategy = HierarchicalRAGStrategy(child, index)
    docs = strategy.retrieve("q", RAGContext(max_results=1, metadata_filters={"kind": "rare"}))
    assert ids_of(docs) == ["e119"] and docs[0].score == pytest.approx(1.0 - 119 / 200)
    assert [c.max_results for c in child.calls] == [50, 100, 200]
    # Without a filter the first page already decides the top-K.
    child.calls.clear()
    assert ids_of(strategy.retrieve("q", RAGContext(max_results=3))) == ["e000", "e001", "e002"]
    assert [c.max_results for c in child.calls] == [50]


def test_bad_configuration_is_rejected(tree: HierarchyIndex) -> None:
    child = FixedScores(tree.store, {})
    for kwargs in ({"decay": 0.0}, {"decay": 1.5}, {"decay": float("nan")}, {"max_parent_depth": -1},
                   {"max_parent_depth": 1.5}, {"allowed_sources": "a"}):
        with pytest.raises(ConfigurationError):
            HierarchicalRAGStrategy(child, tree, **kwargs)
    with pytest.raises(ConfigurationError):
        HierarchicalRAGStrategy(object(), tree)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        HierarchicalRAGStrategy(child, tree.store)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        HierarchyIndex("not a store")  # type: ignore[arg-type]


def test_with_the_real_keyword_strategy(store: Store) -> None:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy

    index = HierarchyIndex(store)
    index.add_all([
        MemoryEntry("manual", "Operations manual", source="docs", metadata={"kind": "doc"}),
        MemoryEntry("ch1", "Chapter one: installation", parent_id="manual", source="docs",
                    metadata={"kind": "chapter"}),
        MemoryEntry("s1", "Configure the TAN-5326 flux capacitor before first start.", parent_id="ch1",
                    source="docs", metadata={"kind": "section"}),
        MemoryEntry("s2", "Unrelated notes about coffee.", parent_id="ch1", source="blog",
                    metadata={"kind": "section"}),
    ])
    keyword = KeywordRAGStrategy(BM25Index(store))
    direct = keyword.retrieve("flux capacitor")
    assert ids_of(direct) == ["s1"]
    strategy = HierarchicalRAGStrategy(keyword, index)
    docs = strategy.retrieve("flux capacitor")
    assert ids_of(docs) == ["s1", "ch1", "manual"]
    assert scores_of(docs) == pytest.approx([direct[0].score, direct[0].score * 0.85, direct[0].score * 0.7225])
    assert [d.metadata["childOf"] for d in docs] == ["s1", "s1", "s1"]
    docs = strategy.retrieve("flux capacitor", RAGContext(metadata_filters={"kind": "doc"}))
    assert ids_of(docs) == ["manual"]
    assert ids_of(HierarchicalRAGStrategy(keyword, index, allowed_sources={"blog"}).retrieve("flux capacitor")) == []


def test_plan_driven_by_run_plan_is_retrieve(store: Store) -> None:
    from tests.db._plans import drive
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy

    index = HierarchyIndex(store)
    index.add_all([MemoryEntry("root", "fan manual"), MemoryEntry("ch", "fan chapter", parent_id="root"),
                   MemoryEntry("s1", "fan blade crack", parent_id="ch"), MemoryEntry("s2", "oil", parent_id="ch")])
    strategy = HierarchicalRAGStrategy(KeywordRAGStrategy(BM25Index(store)), index)
    expected = strategy.retrieve("fan blade")
    assert ids_of(expected) == ["s1", "ch", "root"]
    docs, yielded = drive(store, strategy.plan("fan blade"))
    assert docs == expected and len(yielded) == 2  # the keyword child's statement, the parent walk
