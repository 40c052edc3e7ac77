"""GraphStore writes and GraphRAGStrategy traversal on a real database."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._cli.graph import graph, graph_strategy
from tnsrag_db._counts import IngestCounts
from tnsrag_db._errors import ConfigurationError, DanglingReferenceError, ValidationError
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.graph import GraphRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext, RetrievedDocument

D = 0.85


class SqlSeedStrategy:
    """Test-only seed strategy: entries whose content contains the query, scored by their ``seed`` metadata."""

    name = "sql-seed"

    def __init__(self, store: Store) -> None:
        self._store = store

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        ctx = context or RAGContext()
        with self._store.session.transaction() as conn:
            rows = conn.execute((
                "SELECT id, content, source, CAST(metadata->>'seed' AS float8) AS score FROM entries "
                "WHERE corpus = :c AND strpos(content, :q) > 0 AND metadata ? 'seed' "
                "ORDER BY score DESC, id LIMIT :k"), {"c": self._store.corpus, "q": query, "k": ctx.max_results}).all()
        return [RetrievedDocument(r.content, r.source, r.score, {"entryId": r.id}) for r in rows]


def _entries(ids: list[str], source: str = "kb", **meta: dict[str, str]) -> list[MemoryEntry]:
    return [MemoryEntry(i, f"node {i}", source=source, metadata=meta.get(i, {})) for i in ids]


@pytest.fixture
def demo(store: Store) -> GraphStore:
    """Seeds S (2.0) and T (0.5); a cycle S>A>B>S and A<>B; a diamond S>A>D / S>C>E>D; a fenced bridge
    S>F>G>K (F has source "other"); a hub Hb with six leaves, L0>M; a weak shortcut T>D."""
    meta = {"S": {"seed": "2.0"}, "T": {"seed": "0.5"}, "F": {"seed": "9.0"}}
    meta.update({f"L{i}": {"kind": "leaf"} for i in range(6)})
    entries = _entries(["S", "T", "A", "B", "C", "D", "E", "G", "K", "Hb", "M", *[f"L{i}" for i in range(6)]],
                       **meta)
    entries.append(MemoryEntry("F", "node F bridge", source="other", metadata=meta["F"]))
    edges = [Edge("S", "A"), Edge("S", "C"), Edge("S", "F"), Edge("S", "Hb"),
             Edge("A", "B"), Edge("B", "S"), Edge("B", "A"),
             Edge("A", "D"), Edge("C", "E"), Edge("E", "D"),
             Edge("F", "G"), Edge("G", "K"),
             *[Edge("Hb", f"L{i}", weight=float(10 - i)) for i in range(6)], Edge("L0", "M"),
             Edge("T", "D", relation="cites")]
    graph_store = GraphStore(store)
    report, counts = graph_store.add_with_edges(entries, edges)
    assert len(report.inserted) == len(entries) and counts == IngestCounts(inserted=len(edges))
    return graph_store


def _strategy(gs: GraphStore, *, fence: set[str] | None = None, depth: int = 3, budget: int = 1024,
              **kw: object) -> GraphRAGStrategy:
    kw.setdefault("seed_strategy", SqlSeedStrategy(gs.store))
    return GraphRAGStrategy("test", gs, fence, depth, D, budget, **kw)  # type: ignore[arg-type]


def _summary(docs: list[RetrievedDocument]) -> list[tuple[str, float, int, list[str]]]:
    return [(d.metadata["entryId"], d.score, int(d.metadata["depth"]), json.loads(d.metadata["path"])) for d in docs]


EXPECTED = [
    ("S", 2.0, 0, ["S"]),
    ("A", 2.0 * D, 1, ["S", "A"]), ("C", 2.0 * D, 1, ["S", "C"]), ("Hb", 2.0 * D, 1, ["S", "Hb"]),
    ("B", 2.0 * D * D, 2, ["S", "A", "B"]), ("D", 2.0 * D * D, 2, ["S", "A", "D"]),
    ("E", 2.0 * D * D, 2, ["S", "C", "E"]),
    *[(f"L{i}", 2.0 * D * D, 2, ["S", "Hb", f"L{i}"]) for i in range(6)],
    ("M", 2.0 * D * D * D, 3, ["S", "Hb", "L0", "M"]),
    ("T", 0.5, 0, ["T"]),
]


def test_hand_built_graph_exact_ids_depths_scores_and_paths(demo: GraphStore) -> None:
    docs = _strategy(demo, fence={"kb"}).retrieve("node", RAGContext(max_results=100))
    got = _summary(docs)
    assert [g[0] for g in got] == [e[0] for e in EXPECTED]
    for (gid, gscore, gdepth, gpath), (eid, escore, edepth, epath) in zip(got, EXPECTED):
        assert (gid, gdepth, gpath) == (eid, edepth, epath)
        assert gscore == pytest.approx(escore, rel=1e-12)
    # The cycle back to the seed S never re-scores it; D keeps its best path (2 hops from the strong
    # seed S, not 1 hop from the weak seed T, nor the 3-hop side of the diamond); F, G, K are fenced off.
    doc = docs[0]
    assert doc.metadata["tier"] == "SEMANTIC" and doc.metadata["source"] == "kb" and doc.metadata["seed"] == "2.0"
    assert doc.content == "node S" and doc.source == "kb"


def test_depth_bound_and_top_k(demo: GraphStore) -> None:
    docs = _strategy(demo, fence={"kb"}, depth=1).retrieve("node", RAGContext(max_results=3))
    assert _summary(docs) == [("S", 2.0, 0, ["S"]), ("A", 2.0 * D, 1, ["S", "A"]), ("C", 2.0 * D, 1, ["S", "C"])]
    deep = _strategy(demo, fence={"kb"}, depth=1).retrieve("node", RAGContext(max_results=100))
    assert max(int(d.metadata["depth"]) for d in deep) == 1 and "B" not in {d.metadata["entryId"] for d in deep}


def test_source_fence_blocks_the_bridge_and_its_seed(demo: GraphStore) -> None:
    unfenced = {d.metadata["entryId"]: d for d in _strategy(demo).retrieve("node", RAGContext(max_results=100))}
    # Without a fence F is the strongest seed (9.0) and G, K lie behind it.
    assert unfenced["K"].metadata["path"] == json.dumps(["F", "G", "K"]) and unfenced["K"].score == pytest.approx(
        9.0 * D * D)
    fenced = _strategy(demo, fence={"kb"}).retrieve("node", RAGContext(max_results=100))
    assert not {"F", "G", "K"} & {d.metadata["entryId"] for d in fenced}
    # A seed outside the fence is not used at all.
    assert _strategy(demo, fence={"kb"}).traverse({"F": 1.0}, RAGContext(max_results=100)) == []
    # Fenced to "other", F is a seed but G (source "kb") cannot be entered.
    assert _summary(_strategy(demo, fence={"other"}).traverse({"F": 1.0})) == [("F", 1.0, 0, ["F"])]


def test_metadata_filter_applies_after_traversal_before_top_k(demo: GraphStore) -> None:
    strategy = _strategy(demo, fence={"kb"})
    docs = strategy.retrieve("node", RAGContext(max_results=2, metadata_filters={"kind": "leaf"}))
    # S and Hb do not match the filter but are still walked through; top-2 is taken among the leaves.
    assert _summary(docs) == [("L0", 2.0 * D * D, 2, ["S", "Hb", "L0"]), ("L1", 2.0 * D * D, 2, ["S", "Hb", "L1"])]
    at_least = strategy.retrieve("node", RAGContext(max_results=100, min_score=2.0 * D))
    assert [d.metadata["entryId"] for d in at_least] == ["S", "A", "C", "Hb"]  # min_score is inclusive


def test_best_path_beats_shorter_weaker_path(demo: GraphStore) -> None:
    docs = _strategy(demo, depth=2).traverse({"T": 1.0, "Hb": 0.1}, RAGContext(max_results=100))
    got = {d.metadata["entryId"]: (d.score, d.metadata["path"]) for d in docs}
    assert got["D"] == (pytest.approx(D), json.dumps(["T", "D"]))
    # A seed reachable from a stronger seed takes the better path.
    docs = _strategy(demo, depth=2).traverse({"S": 1.0, "Hb": 0.1}, RAGContext(max_results=100))
    got = {d.metadata["entryId"]: (d.score, d.metadata["depth"], d.metadata["path"]) for d in docs}
    assert got["Hb"] == (pytest.approx(D), "1", json.dumps(["S", "Hb"]))
    assert got["L5"] == (pytest.approx(D * D), "2", json.dumps(["S", "Hb", "L5"]))


def test_visited_budget_holds_during_traversal(store: Store) -> None:
    ids = ["R"] + [f"N{i}" for i in range(10)] + [f"N{i}_{j}" for i in range(10) for j in range(4)]
    gs = GraphStore(store)
    edges = [Edge("R", f"N{i}") for i in range(10)] + [Edge(f"N{i}", f"N{i}_{j}") for i in range(10) for j in range(4)]
    gs.add_with_edges(_entries(ids), edges)
    everything = _strategy(gs, depth=2).traverse({"R": 1.0}, RAGContext(max_results=100))
    assert len(everything) == 51
    small = _strategy(gs, depth=2, budget=5)
    docs = small.traverse({"R": 1.0}, RAGContext(max_results=100))
    assert _summary(docs) == [("R", 1.0, 0, ["R"])] + [(f"N{i}", D, 1, ["R", f"N{i}"]) for i in range(4)]
    # Nothing past the budget was materialised: at most 3 x budget edge rows per level, 2 levels.
    plan = small.explain_traversal({"R": 1.0}, RAGContext(max_results=100))
    assert max(node["rows"] for node in plan if "edges" in node["node"]) <= 2 * 3 * 5


def test_hub_fan_out_is_capped_heaviest_first(fresh_db_url: URL) -> None:
    # A database of its own, analysed: the plan assertion below depends on the edges table's
    # planner statistics, which in the shared test table vary with other tests' edges and with
    # whether autoanalyze has run (once in CI the hop read all 300 of the hub's edges).
    with connect(fresh_db_url.render_as_string(hide_password=False), corpus="hub", auto_migrate=True) as store:
        _hub_fan_out_is_capped_heaviest_first(store)


def _hub_fan_out_is_capped_heaviest_first(store: Store) -> None:
    gs = GraphStore(store)
    leaves = [f"x{i:03d}" for i in range(300)]
    gs.add_with_edges(_entries(["hub", *leaves]), [Edge("hub", x, weight=float(i)) for i, x in enumerate(leaves)])
    with store.session.autocommit() as conn:
        conn.execute("ANALYZE edges")
    strategy = _strategy(gs, depth=1, budget=10, max_fan_out=64)
    docs = strategy.traverse({"hub": 1.0}, RAGContext(max_results=100))
    # 2 x budget = 20 edges may be read for a one-node frontier: the heaviest ones; the 9 reached by the
    # heaviest edges fill the budget (results tie on score, so they are listed by id).
    assert [d.metadata["entryId"] for d in docs] == ["hub"] + [f"x{i:03d}" for i in range(291, 300)]
    plan = strategy.explain_traversal({"hub": 1.0}, RAGContext(max_results=100))
    assert max(node["rows"] for node in plan if "edges" in node["node"]) == 20


def test_edge_budget_factor_shares_the_edge_reads_among_the_frontier(store: Store) -> None:
    # Two seeds, six children each; a budget of 6 leaves room for 4 new entries. With a factor
    # of 1 a level reads 6 edge rows, 3 per seed: the stronger seed's 3 heaviest children and
    # the weaker seed's heaviest fill the room. With the default 2, 6 per seed: the stronger
    # seed's 4 heaviest children win them all.
    gs = GraphStore(store)
    children = [f"{p}{i}" for p in "ab" for i in range(6)]
    edges = [Edge(seed, f"{p}{i}", weight=float(6 - i)) for seed, p in (("s1", "a"), ("s2", "b")) for i in range(6)]
    gs.add_with_edges(_entries(["s1", "s2", *children]), edges)
    seeds = {"s1": 1.0, "s2": 0.9}
    narrow = _strategy(gs, depth=1, budget=6, edge_budget_factor=1).traverse(seeds, RAGContext(max_results=100))
    assert {d.metadata["entryId"] for d in narrow} == {"s1", "s2", "a0", "a1", "a2", "b0"}
    default = _strategy(gs, depth=1, budget=6).traverse(seeds, RAGContext(max_results=100))
    assert {d.metadata["entryId"] for d in default} == {"s1", "s2", "a0", "a1", "a2", "a3"}
    for bad in (0, 17, 1.5, True):
        with pytest.raises(ConfigurationError, match="edge_budget_factor"):
            GraphRAGStrategy("p", gs, None, 1, D, 6, edge_budget_factor=bad)  # type: ignore[arg-type]


def test_constructor_validation(demo: GraphStore) -> None:
    ok = GraphRAGStrategy("p", demo, None, GraphRAGStrategy.DEFAULT_MAX_DEPTH, GraphRAGStrategy.DEFAULT_DEPTH_DECAY,
                          GraphRAGStrategy.DEFAULT_MAX_VISITED_NODES)
    assert ok.name == "graph" and (ok.max_depth, ok.depth_decay, ok.max_visited_nodes) == (2, 0.85, 1024)
    assert ok.allowed_sources is None
    for args in [(" ", demo, None, 2, 0.85, 10), ("p", demo, None, 0, 0.85, 10), ("p", demo, None, 17, 0.85, 10),
                 ("p", demo, None, 2, 0.0, 10), ("p", demo, None, 2, 1.5, 10), ("p", demo, None, 2, float("nan"), 10),
                 ("p", demo, None, 2, 0.85, 0), ("p", demo, "kb", 2, 0.85, 10), ("p", demo.store, None, 2, 0.85, 10),
                 ("p", demo, None, True, 0.85, 10)]:
        with pytest.raises(ConfigurationError):
            GraphRAGStrategy(*args)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        GraphRAGStrategy("p", demo, None, 2, 0.85, 10, max_fan_out=0)
    with pytest.raises(ValidationError):
        ok.traverse({"S": float("inf")})
    assert ok.traverse({}) == [] and ok.traverse({"nope": 1.0, "S": -1.0}) == []


def test_default_seeds_are_bm25(demo: GraphStore) -> None:
    strategy = GraphRAGStrategy("p", demo, {"kb"}, 1, D, 1024)
    docs = strategy.retrieve("bridge", RAGContext(max_results=100))
    assert docs == []  # the only match, F, is outside the fence
    store = demo.store
    store.add(MemoryEntry("Z", "zebra crossing", source="kb"))
    demo.add_edge("Z", "A", weight=2.0)
    seeds = strategy.seeds("zebra")
    assert list(seeds) == ["Z"] and seeds["Z"] > 0
    docs = strategy.retrieve("zebra", RAGContext(max_results=100))
    assert _summary(docs) == [("Z", pytest.approx(seeds["Z"]), 0, ["Z"]),  # type: ignore[list-item]
                              ("A", pytest.approx(seeds["Z"] * D), 1, ["Z", "A"])]


# -- GraphStore -------------------------------------------------------------------------


def test_edge_validation() -> None:
    for bad in [("", "b"), ("a", " "), ("a", "a"), ("a", "b", ""), ("a", "b", "r", float("nan")),
                ("a", "b", "r", float("inf")), ("a", "b", "r", True), ("a", "b", "r", 1.0, ""), ("a\x00", "b")]:
        with pytest.raises(ValidationError):
            Edge(*bad)  # type: ignore[arg-type]


def test_add_update_remove_and_neighbours(demo: GraphStore) -> None:
    assert demo.add_edge("S", "A") == IngestCounts(unchanged=1)
    assert demo.add_edge("S", "A", weight=5.0, source="manual") == IngestCounts(updated=1)
    assert demo.add_edge("S", "A", relation="cites") == IngestCounts(inserted=1)
    assert demo.neighbours("S") == [Edge("S", "A", "related", 5.0, "manual"), Edge("S", "A", "cites"),
                                    Edge("S", "C"), Edge("S", "F"), Edge("S", "Hb")]
    assert demo.neighbours("S", relation="cites") == [Edge("S", "A", "cites")]
    assert demo.neighbours("Hb", limit=2) == [Edge("Hb", "L0", weight=10.0), Edge("Hb", "L1", weight=9.0)]
    assert demo.neighbours("nobody") == []
    assert demo.remove_edge("S", "A", "cites") is True and demo.remove_edge("S", "A", "cites") is False
    with pytest.raises(ValidationError):
        demo.neighbours("S", limit=0)


def test_dangling_edge_is_rejected_and_nothing_written(demo: GraphStore) -> None:
    before = demo.count()
    with pytest.raises(DanglingReferenceError, match="'ghost'"):
        demo.add_edge("S", "ghost")
    with pytest.raises(DanglingReferenceError, match="2 missing entries: 'ghost', 'phantom'"):
        demo.add_edges([Edge("S", "T"), Edge("ghost", "A"), Edge("A", "phantom")])
    assert demo.count() == before and demo.neighbours("S", relation="related") == demo.neighbours("S")
    with pytest.raises(DanglingReferenceError):
        demo.add_with_edges([MemoryEntry("new", "new entry")], [Edge("new", "ghost")])
    assert demo.store.get("new") is None and demo.count() == before


def test_deleting_an_entry_removes_its_edges(demo: GraphStore) -> None:
    before = demo.count()
    assert demo.store.delete("A") is True
    # S>A, A>B, A>D, B>A are gone.
    assert demo.count() == before - 4
    assert [e.dst for e in demo.neighbours("S")] == ["C", "F", "Hb"] and demo.neighbours("B") == [Edge("B", "S")]


def test_bulk_add_counts_and_last_duplicate_wins(store: Store) -> None:
    gs = GraphStore(store)
    ids = [f"n{i:04d}" for i in range(500)]
    store.add_all(_entries(ids))
    edges = [Edge(ids[i], ids[(i * 7 + 1) % 500], weight=float(i % 13)) for i in range(500)]
    seen: list[int] = []
    assert gs.add_edges(edges, progress=seen.append) == IngestCounts(inserted=500)
    assert seen[-1] == 500
    again = edges[:10] + [Edge(ids[0], ids[1], weight=99.0), Edge(ids[0], ids[1], weight=42.0)]
    # edges[0] is n0000 -> n0001 too: 10 distinct edges, the last duplicate (42.0) wins.
    assert gs.add_edges(again) == IngestCounts(updated=1, unchanged=9)
    assert gs.neighbours(ids[0]) == [Edge(ids[0], ids[1], weight=42.0)]
    assert gs.count() == 500
    with pytest.raises(ValidationError, match="batch item 1"):
        gs.add_edges([Edge("n0000", "n0001"), "nope"])  # type: ignore[list-item]


# -- CLI -------------------------------------------------------------------------------


def test_cli_add_edge_import_and_query(make_store: Callable[..., Store], db_url: URL, tmp_path: Path) -> None:
    store = make_store()
    store.add_all(_entries(["a", "b", "c", "d"]))
    url = db_url.render_as_string(hide_password=False)
    base = ["--url", url, "--corpus", store.corpus]
    runner = CliRunner()
    result = runner.invoke(graph, [*base, "add-edge", "a", "b", "--relation", "cites", "--weight", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"inserted": 1, "updated": 0, "unchanged": 0}
    result = runner.invoke(graph, [*base, "add-edge", "a", "zzz"])
    assert result.exit_code == 1 and "zzz" in result.output
    csv_file = tmp_path / "edges.csv"
    csv_file.write_text("src,dst,relation,weight,source\nb,c,,3,import\nc,d,next,,\n")
    result = runner.invoke(graph, [*base, "import", str(csv_file), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"edges": 2, "inserted": 2, "updated": 0, "unchanged": 0}
    jsonl = tmp_path / "edges.jsonl"
    jsonl.write_text('{"src": "a", "dst": "d", "weight": 0.5}\n\n{"src": "b", "dst": "c", "weight": 4}\n')
    result = runner.invoke(graph, [*base, "import", str(jsonl)])
    assert result.exit_code == 0, result.output
    assert "2 edges: 1 inserted, 1 updated, 0 unchanged" in result.output
    bad = tmp_path / "bad.csv"
    bad.write_text("src,dst,weight\na,b,heavy\n")
    result = runner.invoke(graph, [*base, "import", str(bad)])
    assert result.exit_code == 1 and "bad.csv:2" in result.output
    gs = GraphStore(store)
    assert gs.neighbours("a") == [Edge("a", "b", "cites", 2.0), Edge("a", "d", weight=0.5)]
    assert gs.neighbours("b") == [Edge("b", "c", weight=4.0)]  # re-written: weight and source replaced
    # The database options also work after the subcommand, overriding the group's.
    result = runner.invoke(graph, ["add-edge", "d", "a", "--url", url, "--corpus", store.corpus, "--json"])
    assert result.exit_code == 0, result.output
    assert gs.neighbours("d") == [Edge("d", "a")]
    strategy = graph_strategy(store)
    assert (strategy.max_depth, strategy.depth_decay, strategy.max_visited_nodes) == (2, 0.85, 1024)
    assert [d.metadata["entryId"] for d in strategy.traverse({"a": 1.0})] == ["a", "b", "d", "c"]


def test_plan_driven_by_run_plan_is_retrieve(demo: GraphStore) -> None:
    from tests.db._plans import drive
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy

    ctx = RAGContext(max_results=100)
    for seed_strategy in (None, KeywordRAGStrategy(BM25Index(demo.store))):
        strategy = GraphRAGStrategy("p", demo, None, 3, D, 1024, seed_strategy=seed_strategy)
        expected = strategy.retrieve("node", ctx)
        assert len(expected) > 3
        docs, statements = drive(demo.store, strategy.plan("node", ctx))
        assert docs == expected and len(statements) == 2  # the seed search (BM25, or the keyword child's plan), the walk
