"""Unit tests of query expansion and MultiQueryRAGStrategy's own logic (no database)."""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Sequence

import pytest

from tnsrag_db._errors import (
    ConfigurationError,
    ExecutionError,
    ProviderConfigurationError,
    ProviderTransportError,
    RetrievalCancelledError,
    StrategyUnavailableError,
)
from tnsrag_db._strategies.expansion import (
    EXPANDER_ENTRY_POINT_GROUP,
    CancellationToken,
    QueryExpansion,
    available_expanders,
    load_expander,
    normalize_variant,
    normalize_variants,
)
from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy
from tnsrag_db._types import RAGContext, RetrievedDocument


def doc(entry_id: str, score: float = 1.0, **metadata: str) -> RetrievedDocument:
    return RetrievedDocument(f"text {entry_id}", None, score, {"entryId": entry_id, **metadata})


class TableStrategy:
    """A base strategy answering from a table of rankings, recording its calls."""

    name = "table"

    def __init__(self, table: dict[str, list[str]], on_call: object = None) -> None:
        self.table = table
        self.calls: list[tuple[str, RAGContext]] = []
        self.on_call = on_call

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        assert context is not None
        self.calls.append((query, context))
        if callable(self.on_call):
            self.on_call()
        return [doc(i, 10.0 - r) for r, i in enumerate(self.table.get(query, []))][: context.max_results]


class ListExpander:
    def __init__(self, variants: object, before: object = None) -> None:
        self.variants = variants
        self.before = before
        self.calls: list[tuple[str, QueryExpansion, str, int]] = []

    def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> object:
        self.calls.append((query, mode, model, max_expansions))
        if callable(self.before):
            self.before()
        return self.variants


# -- QueryExpansion and CancellationToken --------------------------------------------------


def test_query_expansion_modes() -> None:
    assert [m.name for m in QueryExpansion] == ["NONE", "LLM", "RM3"]
    assert QueryExpansion.parse("rm3") is QueryExpansion.RM3
    assert QueryExpansion.parse(" LLM ") is QueryExpansion.LLM
    assert QueryExpansion.parse(QueryExpansion.NONE) is QueryExpansion.NONE
    with pytest.raises(ConfigurationError, match="NONE, LLM, RM3"):
        QueryExpansion.parse("hyde")


def test_cancellation_token_is_a_one_way_thread_safe_flag() -> None:
    token = CancellationToken()
    assert not token.cancelled
    token.raise_if_cancelled()
    worker = threading.Thread(target=token.cancel)
    worker.start()
    worker.join()
    assert token.cancelled
    token.cancel()
    assert token.cancelled
    with pytest.raises(RetrievalCancelledError):
        token.raise_if_cancelled()


# -- normalisation --------------------------------------------------------------------------


@pytest.mark.parametrize("raw, clean", [
    ("  fan   blades\n", "fan blades"),
    ("1. fan blades", "fan blades"),
    ("12) fan blades", "fan blades"),
    ("(3) fan blades", "fan blades"),
    ("- fan blades", "fan blades"),
    ("* fan blades", "fan blades"),
    ("• fan blades", "fan blades"),
    ("1. - fan blades", "fan blades"),
    ("1.5 million rows", "1.5 million rows"),
    ("-5 degrees", "-5 degrees"),
    ("*emphasis* stays", "*emphasis* stays"),
    ("-", ""),
    ("2.", ""),
    ("   ", ""),
    ("nul\x00byte", "nul byte"),
])
def test_normalize_variant(raw: str, clean: str) -> None:
    assert normalize_variant(raw) == clean


def test_normalize_variants_dedups_keeps_original_first_and_limits() -> None:
    variants = ["Fan Blades", "  fan   blades ", "1. FAN blades", "- engine oil", "* Engine Oil", "", "  ",
                "• wing flaps", "rudder"]
    assert normalize_variants("fan  blades", variants, 10) == ["fan  blades", "engine oil", "wing flaps", "rudder"]
    assert normalize_variants("fan blades", variants, 2) == ["fan blades", "engine oil", "wing flaps"]
    assert normalize_variants("fan blades", [], 3) == ["fan blades"]
    assert normalize_variants("q", ("a", "b"), 5) == ["q", "a", "b"]


@pytest.mark.parametrize("bad", ["one string", None, 3, ["ok", 5], [b"bytes"]])
def test_normalize_variants_rejects_output_that_is_not_a_list_of_strings(bad: object) -> None:
    with pytest.raises(ExecutionError):
        normalize_variants("q", bad, 5)  # type: ignore[arg-type]


# -- MultiQueryRAGStrategy construction -----------------------------------------------------


def make(**overrides: object) -> MultiQueryRAGStrategy:
    args: dict[str, object] = {"base_strategy": TableStrategy({}), "expander": ListExpander([]),
                               "mode": QueryExpansion.LLM, "model": "gpt-x", "max_expansions": 3}
    args.update(overrides)
    return MultiQueryRAGStrategy(**args)  # type: ignore[arg-type]


def test_construction_defaults() -> None:
    strategy = make()
    assert strategy.name == "multi_query" and strategy.mode is QueryExpansion.LLM
    assert strategy.model == "gpt-x" and strategy.max_expansions == 3
    assert make(mode="rm3").mode is QueryExpansion.RM3
    assert strategy.candidate_count(1) == 50 and strategy.candidate_count(12) == 50
    assert strategy.candidate_count(13) == 52 and strategy.candidate_count(100) == 400
    assert make(candidates=7).candidate_count(100) == 7


@pytest.mark.parametrize("overrides, message", [
    ({"mode": QueryExpansion.NONE}, "other than NONE"),
    ({"mode": "none"}, "other than NONE"),
    ({"mode": "bogus"}, "unknown query expansion mode"),
    ({"model": ""}, "model"),
    ({"model": "   "}, "model"),
    ({"model": None}, "model"),
    ({"max_expansions": 0}, "max_expansions"),
    ({"max_expansions": -2}, "max_expansions"),
    ({"max_expansions": True}, "max_expansions"),
    ({"max_expansions": 1.5}, "max_expansions"),
    ({"candidates": 0}, "candidates"),
    ({"cancellation_token": "yes"}, "cancellation_token"),
    ({"base_strategy": object()}, "base_strategy"),
    ({"expander": object()}, "expander"),
])
def test_construction_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make(**overrides)


def test_expander_supported_modes_are_checked_at_construction() -> None:
    expander = ListExpander([])
    expander.supported_modes = frozenset({QueryExpansion.RM3})  # type: ignore[attr-defined]
    make(expander=expander, mode=QueryExpansion.RM3)
    with pytest.raises(ConfigurationError, match="does not serve mode LLM"):
        make(expander=expander, mode=QueryExpansion.LLM)


# -- retrieval logic ------------------------------------------------------------------------


def test_each_unique_query_runs_once_and_rrf_merges_exactly() -> None:
    base = TableStrategy({"q": ["a", "b", "c"], "Variant one": ["b", "d"], "variant two": ["c", "b"]})
    expander = ListExpander(["Q", "1. Variant one", "- variant ONE", "variant two", "  "])
    strategy = make(base_strategy=base, expander=expander, max_expansions=5)
    docs = strategy.retrieve("q", RAGContext(max_results=3, metadata_filters={"tenant": "acme"}))
    assert [q for q, _ in base.calls] == ["q", "Variant one", "variant two"]
    assert expander.calls == [("q", QueryExpansion.LLM, "gpt-x", 5)]
    for _, ctx in base.calls:
        assert ctx.max_results == 50 and ctx.min_score == 0.0 and dict(ctx.metadata_filters) == {"tenant": "acme"}
    scores = {d.metadata["entryId"]: d.score for d in docs}
    assert [d.metadata["entryId"] for d in docs] == ["b", "c", "a"]
    assert scores == {"b": 1 / 62 + 1 / 61 + 1 / 62, "c": 1 / 63 + 1 / 61, "a": 1 / 61}


def test_min_score_applies_to_the_fused_score() -> None:
    base = TableStrategy({"q": ["a", "b"], "v": ["b"]})
    strategy = make(base_strategy=base, expander=ListExpander(["v"]))
    assert [d.metadata["entryId"] for d in strategy.retrieve("q", RAGContext(min_score=1 / 61))] == ["b", "a"]
    assert [d.metadata["entryId"] for d in strategy.retrieve("q", RAGContext(min_score=1 / 60))] == ["b"]


def test_cancelled_by_the_expander_runs_no_base_call() -> None:
    token = CancellationToken()
    base = TableStrategy({"q": ["a"]})
    strategy = make(base_strategy=base, expander=ListExpander(["v"], before=token.cancel), cancellation_token=token)
    with pytest.raises(RetrievalCancelledError):
        strategy.retrieve("q")
    assert base.calls == []


def test_cancelled_during_the_first_base_call_stops_further_calls() -> None:
    token = CancellationToken()
    base = TableStrategy({"q": ["a"]}, on_call=token.cancel)
    strategy = make(base_strategy=base, expander=ListExpander(["v", "w"]), cancellation_token=token)
    with pytest.raises(RetrievalCancelledError):
        strategy.retrieve("q")
    assert [q for q, _ in base.calls] == ["q"]


def test_a_cancelled_token_calls_nothing() -> None:
    token = CancellationToken()
    token.cancel()
    expander = ListExpander(["v"])
    base = TableStrategy({})
    with pytest.raises(RetrievalCancelledError):
        make(base_strategy=base, expander=expander, cancellation_token=token).retrieve("q")
    assert expander.calls == [] and base.calls == []


def test_expander_errors() -> None:
    def transport() -> None:
        raise ProviderTransportError("timeout")

    def other() -> None:
        raise RuntimeError("bad json from model")

    with pytest.raises(ProviderTransportError, match="timeout"):
        make(expander=ListExpander([], before=transport)).retrieve("q")
    with pytest.raises(ExecutionError, match="bad json") as info:
        make(expander=ListExpander([], before=other)).retrieve("q")
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(ExecutionError, match="list of strings"):
        make(expander=ListExpander("not a list")).retrieve("q")


# -- entry points ---------------------------------------------------------------------------


class NoArgExpander:
    def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> Sequence[str]:
        return [query.upper()]


def test_load_expander(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="needs a store"):
        load_expander("rm3")
    with pytest.raises(StrategyUnavailableError, match="available: rm3"):
        load_expander("llm-x")

    def fake(group: str) -> list[importlib.metadata.EntryPoint]:
        assert group == EXPANDER_ENTRY_POINT_GROUP
        return [importlib.metadata.EntryPoint("upper", f"{__name__}:NoArgExpander", group),
                importlib.metadata.EntryPoint("nothing", f"{__name__}:TableStrategy", group)]

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: fake(group))
    assert available_expanders() == ["nothing", "rm3", "upper"]
    assert isinstance(load_expander("upper"), NoArgExpander)
    with pytest.raises(ProviderConfigurationError, match="cannot instantiate"):
        load_expander("nothing")


def test_installed_expanders_lists_entry_points_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from tnsrag_db._strategies.expansion import installed_expanders

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [
        importlib.metadata.EntryPoint("upper", f"{__name__}:NoArgExpander", group)])
    assert installed_expanders() == ["upper"]
