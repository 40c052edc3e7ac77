"""``MultiQueryRAGStrategy``: query variations from a ``QueryExpander``, each run once
through one base strategy, merged by reciprocal rank fusion (the SPI's ``MultiQueryRAGStrategy``).

Per retrieval:
1. the expander is asked for at most ``max_expansions`` variants; they are normalised
   and de-duplicated (:func:`~tnsrag_db._strategies.expansion.normalize_variants`), and the original
   query always runs, first;
2. each unique query runs once, in order, through the base strategy with a context of
   ``candidates`` results (default ``max(50, 4 × max_results)``), ``min_score`` 0.0 and
   the caller's metadata filter — the filter is passed *down*, so it applies before
   the base's own top-K (docs/design.md, "Filters before top-K"), and a source fence is whatever
   the base strategy enforces;
3. the rankings are fused by RRF with k = 60 (:func:`~tnsrag_db._strategies.fusion.reciprocal_rank_fusion`),
   each weighted by ``weights`` (default all 1);
   ``min_score`` (inclusive) applies to the fused RRF score, then the top ``max_results``.

Cancellation: the token is checked before the expander call, before every base call and
once more before fusion; a cancelled token raises :class:`RetrievalCancelledError` and
no further call is started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import (
    ConfigurationError,
    ExecutionError,
    TnsragError,
)
from tnsrag_db._strategies.base import RAGStrategy, WrappingStrategy, check_query, child_plan, resolve_context
from tnsrag_db._strategies.expansion import CancellationToken, QueryExpander, QueryExpansion, normalize_variants
from tnsrag_db._strategies.explain import by_entry, explain_with, explanation_of, prefixed
from tnsrag_db._strategies.fusion import DEFAULT_RRF_K, check_weights, document_key, fuse, reciprocal_rank_fusion
from tnsrag_db._types import MAX_RESULTS, RAGContext, RetrievedDocument
from tnsrag_db._validate import is_int
from tnsrag_db.explain import Explanation, FusionExplanation, ScoreExplanation, StreamShare

__all__ = ["MultiQueryRAGStrategy"]


class MultiQueryRAGStrategy(WrappingStrategy):
    """Runs a query and its variations through ``base_strategy`` and fuses the rankings by RRF;
    ``name`` is ``"multi_query"``.

    ``MultiQueryRAGStrategy(base_strategy, expander, mode, model, max_expansions,
    cancellation_token=None)``. ``mode`` is a :class:`QueryExpansion` (or its name) other
    than ``NONE``; ``model`` the exact provider model name passed to the expander;
    ``max_expansions`` the positive bound on variants besides the original.
    ``candidates`` (keyword-only) fixes the per-query candidate count; by default it is
    ``max(50, 4 × max_results)``. ``weights`` (keyword-only) holds ``1 + max_expansions``
    fusion weights: the original query's, then one per variant in the order they run
    (weights past the last variant are unused); default all 1, the plain RRF; a query
    weighted 0 takes no part in the fusion (see :func:`~tnsrag_db._strategies.fusion.check_weights`).
    See the module docstring for the steps.

    Raises :class:`ConfigurationError` at construction for a mode of ``NONE`` (or one the
    expander's ``supported_modes`` excludes), a blank model, a non-positive
    ``max_expansions`` or ``candidates``, bad ``weights``, or arguments of the wrong kind.

    ``retrieve`` returns the RRF fusion of the base strategy's rankings for the query and
    its variants, at most ``max_results``, each with fused score ≥ ``min_score``, best first
    (ties: best rank in any ranking, then identity). It raises
    :class:`RetrievalCancelledError` when the token is cancelled, the expander errors of
    :meth:`queries`, and whatever the base strategy raises. It runs on the base's store;
    ``aretrieve`` calls the expander in a worker thread.
    """

    #: Lower bound of the default per-query candidate count.
    MIN_CANDIDATES = 50
    #: Default per-query candidate count as a multiple of ``max_results``.
    CANDIDATE_FACTOR = 4

    def __init__(self, base_strategy: RAGStrategy, expander: QueryExpander, mode: QueryExpansion | str,
                 model: str, max_expansions: int, cancellation_token: CancellationToken | None = None, *,
                 candidates: int | None = None, weights: Sequence[float] | None = None) -> None:
        if isinstance(base_strategy, type) or not callable(getattr(base_strategy, "retrieve", None)):
            raise ConfigurationError(f"base_strategy must be a RAGStrategy instance, got {base_strategy!r}")
        if isinstance(expander, type) or not callable(getattr(expander, "expand", None)):
            raise ConfigurationError(f"expander must be a QueryExpander instance with expand(), got {expander!r}")
        parsed = QueryExpansion.parse(mode)
        if parsed is QueryExpansion.NONE:
            raise ConfigurationError("MultiQueryRAGStrategy needs a query expansion mode other than NONE")
        supported = getattr(expander, "supported_modes", None)
        if supported is not None and parsed not in supported:
            raise ConfigurationError(f"expander {expander!r} does not serve mode {parsed.name}; it serves "
                                     f"{', '.join(sorted(m.name for m in supported))}")
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(f"model must be a non-blank provider model name, got {model!r}")
        if not is_int(max_expansions) or max_expansions < 1:
            raise ConfigurationError(f"max_expansions must be a positive int, got {max_expansions!r}")
        if cancellation_token is not None and not isinstance(cancellation_token, CancellationToken):
            raise ConfigurationError(f"cancellation_token must be a CancellationToken or None, "
                                     f"got {type(cancellation_token).__name__}")
        if candidates is not None and (not is_int(candidates) or candidates < 1):
            raise ConfigurationError(f"candidates must be a positive int or None, got {candidates!r}")
        super().__init__(base_strategy)
        self._expander = expander
        self._mode = parsed
        self._model = model
        self._max_expansions = max_expansions
        self._token = cancellation_token
        self._candidates = candidates
        self._weights = check_weights(weights, 1 + max_expansions,
                                      "weights (the original query, then each variant)")

    @property
    def name(self) -> str:
        """``"multi_query"``."""
        return "multi_query"

    @property
    def base_strategy(self) -> RAGStrategy:
        """The strategy every query runs through."""
        return self._child

    @property
    def mode(self) -> QueryExpansion:
        """The expansion mode."""
        return self._mode

    @property
    def model(self) -> str:
        """The model name passed to the expander."""
        return self._model

    @property
    def max_expansions(self) -> int:
        """Bound on variants besides the original query."""
        return self._max_expansions

    def __repr__(self) -> str:
        return (f"MultiQueryRAGStrategy({self._child!r}, {self._expander!r}, {self._mode.name}, "
                f"model={self._model!r}, max_expansions={self._max_expansions})")

    def candidate_count(self, max_results: int) -> int:
        """Candidates asked of the base per query: ``candidates`` or ``max(50, 4 × max_results)``."""
        if self._candidates is not None:
            return min(MAX_RESULTS, self._candidates)
        return min(MAX_RESULTS, max(self.MIN_CANDIDATES, self.CANDIDATE_FACTOR * max_results))

    def queries(self, query: str) -> list[str]:
        """The unique queries a retrieval of ``query`` runs: the original first, then the variants.

        Calls the expander once. Raises the library's own errors (any
        :class:`~tnsrag_db._errors.TnsragError`: :class:`ProviderTransportError`,
        :class:`RetrievalCancelledError`, a statement timeout...) as the expander raises
        them, :class:`ExecutionError` for any other expander exception or output that is not a list of strings.
        """
        text = check_query(query)
        self._check_cancelled()
        variants = self._call(lambda: self._expander.expand(text, self._mode, self._model, self._max_expansions),
                              "query expander")
        return normalize_variants(text, variants, self._max_expansions)

    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as a :data:`~tnsrag_db._db.statement.Plan`: the expander call, then the
        base strategy's plan for each query (its ``retrieve`` for a base without one), then
        the fusion. The statements run on the connection of whoever drives the plan (a
        wrapping strategy, or ``Store.run`` of the base's store)."""
        ctx = resolve_context(context)
        return (yield from self._queries_plan(self.queries(query), ctx))

    async def _aplan(self, query: str, context: RAGContext | None) -> Plan[list[RetrievedDocument]]:
        """The expander (a model, or RM3's reads) runs in a worker thread, off the event loop;
        then :meth:`plan`'s part after it."""
        ctx = resolve_context(context)
        return self._queries_plan(await asyncio.to_thread(self.queries, query), ctx)

    @honours_as_of
    def _queries_plan(self, queries: list[str], context: RAGContext) -> Plan[list[RetrievedDocument]]:
        sub_context = RAGContext(self.candidate_count(context.max_results), 0.0, context.metadata_filters)
        rankings: list[list[RetrievedDocument]] = []
        for q in queries:
            self._check_cancelled()
            rankings.append(list((yield from child_plan(self._child, q, sub_context))))
        return self._fused(rankings, context)

    def _fused(self, rankings: list[list[RetrievedDocument]], ctx: RAGContext) -> list[RetrievedDocument]:
        """The last cancellation check, then the weighted RRF of ``rankings``, ``min_score`` and top-K."""
        self._check_cancelled()
        weights = self._weights[: len(rankings)]
        if not any(weights):  # only zero-weighted queries ran
            return []
        fused = reciprocal_rank_fusion(*rankings, k=DEFAULT_RRF_K, weights=weights)
        return [d for d in fused if d.score >= ctx.min_score][: ctx.max_results]

    @property
    def weights(self) -> tuple[float, ...]:
        """The fusion weights: the original query's, then one per variant."""
        return self._weights

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`FusionExplanation`: per query
        that found it (the stream is the query text) the rank, weight and RRF share, with the
        base strategy's explanation; :attr:`Explanation.queries` lists the queries run (the
        expander is asked again, so an expander that answers differently each time explains
        a different retrieval). Errors as :meth:`retrieve`."""
        ctx = resolve_context(context)
        queries = self.queries(query)
        sub_context = RAGContext(self.candidate_count(ctx.max_results), 0.0, ctx.metadata_filters)
        explained: list[Explanation] = []
        for q in queries:
            self._check_cancelled()
            explained.append(explain_with(self._child, q, sub_context))
        self._check_cancelled()
        rankings = [e.documents for e in explained]
        weights = self._weights[: len(rankings)]
        fused = [f for f in fuse(*rankings, k=DEFAULT_RRF_K, weights=weights)
                 if f.document.score >= ctx.min_score][: ctx.max_results] if any(weights) else []
        details = [by_entry(e) for e in explained]
        explanations: list[ScoreExplanation] = []
        for f in fused:
            key = document_key(f.document)
            explanations.append(FusionExplanation(f.document.score, DEFAULT_RRF_K, tuple(
                StreamShare(queries[s.ranking], s.rank, s.weight, s.share, rankings[s.ranking][s.rank - 1].score,
                            details[s.ranking][key].explanation if key in details[s.ranking] else None)
                for s in f.shares)))
        plans = [p for n, e in enumerate(explained, 1) for p in prefixed(e.plans, f"query {n}")]
        return explanation_of(self.name, check_query(query), [f.document for f in fused], explanations, plans,
                              queries)

    # -- helpers ----------------------------------------------------------------------------
    def _check_cancelled(self) -> None:
        if self._token is not None:
            self._token.raise_if_cancelled("multi-query retrieval")

    @staticmethod
    def _call(fn: Callable[[], Any], what: str) -> Any:
        try:
            return fn()
        except TnsragError:  # the library's own typed errors (timeouts, cancellation...) keep their type
            raise
        except Exception as exc:
            raise ExecutionError(f"{what} failed: {exc}") from exc

