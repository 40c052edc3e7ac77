"""``KeywordRAGStrategy``: lexical BM25 retrieval (the SPI's ``KeywordRAGStrategy``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.reads import document_from_row
from tnsrag_db._strategies.base import PlannedStrategy, check_query, resolve_context
from tnsrag_db._types import RAGContext, RetrievedDocument

if TYPE_CHECKING:  # explanations load only when one is asked for
    from tnsrag_db._store.store import Store
    from tnsrag_db.explain import BM25Explanation, Explanation, SearchPlan

__all__ = ["KeywordRAGStrategy"]


class KeywordRAGStrategy(PlannedStrategy):
    """Ranks entries by true Okapi BM25 (see :class:`BM25Index`); ``name`` is ``"keyword"``.

    Metadata filters and the inclusive ``min_score`` apply in SQL before the top
    ``max_results``; each result's score is its BM25 score (> 0). Query analysis,
    scoring and the result rows come from one statement (a second one only when some
    query term is frequent: see :meth:`BM25Index.documents_plan`). Raises
    :class:`ConfigurationError` when ``keywords`` is not a :class:`BM25Index`; ``retrieve``
    raises :class:`ValidationError` for a non-string or blank query or a bad context.
    """

    def __init__(self, keywords: BM25Index) -> None:
        if not isinstance(keywords, BM25Index):
            raise ConfigurationError(f"KeywordRAGStrategy needs a BM25Index, got {type(keywords).__name__}")
        self._keywords = keywords

    @property
    def name(self) -> str:
        """``"keyword"``."""
        return "keyword"

    @property
    def keywords(self) -> BM25Index:
        """The BM25 index this strategy reads."""
        return self._keywords

    @property
    def plan_store(self) -> Store:
        """The index's :class:`Store`."""
        return self._keywords.store

    def __repr__(self) -> str:
        return f"KeywordRAGStrategy({self._keywords!r})"

    def _statement_plan(self, text: str, ctx: RAGContext) -> Plan[Statement]:
        pairs = bool(ctx.metadata_filters) and (yield from self._keywords.store.filter_pairs_plan())
        return self._keywords.documents_statement(text, ctx.max_results, filters=ctx.metadata_filters,
                                                  min_score=ctx.min_score, pairs=pairs)

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as an I/O-free :data:`~tnsrag_db._db.statement.Plan` (validation
        happens when the plan starts)."""
        ctx = resolve_context(context)
        text = check_query(query)
        rows = yield from self._keywords.documents_plan(text, ctx.max_results, filters=ctx.metadata_filters,
                                                        min_score=ctx.min_score)
        return [document_from_row(row, float(row.score)) for row in rows]

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`BM25Explanation` (per query term
        tf, df, idf and contribution); the ranking and the figures come from one snapshot.
        Errors as :meth:`retrieve`."""
        return self._keywords.store.run(self._explain_plan(query, context), snapshot=True)

    def _explain_plan(self, query: str, context: RAGContext | None) -> Plan[Explanation]:
        from tnsrag_db._strategies.explain import explanation_of

        ctx = resolve_context(context)
        text = check_query(query)
        rows = yield (yield from self._statement_plan(text, ctx))
        docs = [document_from_row(row, float(row.score)) for row in rows]
        figures = yield from bm25_figures_plan(self._keywords, text, {d.metadata["entryId"]: d.score for d in docs})
        return explanation_of(self.name, text, docs, [figures[d.metadata["entryId"]] for d in docs],
                              [bm25_plan(ctx)])


def bm25_figures_plan(index: BM25Index, query: str, scores: Mapping[str, float]) -> Plan[dict[str, BM25Explanation]]:
    """:meth:`BM25Index.explain_scores` as a plan (one statement, none for no scores): run it
    in the snapshot that ranked, so the figures agree with the scores."""
    if not scores:
        return {}
    sql_text, params = index.term_figures_sql(query, list(scores))
    rows = yield Statement(sql_text, params)
    return index.explain_rows(list(rows), scores)


def bm25_plan(ctx: RAGContext, stream: str = "keyword") -> SearchPlan:
    """The plan of a BM25 ranking statement (always the postings; filters joined before top-K)."""
    from tnsrag_db.explain import SearchPlan

    return SearchPlan(stream, "bm25", bool(ctx.metadata_filters),
                      detail="postings of the query terms, frequent terms pruned where that cannot change the top k")
