"""``HybridRAGStrategy``: BM25 + vector (+ optional graph), fused on complete information.

Each stream proposes its top ``max(50, 4 × max_results)`` candidates (options
``min_candidates`` and ``candidate_factor``, or a fixed ``candidates``), all with the
metadata filter applied in SQL before their own limit. By default (``fusion="zscore"``)
every candidate either stream proposes is then scored by both: BM25 scores the vector
stream's candidates, the stored vectors give the cosine of BM25's; each score is
normalised (its z-score plus 3, floored at 0) against its stream's first
``pool_size(1)`` rows (the same rows whatever ``max_results``, so the top 5 is always the
first five of the top 10) and the fused score is the weighted sum, keyword 1.8 to vector 1
by default (:func:`~tnsrag_db._strategies.fusion.score_fusion`); ``fusion="minmax"``
normalises between those rows' lowest and best score instead. ``fusion="rrf"``
is the SPI's Reciprocal Rank Fusion, ``weight / (k + rank)`` summed over the lists a
document appears in (k = 60). Either way the BM25 and vector streams run as ONE statement
(one round trip); the graph stream, when given and when it has edges to walk, is a third
ranking, fused with the other two by RRF. ``min_score`` (inclusive) applies to the fused
score. A missing graph keeps the two other streams fused: hybrid never collapses into
vector only.

Fusion weights (``weights=``, one per stream, default all 1) scale each stream's part; a
stream weighted 0 is not run. ``explain`` returns the same results with each stream's
part (see :mod:`tnsrag_db._strategies.explain`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.hybrid import index as fused_index
from tnsrag_db._store.reads import document_from_row
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.base import PlannedStrategy, RAGStrategy, check_query, planned, resolve_context
from tnsrag_db._strategies.explain import by_entry, explain_with, explanation_of, prefixed, snapshot
from tnsrag_db._strategies.fusion import (
    DEFAULT_FUSION,
    DEFAULT_RRF_K,
    Reference,
    check_fusion,
    check_weights,
    default_weights,
    document_key,
    fuse,
    normalization_of,
    normalize,
    reciprocal_rank_fusion,
)
from tnsrag_db._strategies.keyword import bm25_plan
from tnsrag_db._types import MAX_CANDIDATES, MAX_RESULTS, RAGContext, RetrievedDocument
from tnsrag_db._validate import check_int, is_int
from tnsrag_db.explain import (
    Explanation,
    FusionExplanation,
    ScoreExplanation,
    ScoreFusionExplanation,
    SearchPlan,
    StreamScore,
    StreamShare,
)

if TYPE_CHECKING:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._indexes.vector import QueryBasis, VectorMemoryStore

__all__ = ["HybridMemoryRetriever", "HybridRAGStrategy"]

#: The default lower bound of each stream's candidate pool (option ``min_candidates``).
DEFAULT_MIN_CANDIDATES = 50
#: By default each stream fetches this many times ``max_results`` candidates (option
#: ``candidate_factor``).
DEFAULT_CANDIDATE_FACTOR = 4
#: The largest ``candidate_factor``: the pool of the largest ``max_results`` stays within
#: the indexes' candidate limit.
MAX_CANDIDATE_FACTOR = MAX_CANDIDATES // MAX_RESULTS


def _place(store: Store) -> tuple[str, str, str]:
    """Where a store's rows live: database URL (without password), schema, corpus."""
    return store.location, store.schema, store.corpus


def _describe(store: Store) -> str:
    return f"{store.corpus!r} (schema {store.schema!r} on {store.location})"


class HybridMemoryRetriever:
    """A configured hybrid retriever: BM25 + vector over one corpus, fused in the database.

    ``candidates`` fixes each stream's pool size; without it a query asking ``max_results``
    fetches ``max(min_candidates, candidate_factor × max_results)`` per stream
    (``min_candidates`` an int from 1 to 100,000, default 50; ``candidate_factor`` an int
    from 1 to 10, default 4). ``fusion`` is the rule: ``"zscore"`` (the default) or
    ``"minmax"``, normalised score fusion of every candidate scored by both streams, each
    stream's reference rows its first :meth:`reference_depth`; or ``"rrf"``, the SPI's
    Reciprocal Rank Fusion with constant ``rrf_k`` (default 60). Raises
    :class:`ConfigurationError` for views over different corpora, an unknown rule or bad
    numbers (naming the option).
    """

    def __init__(self, keywords: BM25Index, vectors: VectorMemoryStore, *, candidates: int | None = None,
                 rrf_k: int = DEFAULT_RRF_K, min_candidates: int = DEFAULT_MIN_CANDIDATES,
                 candidate_factor: int = DEFAULT_CANDIDATE_FACTOR, fusion: str = DEFAULT_FUSION) -> None:
        if keywords is None or vectors is None:
            raise ConfigurationError("HybridMemoryRetriever needs both a BM25Index and a VectorMemoryStore")
        if _place(keywords.store) != _place(vectors.store):
            raise ConfigurationError(f"keyword corpus {_describe(keywords.store)} differs from vector corpus "
                                     f"{_describe(vectors.store)}")
        if candidates is not None and (not is_int(candidates) or candidates < 1):
            raise ConfigurationError(f"candidates must be a positive int, got {candidates!r}")
        if not is_int(rrf_k) or rrf_k < 1:
            raise ConfigurationError(f"rrf_k must be a positive int, got {rrf_k!r}")
        self.keywords = keywords
        self.vectors = vectors
        self.min_candidates = check_int(min_candidates, "min_candidates", minimum=1, maximum=MAX_CANDIDATES,
                                        error=ConfigurationError)
        self.candidate_factor = check_int(candidate_factor, "candidate_factor", minimum=1,
                                          maximum=MAX_CANDIDATE_FACTOR, error=ConfigurationError)
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.fusion = check_fusion(fusion)

    @property
    def normalization(self) -> str | None:
        """The normalisation of the score fusion (``"zscore"``, ``"minmax"``); None for RRF."""
        return None if self.fusion == "rrf" else self.fusion

    def reference_depth(self) -> int:
        """How many of each stream's first rows give its reference figures in a score fusion:
        :meth:`pool_size` of one result, the same whatever ``max_results`` (every pool holds them)."""
        return self.pool_size(1)

    def pool_size(self, max_results: int) -> int:
        """Candidates fetched per stream for a query asking ``max_results``: ``candidates`` when
        set, else ``max(min_candidates, candidate_factor × max_results)``."""
        if self.candidates is not None:
            return self.candidates
        return max(self.min_candidates, self.candidate_factor * max_results)

    def basis(self, context: RAGContext, vector: npt.NDArray[np.float32] | None) -> QueryBasis:
        """What the statements below need before they are built (the vector stream's space and
        the filter pairs' test; see :func:`tnsrag_db._indexes.hybrid.basis_plan`), read now:
        for a caller outside a plan. A plan runs ``basis_plan`` itself."""
        return self.vectors.store.run(fused_index.basis_plan(self.vectors, context, vector))

    def rankings_statement(self, query: str, context: RAGContext, vector: npt.NDArray[np.float32] | None,
                           basis: QueryBasis | None = None) -> Statement:
        """Both streams' rankings with their entry rows, in one statement: columns ``stream``
        (1 BM25, 2 vector), ``rank``, ``score`` and the entry columns; without ``vector``
        only the BM25 stream (see :func:`tnsrag_db._indexes.hybrid.rankings_statement`).
        Without ``basis`` (:meth:`basis`) it is read first."""
        return fused_index.rankings_statement(self.keywords, self.vectors, query, context, vector,
                                              pool=self.pool_size(context.max_results),
                                              basis=basis or self.basis(context, vector))

    def rankings_plan(self, query: str, context: RAGContext) -> Plan[tuple[list[RetrievedDocument],
                                                                         list[RetrievedDocument]]]:
        """:meth:`rankings` as a :data:`~tnsrag_db._db.statement.Plan`."""
        return fused_index.rankings_plan(self.keywords, self.vectors, query, context,
                                         pool=self.pool_size(context.max_results))

    def rankings(self, query: str, context: RAGContext) -> tuple[list[RetrievedDocument], list[RetrievedDocument]]:
        """The BM25 and vector rankings (best first), fetched in one statement with their rows."""
        return self.vectors.store.run(self.rankings_plan(query, context))

    def fused_statement(self, query: str, context: RAGContext, vector: npt.NDArray[np.float32] | None,
                        weights: tuple[float, float], *, plain: bool = False,
                        basis: QueryBasis | None = None) -> Statement:
        """The fused ranking with its entry rows, in one statement (columns ``score`` and the
        entry columns, best first). With ``plain`` (and the BM25 stream weighted above 0), one
        row of NULLs instead when the BM25 stream needs its pruned statement: nothing else runs
        then, the vector stream included (see :func:`tnsrag_db._indexes.hybrid.fused_statement`).
        Without ``basis`` (:meth:`basis`) it is read first."""
        return fused_index.fused_statement(self.keywords, self.vectors, query, context, vector, weights,
                                           pool=self.pool_size(context.max_results), rrf_k=self.rrf_k, plain=plain,
                                           normalization=self.normalization, depth=self.reference_depth(),
                                           basis=basis or self.basis(context, vector))

    def candidates_statement(self, query: str, context: RAGContext, vector: npt.NDArray[np.float32] | None,
                             weights: tuple[float, float], basis: QueryBasis | None = None) -> Statement:
        """Every candidate scored by each stream run, with the streams' reference figures
        (see :func:`tnsrag_db._indexes.hybrid.candidates_statement`). Without ``basis``
        (:meth:`basis`) it is read first."""
        return fused_index.candidates_statement(self.keywords, self.vectors, query, context, vector, weights,
                                                pool=self.pool_size(context.max_results),
                                                depth=self.reference_depth(),
                                                basis=basis or self.basis(context, vector))

    def fused_plan(self, query: str, context: RAGContext, *,
                   weights: Sequence[float] | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`fused` as a :data:`~tnsrag_db._db.statement.Plan`: one statement, a second
        only when a frequent query term makes the BM25 stream take its pruned statement.
        Raises :class:`ConfigurationError` for bad weights (when the plan starts)."""
        w = default_weights(self.fusion, 2) if weights is None else check_weights(weights, 2)
        return (yield from fused_index.fused_plan(self.keywords, self.vectors, query, context, (w[0], w[1]),
                                                  pool=self.pool_size(context.max_results), rrf_k=self.rrf_k,
                                                  normalization=self.normalization, depth=self.reference_depth()))

    def fused(self, query: str, context: RAGContext, *,
              weights: Sequence[float] | None = None) -> list[RetrievedDocument]:
        """BM25 + vector fused by the retriever's rule inside the database, in one statement.

        ``weights`` (keyword, vector; default 1 and 1) scale each stream's part; a stream
        weighted 0 is not run. Only the final ``max_results`` rows are read from
        ``entries``. Scores and order equal, for RRF,
        :func:`~tnsrag_db._strategies.fusion.reciprocal_rank_fusion` over :meth:`rankings`
        with the same weights, and for a score fusion
        :func:`~tnsrag_db._strategies.fusion.score_fusion` over the rows of
        :meth:`candidates_statement`: ties go to the best single-stream rank, then the entry id.
        (A query with a frequent term takes a second statement: see :meth:`fused_plan`.)
        Raises :class:`ConfigurationError` for bad weights.
        """
        return self.vectors.store.run(self.fused_plan(query, context, weights=weights))

    def explain_fused(self, query: str, context: RAGContext, weights: tuple[float, float]) -> Explanation:
        """:meth:`fused` explained: the same statement ranks, then (same snapshot) the two
        rankings (RRF) or every candidate's scores in both streams (a score fusion) give each
        result's parts, with BM25 term figures and cosines."""
        if self.normalization is not None:
            return self._explain_score_fusion(query, context, weights)
        vector = self.vectors.embed_query(query) if weights[1] > 0 else None
        store = self.vectors.store
        basis = self.basis(context, vector)
        fused = self.fused_statement(query, context, vector, weights, basis=basis)
        ranks = self.rankings_statement(query, context, vector, basis)
        plans: list[SearchPlan] = []
        with snapshot(store) as execute:
            docs = [document_from_row(r, float(r.score)) for r in execute(fused)]
            keyword_docs, vector_docs = fused_index.split_rankings(list(execute(ranks)))
            if weights[0] > 0:
                plans.append(bm25_plan(context))
            else:
                keyword_docs = []
            if vector is not None:
                plans.append(self.vectors.explain_plan(execute, vector, self.pool_size(context.max_results),
                                                       filters=context.metadata_filters, min_score=-1.0))
            wanted = {d.metadata["entryId"] for d in docs}
            kw_rank = {d.metadata["entryId"]: (n, d.score) for n, d in enumerate(keyword_docs, 1)
                       if d.metadata["entryId"] in wanted}
            vec_rank = {d.metadata["entryId"]: (n, d.score) for n, d in enumerate(vector_docs, 1)
                        if d.metadata["entryId"] in wanted}
            bm25 = self.keywords.explain_scores(execute, query, {i: s for i, (_, s) in kw_rank.items()})
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
                                           self.vectors.explain_cosine(vector, score, basis=basis)))
            explanations.append(FusionExplanation(doc.score, self.rrf_k, tuple(streams)))
        return explanation_of("hybrid", query, docs, explanations, plans)


    def _explain_score_fusion(self, query: str, context: RAGContext, weights: tuple[float, float]) -> Explanation:
        """:meth:`explain_fused` of a score fusion: each result's score in both streams (rank in
        the stream's list, or scored for completeness), normalised and weighted."""
        method = self.fusion
        vector = self.vectors.embed_query(query) if weights[1] > 0 else None
        store = self.vectors.store
        basis = self.basis(context, vector)
        fused = self.fused_statement(query, context, vector, weights, basis=basis)
        scored = self.candidates_statement(query, context, vector, weights, basis)
        plans: list[SearchPlan] = []
        with snapshot(store) as execute:
            docs = [document_from_row(r, float(r.score)) for r in execute(fused)]
            wanted = {d.metadata["entryId"] for d in docs}
            rows = [r for r in execute(scored) if r.entry_id in wanted]
            if weights[0] > 0:
                plans.append(bm25_plan(context))
            if vector is not None:
                plans.append(self.vectors.explain_plan(execute, vector, self.pool_size(context.max_results),
                                                       filters=context.metadata_filters, min_score=-1.0))
            bm25 = self.keywords.explain_scores(execute, query, {r.entry_id: float(r.score) for r in rows
                                                                 if r.stream == 1 and r.score is not None})
        names = {1: "keyword", 2: "vector"}
        by_entry: dict[str, list[StreamScore]] = {}
        for r in rows:
            reference = None if r.hi is None else Reference(float(r.hi), float(r.lo), float(r.mu), float(r.sd))
            raw = None if r.score is None else float(r.score)
            normalized = normalize(raw, reference, method)
            detail: ScoreExplanation | None = None
            if raw is not None:
                detail = bm25.get(r.entry_id) if r.stream == 1 else self.vectors.explain_cosine(vector, raw, basis=basis)  # type: ignore[arg-type]
            center, scale, floor = (None, None, None) if reference is None else normalization_of(reference, method)
            by_entry.setdefault(r.entry_id, []).append(StreamScore(
                names[r.stream], None if r.rank is None else int(r.rank), raw, center, scale, floor, normalized,
                float(r.w), float(r.w) * normalized, detail))
        depth = self.reference_depth()
        explanations: list[ScoreExplanation] = [
            ScoreFusionExplanation(d.score, method, depth, tuple(sorted(by_entry.get(d.metadata["entryId"], []),
                                                                         key=lambda s: s.stream != "keyword")))
            for d in docs]
        return explanation_of("hybrid", query, docs, explanations, plans)


class HybridRAGStrategy(PlannedStrategy):
    """Hybrid retrieval; ``name == "hybrid"``.

    Forms: ``HybridRAGStrategy(keywords, vectors)``, ``HybridRAGStrategy(keywords, vectors,
    graph)`` with ``graph: GraphRAGStrategy | None`` as a third RRF stream, and
    ``HybridRAGStrategy(hybrid_memory_retriever)``. ``weights`` (keyword-only) holds one
    fusion weight per stream, in the order keyword, vector[, graph]: each stream's part
    (its normalised score, or ``1 / (k + rank)`` under RRF) is multiplied by it; default
    all 1, a stream weighted 0 is not run. Raises :class:`ConfigurationError` for weights of the wrong length, negative,
    non-finite or all zero (see :func:`~tnsrag_db._strategies.fusion.check_weights`).

    ``min_candidates`` and ``candidate_factor``, keyword-only, size each stream's candidate
    pool, ``max(min_candidates, candidate_factor × max_results)``; ``fusion`` is the rule
    of the keyword and vector streams (``"zscore"``, ``"minmax"`` or ``"rrf"``, see
    :class:`HybridMemoryRetriever`). None (the default) means 50, 4 and ``"zscore"``, or
    with a retriever the retriever's own (bounds and errors as
    :class:`HybridMemoryRetriever`'s). With a retriever, a value different from the
    retriever's raises :class:`ConfigurationError`: set it on the retriever. A graph
    stream with edges to walk is fused with the other two by RRF (over their own lists).
    ``retrieve`` returns the fused results, best first; ``min_score`` applies to the fused
    score (inclusive).
    """

    def __init__(self, keywords: BM25Index | HybridMemoryRetriever, vectors: VectorMemoryStore | None = None,
                 graph: RAGStrategy | None = None, *, weights: Sequence[float] | None = None,
                 min_candidates: int | None = None, candidate_factor: int | None = None,
                 fusion: str | None = None) -> None:
        if isinstance(keywords, HybridMemoryRetriever):
            if vectors is not None:
                raise ConfigurationError("pass either a HybridMemoryRetriever or (keywords, vectors[, graph])")
            for option, value, own in (("min_candidates", min_candidates, keywords.min_candidates),
                                       ("candidate_factor", candidate_factor, keywords.candidate_factor),
                                       ("fusion", fusion, keywords.fusion)):
                if value is not None and value != own:
                    raise ConfigurationError(f"{option}={value!r} differs from the HybridMemoryRetriever's "
                                             f"({own}): set {option} on the retriever")
            self._retriever = keywords
        else:
            if vectors is None:
                raise ConfigurationError("HybridRAGStrategy needs a VectorMemoryStore as second argument")
            self._retriever = HybridMemoryRetriever(
                keywords, vectors,
                min_candidates=DEFAULT_MIN_CANDIDATES if min_candidates is None else min_candidates,
                candidate_factor=DEFAULT_CANDIDATE_FACTOR if candidate_factor is None else candidate_factor,
                fusion=DEFAULT_FUSION if fusion is None else fusion)
        if graph is not None and not callable(getattr(graph, "retrieve", None)):
            raise ConfigurationError("graph must be a GraphRAGStrategy (or another strategy) or None")
        graph_store = getattr(getattr(graph, "store", None), "store", None)  # GraphRAGStrategy -> GraphStore -> Store
        if isinstance(graph_store, Store) and _place(graph_store) != _place(self._retriever.keywords.store):
            raise ConfigurationError(f"graph corpus {_describe(graph_store)} differs from the hybrid's corpus "
                                     f"{_describe(self._retriever.keywords.store)}")
        self._graph = graph
        # A graph stream over this very corpus runs as a plan on the hybrid's connection.
        graph_plan = getattr(graph, "plan", None)
        self._graph_plan: Callable[[str, RAGContext], Plan[list[RetrievedDocument]]] | None = (
            graph_plan if isinstance(graph_store, Store) and callable(graph_plan) else None)
        streams = "keyword, vector, graph" if graph is not None else "keyword, vector"
        count = 3 if graph is not None else 2
        fusion_rule = self._retriever.fusion
        self._weights = (default_weights(fusion_rule, count) if weights is None
                         else check_weights(weights, count, f"weights ({streams})"))
        # The keyword and vector streams' weights when they are fused alone (no graph, or a
        # graph without edges to walk): the rule's defaults unless weights were given.
        self._pair = default_weights(fusion_rule, 2) if weights is None else self._weights[:2]

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
        """The fusion weights: keyword, vector[, graph] (by default 2 and 1 for a score fusion
        of the two streams, all 1 under RRF and with a graph stream)."""
        return self._weights

    @property
    def plan_store(self) -> Store:
        """The corpus's :class:`Store` (the retriever's)."""
        return self._retriever.vectors.store

    @property
    def own_io(self) -> bool:
        """True for a graph stream that runs through its own ``retrieve`` (not a plan of this corpus)."""
        return self._graph is not None and (self._graph_plan is None or not planned(self._graph))

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as a :data:`~tnsrag_db._db.statement.Plan` (validation happens when the
        plan starts). The graph stream, when given and weighted above 0, runs as its own plan
        (a graph stream without one, through its ``retrieve``), between the plan's statements."""
        query = check_query(query)
        ctx = resolve_context(context)
        if self._graph is None or not self._weights[2] or not (yield from self._graph_has_evidence()):
            if not any(self._pair):  # only the graph stream was weighted, and it has nothing
                return []
            return (yield from self._retriever.fused_plan(query, ctx, weights=self._pair))
        keyword_docs, vector_docs = yield from self._retriever.rankings_plan(query, ctx)
        pool = self._retriever.pool_size(ctx.max_results)
        graph_ctx = RAGContext(min(MAX_RESULTS, pool), 0.0, ctx.metadata_filters)
        if self._graph_plan is not None:
            graph_docs = yield from self._graph_plan(query, graph_ctx)
        else:
            graph_docs = self._graph.retrieve(query, graph_ctx)
        fused = reciprocal_rank_fusion(keyword_docs, vector_docs, graph_docs, k=self._retriever.rrf_k,
                                       weights=self._weights)
        return [d for d in fused if d.score >= ctx.min_score][: ctx.max_results]

    def _graph_has_evidence(self) -> Plan[bool]:
        """Whether the graph stream can add anything: False only for a graph stream of reached
        entries alone (``include_seeds=False``, as hybrid by name has) over a corpus without
        edges, which is then not run (one index probe instead of its seed search and walk)."""
        graph = self._graph
        if graph is None:
            return False
        if getattr(graph, "include_seeds", True) is not False:
            return True
        rows = yield graph.store.has_edges_statement()  # type: ignore[attr-defined]
        return bool(rows[0][0])

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its explanation: under a score fusion a
        :class:`ScoreFusionExplanation` (per stream its score of the result, proposed or
        not, normalised and weighted), under RRF (or with a graph stream that has edges to
        walk) a :class:`FusionExplanation` (per stream the rank, weight and share
        ``weight / (k + rank)``); the shares, summed in stream order, give the score, each
        with the stream's own explanation (BM25 term figures, cosine, graph path); plus the
        search plan of each stream. Errors as :meth:`retrieve`."""
        query = check_query(query)
        ctx = resolve_context(context)
        retriever = self._retriever
        # A stream weighted 0 is not run.
        if (self._graph is None or not self._weights[2]
                or not retriever.vectors.store.run(self._graph_has_evidence())):
            if not any(self._pair):  # only the graph stream was weighted, and it has nothing
                return explanation_of(self.name, query, [], [], [])
            return retriever.explain_fused(query, ctx, (self._pair[0], self._pair[1]))
        vector = retriever.vectors.embed_query(query)
        basis = retriever.basis(ctx, vector)
        ranks = retriever.rankings_statement(query, ctx, vector, basis)
        pool = retriever.pool_size(ctx.max_results)
        with snapshot(retriever.vectors.store) as execute:
            keyword_docs, vector_docs = fused_index.split_rankings(list(execute(ranks)))
            plans = [bm25_plan(ctx), retriever.vectors.explain_plan(execute, vector, pool,
                                                                     filters=ctx.metadata_filters, min_score=-1.0)]
            bm25 = retriever.keywords.explain_scores(execute, query, {d.metadata["entryId"]: d.score
                                                                   for d in keyword_docs})
        graph = explain_with(self._graph, query, RAGContext(pool, 0.0, ctx.metadata_filters))
        plans.extend(prefixed(graph.plans, "graph"))
        rankings = [keyword_docs, vector_docs, graph.documents]
        details: list[Mapping[str, ScoreExplanation | None]] = [
            {document_key(d): bm25.get(d.metadata["entryId"]) for d in keyword_docs},
            {document_key(d): retriever.vectors.explain_cosine(vector, d.score, basis=basis)
             for d in vector_docs},
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
