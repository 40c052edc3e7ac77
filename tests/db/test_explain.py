"""Explained rankings: every strategy's ``explain`` returns what ``retrieve`` returns, and the
figures of each explanation give its score (BM25 contributions sum, RRF shares sum, decays
and multipliers multiply), on a real corpus: the sample corpus and this project's README
(its Markdown sections form a hierarchy), with timestamps and graph edges."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import URL

from tnsrag_db import (
    BM25Index,
    Edge,
    GraphRAGStrategy,
    GraphStore,
    HashingEmbedding,
    HierarchicalRAGStrategy,
    HierarchyIndex,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    LexicalTreeNavigator,
    MultiQueryRAGStrategy,
    QueryExpansion,
    RAGContext,
    ReasoningRAGStrategy,
    RM3QueryExpander,
    TemporalIndex,
    TemporalRAGStrategy,
    VectorMemoryStore,
    VectorRAGStrategy,
)
from tnsrag_db._errors import StatementTimeoutError
from tnsrag_db._loaders import FileLoader
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import STRATEGY_NAMES, build_strategy
from tnsrag_db.explain import (
    BM25Explanation,
    CosineExplanation,
    ExplainableStrategy,
    Explanation,
    FusionExplanation,
    GraphExplanation,
    HierarchyExplanation,
    ReasoningExplanation,
    ScoreFusionExplanation,
    TemporalExplanation,
    UnexplainedScore,
)

ROOT = Path(__file__).resolve().parents[2]
# Timestamps in the past of the real clock (the registry's temporal strategy uses it).
NOW = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
K1, B = 1.2, 0.75
QUERIES = ["hybrid retrieval fuses keyword and vector rankings", "PostgreSQL memory for agents",
           "TAN-5326 HttpClient", "BM25 identifiers snake_case_name", "embedding provider installed"]


def _corpus(store: Store) -> tuple[BM25Index, VectorMemoryStore]:
    entries = list(FileLoader(str(ROOT / "tnsrag_db" / "data" / "sample_corpus.jsonl"), "README.md",
                              base_dir=ROOT, tier="SEMANTIC", timestamp=None).load())
    # Every third entry undated, the others a week apart.
    entries = [e if i % 3 == 0 else dataclasses.replace(e, timestamp=NOW - timedelta(days=7 * i))
               for i, e in enumerate(entries)]
    vectors = VectorMemoryStore(store, HashingEmbedding())
    vectors.add_all(entries)
    graph = GraphStore(store)
    ids = [e.id for e in entries]
    edges = [Edge(e.parent_id, e.id, "contains", 2.0) for e in entries if e.parent_id]
    edges += [Edge(a, b, "next", 0.5) for a, b in zip(ids, ids[1:])]
    graph.add_edges(edges)
    return BM25Index(store), vectors


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def check(explanation: object, score: float) -> None:
    """Assert that ``explanation``'s figures give ``score``, recursively."""
    assert explanation.score == score  # type: ignore[attr-defined]
    if isinstance(explanation, BM25Explanation):
        assert explanation.terms and _close(math.fsum(t.contribution for t in explanation.terms), score)
        avgdl = explanation.avg_doc_len
        for t in explanation.terms:
            n, df = explanation.n_docs, t.df
            assert _close(t.idf, math.log(1 + (n - df + 0.5) / (df + 0.5)))
            expected = t.idf * t.tf * (K1 + 1) / (t.tf + K1 * (1 - B + B * explanation.doc_len / avgdl)) if t.tf else 0
            assert _close(t.contribution, expected)
    elif isinstance(explanation, CosineExplanation):
        assert explanation.cosine == score and explanation.provider and explanation.dimension == 128
    elif isinstance(explanation, FusionExplanation):
        total = 0.0
        for s in explanation.streams:
            assert s.share == s.weight / (explanation.k + s.rank)
            total += s.share
            if s.explanation is not None:
                check(s.explanation, s.stream_score)
        assert total == score
    elif isinstance(explanation, ScoreFusionExplanation):
        total = 0.0
        for p in explanation.streams:
            if p.stream_score is None or p.center is None or p.scale is None or p.floor is None:
                assert p.normalized == 0.0
            elif p.scale > 0:
                assert p.normalized == max((p.stream_score - p.center) / p.scale + p.floor, 0.0)
            assert p.share == p.weight * p.normalized
            total += p.share
            if p.explanation is not None:
                check(p.explanation, p.stream_score)  # type: ignore[arg-type]
        assert total == score
    elif isinstance(explanation, GraphExplanation):
        value = explanation.seed_score
        for hop in explanation.hops:
            value *= explanation.decay
            assert hop.score == value and hop.decay == explanation.decay
        assert value == score
        if explanation.seed_explanation is not None:
            check(explanation.seed_explanation, explanation.seed_score)
    elif isinstance(explanation, HierarchyExplanation):
        value = explanation.child_score
        for _ in range(explanation.level):
            value *= explanation.decay
        assert value == score
        if explanation.child_explanation is not None:
            check(explanation.child_explanation, explanation.child_score)
    elif isinstance(explanation, TemporalExplanation):
        assert explanation.child_score * explanation.multiplier == score
        floor = explanation.relevance_floor
        if explanation.age_seconds is None:
            assert explanation.multiplier == floor
        else:
            assert _close(explanation.multiplier,
                          floor + (1 - floor) * 0.5 ** (explanation.age_seconds / explanation.half_life_seconds))
        if explanation.child_explanation is not None:
            check(explanation.child_explanation, explanation.child_score)
    elif isinstance(explanation, ReasoningExplanation):
        value = 1.0
        for step in explanation.steps:
            assert step.share == step.navigator_score / step.sibling_total
            value *= step.share
        assert value == score
    else:
        raise AssertionError(f"unexpected explanation {explanation!r}")


def assert_explains(strategy: object, query: str, context: RAGContext | None = None, *,
                    moving_clock: bool = False) -> Explanation:
    expected = strategy.retrieve(query, context)  # type: ignore[attr-defined]
    explained = strategy.explain(query, context)  # type: ignore[attr-defined]
    assert isinstance(explained, Explanation)
    if moving_clock:  # freshness changed a little between the two calls
        assert [(d.content, d.metadata["entryId"]) for d in explained.documents] == \
            [(d.content, d.metadata["entryId"]) for d in expected]
        assert [d.score for d in explained.documents] == pytest.approx([d.score for d in expected], rel=1e-6)
    else:
        assert explained.documents == expected
    assert [r.rank for r in explained.results] == list(range(1, len(expected) + 1))
    for result in explained.results:
        check(result.explanation, result.document.score)
    json.dumps(explained.to_dict())
    assert explained.to_text()
    return explained


def top_hits(keywords: BM25Index) -> list:  # type: ignore[type-arg]
    return KeywordRAGStrategy(keywords).explain("TAN-5326", RAGContext(3)).results[:1]


def test_keyword_explains_bm25_per_term(store: Store) -> None:
    keywords, _ = _corpus(store)
    strategy = KeywordRAGStrategy(keywords)
    for query in QUERIES:
        explained = assert_explains(strategy, query)
        assert explained.results and explained.plans[0].method == "bm25"
    top = assert_explains(strategy, "TAN-5326").results[0]
    terms = {t.term: t for t in top.explanation.terms}  # type: ignore[union-attr]
    assert terms["tan-5326"].tf >= 1 and terms["tan-5326"].df == keywords.document_frequency(["tan-5326"])["tan-5326"]
    assert top.document.metadata["entryId"] in {r.document.metadata["entryId"] for r in top_hits(keywords)}
    filtered = assert_explains(strategy, "agent memory", RAGContext(3, 0.5, {"tier": "WORKING"}))
    assert filtered.plans[0].filtered and all(d.metadata["tier"] == "WORKING" for d in filtered.documents)


def test_vector_explains_cosine_and_plan(store: Store) -> None:
    _, vectors = _corpus(store)
    strategy = VectorRAGStrategy(vectors)
    for query in QUERIES:
        explained = assert_explains(strategy, query)
        assert explained.plans[0].method == "exact" and explained.plans[0].index is None
    # With an HNSW index: unfiltered top 3 is an HNSW scan; asking for more rows than
    # there are vectors makes HNSW fall short, and the exact scan answers.
    vectors.build_index()
    plan = assert_explains(strategy, QUERIES[0], RAGContext(3)).plans[0]
    assert (plan.method, plan.fallback, plan.filtered) == ("hnsw", False, False) and plan.index
    plan = assert_explains(strategy, QUERIES[0], RAGContext(500)).plans[0]
    assert (plan.method, plan.fallback) == ("hnsw", True)
    # Filtered: few matches are scanned exactly; above the threshold HNSW iterates.
    plan = assert_explains(strategy, QUERIES[1], RAGContext(2, -1.0, {"tier": "SEMANTIC"})).plans[0]
    assert plan.method == "exact" and plan.filtered and plan.matches_counted == store.count({"tier": "SEMANTIC"})
    low = VectorRAGStrategy(VectorMemoryStore(store, HashingEmbedding(), exact_threshold=1))
    plan = assert_explains(low, QUERIES[1], RAGContext(1, -1.0, {"tier": "SEMANTIC"})).plans[0]
    assert (plan.method, plan.matches_counted, plan.exact_threshold, plan.fallback) == ("hnsw", 2, 1, False)


def test_hybrid_explains_stream_ranks_and_shares(store: Store) -> None:
    keywords, vectors = _corpus(store)
    plain = HybridRAGStrategy(keywords, vectors)
    for query in QUERIES:
        explained = assert_explains(plain, query)
        assert [p.stream for p in explained.plans] == ["keyword", "vector"]
        both = [r for r in explained.results if len(r.explanation.streams) == 2]  # type: ignore[union-attr]
        assert both, "some result should come from both streams"
        kinds = {s.stream: s.explanation.kind for s in both[0].explanation.streams}  # type: ignore[union-attr]
        assert kinds == {"keyword": "bm25", "vector": "cosine"}
    assert_explains(plain, QUERIES[0], RAGContext(4, 0.02, {"tier": "SEMANTIC"}))
    weighted = HybridRAGStrategy(keywords, vectors, weights=(2.0, 0.5))
    explained = assert_explains(weighted, QUERIES[0])
    shares = explained.results[0].explanation.streams  # type: ignore[union-attr]
    assert {(s.stream, s.weight) for s in shares} <= {("keyword", 2.0), ("vector", 0.5)}
    keyword_only = assert_explains(HybridRAGStrategy(keywords, vectors, weights=(1.0, 0.0)), QUERIES[2])
    assert [p.stream for p in keyword_only.plans] == ["keyword"]
    assert all(s.stream == "keyword" for r in keyword_only.results
               for s in r.explanation.streams)  # type: ignore[union-attr]
    graph = GraphRAGStrategy("test", GraphStore(store), None, 2, 0.85, 1024)
    with_graph = HybridRAGStrategy(keywords, vectors, graph, weights=(1.0, 1.0, 0.5))
    explained = assert_explains(with_graph, QUERIES[1])
    streams = {s.stream for r in explained.results for s in r.explanation.streams}  # type: ignore[union-attr]
    assert streams == {"keyword", "vector", "graph"}
    assert [p.stream for p in explained.plans][:3] == ["keyword", "vector", "graph/seeds"]


@pytest.mark.parametrize("graph", [False, True])
def test_a_timeout_while_explaining_is_a_statement_timeout_error(store: Store, db_url: URL, graph: bool) -> None:
    """Explanations read through the store's read path: its statement timeout bounds them and
    a cancelled statement is a StatementTimeoutError (the hybrid explanation's snapshot ran
    outside it: no timeout, and errors as bare DatabaseErrors)."""
    keywords, vectors = _corpus(store)
    strategy = HybridRAGStrategy(keywords, vectors, graph=GraphRAGStrategy("test", GraphStore(store), None, 2, 0.85, 1024) if graph else None)
    holder = psycopg.connect(db_url.set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        # A writer holding the entries table: every read of it waits, until its timeout.
        holder.execute(f"LOCK TABLE {store.schema}.entries IN ACCESS EXCLUSIVE MODE")
        releaser = threading.Timer(20, holder.rollback)  # the old path waited for the lock: end that wait
        releaser.start()
        try:
            with store.timeout(0.3), pytest.raises(StatementTimeoutError) as caught:
                strategy.explain(QUERIES[0])
        finally:
            releaser.cancel()
        assert caught.value.sqlstate in ("57014", "55P03")
    finally:
        holder.rollback()
        holder.close()
    assert strategy.explain(QUERIES[0]).results  # the store reads again once the lock is gone


def test_graph_explains_path_and_decay(store: Store) -> None:
    _corpus(store)
    graph = GraphRAGStrategy("test", GraphStore(store), None, 2, 0.85, 1024)
    explained = assert_explains(graph, "PostgreSQL memory for agents", RAGContext(30))
    depths = {len(r.explanation.hops) for r in explained.results}  # type: ignore[union-attr]
    assert depths == {0, 1, 2}
    hop = next(r for r in explained.results if len(r.explanation.hops) == 2).explanation  # type: ignore[union-attr]
    assert json.loads(explained.results[0].document.metadata["path"])[0] in {r.document.metadata["entryId"]
                                                                             for r in explained.results}
    assert all(h.relation in {"contains", "next"} and h.weight in {2.0, 0.5} for h in hop.hops)
    assert hop.seed_explanation is not None and hop.seed_explanation.kind == "bm25"
    seeded = GraphRAGStrategy("test", GraphStore(store), None, 1, 0.5, 1024,
                              seed_strategy=VectorRAGStrategy(VectorMemoryStore(store, HashingEmbedding())))
    explained = assert_explains(seeded, QUERIES[0], RAGContext(20, 0.0, {"tier": "SEMANTIC"}))
    assert any(r.explanation.seed_explanation.kind == "cosine" for r in explained.results)  # type: ignore[union-attr]


def test_hierarchical_explains_level_and_decay(store: Store) -> None:
    keywords, _ = _corpus(store)
    strategy = HierarchicalRAGStrategy(KeywordRAGStrategy(keywords), HierarchyIndex(store))
    explained = assert_explains(strategy, "tnsrag query strategy", RAGContext(40))
    levels = {r.explanation.level for r in explained.results}  # type: ignore[union-attr]
    assert 0 in levels and max(levels) >= 1
    parent = next(r for r in explained.results if r.explanation.level >= 1).explanation  # type: ignore[union-attr]
    assert parent.child_explanation.kind == "bm25" and parent.child_of
    assert [p.stream for p in explained.plans] == ["child/keyword"]
    assert_explains(strategy, "tnsrag query strategy", RAGContext(3, 1.0, {"tier": "SEMANTIC"}))


def test_temporal_explains_age_and_freshness(store: Store) -> None:
    keywords, vectors = _corpus(store)
    clock = lambda: NOW + timedelta(hours=1)  # noqa: E731
    strategy = TemporalRAGStrategy(KeywordRAGStrategy(keywords), TemporalIndex(store), clock=clock,
                                   half_life=timedelta(days=14))
    explained = assert_explains(strategy, "retrieval strategy", RAGContext(20))
    ages = [r.explanation.age_seconds for r in explained.results]  # type: ignore[union-attr]
    assert None in ages and any(a is not None and a > 86400 for a in ages)
    dated = next(r.explanation for r in explained.results if r.explanation.age_seconds)  # type: ignore[union-attr]
    assert dated.half_life_seconds == 14 * 86400 and dated.child_explanation.kind == "bm25"
    over_vector = TemporalRAGStrategy(VectorRAGStrategy(vectors), TemporalIndex(store), clock=clock)
    assert_explains(over_vector, QUERIES[1], RAGContext(5, 0.0, {"tier": "SEMANTIC"}))


def test_multi_query_explains_variants_and_shares(store: Store) -> None:
    keywords, _ = _corpus(store)
    strategy = MultiQueryRAGStrategy(KeywordRAGStrategy(keywords), RM3QueryExpander(keywords), QueryExpansion.RM3,
                                     "rm3", 2)
    explained = assert_explains(strategy, "hybrid retrieval")
    assert len(explained.queries) > 1 and explained.queries[0] == "hybrid retrieval"
    streams = {s.stream for r in explained.results for s in r.explanation.streams}  # type: ignore[union-attr]
    assert streams <= set(explained.queries) and len(streams) > 1
    assert [p.stream for p in explained.plans] == [f"query {n}/keyword" for n in range(1, len(explained.queries) + 1)]
    weighted = MultiQueryRAGStrategy(KeywordRAGStrategy(keywords), RM3QueryExpander(keywords), QueryExpansion.RM3,
                                     "rm3", 2, weights=(3.0, 1.0, 0.0))
    explained = assert_explains(weighted, "hybrid retrieval")
    for r in explained.results:
        for s in r.explanation.streams:  # type: ignore[union-attr]
            assert s.weight == (3.0 if s.stream == "hybrid retrieval" else 1.0)


def test_reasoning_explains_sibling_shares(store: Store) -> None:
    _corpus(store)
    strategy = ReasoningRAGStrategy(HierarchyIndex(store), LexicalTreeNavigator(), "lexical", None, 40, 6)
    explained = assert_explains(strategy, "vector index HNSW")
    assert explained.results
    assert any(len(r.explanation.steps) >= 2 for r in explained.results)  # type: ignore[union-attr]
    path = json.loads(explained.results[0].document.metadata["path"])
    assert [s.node for s in explained.results[0].explanation.steps] == path  # type: ignore[union-attr]


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_registered_strategy_explains(store: Store, name: str) -> None:
    _corpus(store)
    strategy = build_strategy(name, store, embedding=HashingEmbedding())
    assert isinstance(strategy, ExplainableStrategy)
    moving = name == "temporal"  # the registry's temporal strategy reads the real clock
    for query in QUERIES[:3]:
        assert_explains(strategy, query, RAGContext(5), moving_clock=moving)
    assert_explains(strategy, QUERIES[1], RAGContext(5, 0.0, {"tier": "SEMANTIC"}), moving_clock=moving)


def test_a_child_without_explain_is_reported_unexplained(store: Store) -> None:
    keywords, _ = _corpus(store)

    class Plain:
        name = "plain"

        def retrieve(self, query: str, context: RAGContext | None = None) -> list:  # type: ignore[type-arg]
            return KeywordRAGStrategy(keywords).retrieve(query, context)

    explained = HierarchicalRAGStrategy(Plain(), HierarchyIndex(store)).explain("tnsrag query", RAGContext(5))
    hit = next(r for r in explained.results if r.explanation.level == 0)  # type: ignore[union-attr]
    assert isinstance(hit.explanation.child_explanation, UnexplainedScore)  # type: ignore[union-attr]
    assert hit.explanation.child_explanation.score == hit.document.score  # type: ignore[union-attr]


def test_readme_explain_example_runs(store: Store) -> None:
    import contextlib
    import io

    from tests._docs import find_example

    page, example = find_example("explained = hybrid.explain(")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, str(page), "exec"), {"__name__": "readme_explain", "store": store})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("keyword 1 2.0 ") and lines[0].endswith(" bm25")
    assert lines[1].startswith("vector ") and lines[1].endswith(" cosine")
    assert lines[2] == "hybrid: 2 result(s) for 'TAN-5326 memory'"
