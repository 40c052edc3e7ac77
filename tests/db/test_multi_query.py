"""MultiQueryRAGStrategy over real strategies, and RM3QueryExpander, on a real database."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from tnsrag_db._errors import ConfigurationError, RetrievalCancelledError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.expansion import CancellationToken, QueryExpansion, RM3QueryExpander, load_expander
from tnsrag_db._strategies.fusion import reciprocal_rank_fusion
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy
from tnsrag_db._strategies.navigation import LexicalTreeNavigator
from tnsrag_db._strategies.reasoning import ReasoningRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext, RetrievedDocument


class Counting:
    """Wraps a real strategy and records every call (and optionally acts on it)."""

    def __init__(self, inner: object, on_call: object = None) -> None:
        self.inner = inner
        self.calls: list[tuple[str, RAGContext | None]] = []
        self.on_call = on_call

    @property
    def name(self) -> str:
        return "counting"

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        self.calls.append((query, context))
        if callable(self.on_call):
            self.on_call()
        return self.inner.retrieve(query, context)  # type: ignore[attr-defined,no-any-return]


class Fixed:
    def __init__(self, variants: Sequence[str]) -> None:
        self.variants = list(variants)

    def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> list[str]:
        return self.variants


DOCS = [
    MemoryEntry("fan", "Inspect every fan blade for cracks.", MemoryTier.SEMANTIC, source="docs"),
    MemoryEntry("fan-log", "Fan blade crack found on engine two.", MemoryTier.WORKING, source="docs",
                metadata={"tenant": "acme"}),
    MemoryEntry("oil", "Engine oil pressure must be checked after start.", MemoryTier.SEMANTIC, source="docs"),
    MemoryEntry("oil-log", "Low oil pressure warning on engine one.", MemoryTier.WORKING, source="docs",
                metadata={"tenant": "acme"}),
    MemoryEntry("flaps", "Rig the flap actuator before flight.", MemoryTier.PROCEDURAL, source="docs"),
    MemoryEntry("pasta", "Boil pasta in salted water; crack pepper on top.", MemoryTier.SEMANTIC, source="galley"),
]


@pytest.fixture
def keyword(store: Store) -> KeywordRAGStrategy:
    store.add_all(DOCS)
    return KeywordRAGStrategy(BM25Index(store))


def ids(docs: Sequence[RetrievedDocument]) -> list[str]:
    return [d.metadata["entryId"] for d in docs]


def test_variants_differing_by_case_whitespace_or_marker_run_once(keyword: KeywordRAGStrategy) -> None:
    base = Counting(keyword)
    expander = Fixed(["Fan Blade", "  fan   blade ", "1. FAN BLADE", "- fan blade", "* fan blade", "• Fan blade",
                      "", "   ", "2) engine oil", "Engine Oil", "oil pressure"])
    strategy = MultiQueryRAGStrategy(base, expander, QueryExpansion.LLM, "gpt-x", 5)
    strategy.retrieve("fan blade")
    assert [q for q, _ in base.calls] == ["fan blade", "engine oil", "oil pressure"]
    limited = Counting(keyword)
    MultiQueryRAGStrategy(limited, expander, QueryExpansion.LLM, "gpt-x", 1).retrieve("fan blade")
    assert [q for q, _ in limited.calls] == ["fan blade", "engine oil"]


def test_rrf_merge_of_the_real_rankings_has_exact_scores(keyword: KeywordRAGStrategy) -> None:
    strategy = MultiQueryRAGStrategy(keyword, Fixed(["engine oil", "crack"]), QueryExpansion.LLM, "m", 3)
    fused = strategy.retrieve("fan blade", RAGContext(max_results=4))
    deep = RAGContext(max_results=50)
    rankings = {q: ids(keyword.retrieve(q, deep)) for q in ("fan blade", "engine oil", "crack")}
    assert rankings["fan blade"][:2] == ["fan", "fan-log"] or rankings["fan blade"][:2] == ["fan-log", "fan"]
    expected: dict[str, float] = {}
    for ranking in rankings.values():
        for rank, entry_id in enumerate(ranking, start=1):
            expected[entry_id] = expected.get(entry_id, 0.0) + 1 / (60 + rank)
    order = sorted(expected, key=lambda e: -expected[e])
    assert ids(fused) == order[:4]
    for d in fused:
        assert d.score == pytest.approx(expected[d.metadata["entryId"]], rel=1e-15)
    # identical to the shared fusion function over the same rankings
    again = reciprocal_rank_fusion(*(keyword.retrieve(q, deep) for q in ("fan blade", "engine oil", "crack")))
    assert [(ids([d])[0], d.score) for d in again[:4]] == [(ids([d])[0], d.score) for d in fused]
    # the fused documents keep the base's metadata
    assert {k: v for k, v in fused[0].metadata.items()} == \
        dict(next(d for d in keyword.retrieve("fan blade", deep) if d.metadata["entryId"] == ids(fused)[0]).metadata)


def test_metadata_filter_is_passed_down_and_applies_before_top_k(keyword: KeywordRAGStrategy) -> None:
    base = Counting(keyword)
    strategy = MultiQueryRAGStrategy(base, Fixed(["inspect"]), QueryExpansion.LLM, "m", 2)
    unfiltered = strategy.retrieve("fan blade crack", RAGContext(max_results=1))
    assert unfiltered[0].metadata["tier"] == "SEMANTIC"
    working = strategy.retrieve("fan blade crack", RAGContext(max_results=1, metadata_filters={"tier": "WORKING"}))
    assert ids(working) == ["fan-log"]
    for _, ctx in base.calls[-2:]:
        assert ctx is not None and dict(ctx.metadata_filters) == {"tier": "WORKING"}
        assert ctx.max_results == 50 and ctx.min_score == 0.0
    acme = strategy.retrieve("fan blade crack", RAGContext(metadata_filters={"tenant": "acme"}))
    assert ids(acme) == ["fan-log"] and acme[0].metadata["tenant"] == "acme"


def test_candidates_per_query(keyword: KeywordRAGStrategy) -> None:
    base = Counting(keyword)
    MultiQueryRAGStrategy(base, Fixed([]), QueryExpansion.LLM, "m", 2).retrieve("oil", RAGContext(max_results=30))
    MultiQueryRAGStrategy(base, Fixed([]), QueryExpansion.LLM, "m", 2, candidates=3).retrieve("oil")
    assert [ctx.max_results for _, ctx in base.calls if ctx is not None] == [120, 3]


def test_source_fence_of_the_base_holds(store: Store) -> None:
    HierarchyIndex(store).add_all([
        MemoryEntry("manual", "Maintenance manual", source="docs"),
        MemoryEntry("fan", "Fan blade cracks", source="docs", parent_id="manual"),
        MemoryEntry("galley", "Galley guide", source="galley"),
        MemoryEntry("pasta", "Crack pepper over pasta", source="galley", parent_id="galley"),
    ])
    fenced = ReasoningRAGStrategy(HierarchyIndex(store), LexicalTreeNavigator(), "lexical", {"docs"})
    strategy = MultiQueryRAGStrategy(fenced, Fixed(["pepper crack", "pasta"]), QueryExpansion.LLM, "m", 3)
    docs = strategy.retrieve("crack")
    assert ids(docs) == ["fan"] and {d.source for d in docs} == {"docs"}
    open_base = ReasoningRAGStrategy(HierarchyIndex(store), LexicalTreeNavigator(), "lexical")
    assert set(ids(MultiQueryRAGStrategy(open_base, Fixed(["pasta"]), QueryExpansion.LLM, "m", 3)
                   .retrieve("crack"))) == {"fan", "pasta"}


def test_cancellation_in_the_first_base_call_stops_the_rest(keyword: KeywordRAGStrategy) -> None:
    token = CancellationToken()
    base = Counting(keyword, on_call=token.cancel)
    strategy = MultiQueryRAGStrategy(base, Fixed(["oil", "flap"]), QueryExpansion.LLM, "m", 3, token)
    with pytest.raises(RetrievalCancelledError):
        strategy.retrieve("fan")
    assert [q for q, _ in base.calls] == ["fan"]


def test_cancellation_by_the_expander(keyword: KeywordRAGStrategy) -> None:
    token = CancellationToken()

    class Cancelling:
        def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> list[str]:
            token.cancel()
            return ["oil"]

    base = Counting(keyword)
    with pytest.raises(RetrievalCancelledError):
        MultiQueryRAGStrategy(base, Cancelling(), QueryExpansion.LLM, "m", 3, token).retrieve("fan")
    assert base.calls == []


# -- RM3 --------------------------------------------------------------------------------


RM3_DOCS = [
    MemoryEntry("d1", "turbine blade cooling airflow", metadata={"tenant": "a"}),
    MemoryEntry("d2", "turbine blade fatigue cracks turbine", metadata={"tenant": "b"}),
    MemoryEntry("d3", "airflow cooling fins", metadata={"tenant": "a"}),
    MemoryEntry("d4", "pasta recipe water"),
]


@pytest.fixture
def rm3_index(store: Store) -> BM25Index:
    store.add_all(RM3_DOCS)
    return BM25Index(store)


def test_rm3_relevance_model_matches_a_plain_reference(rm3_index: BM25Index) -> None:
    expander = RM3QueryExpander(rm3_index)
    feedback = rm3_index.search("turbine", 10)
    assert [e for e, _ in feedback] == ["d2", "d1"]
    terms = rm3_index.document_terms(["d1", "d2"])
    total = sum(s for _, s in feedback)
    reference: dict[str, float] = {}
    for entry_id, score in feedback:
        length = sum(terms[entry_id].values())
        for term, tf in terms[entry_id].items():
            reference[term] = reference.get(term, 0.0) + (score / total) * tf / length
    model = expander.relevance_model("turbine")
    assert dict(model) == pytest.approx(reference, rel=1e-12)
    assert math.fsum(w for _, w in model) == pytest.approx(1.0)
    assert [w for _, w in model] == sorted((w for _, w in model), reverse=True)
    assert model[0][0] == rm3_index.query_terms("turbine")[0]
    assert expander.relevance_model("zebra") == []


def test_rm3_expansion_terms_model_and_variant(rm3_index: BM25Index) -> None:
    expander = RM3QueryExpander(rm3_index, expansion_terms=3)
    query_terms = rm3_index.query_terms("turbine")
    expansion = expander.expansion_terms("turbine")
    assert len(expansion) == 3 and not set(expansion) & set(query_terms)
    assert expansion[0] == rm3_index.query_terms("blade")[0]  # in both feedback documents
    [variant] = expander.expand("turbine", QueryExpansion.RM3, "rm3", 5)
    assert variant == "turbine " + " ".join(expansion)
    weighted = dict(expander.expansion_model("turbine"))
    assert math.fsum(weighted.values()) == pytest.approx(1.0)
    top3 = dict(expander.relevance_model("turbine")[:3])
    norm = math.fsum(top3.values())
    for term, w in top3.items():
        assert weighted[term] == pytest.approx((0.5 if term in query_terms else 0.0) + 0.5 * w / norm)
    assert expander.expand("zebra", QueryExpansion.RM3, "rm3", 5) == []


def test_rm3_feedback_respects_its_filter(rm3_index: BM25Index) -> None:
    only_a = RM3QueryExpander(rm3_index, filters={"tenant": "a"})
    vocabulary = {t for t, _ in only_a.relevance_model("turbine")}
    assert vocabulary == set(rm3_index.document_terms(["d1"])["d1"])


def test_rm3_configuration_errors(rm3_index: BM25Index, store: Store) -> None:
    for kwargs in ({"feedback_docs": 0}, {"expansion_terms": -1}, {"original_weight": 1.5},
                   {"original_weight": True}, {"filters": {"": "x"}}):
        with pytest.raises(ConfigurationError):
            RM3QueryExpander(rm3_index, **kwargs)
    with pytest.raises(ConfigurationError, match="BM25Index"):
        RM3QueryExpander(store)  # type: ignore[arg-type]
    expander = RM3QueryExpander(rm3_index)
    with pytest.raises(ConfigurationError, match="RM3 only"):
        expander.expand("turbine", QueryExpansion.LLM, "m", 1)
    with pytest.raises(ConfigurationError, match="does not serve mode LLM"):
        MultiQueryRAGStrategy(KeywordRAGStrategy(rm3_index), expander, QueryExpansion.LLM, "m", 1)
    assert isinstance(load_expander("rm3", store=store), RM3QueryExpander)


def test_multi_query_with_rm3_finds_documents_sharing_only_feedback_vocabulary(rm3_index: BM25Index) -> None:
    keyword = KeywordRAGStrategy(rm3_index)
    assert ids(keyword.retrieve("turbine")) == ["d2", "d1"]
    strategy = MultiQueryRAGStrategy(keyword, RM3QueryExpander(rm3_index), QueryExpansion.RM3, "rm3", 1)
    docs = strategy.retrieve("turbine")
    assert set(ids(docs)) == {"d1", "d2", "d3"} and ids(docs)[-1] == "d3"
    assert ids(strategy.retrieve("turbine", RAGContext(metadata_filters={"tenant": "a"}))) == ["d1", "d3"]


def test_plan_driven_by_run_plan_is_retrieve(keyword: KeywordRAGStrategy, store: Store) -> None:
    from tests.db._plans import drive

    strategy = MultiQueryRAGStrategy(keyword, Fixed(["engine oil", "crack"]), QueryExpansion.LLM, "m", 2)
    expected = strategy.retrieve("fan blade")
    assert len(expected) > 2
    docs, yielded = drive(store, strategy.plan("fan blade"))
    assert docs == expected and len(yielded) == 3  # one keyword statement per query


def test_the_library_s_typed_errors_pass_through_the_expander_unchanged(keyword: KeywordRAGStrategy) -> None:
    from tnsrag_db._errors import ExecutionError, StatementTimeoutError

    class TimingOut:
        def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> list[str]:
            raise StatementTimeoutError("canceling statement due to statement timeout")

    class Broken:
        def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> list[str]:
            raise KeyError("x")

    # Before: "query expander failed ..." as an ExecutionError, the timeout's type lost.
    with pytest.raises(StatementTimeoutError, match="statement timeout"):
        MultiQueryRAGStrategy(keyword, TimingOut(), QueryExpansion.LLM, "m", 3).retrieve("fan")
    with pytest.raises(ExecutionError, match="query expander failed"):
        MultiQueryRAGStrategy(keyword, Broken(), QueryExpansion.LLM, "m", 3).retrieve("fan")


def test_rm3_document_terms_probe_postings_by_key_on_fresh_tables(fresh_db_url: object) -> None:
    """A large document on tables the planner has no statistics for: its terms are read one
    primary-key probe each (a join planned without statistics took minutes for 37,500 terms)."""
    import json

    import psycopg

    from tnsrag_db._db import runner
    from tnsrag_db._store.store import connect

    def letters(n: int) -> str:  # plain words (no digits: identifiers would add their parts)
        out = "zq"
        for _ in range(4):
            n, r = divmod(n, 26)
            out += "abcdefghijklmnopqrstuvwxyz"[r]
        return out

    words = [letters(n) for n in range(3000)]
    with connect(fresh_db_url, corpus="fresh", auto_migrate=True) as fresh:  # type: ignore[arg-type]
        fresh.add_all([MemoryEntry("big", " ".join(words)), MemoryEntry("small", words[3])])
        reads: list[tuple[str, list[object]]] = []

        def record(text: str, values: object) -> None:
            reads.append((text, list(values)))  # type: ignore[call-overload]

        runner.add_statement_listener(record)
        try:
            terms = BM25Index(fresh).document_terms(["big", "small", "missing"])
        finally:
            runner.remove_statement_listener(record)
        assert set(terms) == {"big", "small"} and len(terms["big"]) == 3000 and len(terms["small"]) == 1
        # The statement the index read them with, explained for the large document alone.
        ((text, values),) = reads
        values = [["big"] if v == ["big", "small", "missing"] else v for v in values]
        with fresh.pool.connect() as conn, psycopg.RawCursor(conn.driver) as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON) " + text, values)
            plan = cursor.fetchone()[0]  # type: ignore[index]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    scans: list[tuple[str, str]] = []

    def walk(node: dict[str, object]) -> None:
        if node.get("Relation Name") == "bm25_postings":
            scans.append((str(node["Node Type"]), str(node.get("Index Cond"))))
        for child in node.get("Plans", ()):  # type: ignore[attr-defined]
            walk(child)

    walk(plan[0]["Plan"])
    # each probe has the whole key: before, one scan of the entry's postings per lexeme (quadratic)
    assert scans and all(kind in ("Index Scan", "Index Only Scan") and "lexeme" in cond for kind, cond in scans), scans
