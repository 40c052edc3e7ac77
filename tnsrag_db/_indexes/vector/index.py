"""``VectorMemoryStore``: entries with pgvector embeddings, searched by cosine similarity.

This module holds the search; the write path is :mod:`.write`, the shared core
:mod:`.core`, the SQL :mod:`.sql`, the indexes :mod:`.hnsw`.

Storage. Vectors live in the narrow ``embeddings`` table (kept apart from the wide entry
rows so a 384-d vector stays inline instead of being TOASTed), keyed by corpus, embedding
space and entry. An embedding space is (corpus, provider name, dimension): a row of
``embedding_spaces`` created on first write, so several models can coexist in one corpus.
The HNSW index of a space is a partial index on the typed expression
``(embedding::vector(<dim>)) WHERE space_id = <id>`` named ``ix_embeddings_hnsw_<id>``.

Scores are cosine similarity in [-1, 1]; a zero vector (stored or query) scores 0, never
NaN (pgvector's ``<=>`` returns NaN for it, so the SQL maps NaN to 0).

How a search is answered (one statement, chosen at run time by PostgreSQL itself through
one-time filters on InitPlans, so Hybrid can embed it as a CTE without a separate SET):

* no HNSW index in the space: exact scan (the filter joined in before top-K);
* unfiltered, index present: HNSW with ``hnsw.ef_search = max(ef_search, k)`` and
  ``hnsw.iterative_scan = relaxed_order`` (set with ``set_config(..., true)`` inside the
  statement, before the index scan starts; the first ``ef_search`` candidates come back
  sorted, and strict order would cost twice the scan). Approximate: recall@10 ≈
  0.97-0.99 at the default ``ef_search`` of 100 on the benchmark corpus;
* filtered, index present: the statement first collects the matching entry ids, stopping
  at ``exact_threshold + 1`` (through the entries indexes). At most ``exact_threshold``
  matches: exact scan of exactly those ids (recall 1.0). More: HNSW with strict-order
  iterative scan, which looks for the ``k`` matches among a budget of nearest vectors
  sized from the corpus's own statistics: ``(3 k + 20) * N / (exact_threshold + 1)``
  (N its entries, from the BM25 statistics), between 200 and 1,000, with ``ef_search``
  raised to the budget. A filter independent of the vectors has its ``k`` matches there
  all but always; when the scan ends with fewer (the matches near the query are rarer
  than the filter is overall, as when it follows the clusters of the vectors, or zero
  vectors could belong in the result) the exact scan of every match answers instead. A
  filtered query therefore always returns min(k, entries that match and score ≥
  min_score) rows in score order.

``min_score`` is applied after the top-K by distance, which gives the same set as
filtering first (the order is by score) without letting an iterative scan run on past
the last qualifying row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tnsrag_db._validate import check_int, check_number, check_prefix
from tnsrag_db._db.statement import Plan, Rows, Statement
from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._indexes.vector.core import (
    DEFAULT_EF_SEARCH,
    DEFAULT_EXACT_THRESHOLD,
    DEFAULT_INDEX_THRESHOLD,
    MAX_EF_SEARCH,
)
from tnsrag_db._indexes.vector.hnsw import HNSW_EF_CONSTRUCTION, HNSW_M, IndexProgress
from tnsrag_db._indexes.vector.ingest import IngestProgress
from tnsrag_db._indexes.vector.spaces import Space
from tnsrag_db._indexes.vector.sql import (
    DOCUMENT_COLUMNS,
    EMPTY_RANKING,
    STORED_VECTORS,
    Ranking,
    documents_sql,
    ranking_sql,
)
from tnsrag_db._indexes.vector.write import VectorWrites
from tnsrag_db.explain import CosineExplanation, SearchPlan
from tnsrag_db._types import MAX_CANDIDATES, is_unicode_text, validate_filters

__all__ = [
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_INDEX_THRESHOLD",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "IndexProgress",
    "IngestProgress",
    "VectorMemoryStore",
]

_FILTERED_MIN_EF = 200


def _check_k(k: object) -> int:
    return check_int(k, "k", minimum=1, maximum=MAX_CANDIDATES)


class VectorMemoryStore(VectorWrites):
    """A vector view over one :class:`Store`: add entries with embeddings, search by cosine.

    ``embedding`` is wrapped in :class:`ValidatingEmbedding` (unless it already is one
    with the same name); ``name`` overrides the provider name that keys the space.
    ``ef_search`` (default 100, 1 to 1000) is the HNSW candidate list of unfiltered
    queries. ``exact_threshold`` (default 5,000) is the number of matching entries up to
    which filtered queries scan exactly. ``index_threshold`` (default 10,000; None turns
    automatic builds off) is the space size at which :meth:`add_all` builds the HNSW
    index at the end of a write (see :meth:`build_index`). No I/O happens here.

    Raises :class:`ConfigurationError` for a bad option.
    """

    # -- statements -----------------------------------------------------------------
    def _ef_for(self, k: int, filtered: bool) -> int:
        """``hnsw.ef_search`` of a top-``k`` query (filtered queries search wider)."""
        return min(MAX_EF_SEARCH, max(self._ef_search, k, (2 * k if filtered else 0),
                                      (_FILTERED_MIN_EF if filtered else 0)))

    def _ranking(self, space: Space, vec: npt.NDArray[np.float32], k: int, filters: Mapping[str, str] | None,
                 min_score: float, prefix: str) -> Ranking:
        return Ranking(self._store.corpus, space.space_id, space.dimension, space.index_name, vec, k,
                       filters, min_score, prefix, self._ef_for(k, bool(validate_filters(filters))),
                       self._exact_threshold, bool(filters) and self._store.uses_filter_pairs())

    def _query_vector(self, query_vector: Sequence[float] | npt.NDArray[Any], k: object, filters: object,
                      min_score: object, *, fix: bool = False) -> tuple[npt.NDArray[np.float32], int, float]:
        """Validated arguments of a query by vector: the vector, ``k``, ``min_score``."""
        k = _check_k(k)
        score = check_number(min_score, "min_score")
        validate_filters(filters)  # type: ignore[arg-type]
        vec = query_vector
        # What embed_query returns (1-d float32, finite, of the known dimension) is valid
        # as it is; anything else goes through the full check.
        if not (isinstance(vec, np.ndarray) and vec.dtype == np.float32 and vec.ndim == 1
                and vec.shape[0] == self._dimension and bool(np.isfinite(vec).all())):
            vec = self._validate_rows([query_vector], 1, fix=fix)[0]  # type: ignore[list-item]
        return vec, k, score

    def candidates_sql(self, query_vector: Sequence[float] | npt.NDArray[Any], k: int, *,
                       filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                       prefix: str = "v") -> tuple[str, dict[str, Any]]:
        """One SELECT of ``(entry_id, score)``, best first (ties by entry id), at most ``k`` rows.

        The statement can be embedded as a CTE body by another statement (Hybrid fuses it
        with BM25 in one round trip); it carries its own HNSW settings (``set_config`` with
        ``is_local = true``, so they also hold for the rest of the caller's transaction)
        and needs no separate ``SET``. ``prefix`` (a short lower-case identifier, default
        ``"v"``) keeps its parameter names and CTE names (``<prefix>_...``) unique. The
        query vector is validated like stored vectors and must have the space's dimension.
        May read the space row first (one round trip) unless the space is known to be
        indexed; returns an empty SELECT when the space does not exist yet.
        """
        p = check_prefix(prefix, error=ConfigurationError)
        vec, k, score = self._query_vector(query_vector, k, filters, min_score)
        space = self._space_for_query(int(vec.shape[0]))
        if space is None:
            return EMPTY_RANKING, {}
        return ranking_sql(self._ranking(space, vec, k, filters, score, p))

    def ranking_plan(self, query_vector: Sequence[float] | npt.NDArray[Any], k: int, *,
                     filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                     prefix: str = "v") -> Plan[Statement | None]:
        """:meth:`candidates_sql` as a :class:`Statement` (columns ``entry_id, score``), built
        by a plan that first reads the space row when the cache cannot answer; None when
        the space does not exist yet (nothing to find)."""
        p = check_prefix(prefix, error=ConfigurationError)
        vec, k, score = self._query_vector(query_vector, k, filters, min_score)
        space = yield from self._query_space_plan(int(vec.shape[0]))
        if space is None:
            return None
        sql, params = ranking_sql(self._ranking(space, vec, k, filters, score, p))
        return Statement(sql, params, ("entry_id", "score"))

    def documents_plan(self, query_vector: Sequence[float] | npt.NDArray[Any], k: int, *,
                       filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                       explain: bool = False) -> Plan[tuple[Rows, SearchPlan | None]]:
        """The best ``k`` entries for ``query_vector`` with the columns documents are built
        from (:data:`~tnsrag_db._indexes.vector.sql.DOCUMENT_COLUMNS`), as a plan: one
        statement when the space is cached, else the space row first. With ``explain``,
        also the :class:`SearchPlan` of the ranking (from a second statement of the same
        plan: run it with ``snapshot=True`` for the same answer); else None."""
        vec, k, score = self._query_vector(query_vector, k, filters, min_score)
        filtered = bool(validate_filters(filters))
        space = yield from self._query_space_plan(int(vec.shape[0]))
        if space is None:
            return [], (SearchPlan("vector", "none", filtered, detail="no embedding space yet") if explain else None)
        ranking = self._ranking(space, vec, k, filters, score, "v")
        sql, params = ranking_sql(ranking)
        rows = yield Statement(documents_sql(sql, "v"), params, DOCUMENT_COLUMNS)
        if not explain:
            return rows, None
        path_row = None
        if space.index_name is not None and np.any(vec):
            path_sql, path_params = ranking_sql(ranking, path=True)
            path_row = (yield Statement(path_sql, path_params, ("n", "ok")))[0]
        return rows, self._search_plan(ranking, path_row)

    def _search_plan(self, r: Ranking, row: Any, stream: str = "vector") -> SearchPlan:
        """The :class:`SearchPlan` of ranking ``r``; ``row`` is its path statement's row (None
        for an unindexed space or a zero query vector, whose path is known without it)."""
        filtered = bool(validate_filters(r.filters))
        index_name = r.index_name
        if not np.any(r.vector):
            return SearchPlan(stream, "exact", filtered, index_name,
                              detail="zero query vector: every entry scores 0 (ties by entry id)")
        if index_name is None:
            return SearchPlan(stream, "exact", filtered, None, detail="no HNSW index in this space: exact scan")
        t = r.exact_threshold
        fell_short = not bool(row.ok)
        if filtered:
            n = int(row.n)
            if n <= t:
                return SearchPlan(stream, "exact", True, index_name, n, t,
                                  detail=f"{n} matching entries (at most {t}): exact scan of them")
            return SearchPlan(stream, "hnsw", True, index_name, n, t, fell_short, r.ef_search,
                              detail="HNSW strict-order iterative scan, filter checked per row"
                              + ("; too few rows, exact scan answered" if fell_short else ""))
        return SearchPlan(stream, "hnsw", False, index_name, None, None, fell_short, r.ef_search,
                          detail="HNSW relaxed-order iterative scan"
                          + ("; too few rows, exact scan answered" if fell_short else ""))

    # -- search ---------------------------------------------------------------------
    def search(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
               min_score: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` entries most similar to ``query``: ``(entry id, cosine)`` pairs, best first.

        ``filters`` are exact metadata filters applied before top-K; ``min_score`` is
        inclusive. Raises :class:`ValidationError` for bad arguments and what the
        embedding function raises.
        """
        vec = self._embed_text_query(query, k, filters, min_score)
        return self._store.run(self._ids_plan(vec, k, filters, min_score))

    def _ids_plan(self, vec: npt.NDArray[np.float32], k: int, filters: Mapping[str, str] | None,
                        min_score: float) -> Plan[list[tuple[str, float]]]:
        statement = yield from self.ranking_plan(vec, k, filters=filters, min_score=min_score)
        if statement is None:
            return []
        rows = yield statement
        return [(r.entry_id, float(r.score)) for r in rows]

    def _embed_text_query(self, query: object, k: object, filters: object,
                          min_score: object) -> npt.NDArray[np.float32]:
        """Validate a text query's arguments (before embedding it) and embed it."""
        if not isinstance(query, str):
            raise ValidationError(f"query must be a string, got {type(query).__name__}")
        if not is_unicode_text(query):
            raise ValidationError("query contains a lone surrogate (not Unicode text)")
        _check_k(k)
        check_number(min_score, "min_score")
        validate_filters(filters)  # type: ignore[arg-type]
        return self.embed_query(query)

    def rows_statement(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                       min_score: float = 0.0,
                       columns: str = "") -> tuple[str, dict[str, Any], npt.NDArray[np.float32]] | None:
        """The statement :meth:`search_rows` runs, with the query vector; None when the space
        does not exist yet (then there is nothing to find)."""
        vec = self._embed_text_query(query, k, filters, min_score)
        space = self._space_for_query(int(vec.shape[0]))
        if space is None:
            return None
        sql, params = ranking_sql(self._ranking(space, vec, k, filters, float(min_score), "v"))
        return documents_sql(sql, "v", columns or "e.id AS entry_id"), params, vec

    def search_rows(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                    min_score: float = 0.0, columns: str = "") -> list[Any]:
        """Like :meth:`search` but returns rows joined with their entries in the same statement.

        Each row has ``score`` plus ``columns`` (entry columns on alias ``e``, a code
        constant such as :data:`tnsrag_db._store.reads.ENTRY_COLUMNS`).
        """
        statement = self.rows_statement(query, k, filters=filters, min_score=min_score, columns=columns)
        if statement is None:
            return []
        return self._store.read(statement[0], statement[1])

    # -- stored vectors -------------------------------------------------------------
    def stored_vectors_plan(self, entry_ids: Sequence[str],
                            dimension: int) -> Plan[dict[str, npt.NDArray[np.float32]]]:
        """The vectors this view's space of ``dimension`` holds for ``entry_ids``, by entry id,
        as a plan (the space row first when the cache cannot answer; then one statement). An
        id without a vector in that space (an entry written without one, or not at all) is
        absent from the answer; so is every id before the space's first write."""
        ids = list(dict.fromkeys(entry_ids))
        space = yield from self._query_space_plan(dimension)
        if space is None or not ids:
            return {}
        rows = yield Statement(STORED_VECTORS, {"c": self._store.corpus, "s": space.space_id, "ids": ids},
                               ("entry_id", "embedding"))
        return {r.entry_id: np.asarray(r.embedding, dtype=np.float32) for r in rows}

    def stored_vectors(self, entry_ids: Sequence[str], dimension: int) -> dict[str, npt.NDArray[np.float32]]:
        """:meth:`stored_vectors_plan` run on the store (at most two round trips)."""
        return self._store.run(self.stored_vectors_plan(entry_ids, dimension))

    # -- explanations -----------------------------------------------------------------
    def space_of(self, query_vector: npt.NDArray[np.float32]) -> tuple[int, int] | None:
        """``(space_id, dimension)`` of the space a query vector searches; None before the first write."""
        space = self._space_for_query(int(query_vector.shape[0]))
        return None if space is None else (space.space_id, space.dimension)

    def explain_cosine(self, query_vector: npt.NDArray[np.float32], score: float) -> CosineExplanation:
        """The :class:`CosineExplanation` of a score this store's search returned for ``query_vector``."""
        space = self.space_of(query_vector)
        dim = int(query_vector.shape[0])
        return CosineExplanation(score, score, self._embedding.name, dim, None if space is None else space[0])

    def explain_plan(self, execute: Callable[[Statement], Rows], query_vector: npt.NDArray[np.float32], k: int, *,
                     filters: Mapping[str, str] | None = None, min_score: float = 0.0,
                     stream: str = "vector") -> SearchPlan:
        """Which path the ranking statement for ``query_vector`` takes (see the module docstring):
        exact scan or HNSW iterative scan, the matches it counted and whether the exact
        fallback answered. For an indexed space this runs the statement's own path-choosing
        part with ``execute`` (a statement executor: run it in the snapshot that ranked, same
        answer)."""
        vec, k, score = self._query_vector(query_vector, k, filters, min_score, fix=True)
        space = self._space_for_query(int(vec.shape[0]))
        if space is None:
            return SearchPlan(stream, "none", bool(validate_filters(filters)),
                              detail="no embedding space yet: nothing to search")
        ranking = self._ranking(space, vec, k, filters, score, "v")
        row = None
        if space.index_name is not None and np.any(vec):
            sql, params = ranking_sql(ranking, path=True)
            (row,) = execute(Statement(sql, params))
        return self._search_plan(ranking, row, stream)
