"""``HybridRAGStrategy``: BM25 + vector (+ optional graph) fused with Reciprocal Rank Fusion.

Each stream contributes its top ``max(50, 4 × max_results)`` candidates (configurable),
all with the metadata filter applied in SQL before their own limit; the fused score is
the RRF sum of ``1 / (k + rank)`` over the streams a document appears in (ranks from 1,
k = 60). The BM25 and vector streams run as ONE statement (one round trip); the graph
stream, when given, is a third ranking. ``min_score`` (inclusive) applies to the fused
score. A missing graph keeps the two other streams fused: hybrid never collapses into
vector only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tnsrag_db.errors import ConfigurationError
from tnsrag_db.fusion import DEFAULT_RRF_K, reciprocal_rank_fusion
from tnsrag_db.store.store import Store
from tnsrag_db.strategies.base import ENTRY_COLUMNS, RAGStrategy, check_query, document_from_row, resolve_context
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

    def rankings(self, query: str, context: RAGContext) -> tuple[list[RetrievedDocument], list[RetrievedDocument]]:
        """The BM25 and vector rankings (best first), fetched in one statement with their rows."""
        pool = self.pool_size(context.max_results)
        filters = context.metadata_filters
        kw_sql, kw_params = self.keywords.candidates_sql(query, pool, filters=filters, min_score=0.0, prefix="hk")
        store = self.vectors.store
        vec_sql, vec_params = self.vectors.candidates_sql(
            self.vectors.embed_query(query), pool, filters=filters, min_score=-1.0, prefix="hv")
        sql = (
            f"WITH hk_r AS ({kw_sql}), hv_r AS ({vec_sql}), "
            "ranked AS ("
            "  SELECT 1 AS stream, entry_id, score, row_number() OVER (ORDER BY score DESC, entry_id) AS rank "
            "  FROM hk_r "
            "  UNION ALL "
            "  SELECT 2, entry_id, score, row_number() OVER (ORDER BY score DESC, entry_id) FROM hv_r) "
            f"SELECT r.stream, r.rank, r.score, {ENTRY_COLUMNS} FROM ranked r "
            "JOIN entries e ON e.corpus = :h_c AND e.id = r.entry_id ORDER BY r.stream, r.rank"
        )
        params: dict[str, Any] = {**kw_params, **vec_params, "h_c": store.corpus}
        rows = store.read(sql, params)
        keyword_docs = [document_from_row(r, float(r.score)) for r in rows if r.stream == 1]
        vector_docs = [document_from_row(r, float(r.score)) for r in rows if r.stream == 2]
        return keyword_docs, vector_docs

    def fused(self, query: str, context: RAGContext) -> list[RetrievedDocument]:
        """BM25 + vector fused with RRF inside the database, in one statement.

        Only the final ``max_results`` rows are read from ``entries``. Scores and order
        equal :func:`~tnsrag_db.fusion.reciprocal_rank_fusion` over :meth:`rankings`: the
        sum of two float8 terms is exact whatever the order, and ties go to the best
        single-stream rank, then the entry id.
        """
        pool = self.pool_size(context.max_results)
        filters = context.metadata_filters
        kw_sql, kw_params = self.keywords.candidates_sql(query, pool, filters=filters, min_score=0.0, prefix="hk")
        vec_sql, vec_params = self.vectors.candidates_sql(
            self.vectors.embed_query(query), pool, filters=filters, min_score=-1.0, prefix="hv")
        store = self.vectors.store
        sql = (
            f"WITH hk_r AS ({kw_sql}), hv_r AS ({vec_sql}), "
            "ranked AS ("
            "  SELECT entry_id, row_number() OVER (ORDER BY score DESC, entry_id) AS rank FROM hk_r "
            "  UNION ALL "
            "  SELECT entry_id, row_number() OVER (ORDER BY score DESC, entry_id) FROM hv_r), "
            "fused AS (SELECT entry_id, sum(1.0::float8 / (CAST(:h_k AS float8) + rank)) AS score, "
            "  min(rank) AS best FROM ranked GROUP BY entry_id) "
            f"SELECT f.score, {ENTRY_COLUMNS} FROM fused f "
            "JOIN entries e ON e.corpus = :h_c AND e.id = f.entry_id "
            "WHERE f.score >= CAST(:h_min AS float8) "
            "ORDER BY f.score DESC, f.best, f.entry_id LIMIT :h_lim"
        )
        params: dict[str, Any] = {**kw_params, **vec_params, "h_c": store.corpus, "h_k": self.rrf_k,
                                  "h_min": context.min_score, "h_lim": context.max_results}
        rows = store.read(sql, params)
        return [document_from_row(r, float(r.score)) for r in rows]


class HybridRAGStrategy:
    """Hybrid retrieval; ``name == "hybrid"``.

    Forms: ``HybridRAGStrategy(keywords, vectors)``, ``HybridRAGStrategy(keywords, vectors,
    graph)`` with ``graph: GraphRAGStrategy | None`` as a third RRF stream, and
    ``HybridRAGStrategy(hybrid_memory_retriever)``.
    """

    def __init__(self, keywords: BM25Index | HybridMemoryRetriever, vectors: VectorMemoryStore | None = None,
                 graph: RAGStrategy | None = None) -> None:
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

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        """Fused results, best first; ``min_score`` applies to the RRF score (inclusive)."""
        query = check_query(query)
        ctx = resolve_context(context)
        if self._graph is None:
            return self._retriever.fused(query, ctx)
        keyword_docs, vector_docs = self._retriever.rankings(query, ctx)
        rankings: list[Sequence[RetrievedDocument]] = [keyword_docs, vector_docs]
        if self._graph is not None:
            pool = self._retriever.pool_size(ctx.max_results)
            rankings.append(self._graph.retrieve(query, RAGContext(min(MAX_RESULTS, pool), 0.0, ctx.metadata_filters)))
        fused = reciprocal_rank_fusion(*rankings, k=self._retriever.rrf_k)
        return [d for d in fused if d.score >= ctx.min_score][: ctx.max_results]
