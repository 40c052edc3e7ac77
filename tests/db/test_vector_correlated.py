"""Filtered vector search when the filter follows the clusters of the vectors.

A filter that selects regions of the space (tiers that follow clusters) is the case where
an HNSW scan checked row by row finds its first matches by walking the graph out of the
query's cluster, not in distance order: those tests fail when such matches are returned
as the answer instead of the exact top k.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy.engine import URL

from bench._corpus import GROUP_1PCT, CorrelatedCorpus, generate_correlated_corpus
from tests.fix_db import SCHEMA
from tnsrag_db._db.hooks import ConnectionHooks
from tnsrag_db._db.pool import Pool
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._types import RAGContext


class Lookup:
    """Query text ``"<seed>"`` embeds to the corpus's query vector of that seed."""

    name = "correlated-32"

    def __init__(self, corpus: CorrelatedCorpus) -> None:
        self.corpus = corpus

    def __call__(self, text: str) -> np.ndarray:
        return self.corpus.query_vectors(1, seed=int(text))[0]


@pytest.fixture(scope="module")
def correlated(db_url: URL) -> Iterator[Callable[[], tuple[VectorMemoryStore, CorrelatedCorpus]]]:
    """6,000 entries in 50 isotropic clusters of 32-d vectors, tiers and groups following
    the clusters, with the HNSW index built. Its connections disable seq scans and sorts
    where an alternative exists, so that the HNSW index scan is what the tests exercise."""
    def _force_index_scans(dbapi_conn: Any, _info: object) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute("SET enable_seqscan = off")
            cur.execute("SET enable_sort = off")
        dbapi_conn.commit()

    pool = Pool(db_url, schema=SCHEMA, pool_size=2, hooks=[ConnectionHooks("index_scans", configure=_force_index_scans)])

    corpus = generate_correlated_corpus(6000, dim=32, seed=3, mixing=0.02)
    store = Store(pool, corpus="test_vector_correlated")
    store.clear()
    vectors = VectorMemoryStore(store, Lookup(corpus), index_threshold=None)
    vectors.add_all(corpus.entries, embeddings=corpus.embeddings)
    vectors.build_index()
    with store.session.autocommit() as conn:
        conn.execute("ANALYZE entries, embeddings")
    yield lambda: (vectors, corpus)
    with pool.begin() as conn:
        conn.execute("DELETE FROM corpora WHERE corpus = :c", {"c": store.corpus})
    pool.close()


def _exact(corpus: CorrelatedCorpus, filters: dict[str, str], query: np.ndarray, k: int) -> tuple[list[str], int]:
    ctx = RAGContext(metadata_filters=filters)
    keep = [i for i, e in enumerate(corpus.entries) if ctx.matches({"tier": e.tier.name, **e.metadata})]
    scores = corpus.embeddings[keep] @ query
    order = sorted(range(len(keep)), key=lambda j: (-scores[j], corpus.entries[keep[j]].id))
    return [corpus.entries[keep[j]].id for j in order[:k]], len(keep)


@pytest.mark.parametrize(("filters", "threshold"), [
    ({"tier": "WORKING"}, 100), ({"tier": "EPISODIC"}, 100), ({"tier": "SEMANTIC"}, 100),
    ({"group": GROUP_1PCT}, 10), ({"tier": "WORKING"}, 0)])
def test_filters_that_follow_the_clusters_return_the_exact_top_k(
        correlated: Callable[[], tuple[VectorMemoryStore, CorrelatedCorpus]], filters: dict[str, str],
        threshold: int) -> None:
    """Above the exact threshold (the HNSW path), every query returns exactly the exact
    filtered top 10, in order, min(10, matches) rows, for queries drawn from every cluster."""
    vectors, corpus = correlated()
    view = VectorMemoryStore(vectors.store, vectors.embedding, exact_threshold=threshold, index_threshold=None)
    for seed in range(40):
        query = corpus.query_vectors(1, seed=seed)[0]
        expected, matches = _exact(corpus, filters, query, 10)
        assert matches > threshold  # the HNSW path
        got = view.search(str(seed), 10, filters=filters, min_score=-1.0)
        assert len(got) == min(10, matches)
        assert [i for i, _ in got] == expected, seed
