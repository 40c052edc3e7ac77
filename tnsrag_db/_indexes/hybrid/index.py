"""The fused BM25 + vector statements and plans over one corpus, built without I/O.

Each stream is its index's own ranking statement, embedded as a CTE (BM25 as ``hk_r``
with prefix ``hk``, its query terms once beside it, vector as ``hv_r`` with prefix ``hv``);
:data:`~.sql.FUSED_SQL` fuses them, by default on complete information (every candidate
scored by both streams, the BM25 index's ``scores_sql`` and the vector store's
``cosines_sql`` scoring the other stream's candidates, then a normalised score fusion),
or with Reciprocal Rank Fusion (``weight / (k + rank)`` per stream, ranks from 1), and
reads only the final rows from ``entries``. The callers
(:class:`~tnsrag_db._strategies.hybrid.HybridMemoryRetriever`) validate the weights and
choose the pool size; a stream weighted 0 is not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._indexes.bm25.index import DOCUMENT_COLUMNS
from tnsrag_db._indexes.hybrid import sql
from tnsrag_db._store.reads import document_from_row
from tnsrag_db._types import RAGContext, RetrievedDocument

if TYPE_CHECKING:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._indexes.vector import QueryBasis, VectorMemoryStore

__all__ = ["basis_plan", "candidates_statement", "fused_plan", "fused_statement", "rankings_plan", "rankings_statement", "split_rankings"]

#: Documents of one ranking each: BM25 first, then vector.
Rankings = tuple[list[RetrievedDocument], list[RetrievedDocument]]


def _streams(keywords: BM25Index, vectors: VectorMemoryStore, query: str, context: RAGContext,
             vector: npt.NDArray[np.float32] | None, weights: tuple[float, float], *, pool: int,
             plain: bool, basis: QueryBasis) -> tuple[str, dict[str, Any]]:
    """The ``WITH`` items of both streams (``hk_r``, ``hv_r``) and ``ranked`` (stream, entry id,
    weight, 1-based rank), each stream's top ``pool``; a stream weighted 0 is not run. With
    ``plain``, the BM25 stream is the index's plain statement (its row of NULLs means: run
    again without ``plain``)."""
    filters = context.metadata_filters
    params: dict[str, Any] = {}
    ctes: list[str] = []
    ranked: list[str] = []
    if weights[0] > 0:
        # The query's terms once, for the BM25 stream and for its scores of the vector stream's candidates.
        bm25 = keywords.ranking_statement(query, pool, filters=filters, min_score=0.0, prefix="hk", plain=plain,
                                          shared_terms=True, pairs=basis.pairs)
        params.update(bm25.params)
        ctes.append(keywords.terms_ctes("hk"))
        ctes.append(sql.stream_cte("hk_r", bm25.sql))
        ranked.append(sql.ranked_stream(1, sql.weight_sql(weights[0], "h_w1", params), "hk_r"))
    if weights[1] > 0:
        assert vector is not None
        vec_sql, vec_params = vectors.candidates_sql(vector, pool, filters=filters, min_score=-1.0, prefix="hv",
                                                     basis=basis)
        params.update(vec_params)
        ctes.append(sql.stream_cte("hv_r", vec_sql))
        ranked.append(sql.ranked_stream(2, sql.weight_sql(weights[1], "h_w2", params), "hv_r"))
    ctes.append(sql.ranked_cte(ranked))
    return ",\n".join(ctes), params


def _complete(keywords: BM25Index, vectors: VectorMemoryStore, query: str, vector: npt.NDArray[np.float32] | None,
              weights: tuple[float, float], params: dict[str, Any], depth: int,
              basis: QueryBasis) -> tuple[str, list[tuple[int, str]]]:
    """The CTEs of complete information (:func:`~.sql.scored_ctes`) after :func:`_streams`: every
    candidate scored by each stream run, BM25 scoring the vector stream's candidates (with the
    BM25 stream's terms, prefix ``hk``) and the stored vectors scoring BM25's (prefix ``hw``);
    and the streams run with their weights' SQL."""
    extras: list[tuple[int, str]] = []
    run: list[tuple[int, str]] = []
    if weights[0] > 0:
        text, extra = keywords.scores_sql(query, _MISSING.format(stream=1), prefix="hk", shared_terms=True)
        params.update(extra)
        extras.append((1, text))
        run.append((1, sql.weight_sql(weights[0], "h_w1", params)))
    if weights[1] > 0:
        assert vector is not None
        text, extra = vectors.cosines_sql(vector, _MISSING.format(stream=2), prefix="hw", basis=basis)
        params.update(extra)
        extras.append((2, text))
        run.append((2, sql.weight_sql(weights[1], "h_w2", params)))
    return sql.scored_ctes(extras, depth), run


#: The candidates a stream did not propose (a subquery over ``h_pair``).
_MISSING = "(SELECT m.entry_id FROM h_pair m WHERE m.r{stream} IS NULL)"


def _documents_sql(keywords: BM25Index, source: str, columns: str, order_by: str, *, left_join: bool = False) -> str:
    # The entry rows of ``source`` through the BM25 index (the corpus bound as :h_c).
    return keywords.documents_sql(source, columns=columns, order_by=order_by, prefix="h", left_join=left_join)


def basis_plan(vectors: VectorMemoryStore, context: RAGContext,
               vector: npt.NDArray[np.float32] | None) -> Plan[QueryBasis]:
    """What the statements of this module need before they are built (the vector stream's
    space, when ``vector`` is given, and the filter pairs' test), as a plan's first statements:
    :meth:`~tnsrag_db._indexes.vector.VectorMemoryStore.basis_plan`."""
    return (yield from vectors.basis_plan(None if vector is None else int(vector.shape[0]), context.metadata_filters))


def rankings_statement(keywords: BM25Index, vectors: VectorMemoryStore, query: str, context: RAGContext,
                       vector: npt.NDArray[np.float32] | None, *, pool: int, basis: QueryBasis) -> Statement:
    """Both streams' rankings (each its top ``pool``) with their entry rows, in one statement:
    columns ``stream`` (1 BM25, 2 vector), ``rank``, ``score`` and the entry columns; without
    ``vector`` only the BM25 stream. ``basis`` from :func:`basis_plan`. Errors as the indexes'
    ranking statements."""
    weights = (1.0, 1.0 if vector is not None else 0.0)
    ctes, params = _streams(keywords, vectors, query, context, vector, weights, pool=pool, plain=False, basis=basis)
    params["h_c"] = vectors.store.corpus
    body = _documents_sql(keywords, "ranked", "r.stream, r.rank, r.score", "r.stream, r.rank")
    return Statement(f"WITH {ctes}\n{body}", params, ("stream", "rank", "score", *DOCUMENT_COLUMNS[1:]))


def split_rankings(rows: Sequence[Any]) -> Rankings:
    """The rows of :func:`rankings_statement` as the BM25 and the vector ranking, best first."""
    keyword_docs = [document_from_row(r, float(r.score)) for r in rows if r.stream == 1]
    vector_docs = [document_from_row(r, float(r.score)) for r in rows if r.stream == 2]
    return keyword_docs, vector_docs


def rankings_plan(keywords: BM25Index, vectors: VectorMemoryStore, query: str, context: RAGContext, *,
                  pool: int) -> Plan[Rankings]:
    """The BM25 and vector rankings of ``query`` (each its top ``pool``, best first) as a
    :data:`~tnsrag_db._db.statement.Plan` of one statement (the query is embedded first)."""
    vector = vectors.embed_query(query)
    basis = yield from basis_plan(vectors, context, vector)
    rows = yield rankings_statement(keywords, vectors, query, context, vector, pool=pool, basis=basis)
    return split_rankings(rows)


def candidates_statement(keywords: BM25Index, vectors: VectorMemoryStore, query: str, context: RAGContext,
                         vector: npt.NDArray[np.float32] | None, weights: tuple[float, float], *, pool: int,
                         depth: int, basis: QueryBasis) -> Statement:
    """Every candidate either stream proposes (each its top ``pool``), scored by each stream
    run, in one statement: columns ``entry_id``, ``stream`` (1 BM25, 2 vector), ``w`` (the
    stream's weight), ``score`` (NULL: no stored vector), ``rank`` (in the stream's own
    list; NULL when the stream did not propose it) and the stream's reference figures over
    its first ``depth`` rows (``hi``, ``lo``, ``mu``, ``sd``). What a normalised score fusion
    reads (:func:`~tnsrag_db._strategies.fusion.score_fusion` computes it from these rows).
    ``basis`` from :func:`basis_plan`."""
    ctes, params = _streams(keywords, vectors, query, context, vector, weights, pool=pool, plain=False, basis=basis)
    complete, run = _complete(keywords, vectors, query, vector, weights, params, depth, basis)
    return Statement(sql.candidates_sql(f"{ctes},\n{complete}", run), params,
                     ("entry_id", "stream", "w", "score", "rank", "hi", "lo", "mu", "sd"))


def fused_statement(keywords: BM25Index, vectors: VectorMemoryStore, query: str, context: RAGContext,
                    vector: npt.NDArray[np.float32] | None, weights: tuple[float, float], *, pool: int,
                    rrf_k: int, basis: QueryBasis, plain: bool = False, normalization: str | None = None,
                    depth: int = 0) -> Statement:
    """The fused ranking with its entry rows, in one statement (columns ``score`` and the
    entry columns, best first, at most ``context.max_results``, each scoring at least
    ``context.min_score``). ``weights`` (keyword, vector) are validated by the caller; a
    stream weighted 0 is not run (``vector`` may then be None). With ``plain`` (and the BM25
    stream weighted above 0), one row of NULLs instead when the BM25 stream needs its pruned
    statement: nothing else runs then, the vector stream included. ``basis`` from :func:`basis_plan`."""
    ctes, params = _streams(keywords, vectors, query, context, vector, weights, pool=pool, plain=plain, basis=basis)
    score = None
    if normalization is not None:
        complete, run = _complete(keywords, vectors, query, vector, weights, params, depth, basis)
        ctes += ",\n" + complete
        score = sql.fused_score(normalization, run)
    else:
        params["h_k"] = rrf_k
    text = sql.fused_sql(ctes, deferrable=plain and weights[0] > 0, limit=context.max_results,
                         documents=_documents_sql(keywords, "h_top", "r.score",
                                                  "r.score DESC NULLS FIRST, r.best, r.entry_id", left_join=True),
                         score=score)
    params.update({"h_c": vectors.store.corpus, "h_min": context.min_score})
    return Statement(text, params, DOCUMENT_COLUMNS)


def fused_plan(keywords: BM25Index, vectors: VectorMemoryStore, query: str, context: RAGContext,
               weights: tuple[float, float], *, pool: int, rrf_k: int, normalization: str | None = None,
               depth: int = 0) -> Plan[list[RetrievedDocument]]:
    """The fused documents as a :data:`~tnsrag_db._db.statement.Plan`: one statement, a second
    only when a frequent query term makes the BM25 stream take its pruned statement. The
    query is embedded only when the vector stream is weighted above 0."""
    vector = vectors.embed_query(query) if weights[1] > 0 else None
    basis = yield from basis_plan(vectors, context, vector)
    options: dict[str, Any] = {"pool": pool, "rrf_k": rrf_k, "normalization": normalization, "depth": depth,
                               "basis": basis}
    rows = yield fused_statement(keywords, vectors, query, context, vector, weights, plain=True, **options)
    if rows and rows[0].entry_id is None:
        rows = yield fused_statement(keywords, vectors, query, context, vector, weights, **options)
    return [document_from_row(r, float(r.score)) for r in rows]
