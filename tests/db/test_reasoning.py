"""ReasoningRAGStrategy and LexicalTreeNavigator on a real database."""

from __future__ import annotations

import importlib.metadata
import json
import math
from collections.abc import Mapping, Sequence

import pytest

from tests.db._helpers import read_statements
from tnsrag_db._errors import (
    ConfigurationError,
    ExecutionError,
    ProviderConfigurationError,
    ProviderTransportError,
    StrategyUnavailableError,
)
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.navigation import (
    NAVIGATOR_ENTRY_POINT_GROUP,
    LexicalTreeNavigator,
    NavNode,
    available_navigators,
    installed_navigators,
    load_navigator,
)
from tnsrag_db._strategies.reasoning import ReasoningRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext


class ScriptedNavigator:
    """Scores children from a table (default ``default``) and records every child it was shown."""

    def __init__(self, scores: Mapping[str, float] | None = None, default: float = 1.0) -> None:
        self.scores = dict(scores or {})
        self.default = default
        self.seen: list[str] = []
        self.parents: list[str | None] = []
        self.models: list[str] = []

    def rank_children(self, query: str, node: NavNode | None, children: Sequence[NavNode],
                      model: str) -> list[float]:
        self.seen.extend(c.id for c in children)
        self.parents.append(None if node is None else node.id)
        self.models.append(model)
        return [self.scores.get(c.id, self.default) for c in children]


class AnswerNavigator:
    """Returns a fixed answer (for output-contract tests)."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def rank_children(self, query: str, node: NavNode | None, children: Sequence[NavNode], model: str) -> object:
        if callable(self.answer):
            return self.answer(children)
        return self.answer


MANUAL = [
    MemoryEntry("manual", "Aircraft maintenance manual\nThis manual covers engines and wings.", source="docs"),
    MemoryEntry("engines", "Engines\nTurbofan engine maintenance procedures.", source="docs", parent_id="manual"),
    MemoryEntry("fan", "Fan blades\nInspect every fan blade for cracks and nicks.", source="docs",
                parent_id="engines", metadata={"kind": "task"}),
    MemoryEntry("oil", "Oil system\nCheck engine oil pressure after start.", source="docs", parent_id="engines"),
    MemoryEntry("wings", "Wings\nWing structure and control surfaces.", source="docs", parent_id="manual"),
    MemoryEntry("flaps", "Flaps\nRig the flap actuator.", source="docs", parent_id="wings"),
    MemoryEntry("cooking", "Cooking guide\nRecipes for the galley.", source="galley"),
    MemoryEntry("pasta", "Pasta\nBoil pasta in salted water.", source="galley", parent_id="cooking"),
]


@pytest.fixture
def manual(store: Store) -> HierarchyIndex:
    index = HierarchyIndex(store)
    index.add_all(MANUAL)
    return index


def ids(docs: Sequence[object]) -> list[str]:
    return [d.metadata["entryId"] for d in docs]  # type: ignore[attr-defined]


# -- construction -----------------------------------------------------------------------


def test_three_argument_form_uses_class_defaults(manual: HierarchyIndex) -> None:
    strategy = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "lexical")
    assert strategy.name == "reasoning"
    assert ReasoningRAGStrategy.DEFAULT_MAX_NODES_VISITED == 15 and ReasoningRAGStrategy.DEFAULT_MAX_DEPTH == 6
    assert strategy.max_nodes_visited == 15 and strategy.max_depth == 6 and strategy.allowed_sources is None
    assert ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m", set()).allowed_sources is None


@pytest.mark.parametrize("model", ["", "   ", None, 3])
def test_blank_model_is_a_configuration_error(manual: HierarchyIndex, model: object) -> None:
    with pytest.raises(ConfigurationError, match="model"):
        ReasoningRAGStrategy(manual, LexicalTreeNavigator(), model)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["max_nodes_visited", "max_depth"])
@pytest.mark.parametrize("value", [0, -1, True, 2.5, None])
def test_non_positive_limits_are_configuration_errors(manual: HierarchyIndex, field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m", **{field: value})  # type: ignore[arg-type]


def test_bad_index_navigator_or_fence_are_configuration_errors(manual: HierarchyIndex, store: Store) -> None:
    with pytest.raises(ConfigurationError, match="HierarchyIndex"):
        ReasoningRAGStrategy(store, LexicalTreeNavigator(), "m")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="navigator"):
        ReasoningRAGStrategy(manual, object(), "m")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="navigator"):
        ReasoningRAGStrategy(manual, LexicalTreeNavigator, "m")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="allowed_sources"):
        ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m", "docs")


# -- descent ------------------------------------------------------------------------------


def test_lexical_navigator_descends_to_the_matching_leaf_with_its_path(manual: HierarchyIndex) -> None:
    strategy = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "lexical", seed_count=None)
    descent = strategy.descend("cracked fan blades")
    [doc] = descent.documents
    assert doc.content == "Fan blades\nInspect every fan blade for cracks and nicks."
    assert doc.source == "docs"
    assert doc.score == 1.0  # the only positive child at every level
    assert dict(doc.metadata) == {"kind": "task", "tier": "SEMANTIC", "entryId": "fan", "source": "docs",
                                  "path": json.dumps(["manual", "engines", "fan"]), "depth": "3"}
    # roots (manual, cooking), children of manual (engines, wings), children of engines (fan, oil)
    assert descent.visited == ("cooking", "manual", "engines", "wings", "fan", "oil")
    assert descent.expansions == 3
    assert strategy.retrieve("cracked fan blades") == descent.documents


def test_a_seeded_descent_fetches_only_the_branches_of_the_bm25_hits(manual: HierarchyIndex) -> None:
    unseeded = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "lexical", seed_count=None)
    strategy = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "lexical")
    assert strategy.seed_count == ReasoningRAGStrategy.DEFAULT_SEED_COUNT == 50
    descent = strategy.descend("cracked fan blades")
    assert descent.documents == unseeded.descend("cracked fan blades").documents
    # only the hit (fan) and its ancestors are fetched: no sibling spends the budget
    assert descent.visited == ("manual", "engines", "fan")
    assert descent.expansions == 3 and descent.branches == 3


def test_a_seeded_descent_starts_from_the_best_roots_not_the_first(store: Store) -> None:
    """The budget goes to the branches holding the query's best hits, wherever they sit in id order."""
    index = HierarchyIndex(store)
    entries = [MemoryEntry(f"r{n:03d}", f"Filler chapter {n}\nNothing about the topic here.") for n in range(40)]
    entries.append(MemoryEntry("z-engines", "Engines\nTurbofan maintenance."))
    entries.append(MemoryEntry("z-fan", "Fan blades\nInspect every fan blade for cracks.", parent_id="z-engines"))
    index.add_all(entries)
    strategy = ReasoningRAGStrategy(index, LexicalTreeNavigator(), "lexical")
    descent = strategy.descend("cracked fan blade")
    assert [d.metadata["entryId"] for d in descent.documents] == ["z-fan"]
    assert descent.visited == ("z-engines", "z-fan")
    # unseeded, the 15-node budget is spent on the first roots in id order and finds nothing
    unseeded = ReasoningRAGStrategy(index, LexicalTreeNavigator(), "lexical", seed_count=None).descend(
        "cracked fan blade")
    assert unseeded.documents == [] and len(unseeded.visited) == 15


def test_a_flat_corpus_degrades_to_the_ranked_seeds(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add_all([MemoryEntry(f"d{n:03d}", f"Document {n} about gardening and soil.") for n in range(30)]
                  + [MemoryEntry("x1", "Jet engine fan blade inspection."),
                     MemoryEntry("x2", "Fan blade cracks in a jet engine: inspection notes for the fan.")])
    descent = ReasoningRAGStrategy(index, LexicalTreeNavigator(), "lexical").descend("fan blade inspection")
    assert {d.metadata["entryId"] for d in descent.documents} == {"x1", "x2"}
    assert descent.visited in (("x1", "x2"), ("x2", "x1"))


def test_a_query_without_bm25_hits_walks_the_roots_in_id_order(manual: HierarchyIndex) -> None:
    seeded = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "lexical").descend("zeppelin")
    unseeded = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "lexical", seed_count=None).descend("zeppelin")
    assert seeded.branches == 0 and seeded.visited == unseeded.visited and seeded.documents == []


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_a_bad_seed_count_is_a_configuration_error(manual: HierarchyIndex, value: object) -> None:
    with pytest.raises(ConfigurationError, match="seed_count"):
        ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m", seed_count=value)  # type: ignore[arg-type]


def test_lexical_navigator_scores_by_subtree_text() -> None:
    nav = LexicalTreeNavigator()
    kids = [NavNode("a", "Engines", "Engines", 1, True, "Engines\nFan blades cracks"),
            NavNode("b", "Wings", "Wings", 1, True, "Wings\nFlaps"),
            NavNode("c", "Galley", "Galley", 1, False, "")]
    scores = nav.rank_children("fan blade crack", None, kids, "ignored")
    assert scores[0] > 0 and scores[1] == 0.0 and scores[2] == 0.0
    # BM25 over the candidate set: idf = ln(1 + (3 - 1 + 0.5) / (1 + 0.5)) per matched term
    idf = math.log(1 + 2.5 / 1.5)
    dl = [6, 4, 2]  # engine×3 fan blade crack | wing×3 flap | galley×2
    avg = sum(dl) / 3
    norm = 1.2 * (1 - 0.75 + 0.75 * dl[0] / avg)
    assert scores[0] == pytest.approx(3 * idf * 2.2 / (1 + norm))
    assert nav.rank_children("", None, kids, "m") == [0.0, 0.0, 0.0]


def test_scores_are_shares_of_positive_siblings_multiplied_down_the_path(manual: HierarchyIndex) -> None:
    nav = ScriptedNavigator({"manual": 3.0, "cooking": 1.0, "engines": 1.0, "wings": 1.0, "fan": 2.0,
                             "oil": 6.0, "pasta": 5.0, "flaps": 0.5})
    strategy = ReasoningRAGStrategy(manual, nav, "m", max_nodes_visited=50)
    docs = strategy.retrieve("anything")
    by_id = {d.metadata["entryId"]: d.score for d in docs}
    assert by_id == {"oil": 0.75 * 0.5 * 0.75, "fan": 0.75 * 0.5 * 0.25, "flaps": 0.75 * 0.5 * 1.0,
                     "pasta": 0.25 * 1.0}
    assert ids(docs) == ["flaps", "oil", "pasta", "fan"]
    assert set(nav.models) == {"m"}


def test_descent_stops_where_every_child_scores_zero_or_less(manual: HierarchyIndex) -> None:
    nav = ScriptedNavigator({"cooking": 0.0, "wings": -1.0, "fan": 0.0, "oil": -2.5})
    docs = ReasoningRAGStrategy(manual, nav, "m").retrieve("q")
    assert ids(docs) == ["engines"]
    assert docs[0].metadata["path"] == json.dumps(["manual", "engines"]) and docs[0].metadata["depth"] == "2"
    assert docs[0].score == 1.0
    # pruned children are never expanded
    assert "wings" not in nav.parents and "cooking" not in nav.parents


def test_no_result_when_every_root_scores_zero(manual: HierarchyIndex) -> None:
    nav = ScriptedNavigator(default=0.0)
    descent = ReasoningRAGStrategy(manual, nav, "m").descend("q")
    assert descent.documents == [] and descent.visited == ("cooking", "manual") and nav.parents == [None]
    assert ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m").retrieve("zebra quantum") == []


def wide_tree(store: Store, fanout: int = 6, levels: int = 3) -> HierarchyIndex:
    entries: list[MemoryEntry] = []
    frontier = [""]
    for _ in range(levels):
        nxt = []
        for parent in frontier:
            for i in range(fanout):
                eid = f"{parent}{i}" if parent else f"n{i}"
                entries.append(MemoryEntry(eid, f"node {eid}", parent_id=parent or None))
                nxt.append(eid)
        frontier = nxt
    index = HierarchyIndex(store)
    index.add_all(entries)
    return index


@pytest.mark.parametrize("budget", [1, 2, 5, 6, 7, 15, 20, 43])
def test_never_more_nodes_fetched_than_the_budget(store: Store, budget: int) -> None:
    index = wide_tree(store)  # 6 + 36 + 216 nodes
    nav = ScriptedNavigator()
    descent = ReasoningRAGStrategy(index, nav, "m", max_nodes_visited=budget).descend(
        "q", RAGContext(max_results=100))
    assert len(nav.seen) == len(descent.visited) == min(budget, 6 + 36 + 216)
    assert len(set(descent.visited)) == len(descent.visited)
    # every stop node was fetched, and results are the stop points only
    assert set(ids(descent.documents)) <= set(descent.visited)
    assert descent.documents


def test_budget_counts_every_fetched_row_even_with_a_lexical_navigator(store: Store) -> None:
    index = wide_tree(store)
    descent = ReasoningRAGStrategy(index, LexicalTreeNavigator(), "m").descend("node", RAGContext(max_results=50))
    assert len(descent.visited) == 15
    # six roots, then the first expanded root's six children, then three more: 15
    assert descent.visited[:6] == tuple(f"n{i}" for i in range(6))


def test_depth_limit(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add_all([MemoryEntry(f"a{i}", f"level {i}", parent_id=f"a{i - 1}" if i else None) for i in range(10)])
    nav = ScriptedNavigator()
    descent = ReasoningRAGStrategy(index, nav, "m", None, 15, 3).descend("q")
    assert descent.visited == ("a0", "a1", "a2")
    [doc] = descent.documents
    assert doc.metadata["entryId"] == "a2" and doc.metadata["depth"] == "3"
    assert doc.metadata["path"] == json.dumps(["a0", "a1", "a2"])
    default = ReasoningRAGStrategy(index, ScriptedNavigator(), "m").retrieve("q")
    assert ids(default) == ["a5"] and default[0].metadata["depth"] == "6"


def test_filter_applies_to_stop_nodes_after_the_descent(store: Store) -> None:
    index = HierarchyIndex(store)
    index.add_all([
        MemoryEntry("root", "root"),
        MemoryEntry("sec", "section", parent_id="root"),
        MemoryEntry("best", "best leaf", MemoryTier.SEMANTIC, parent_id="sec"),
        MemoryEntry("work", "working leaf", MemoryTier.WORKING, parent_id="sec", metadata={"tenant": "acme"}),
        MemoryEntry("other", "other leaf", MemoryTier.WORKING, parent_id="root"),
    ])
    nav = ScriptedNavigator({"sec": 3.0, "other": 1.0, "best": 3.0, "work": 1.0})
    strategy = ReasoningRAGStrategy(index, nav, "m")
    assert ids(strategy.retrieve("q")) == ["best", "other", "work"]
    # the unfiltered top-1 is SEMANTIC; the filter runs before top-K
    working = strategy.retrieve("q", RAGContext(max_results=1, metadata_filters={"tier": "WORKING"}))
    assert ids(working) == ["other"] and working[0].score == 0.25
    # walked nodes (root, sec) are not filtered: the leaf is reached through them
    acme = strategy.retrieve("q", RAGContext(metadata_filters={"tenant": "acme"}))
    assert ids(acme) == ["work"] and acme[0].metadata["path"] == json.dumps(["root", "sec", "work"])
    assert strategy.retrieve("q", RAGContext(metadata_filters={"depth": "2"})) == \
        [d for d in strategy.retrieve("q") if d.metadata["entryId"] == "other"]
    # min_score is inclusive, on the path score
    assert ids(strategy.retrieve("q", RAGContext(min_score=0.25))) == ["best", "other"]


def test_source_fence_hides_fenced_nodes_and_their_subtrees(manual: HierarchyIndex, store: Store) -> None:
    HierarchyIndex(store).add_all([
        MemoryEntry("secret", "Fan blade crack report (internal).", source="private", parent_id="engines"),
        MemoryEntry("under", "Fan blade details", source="docs", parent_id="secret"),
    ])
    nav = ScriptedNavigator()
    descent = ReasoningRAGStrategy(manual, nav, "m", {"docs"}, 50, 6).descend("q", RAGContext(max_results=50))
    assert "secret" not in nav.seen and "under" not in nav.seen and "cooking" not in nav.seen
    assert set(ids(descent.documents)) == {"fan", "oil", "flaps"}
    # the lexical navigator's subtree text does not see fenced text either
    lexical = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m", {"docs", "galley"})
    assert ids(lexical.retrieve("internal report")) == []
    unfenced = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m")
    assert ids(unfenced.retrieve("internal report")) == ["secret"]


class _Recorder:
    """A navigator that records the children it is shown and scores them all 0."""

    def __init__(self, *, wants_subtree_text: bool) -> None:
        self.wants_subtree_text = wants_subtree_text
        self.seen: list[NavNode] = []

    def rank_children(self, query: str, node: NavNode | None, children: Sequence[NavNode],
                      model: str) -> list[float]:
        self.seen.extend(children)
        return [0.0] * len(children)


def test_summary_metadata_and_titles_reach_the_navigator(store: Store) -> None:
    HierarchyIndex(store).add_all([MemoryEntry("r", "\n  Title line  \nbody " + "x " * 400,
                                               metadata={"summary": "short summary"}),
                                   MemoryEntry("s", "Plain\n" + "word " * 100)])
    recorder = _Recorder(wants_subtree_text=False)
    seen = recorder.seen
    ReasoningRAGStrategy(HierarchyIndex(store), recorder, "m").retrieve("q")
    r, s = seen
    assert (r.id, r.title, r.summary, r.depth, r.has_children, r.subtree_text) == \
        ("r", "Title line", "short summary", 1, False, "")
    assert s.title == "Plain" and s.summary == ("Plain " + "word " * 100)[:300]


def test_subtree_text_is_capped_per_child(store: Store) -> None:
    HierarchyIndex(store).add_all([MemoryEntry("r", "root text"),
                                   *(MemoryEntry(f"c{i}", "y" * 100, parent_id="r") for i in range(5))])
    recorder = _Recorder(wants_subtree_text=True)
    seen = recorder.seen
    ReasoningRAGStrategy(HierarchyIndex(store), recorder, "m", subtree_text_chars=250).retrieve("q")
    [root] = seen
    assert root.has_children
    assert root.subtree_text == ("root text\n" + "y" * 100 + "\n" + "y" * 100 + "\n" + "y" * 100)[:250]


# -- navigator output contract ------------------------------------------------------------


@pytest.mark.parametrize("answer, message", [
    ([1.0], "1 scores for 2 children"),
    ([1.0, 2.0, 3.0], "3 scores for 2 children"),
    ({"manual": 1.0, "cooking": 1.0, "ghost": 2.0}, "unknown children"),
    ({"manual": 1.0}, "no score"),
    ([1.0, math.nan], "non-finite"),
    ([math.inf, 1.0], "non-finite"),
    ([1.0, "high"], "non-numeric"),
    ([True, 1.0], "non-numeric"),
    ("1.0 2.0", "sequence of scores"),
    (None, "sequence of scores"),
])
def test_navigator_output_breaking_the_contract_is_an_execution_error(
        manual: HierarchyIndex, answer: object, message: str) -> None:
    strategy = ReasoningRAGStrategy(manual, AnswerNavigator(answer), "m")  # type: ignore[arg-type]
    with pytest.raises(ExecutionError, match=message):
        strategy.retrieve("q")


def test_mapping_answers_are_accepted(manual: HierarchyIndex) -> None:
    nav = AnswerNavigator(lambda children: {c.id: (1.0 if c.id in ("manual", "engines", "fan") else 0.0)
                                            for c in children})
    assert ids(ReasoningRAGStrategy(manual, nav, "m").retrieve("q")) == ["fan"]  # type: ignore[arg-type]


def test_navigator_exceptions(manual: HierarchyIndex) -> None:
    def boom(children: object) -> object:
        raise KeyError("model exploded")

    with pytest.raises(ExecutionError, match="model exploded") as info:
        ReasoningRAGStrategy(manual, AnswerNavigator(boom), "m").retrieve("q")  # type: ignore[arg-type]
    assert isinstance(info.value.__cause__, KeyError)

    def down(children: object) -> object:
        raise ProviderTransportError("connection refused")

    with pytest.raises(ProviderTransportError, match="connection refused"):
        ReasoningRAGStrategy(manual, AnswerNavigator(down), "m").retrieve("q")  # type: ignore[arg-type]


def test_one_statement_per_frontier_expansion(manual: HierarchyIndex, store: Store) -> None:
    with read_statements() as sent:
        descent = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m", seed_count=None).descend("fan blade")
        seeded = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m").descend("fan blade")
    statements = [text for _, text, _ in sent if "entries" in text]
    # unseeded: one per expansion; seeded: the seeds' statement, then one per expansion
    assert len(statements) == descent.expansions + 1 + seeded.expansions and descent.expansions == 3


# -- entry points -------------------------------------------------------------------------


def test_load_navigator_builtin_and_unknown() -> None:
    assert isinstance(load_navigator("lexical"), LexicalTreeNavigator)
    assert "lexical" in available_navigators()
    with pytest.raises(StrategyUnavailableError, match="available: .*lexical"):
        load_navigator("no-such-navigator")
    with pytest.raises(ConfigurationError):
        load_navigator(" ")


def test_load_navigator_from_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(group: str) -> list[importlib.metadata.EntryPoint]:
        assert group == NAVIGATOR_ENTRY_POINT_GROUP
        return [
            importlib.metadata.EntryPoint("mine", "tnsrag_db._strategies.navigation:LexicalTreeNavigator", group),
            importlib.metadata.EntryPoint("twice", "tnsrag_db._strategies.navigation:LexicalTreeNavigator", group),
            importlib.metadata.EntryPoint("twice", "tnsrag_db._strategies.navigation:NavNode", group),
            importlib.metadata.EntryPoint("broken", "tnsrag_db.no_such_module:X", group),
            importlib.metadata.EntryPoint("wrong", "tnsrag_db._strategies.navigation:available_navigators", group),
        ]

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: fake(group))
    assert available_navigators() == ["broken", "lexical", "mine", "twice", "wrong"]
    assert installed_navigators() == ["broken", "mine", "twice", "wrong"]
    assert isinstance(load_navigator("mine"), LexicalTreeNavigator)
    with pytest.raises(ProviderConfigurationError, match="2 tree navigators are named 'twice'"):
        load_navigator("twice")
    with pytest.raises(ProviderConfigurationError, match="cannot load"):
        load_navigator("broken")
    with pytest.raises(ProviderConfigurationError, match="not a tree navigator"):
        load_navigator("wrong")


def test_subtree_text_reads_a_bounded_number_of_rows(store: Store) -> None:
    # One child with a 60-deep chain below it: short texts, far under the character cap,
    # so only the row bound can leave the deep end out.
    chain = [MemoryEntry("r", "root"), MemoryEntry("n0", "start", parent_id="r")]
    chain += [MemoryEntry(f"n{i}", f"level{i}", parent_id=f"n{i - 1}") for i in range(1, 60)]
    HierarchyIndex(store).add_all(chain)
    recorder = _Recorder(wants_subtree_text=True)
    seen = recorder.seen
    ReasoningRAGStrategy(HierarchyIndex(store), recorder, "m", max_nodes_visited=1).retrieve("q")
    assert seen[0].subtree_text.split("\n")[-1] == "level59"  # default bound: the whole chain
    seen.clear()
    ReasoningRAGStrategy(HierarchyIndex(store), recorder, "m", max_nodes_visited=1, subtree_rows=10).retrieve("q")
    assert seen[0].subtree_text.split("\n") == ["root", "start"] + [f"level{i}" for i in range(1, 9)]
    with pytest.raises(ConfigurationError, match="subtree_rows"):
        ReasoningRAGStrategy(HierarchyIndex(store), recorder, "m", subtree_rows=0)


def test_plan_driven_by_run_plan_is_retrieve(manual: HierarchyIndex, store: Store) -> None:
    from tests.db._plans import drive

    strategy = ReasoningRAGStrategy(manual, LexicalTreeNavigator(), "m")
    expected = strategy.retrieve("fan blade")
    assert expected
    docs, yielded = drive(store, strategy.plan("fan blade"))
    assert docs == expected and len(yielded) == 1 + strategy.descend("fan blade").expansions
