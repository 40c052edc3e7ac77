"""The plain and the pruned BM25 statements score alike; the plain one defers when a term is
frequent; explanations computed in Python (scoring.py) are the database's own summands."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.db._helpers import read_statements
from tests.db.test_bm25 import PRUNE_QUERIES, pruning_entries
from tnsrag_db import HybridMemoryRetriever, HybridRAGStrategy, VectorMemoryStore
from tnsrag_db._indexes.bm25 import BM25Index, scoring
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.fusion import reciprocal_rank_fusion
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import RAGContext

CASES = [(q, k, f, m) for q in PRUNE_QUERIES for k in (1, 3, 10, 200)
         for f in ({}, {"tier": "WORKING"}) for m in (0.0, 2.5)]


@contextmanager
def counted(store: Store) -> Iterator[list[str]]:
    with read_statements() as sent:
        statements: list[str] = []
        yield statements
        statements.extend(text for _, text, _ in sent)


def test_plain_and_pruned_paths_rank_and_score_alike(store: Store) -> None:
    # Plain: no term counts as frequent, every query takes the short statement alone.
    index = BM25Index(store, prune_min_df=10**9)
    index.add_all(pruning_entries(random.Random(5), 160))
    keyword = KeywordRAGStrategy(index)
    plain, plain_docs = {}, {}
    for q, k, f, m in CASES:
        rows = store.read(**_args(index.ranking_statement(q, k, filters=f or None, min_score=m, plain=True)))
        assert all(r.entry_id is not None for r in rows)
        plain[q, k, str(f), m] = [(r.entry_id, float(r.score)) for r in rows]
        assert index.search(q, k, filters=f or None, min_score=m) == plain[q, k, str(f), m]
        plain_docs[q, k, str(f), m] = keyword.retrieve(q, RAGContext(min(k, 100), m, f or None))
    # Pruned: every query term held by at least one entry is frequent.
    index = BM25Index(store, prune_min_df=1)
    keyword = KeywordRAGStrategy(index)
    pruned_paths = 0
    for q, k, f, m in CASES:
        want = plain[q, k, str(f), m]
        deferred = store.read(**_args(index.ranking_statement(q, k, filters=f or None, min_score=m, plain=True)))
        several_terms = len(index.query_terms(q)) > 1
        # The short statement scores nothing and says so with one row of NULLs.
        assert ([(r.entry_id, r.score) for r in deferred] == [(None, None)]) == several_terms, q
        pruned_paths += several_terms
        got = index.search(q, k, filters=f or None, min_score=m)
        assert [i for i, _ in got] == [i for i, _ in want], (q, k, f, m)
        # Same contributions, summed in another grouping: equal to the last bits only.
        assert all(a == pytest.approx(b, rel=1e-12) for (_, a), (_, b) in zip(got, want))
        docs = keyword.retrieve(q, RAGContext(min(k, 100), m, f or None))
        assert [(d.metadata["entryId"], d.content) for d in docs] == [
            (d.metadata["entryId"], d.content) for d in plain_docs[q, k, str(f), m]]
        assert all(d.score == pytest.approx(e.score, rel=1e-12) for d, e in zip(docs, plain_docs[q, k, str(f), m]))
    assert pruned_paths > len(CASES) // 2


def _args(statement):  # type: ignore[no-untyped-def]
    return {"sql": statement.sql, "params": statement.params}


def test_a_frequent_term_takes_a_second_statement_only_then(store: Store) -> None:
    store.add_all(pruning_entries(random.Random(6), 60))
    for threshold, statements_per_query in ((10**9, 1), (1, 2)):
        index = BM25Index(store, prune_min_df=threshold)
        keyword = KeywordRAGStrategy(index)
        for run in (keyword.retrieve, lambda q: index.search(q, 5)):
            with counted(store) as statements:
                assert run("zzcommon zzrare")
            assert len([s for s in statements if "bm25_postings" in s]) == statements_per_query
    # One term alone is never pruned: one statement.
    with counted(store) as statements:
        assert keyword.retrieve("zzcommon")
    assert len([s for s in statements if "bm25_postings" in s]) == 1


def test_hybrid_with_a_frequent_term_fuses_the_same(store: Store) -> None:
    entries = pruning_entries(random.Random(7), 80)
    vectors = VectorMemoryStore(store, lambda text: [1.0 + text.count("zzrare"), 1.0 + len(text) % 7, 0.5])
    vectors.add_all(entries)
    results = {}
    for fusion in ("rrf", "zscore"):  # the SPI's RRF and the default fusion on complete information
        for threshold, statements_per_query in ((10**9, 1), (1, 2)):
            retriever = HybridMemoryRetriever(BM25Index(store, prune_min_df=threshold), vectors, fusion=fusion)
            hybrid = HybridRAGStrategy(retriever)
            with counted(store) as statements:
                assert hybrid.retrieve("zzcommon zzrare")
            # The second statement (pruned BM25 stream) only after the first one deferred.
            assert len([s for s in statements if "bm25_postings" in s]) == statements_per_query
            for q in PRUNE_QUERIES:
                for ctx in (RAGContext(5), RAGContext(10, 0.0, {"tier": "WORKING"}), RAGContext(10, 0.02)):
                    docs = hybrid.retrieve(q, ctx)
                    if fusion == "rrf":
                        kw, vec = retriever.rankings(q, ctx)
                        expected = [d for d in reciprocal_rank_fusion(kw, vec)
                                    if d.score >= ctx.min_score][: ctx.max_results]
                        assert [d.metadata["entryId"] for d in docs] == [d.metadata["entryId"] for d in expected]
                        assert [d.score for d in docs] == pytest.approx([d.score for d in expected], rel=1e-12)
                    results.setdefault((fusion, q, str(ctx)), []).append(
                        [(d.metadata["entryId"], d.score) for d in docs])
    # Pruned or plain, the BM25 stream gives the same candidates and scores: the same fusion.
    assert all(a == b for a, b in results.values())


def test_explained_contributions_are_the_databases_summands(store: Store) -> None:
    index = BM25Index(store, k1=1.1, b=0.6)
    index.add_all(pruning_entries(random.Random(8), 50))
    n, avgdl = index.corpus_statistics()
    for term in ("zzcommon", "zzrare", "agent"):
        ranked = dict(index.search(term, 50))
        assert ranked
        with store.session.executor(snapshot=True) as execute:
            figures = index.explain_scores(execute, term, ranked)
        for entry_id, explanation in figures.items():
            (only,) = explanation.terms
            # One term: the score is that term's part, computed by scoring.py bit for bit.
            assert only.contribution == ranked[entry_id]
            assert only.idf == scoring.idf(n, only.df)
            assert explanation.avg_doc_len == pytest.approx(avgdl)
