"""``HybridRAGStrategy``: BM25 + vector (+ optional graph) fused with Reciprocal Rank Fusion.

Each stream contributes its top ``max(50, 4 × max_results)`` candidates (configurable),
all with the metadata filter applied in SQL before their own limit; the fused score is
the RRF sum of ``1 / (k + rank)`` over the streams a document appears in (ranks from 1,
k = 60). The BM25 and vector streams run as ONE statement (one round trip); the graph
stream, when given, is a third ranking. ``min_score`` (inclusive) applies to the fused
score. A missing graph keeps the two other streams fused: hybrid never collapses into
vector only.

Fusion weights (``weights=``, one per stream, default all 1 as the spec has it) scale each
stream's term to ``weight / (k + rank)``; a stream weighted 0 is not run. ``explain``
returns the same results with each stream's rank, weight and share (see
:mod:`tnsrag_db.strategies.explain`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa

from tnsrag_db.errors import ConfigurationError
from tnsrag_db.fusion import DEFAULT_RRF_K, check_weights, document_key, fuse, reciprocal_rank_fusion
from tnsrag_db.store.store import Store
from tnsrag_db.strategies.base import ENTRY_COLUMNS, RAGStrategy, check_query, document_from_row, resolve_context
from tnsrag_db.strategies.explain import (
    Explanation,
    FusionExplanation,
    ScoreExplanation,
    SearchPlan,
    StreamShare,
    by_entry,
    explain_with,
    explanation_of,
    prefixed,
    snapshot,
)
from tnsrag_db.strategies.keyword import bm25_plan
from tnsrag_db.types import MAX_RESULTS, RAGContext, RetrievedDocument

if TYPE_CHECKING:
    from tnsrag_db.indexes.bm25 import BM25Index
    from tnsrag_db.indexes.vector import VectorMemoryStore

__all__ = ["HybridMemoryRetriever", "HybridRAGStrategy"]

#: Lower bound of each stream's candidate pool.
MIN_CANDIDATES = 50
#: Each stream fetches this many times ``max_results`` candidates (at least MIN_CANDIDATES).
CANDIDATE_FACTOR = 4


def _place(store: Store) -> tuple[str, str, str]:
    """Where a store's rows live: database URL (without password), schema, corpus."""
    return store.engine.url.render_as_string(hide_password=True), store.schema, store.corpus


def _describe(store: Store) -> str:
    return f"{store.corpus!r} (schema {store.schema!r} on {store.engine.url.render_as_string(hide_password=True)})"


class HybridMemoryRetriever:
    """A configured hybrid retriever: BM25 + vector over one corpus, fused with RRF.

    ``candidates`` fixes each stream's pool size (default ``max(50, 4 × max_results)``);
    ``rrf_k`` is the RRF constant (default 60). Raises :class:`ConfigurationError` for
    views over different corpora or bad numbers.
    """

    def __init__(self, keywords: BM25Index, vectors: VectorMemoryStore, *, candidates: int | None = None,
                 rrf_k: int = DEFAULT_RRF_K) -> None:
        if keywords is None or vectors is None:
            raise ConfigurationError("HybridMemoryRetriever needs both a BM25Index and a VectorMemoryStore")
        if _place(keywords.store) != _place(vectors.store):
            raise ConfigurationError(f"keyword corpus {_describe(keywords.store)} differs from vector corpus "
                                     f"{_describe(vectors.store)}")
        if candidates is not None and (isinstance(candidates, bool) or not isinstance(candidates, int)
                                       or candidates < 1):
            raise ConfigurationError(f"candidates must be a positive int, got {candidates!r}")
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or rrf_k < 1:
            raise ConfigurationError(f"rrf_k must be a positive int, got {rrf_k!r}")
        self.keywords = keywords
        self.vectors = vectors
        self.candidates = candidates
        self.rrf_k = rrf_k

    def pool_size(self, max_results: int) -> int:
        """Candidates fetched per stream for a query asking ``max_results``."""
        return self.candidates if self.candidates is not None else max(MIN_CANDIDATES, CANDIDATE_FACTOR * max_results)

    def _streams_sql(self, query: str, context: RAGContext, vector: npt.NDArray[np.float32] | None,
                     weights: tuple[float, float]) -> tuple[str, dict[str, Any]]:
        """The ``WITH`` items of both streams (``hk_r``, ``hv_r``) and ``ranked`` (stream, entry id,
        weight, 1-based rank); a stream weighted 0 is not run."""
        pool = self.pool_size(context.max_results)
        filters = context.metadata_filters
        params: dict[str, Any] = {"h_c": self.vectors.store.corpus}
        ctes: list[str] = []
        ranked: list[str] = []
        if weights[0] > 0:
            kw_sql, kw_params = self.keywords.candidates_sql(query, pool, filters=filters, min_score=0.0, prefix="hk")
            params.update(kw_params)
            ctes.append(f"hk_r AS ({kw_sql})")
            ranked.append(f"SELECT 1 AS stream, entry_id, score, {_weight_sql(weights[0], 'h_w1', params)} AS w, "
                          "row_number() OVER (ORDER BY score DESC, entry_id) AS rank FROM hk_r")
        if weights[1] > 0:
            assert vector is not None
            vec_sql, vec_params = self.vectors.candidates_sql(vector, pool, filters=filters, min_score=-1.0,
                                                              prefix="hv")
            params.update(vec_params)
            ctes.append(f"hv_r AS ({vec_sql})")
            ranked.append(f"SELECT 2 AS stream, entry_id, score, {_weight_sql(weights[1], 'h_w2', params)} AS w, "
                          "row_number() OVER (ORDER BY score DESC, entry_id) AS rank FROM hv_r")
        ctes.append(f"ranked AS ({' UNION ALL '.join(ranked)})")
        return ", ".join(ctes), params

    def _rankings_sql(self, query: str, context: RAGContext,
                      vector: npt.NDArray[np.float32] | None) -> tuple[str, dict[str, Any]]:
        ctes, params = self._streams_sql(query, context, vector, (1.0, 1.0))
        sql = (f"WITH {ctes} SELECT r.stream, r.rank, r.score, {ENTRY_COLUMNS} FROM ranked r "
               "JOIN entries e ON e.corpus = :h_c AND e.id = r.entry_id ORDER BY r.stream, r.rank")
        return sql, params

    @staticmethod
    def _split(rows: Sequence[Any]) -> tuple[list[RetrievedDocument], list[RetrievedDocument]]:
        keyword_docs = [document_from_row(r, float(r.score)) for r in rows if r.stream == 1]
        vector_docs = [document_from_row(r, float(r.score)) for r in rows if r.stream == 2]
        return keyword_docs, vector_docs

    def rankings(self, query: str, context: RAGContext) -> tuple[list[RetrievedDocument], list[RetrievedDocument]]:
        """The BM25 and vector rankings (best first), fetched in one statement with their rows."""
        sql, params = self._rankings_sql(query, context, self.vectors.embed_query(query))
        return self._split(self.vectors.store.read(sql, params))

    def _fused_sql(self, query: str, context: RAGContext, vector: npt.NDArray[np.float32] | None,
                   weights: tuple[float, float]) -> tuple[str, dict[str, Any]]:
        ctes, params = self._streams_sql(query, context, vector, weights)
        sql = (
            f"WITH {ctes}, "
            "fused AS (SELECT entry_id, sum(w / (CAST(:h_k AS float8) + rank)) AS score, "
            "  min(rank) AS best FROM ranked GROUP BY entry_id) "
            f"SELECT f.score, {ENTRY_COLUMNS} FROM fused f "
            "JOIN entries e ON e.corpus = :h_c AND e.id = f.entry_id "
            "WHERE f.score >= CAST(:h_min AS float8) "
            "ORDER BY f.score DESC, f.best, f.entry_id LIMIT :h_lim"
        )
        params.update({"h_k": self.rrf_k, "h_min": context.min_score, "h_lim": context.max_results})
        return sql, params

    def fused(self, query: str, context: RAGContext, *,
              weights: Sequence[float] | None = None) -> list[RetrievedDocument]:
        """BM25 + vector fused with RRF inside the database, in one statement.

        ``weights`` (keyword, vector; default 1 and 1) scale each stream's ``1 / (k + rank)``;
        a stream weighted 0 is not run. Only the final ``max_results`` rows are read from
        ``entries``. Scores and order equal :func:`~tnsrag_db.fusion.reciprocal_rank_fusion`
        over :meth:`rankings` with the same weights: the sum of two float8 terms is exact
        whatever the order, and ties go to the best single-stream rank, then the entry id.
        Raises :class:`ConfigurationError` for bad weights.
        """
        w = check_weights(weights, 2)
        vector = self.vectors.embed_query(query) if w[1] > 0 else None
        sql, params = self._fused_sql(query, context, vector, (w[0], w[1]))
        return [document_from_row(r, float(r.score)) for r in self.vectors.store.read(sql, params)]

    def explain_fused(self, query: str, context: RAGContext, weights: tuple[float, float]) -> Explanation:
        """:meth:`fused` explained: the same statement ranks, then (same snapshot) the two
        rankings give each result's ranks and shares, BM25 term figures and cosines."""
        vector = self.vectors.embed_query(query) if weights[1] > 0 else None
        store = self.vectors.store
        fused_sql, fused_params = self._fused_sql(query, context, vector, weights)
        plans: list[SearchPlan] = []
        with snapshot(store) as conn:
            docs = [document_from_row(r, float(r.score)) for r in conn.execute(sa.text(fused_sql), fused_params)]
            ranks_sql, ranks_params = self._rankings_sql(query, context, vector) if vector is not None else \
                self._keyword_only_rankings_sql(query, context)
            keyword_docs, vector_docs = self._split(list(conn.execute(sa.text(ranks_sql), ranks_params)))
            if weights[0] > 0:
                plans.append(bm25_plan(context))
            else:
                keyword_docs = []
            if vector is not None:
                plans.append(self.vectors.explain_plan(conn, vector, self.pool_size(context.max_results),
                                                       filters=context.metadata_filters, min_score=-1.0))
            wanted = {d.metadata["entryId"] for d in docs}
            kw_rank = {d.metadata["entryId"]: (n, d.score) for n, d in enumerate(keyword_docs, 1)
                       if d.metadata["entryId"] in wanted}
            vec_rank = {d.metadata["entryId"]: (n, d.score) for n, d in enumerate(vector_docs, 1)
                        if d.metadata["entryId"] in wanted}
            bm25 = self.keywords.explain_scores(conn, query, {i: s for i, (_, s) in kw_rank.items()})
        explanations: list[ScoreExplanation] = []
        for doc in docs:
            entry_id = doc.metadata["entryId"]
            streams: list[StreamShare] = []
            if entry_id in kw_rank:
                rank, score = kw_rank[entry_id]
                streams.append(StreamShare("keyword", rank, weights[0], weights[0] / (self.rrf_k + rank), score,
                                           bm25.get(entry_id)))
            if entry_id in vec_rank and vector is not None:
                rank, score = vec_rank[entry_id]
                streams.append(StreamShare("vector", rank, weights[1], weights[1] / (self.rrf_k + rank), score,
                                           self.vectors.explain_cosine(vector, score)))
            explanations.append(FusionExplanation(doc.score, self.rrf_k, tuple(streams)))
        return explanation_of("hybrid", query, docs, explanations, plans)

    def _keyword_only_rankings_sql(self, query: str, context: RAGContext) -> tuple[str, dict[str, Any]]:
        ctes, params = self._streams_sql(query, context, None, (1.0, 0.0))
        sql = (f"WITH {ctes} SELECT r.stream, r.rank, r.score, {ENTRY_COLUMNS} FROM ranked r "
               "JOIN entries e ON e.corpus = :h_c AND e.id = r.entry_id ORDER BY r.stream, r.rank")
        return sql, params


def _weight_sql(weight: float, name: str, params: dict[str, Any]) -> str:
    """A stream's weight in SQL: the literal 1 for the default, else a bound float8."""
    if weight == 1.0:
        return "1.0::float8"
    params[name] = weight
    return f"CAST(:{name} AS float8)"


class HybridRAGStrategy:
    """Hybrid retrieval; ``name == "hybrid"``.

    Forms: ``HybridRAGStrategy(keywords, vectors)``, ``HybridRAGStrategy(keywords, vectors,
    graph)`` with ``graph: GraphRAGStrategy | None`` as a third RRF stream, and
    ``HybridRAGStrategy(hybrid_memory_retriever)``. ``weights`` (keyword-only) holds one
    fusion weight per stream, in the order keyword, vector[, graph]: each stream adds
    ``weight / (k + rank)``; default all 1 (the spec's plain RRF), a stream weighted 0 is
    not run. Raises :class:`ConfigurationError` for weights of the wrong length, negative,
    non-finite or all zero (see :func:`~tnsrag_db.fusion.check_weights`).
    """

    def __init__(self, keywords: BM25Index | HybridMemoryRetriever, vectors: VectorMemoryStore | None = None,
                 graph: RAGStrategy | None = None, *, weights: Sequence[float] | None = None) -> None:
        if isinstance(keywords, HybridMemoryRetriever):
            if vectors is not None:
                raise ConfigurationError("pass either a HybridMemoryRetriever or (keywords, vectors[, graph])")
            self._retriever = keywords
        else:
            if vectors is None:
                raise ConfigurationError("HybridRAGStrategy needs a VectorMemoryStore as second argument")
            self._retriever = HybridMemoryRetriever(keywords, vectors)
        if graph is not None and not callable(getattr(graph, "retrieve", None)):
            raise ConfigurationError("graph must be a GraphRAGStrategy (or another strategy) or None")
        graph_store = getattr(getattr(graph, "store", None), "store", None)  # GraphRAGStrategy -> GraphStore -> Store
        if isinstance(graph_store, Store) and _place(graph_store) != _place(self._retriever.keywords.store):
            raise ConfigurationError(f"graph corpus {_describe(graph_store)} differs from the hybrid's corpus "
                                     f"{_describe(self._retriever.keywords.store)}")
        self._graph = graph
        streams = "keyword, vector, graph" if graph is not None else "keyword, vector"
        self._weights = check_weights(weights, 3 if graph is not None else 2, f"weights ({streams})")

    @property
    def name(self) -> str:
        """``"hybrid"``."""
        return "hybrid"

    @property
    def retriever(self) -> HybridMemoryRetriever:
        """The configured BM25 + vector retriever."""
        return self._retriever

    @property
    def graph(self) -> RAGStrategy | None:
        """The optional graph stream."""
        return self._graph

    @property
    def weights(self) -> tuple[float, ...]:
        """The fusion weights: keyword, vector[, graph]."""
        return self._weights

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """Fused results, best first; ``min_score`` applies to the RRF score (inclusive)."""
        query = check_query(query)
        ctx = resolve_context(context)
        if self._graph is None:
            return self._retriever.fused(query, ctx, weights=self._weights)
        keyword_docs, vector_docs = self._retriever.rankings(query, ctx)
        pool = self._retriever.pool_size(ctx.max_results)
        graph_docs = self._graph.retrieve(query, RAGContext(min(MAX_RESULTS, pool), 0.0, ctx.metadata_filters))
        fused = reciprocal_rank_fusion(keyword_docs, vector_docs, graph_docs, k=self._retriever.rrf_k,
                                       weights=self._weights)
        return [d for d in fused if d.score >= ctx.min_score][: ctx.max_results]

    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`FusionExplanation`: per stream
        the rank, weight and share ``weight / (k + rank)`` (summed in stream order they give
        the score), with the stream's own explanation (BM25 term figures, cosine, graph
        path); plus the search plan of each stream. Errors as :meth:`retrieve`."""
        query = check_query(query)
        ctx = resolve_context(context)
        retriever = self._retriever
        if self._graph is None:
            return retriever.explain_fused(query, ctx, (self._weights[0], self._weights[1]))
        vector = retriever.vectors.embed_query(query)
        sql, params = retriever._rankings_sql(query, ctx, vector)
        pool = retriever.pool_size(ctx.max_results)
        with snapshot(retriever.vectors.store) as conn:
            keyword_docs, vector_docs = retriever._split(list(conn.execute(sa.text(sql), params)))
            plans = [bm25_plan(ctx), retriever.vectors.explain_plan(conn, vector, pool,
                                                                     filters=ctx.metadata_filters, min_score=-1.0)]
            bm25 = retriever.keywords.explain_scores(conn, query, {d.metadata["entryId"]: d.score
                                                                   for d in keyword_docs})
        graph = explain_with(self._graph, query, RAGContext(pool, 0.0, ctx.metadata_filters))
        plans.extend(prefixed(graph.plans, "graph"))
        rankings = [keyword_docs, vector_docs, graph.documents]
        details: list[Mapping[str, ScoreExplanation | None]] = [
            {document_key(d): bm25.get(d.metadata["entryId"]) for d in keyword_docs},
            {document_key(d): retriever.vectors.explain_cosine(vector, d.score) for d in vector_docs},
            {k: r.explanation for k, r in by_entry(graph).items()},
        ]
        names = ("keyword", "vector", "graph")
        fused = [f for f in fuse(*rankings, k=retriever.rrf_k, weights=self._weights)
                 if f.document.score >= ctx.min_score][: ctx.max_results]
        explanations: list[ScoreExplanation] = []
        for f in fused:
            key = document_key(f.document)
            explanations.append(FusionExplanation(f.document.score, retriever.rrf_k, tuple(
                StreamShare(names[s.ranking], s.rank, s.weight, s.share, rankings[s.ranking][s.rank - 1].score,
                            details[s.ranking].get(key)) for s in f.shares)))
        return explanation_of(self.name, query, [f.document for f in fused], explanations, plans)
