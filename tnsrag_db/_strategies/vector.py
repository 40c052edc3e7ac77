"""``VectorRAGStrategy``: cosine similarity over a :class:`VectorMemoryStore`.

One statement per retrieve: the ranking (exact or HNSW, chosen inside the statement; see
:mod:`tnsrag_db._indexes.vector`) joined with the entry rows the documents are built from,
both built by the index (this module names no table). Metadata filters and ``min_score``
(inclusive) apply in SQL before top-K.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.reads import document_from_row
from tnsrag_db._strategies.base import PlannedStrategy, check_query, resolve_context
from tnsrag_db._strategies.explain import explanation_of
from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db.explain import Explanation, SearchPlan

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["VectorRAGStrategy"]


class VectorRAGStrategy(PlannedStrategy):
    """Retrieves the entries most similar to the query by cosine similarity (score in [-1, 1]).

    Results carry ``tier``, ``entryId``, ``source`` (when set) and the entry's own
    metadata. Raises :class:`ConfigurationError` when ``vectors`` is not a
    :class:`VectorMemoryStore`; ``retrieve`` raises :class:`ValidationError` for a bad
    query or context and whatever the embedding function raises.
    """

    def __init__(self, vectors: VectorMemoryStore) -> None:
        if not isinstance(vectors, VectorMemoryStore):
            raise ConfigurationError(f"vectors must be a VectorMemoryStore, got {type(vectors).__name__}")
        self._vectors = vectors

    @property
    def name(self) -> str:
        """``"vector"``."""
        return "vector"

    @property
    def vectors(self) -> VectorMemoryStore:
        """The vector store this strategy searches."""
        return self._vectors

    @property
    def plan_store(self) -> Store:
        """The vector store's :class:`Store`."""
        return self._vectors.store

    def __repr__(self) -> str:
        return f"VectorRAGStrategy({self._vectors!r})"

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as an I/O-free :data:`~tnsrag_db._db.statement.Plan` (validation and
        the query's embedding happen when the plan starts)."""
        ctx = resolve_context(context)
        text = check_query(query)
        vec = self._vectors.embed_query(text)
        rows, _ = yield from self._vectors.documents_plan(vec, ctx.max_results, filters=ctx.metadata_filters,
                                                          min_score=ctx.min_score)
        return [document_from_row(row, float(row.score)) for row in rows]

    def _explain_plan(self, query: str, context: RAGContext | None) -> Plan[Explanation]:
        ctx = resolve_context(context)
        text = check_query(query)
        vec = self._vectors.embed_query(text)
        rows, search = yield from self._vectors.documents_plan(vec, ctx.max_results, filters=ctx.metadata_filters,
                                                               min_score=ctx.min_score, explain=True)
        assert isinstance(search, SearchPlan)
        docs = [document_from_row(row, float(row.score)) for row in rows]
        basis = yield from self._vectors.basis_plan(int(vec.shape[0]))  # the space, known since the ranking
        return explanation_of(self.name, text, docs,
                              [self._vectors.explain_cosine(vec, d.score, basis=basis) for d in docs], [search])

    @honours_as_of
    def explain(self, query: str, context: RAGContext | None = None) -> Explanation:
        """The results of :meth:`retrieve`, each with its :class:`CosineExplanation`, and the
        search plan (exact scan or HNSW iterative scan, matches counted, fallback taken),
        ranking and plan from one snapshot. Errors as :meth:`retrieve`."""
        return self._vectors.store.run(self._explain_plan(query, context), snapshot=True)
