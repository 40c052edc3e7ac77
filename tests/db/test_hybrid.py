"""Hybrid retrieval: score fusion on complete information (the default) or RRF over BM25, vector
and the optional graph stream, filters before top-K."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.db._helpers import read_statements
from tnsrag_db import (
    BM25Index,
    ConfigurationError,
    Edge,
    GraphRAGStrategy,
    GraphStore,
    HybridMemoryRetriever,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    MemoryEntry,
    MemoryTier,
    RAGContext,
    VectorMemoryStore,
    VectorRAGStrategy,
)
from tnsrag_db._store.store import Store

WORDS = ["agent", "memory", "vector", "keyword", "graph", "time", "tree", "query"]


def _embedding(text: str) -> list[float]:
    lowered = text.lower()
    return [float(lowered.count(w)) + 0.01 * i for i, w in enumerate(WORDS)]


def _corpus(store: Store) -> tuple[BM25Index, VectorMemoryStore]:
    vectors = VectorMemoryStore(store, _embedding)
    entries = [
        MemoryEntry("a", "agent memory agent", MemoryTier.SEMANTIC),
        MemoryEntry("b", "memory vector graph", MemoryTier.WORKING),
        MemoryEntry("c", "agent keyword query", MemoryTier.SEMANTIC, metadata={"tenant": "acme"}),
        MemoryEntry("d", "time tree memory memory", MemoryTier.EPISODIC),
        MemoryEntry("e", "graph graph tree", MemoryTier.SEMANTIC),
        MemoryEntry("f", "agent memory vector keyword", MemoryTier.WORKING, metadata={"tenant": "acme"}),
    ]
    vectors.add_all(entries)
    return BM25Index(store), vectors


def _expected(*rankings: list[str], k: int = 60) -> dict[str, float]:
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, entry_id in enumerate(ranking, start=1):
            scores[entry_id] = scores.get(entry_id, 0.0) + 1.0 / (k + rank)
    return scores


def _ids(docs: list) -> list[str]:  # type: ignore[type-arg]
    return [d.metadata["entryId"] for d in docs]


def test_fused_scores_are_exact_rrf_sums(store: Store) -> None:
    keywords, vectors = _corpus(store)
    hybrid = HybridRAGStrategy(keywords, vectors, fusion="rrf")
    assert hybrid.name == "hybrid"
    pool = RAGContext(50)
    kw = _ids(KeywordRAGStrategy(keywords).retrieve("agent memory", pool))
    vec = _ids(VectorRAGStrategy(vectors).retrieve("agent memory", pool.with_min_score(-1.0)))
    expected = _expected(kw, vec)
    docs = hybrid.retrieve("agent memory", RAGContext(6))
    assert {d.metadata["entryId"]: d.score for d in docs} == {i: expected[i] for i in _ids(docs)}
    ordered = sorted(expected.items(), key=lambda kv: -kv[1])
    assert [d.score for d in docs] == [s for _, s in ordered][: len(docs)]
    assert all(d.metadata["tier"] in {"SEMANTIC", "WORKING", "EPISODIC"} for d in docs)


def test_filters_apply_before_top_k_in_both_streams(store: Store) -> None:
    keywords, vectors = _corpus(store)
    hybrid = HybridRAGStrategy(keywords, vectors)
    docs = hybrid.retrieve("agent memory", RAGContext(1, 0.0, {"tier": "WORKING"}))
    assert len(docs) == 1 and docs[0].metadata["tier"] == "WORKING"
    assert _ids(hybrid.retrieve("agent", RAGContext(10, 0.0, {"tenant": "acme"}))) == ["c", "f"] or set(
        _ids(hybrid.retrieve("agent", RAGContext(10, 0.0, {"tenant": "acme"})))) == {"c", "f"}
    assert hybrid.retrieve("agent", RAGContext(10, 0.0, {"nobody": "x"})) == []
    # min_score is inclusive on the fused score
    top = hybrid.retrieve("agent memory", RAGContext(10))
    assert hybrid.retrieve("agent memory", RAGContext(10, top[0].score)) == top[:1]


def test_both_streams_run_in_one_statement(store: Store) -> None:
    keywords, vectors = _corpus(store)
    hybrid = HybridRAGStrategy(keywords, vectors)
    hybrid.retrieve("agent memory")  # warm: the vector space lookup is cached after the first query
    with read_statements() as sent:
        hybrid.retrieve("agent memory", RAGContext(3))
    statements = [text for _, text, _ in sent if text.lstrip().upper().startswith(("SELECT", "WITH"))]
    assert len(statements) == 1, statements


def test_graph_stream_is_a_third_ranking_and_none_keeps_two(store: Store) -> None:
    keywords, vectors = _corpus(store)
    graph_store = GraphStore(store)
    graph_store.add_edges([Edge("a", "e"), Edge("e", "d")])
    G = GraphRAGStrategy
    graph = G("test", graph_store, None, G.DEFAULT_MAX_DEPTH, G.DEFAULT_DEPTH_DECAY, G.DEFAULT_MAX_VISITED_NODES)
    with_graph = HybridRAGStrategy(keywords, vectors, graph)
    without = HybridRAGStrategy(keywords, vectors, None, fusion="rrf")
    pool = RAGContext(50)
    kw = _ids(KeywordRAGStrategy(keywords).retrieve("agent memory", pool))
    vec = _ids(VectorRAGStrategy(vectors).retrieve("agent memory", pool.with_min_score(-1.0)))
    gr = _ids(graph.retrieve("agent memory", pool))
    assert "e" in gr  # reached through the edge a -> e
    three = {d.metadata["entryId"]: d.score for d in with_graph.retrieve("agent memory", RAGContext(10))}
    two = {d.metadata["entryId"]: d.score for d in without.retrieve("agent memory", RAGContext(10))}
    assert three == {i: s for i, s in _expected(kw, vec, gr).items() if i in three}
    assert two == {i: s for i, s in _expected(kw, vec).items() if i in two}
    assert len(two) == len(set(kw) | set(vec))  # not vector-only


def test_retriever_form_and_validation(make_store: Callable[..., Store], store: Store) -> None:
    keywords, vectors = _corpus(store)
    retriever = HybridMemoryRetriever(keywords, vectors, candidates=2)
    docs = HybridRAGStrategy(retriever).retrieve("agent memory", RAGContext(10))
    assert 1 <= len(docs) <= 4  # each stream contributes at most 2 candidates
    other = make_store()
    with pytest.raises(ConfigurationError, match="differs from vector corpus"):
        HybridMemoryRetriever(BM25Index(other), vectors)
    G = GraphRAGStrategy
    foreign_graph = G("test", GraphStore(other), None, G.DEFAULT_MAX_DEPTH, G.DEFAULT_DEPTH_DECAY,
                      G.DEFAULT_MAX_VISITED_NODES)
    with pytest.raises(ConfigurationError, match="graph corpus"):
        HybridRAGStrategy(keywords, vectors, foreign_graph)
    own_graph = G("test", GraphStore(store), None, G.DEFAULT_MAX_DEPTH, G.DEFAULT_DEPTH_DECAY,
                  G.DEFAULT_MAX_VISITED_NODES)
    assert HybridRAGStrategy(keywords, vectors, own_graph).retrieve("agent memory", RAGContext(2))
    with pytest.raises(ConfigurationError):
        HybridRAGStrategy(keywords)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError):
        HybridMemoryRetriever(keywords, vectors, rrf_k=0)


def test_candidate_pool_options_size_each_stream(store: Store) -> None:
    keywords, vectors = _corpus(store)
    default = HybridMemoryRetriever(keywords, vectors)
    assert (default.min_candidates, default.candidate_factor) == (50, 4)
    assert [default.pool_size(n) for n in (1, 12, 13)] == [50, 50, 52]
    small = HybridMemoryRetriever(keywords, vectors, min_candidates=1, candidate_factor=2)
    assert [small.pool_size(n) for n in (1, 3)] == [2, 6]
    # Each stream ranks only its pool: 2 candidates for one result, 6 for three.
    for k, pool in ((1, 2), (3, 6)):
        kw, vec = small.rankings("agent memory vector", RAGContext(k))
        kw_all, vec_all = default.rankings("agent memory vector", RAGContext(k))
        assert len(kw_all) == 5 and len(vec_all) == 6  # the default pool holds every match
        assert _ids(kw) == _ids(kw_all)[:pool] and _ids(vec) == _ids(vec_all)[:pool]
    # The strategy passes them to the retriever it builds; it fuses those pools.
    from tnsrag_db._strategies.fusion import reciprocal_rank_fusion

    strategy = HybridRAGStrategy(keywords, vectors, min_candidates=1, candidate_factor=1, fusion="rrf")
    kw, vec = strategy.retriever.rankings("agent memory vector", RAGContext(2))
    assert (len(kw), len(vec)) == (2, 2) and strategy.retriever.pool_size(2) == 2
    assert [(d.metadata["entryId"], d.score) for d in strategy.retrieve("agent memory vector", RAGContext(2))] == [
        (d.metadata["entryId"], d.score) for d in reciprocal_rank_fusion(kw, vec)[:2]]


def test_candidate_pool_options_are_checked(store: Store) -> None:
    keywords, vectors = _corpus(store)
    for option, bad in (("min_candidates", 0), ("min_candidates", 100_001), ("min_candidates", 2.0),
                        ("candidate_factor", 0), ("candidate_factor", 11), ("candidate_factor", True)):
        with pytest.raises(ConfigurationError, match=option):
            HybridMemoryRetriever(keywords, vectors, **{option: bad})
        with pytest.raises(ConfigurationError, match=option):
            HybridRAGStrategy(keywords, vectors, **{option: bad})
    # With a retriever, its own options hold; a different one is an error, not ignored.
    retriever = HybridMemoryRetriever(keywords, vectors, min_candidates=10)
    assert HybridRAGStrategy(retriever, min_candidates=10).retriever is retriever
    assert HybridRAGStrategy(retriever).retriever.pool_size(1) == 10
    with pytest.raises(ConfigurationError, match="min_candidates=20 differs"):
        HybridRAGStrategy(retriever, min_candidates=20)
    with pytest.raises(ConfigurationError, match="candidate_factor=5 differs"):
        HybridRAGStrategy(retriever, candidate_factor=5)


def test_sql_fusion_equals_python_fusion(store: Store) -> None:
    from tnsrag_db._strategies.fusion import reciprocal_rank_fusion

    keywords, vectors = _corpus(store)
    retriever = HybridMemoryRetriever(keywords, vectors, fusion="rrf")
    for query in ("agent memory", "graph tree", "keyword", "time"):
        for ctx in (RAGContext(3), RAGContext(10), RAGContext(10, 0.02), RAGContext(5, 0.0, {"tier": "SEMANTIC"})):
            kw, vec = retriever.rankings(query, ctx)
            expected = [d for d in reciprocal_rank_fusion(kw, vec) if d.score >= ctx.min_score][: ctx.max_results]
            got = retriever.fused(query, ctx)
            assert [(d.metadata["entryId"], d.score) for d in got] == [
                (d.metadata["entryId"], d.score) for d in expected]
            assert [dict(d.metadata) for d in got] == [dict(d.metadata) for d in expected]


def _score_fused(retriever: HybridMemoryRetriever, query: str, ctx: RAGContext,
                 weights: tuple[float, float] = (1.0, 1.0)) -> list[tuple[str, float]]:
    """What :func:`score_fusion` makes of the rows of the retriever's candidates statement."""
    from tnsrag_db._strategies.fusion import Reference, score_fusion

    vector = retriever.vectors.embed_query(query) if weights[1] > 0 else None
    rows = retriever.keywords.store.read(*_text(retriever.candidates_statement(query, ctx, vector, weights)))
    streams = [s for s, w in ((1, weights[0]), (2, weights[1])) if w > 0]
    scores: dict[str, list[float | None]] = {}
    refs: dict[int, Reference | None] = {s: None for s in streams}
    best: dict[str, int] = {}
    for r in rows:
        scores.setdefault(r.entry_id, [None] * len(streams))[streams.index(r.stream)] = r.score
        if r.hi is not None:
            refs[r.stream] = Reference(r.hi, r.lo, r.mu, r.sd)
        if r.rank is not None:
            best[r.entry_id] = min(best.get(r.entry_id, r.rank), r.rank)
    fused = score_fusion(scores, [refs[s] for s in streams], method=retriever.fusion,
                         weights=[w for w in weights if w > 0], best=best)
    return [(k, f) for k, f, _ in fused if f >= ctx.min_score][: ctx.max_results]


def _text(statement: object) -> tuple[str, object]:
    return statement.sql, statement.params  # type: ignore[attr-defined]


def test_score_fusion_is_the_default_and_equals_its_python_reference(store: Store) -> None:
    from tnsrag_db._strategies.fusion import DEFAULT_FUSION, DEFAULT_SCORE_WEIGHTS

    keywords, vectors = _corpus(store)
    default = HybridRAGStrategy(keywords, vectors)
    assert default.retriever.fusion == DEFAULT_FUSION == "zscore" and default.weights == DEFAULT_SCORE_WEIGHTS == (1.8, 1.0)
    for fusion in ("zscore", "minmax"):
        retriever = HybridMemoryRetriever(keywords, vectors, fusion=fusion, min_candidates=2, candidate_factor=1)
        for query in ("agent memory", "graph tree", "keyword", "time"):
            for ctx in (RAGContext(3), RAGContext(6), RAGContext(5, 0.5), RAGContext(5, 0.0, {"tier": "SEMANTIC"})):
                got = [(d.metadata["entryId"], d.score) for d in retriever.fused(query, ctx)]
                assert got == _score_fused(retriever, query, ctx, DEFAULT_SCORE_WEIGHTS), (fusion, query, ctx)
                for weights in ((1.0, 1.0), (1.0, 0.0), (0.0, 1.0)):
                    got = [(d.metadata["entryId"], d.score) for d in retriever.fused(query, ctx, weights=weights)]
                    assert got == _score_fused(retriever, query, ctx, weights), (fusion, query, ctx, weights)


def test_the_order_does_not_depend_on_the_number_of_results(store: Store) -> None:
    keywords, vectors = _corpus(store)
    # Pools of 2 at one result, 2 x max_results beyond: the streams' lists grow with k.
    hybrid = HybridRAGStrategy(keywords, vectors, min_candidates=2, candidate_factor=2)
    for query in ("agent memory", "memory vector graph", "keyword query tree", "time"):
        ranked = {k: [(d.metadata["entryId"], d.score) for d in hybrid.retrieve(query, RAGContext(k))]
                  for k in (1, 2, 3, 5, 6)}
        for k in (1, 2, 3, 5):
            assert ranked[k] == ranked[6][:k], (query, k)


def test_a_candidate_of_one_stream_is_scored_by_both(store: Store) -> None:
    from tnsrag_db.explain import ScoreFusionExplanation

    keywords, vectors = _corpus(store)
    hybrid = HybridRAGStrategy(keywords, vectors, min_candidates=1, candidate_factor=1)
    query, ctx = "agent keyword", RAGContext(6)  # pools of 6: BM25 lists its 3 matches, vector all 6
    kw_list, vec_list = hybrid.retriever.rankings(query, ctx)
    only_one = (set(_ids(kw_list)) ^ set(_ids(vec_list)))
    explained = hybrid.explain(query, ctx)
    assert explained.documents == hybrid.retrieve(query, ctx)
    bm25 = dict(keywords.search(query, 50))
    cosine = {d.metadata["entryId"]: d.score
              for d in VectorRAGStrategy(vectors).retrieve(query, RAGContext(50, -1.0))}
    seen_single = False
    for result in explained.results:
        entry_id = result.document.metadata["entryId"]
        explanation = result.explanation
        assert isinstance(explanation, ScoreFusionExplanation) and explanation.method == "zscore"
        keyword, vector = explanation.streams
        assert (keyword.stream, vector.stream) == ("keyword", "vector")
        # Both streams scored it, proposed or not: the score each stream gives it alone.
        assert keyword.stream_score == bm25.get(entry_id, 0.0) and vector.stream_score == cosine[entry_id]
        assert (keyword.rank is None) == (entry_id not in _ids(kw_list))
        assert (vector.rank is None) == (entry_id not in _ids(vec_list))
        seen_single |= entry_id in only_one
        total = 0.0
        for part in explanation.streams:
            assert part.share == part.weight * part.normalized
            if part.scale:
                assert part.normalized == max((part.stream_score - part.center) / part.scale + part.floor, 0.0)
            total += part.share
        assert total == result.document.score
        assert keyword.explanation is not None and vector.explanation is not None
    assert seen_single
    assert "keyword: not in its list, scored" in "\n".join(explained.results[-1].explanation.lines())


def test_hybrid_by_name_uses_the_default_rule(store: Store) -> None:
    from tnsrag_db._strategies.fusion import DEFAULT_FUSION
    from tnsrag_db._strategies.registry import build_strategy

    keywords, vectors = _corpus(store)
    by_name = build_strategy("hybrid", store, embedding=_embedding)
    assert isinstance(by_name, HybridRAGStrategy) and by_name.retriever.fusion == DEFAULT_FUSION
    plain = HybridRAGStrategy(keywords, vectors)
    for query in ("agent memory", "graph tree"):
        assert by_name.retrieve(query, RAGContext(4)) == plain.retrieve(query, RAGContext(4))


def test_fusion_option_is_checked(store: Store) -> None:
    keywords, vectors = _corpus(store)
    for bad in ("RRF", "borda", 1, None):
        with pytest.raises(ConfigurationError, match="fusion"):
            HybridMemoryRetriever(keywords, vectors, fusion=bad)  # type: ignore[arg-type]
    retriever = HybridMemoryRetriever(keywords, vectors, fusion="zscore")
    assert HybridRAGStrategy(retriever).retriever.fusion == "zscore"
    with pytest.raises(ConfigurationError, match="fusion='rrf' differs"):
        HybridRAGStrategy(retriever, fusion="rrf")


def test_both_scores_come_from_either_postings_layout(store: Store) -> None:
    """BM25 scores the vector stream's candidates exactly as it ranks them, whether an entry's
    postings are rows or merged blocks (some of each here: merged, then one rewritten)."""
    from tnsrag_db._strategies.fusion import DEFAULT_SCORE_WEIGHTS

    keywords, vectors = _corpus(store)
    store.merge_postings()
    vectors.add(MemoryEntry("d", "time tree memory agent", MemoryTier.EPISODIC))  # back to rows
    merged = store.read("SELECT count(*) AS n FROM bm25_docs WHERE corpus = :c", {"c": store.corpus})[0].n
    assert merged == 5
    retriever = HybridMemoryRetriever(keywords, vectors, min_candidates=6)
    for query in ("agent memory", "tree graph", "keyword"):
        vector = vectors.embed_query(query)
        rows = store.read(*_text(retriever.candidates_statement(query, RAGContext(6), vector, (1.0, 1.0))))
        bm25 = dict(keywords.search(query, 50))
        assert {r.entry_id: r.score for r in rows if r.stream == 1} == {
            r.entry_id: bm25.get(r.entry_id, 0.0) for r in rows if r.stream == 1}
        assert {r.entry_id for r in rows} == {"a", "b", "c", "d", "e", "f"}
        got = [(d.metadata["entryId"], d.score) for d in retriever.fused(query, RAGContext(6))]
        assert got == _score_fused(retriever, query, RAGContext(6), DEFAULT_SCORE_WEIGHTS)
