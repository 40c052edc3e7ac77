"""Maximal marginal relevance (MMR): a diversification step over any strategy's candidates.

:func:`maximal_marginal_relevance` is the selection itself, a pure function over vectors:
it picks, one at a time, the candidate that maximises

    ``lambda_mult × sim(query, c) − (1 − lambda_mult) × max(sim(c, s) for s already picked)``

with cosine similarity (a zero vector has similarity 0 with everything, as in the vector
index). The first pick is therefore the candidate most similar to the query; ``lambda_mult``
1 keeps the order by similarity, 0 asks for the most diverse set. The names ``k``,
``fetch_k`` and ``lambda_mult`` (default 0.5) are LangChain's.

:class:`MMRRAGStrategy` wraps any strategy: it asks the base strategy for ``fetch_k``
candidates (with the caller's filters and ``min_score``), takes their vectors from the
corpus's stored embeddings in the vector store's space (an entry without one there, such
as a BM25-only entry, is embedded from its content), embeds the query, and returns the
``max_results`` candidates MMR selects, in selection order, each with the base strategy's
score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError, TnsragError, ValidationError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._strategies.base import RAGStrategy, WrappingStrategy, check_query, child_plan, resolve_context
from tnsrag_db._types import MAX_RESULTS, RAGContext, RetrievedDocument
from tnsrag_db._validate import check_int, is_number

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["DEFAULT_FETCH_K", "DEFAULT_LAMBDA_MULT", "MMRRAGStrategy", "check_lambda_mult",
           "maximal_marginal_relevance"]

#: Candidates fetched for MMR to choose from (LangChain's default).
DEFAULT_FETCH_K = 20
#: Weight of relevance against diversity (LangChain's default).
DEFAULT_LAMBDA_MULT = 0.5


def check_lambda_mult(value: object, error: type[TnsragError] = ValidationError) -> float:
    """``float(value)`` when it is a finite number in [0, 1]; ``error`` (default
    :class:`ValidationError`) naming ``lambda_mult`` otherwise."""
    if not is_number(value) or not math.isfinite(float(value)) or not 0.0 <= float(value) <= 1.0:  # type: ignore[arg-type]
        raise error(f"lambda_mult must be a number in [0, 1], got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _unit_rows(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Rows scaled to length 1; zero rows stay zero (their cosine with anything is 0)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out: npt.NDArray[np.float64] = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return out


def maximal_marginal_relevance(query: Sequence[float] | npt.NDArray[Any],
                               candidates: Sequence[Sequence[float]] | npt.NDArray[Any],
                               k: int, lambda_mult: float = DEFAULT_LAMBDA_MULT) -> list[int]:
    """Indexes into ``candidates`` of the ``min(k, len(candidates))`` vectors MMR selects, in
    selection order (see the module docstring for the score).

    ``query`` is one vector, ``candidates`` a sequence (or 2-d array) of vectors of the
    same dimension; ``k`` ≥ 0 (0 selects nothing); ``lambda_mult`` in [0, 1] (default
    0.5). Ties go to the candidate listed first, so candidates given best first keep their
    order when MMR cannot tell them apart. Raises :class:`ValidationError` for a bad
    ``k``, ``lambda_mult``, shape or a non-finite value.
    """
    k = check_int(k, "k", minimum=0)
    weight = check_lambda_mult(lambda_mult)
    q = np.asarray(query, dtype=np.float64)
    count = len(candidates)
    if q.ndim != 1 or q.shape[0] == 0:
        raise ValidationError(f"query must be one non-empty vector, got shape {q.shape}")
    if count == 0 or k == 0:
        return []
    c = np.asarray(candidates, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != q.shape[0]:
        raise ValidationError(f"candidates must be vectors of the query's dimension {q.shape[0]}, got shape {c.shape}")
    if not (np.isfinite(q).all() and np.isfinite(c).all()):
        raise ValidationError("query and candidate vectors must be finite")
    units = _unit_rows(c)
    relevance = units @ _unit_rows(q[np.newaxis, :])[0]
    # The highest similarity of each candidate to any pick so far (none yet: no penalty).
    redundancy = np.full(count, -np.inf)
    chosen: list[int] = []
    available = np.ones(count, dtype=bool)
    for _ in range(min(k, count)):
        if chosen:
            score = weight * relevance - (1.0 - weight) * redundancy
        else:
            score = relevance.copy()
        score[~available] = -np.inf
        pick = int(np.argmax(score))  # the first of equal maxima
        chosen.append(pick)
        available[pick] = False
        redundancy = np.maximum(redundancy, units @ units[pick])
    return chosen


class MMRRAGStrategy(WrappingStrategy):
    """Any strategy's results diversified by maximal marginal relevance.

    ``base``: the strategy that finds the candidates. ``vectors``: the
    :class:`~tnsrag_db._indexes.vector.VectorMemoryStore` whose embedding function embeds
    the query and whose space holds the candidates' stored vectors. ``fetch_k`` (default
    20, 1 to 10,000): candidates asked of ``base``; ``lambda_mult`` (default 0.5, in [0,
    1]): 1 ranks by relevance alone, 0 by diversity alone. As in LangChain, at most
    ``fetch_k`` candidates are considered, so a ``max_results`` above ``fetch_k`` returns at
    most ``fetch_k`` documents. Raises :class:`ConfigurationError` for a bad argument.

    ``retrieve`` returns at most ``min(max_results, fetch_k)`` of the base strategy's
    candidates, in MMR order; errors of the base strategy and of the embedding function
    propagate.
    """

    def __init__(self, base: RAGStrategy, vectors: VectorMemoryStore, *, fetch_k: int = DEFAULT_FETCH_K,
                 lambda_mult: float = DEFAULT_LAMBDA_MULT) -> None:
        if not isinstance(base, RAGStrategy):
            raise ConfigurationError(f"base must be a RAGStrategy, got {type(base).__name__}")
        if not isinstance(vectors, VectorMemoryStore):
            raise ConfigurationError(f"vectors must be a VectorMemoryStore, got {type(vectors).__name__}")
        super().__init__(base)
        self._vectors = vectors
        self._fetch_k = check_int(fetch_k, "fetch_k", minimum=1, maximum=MAX_RESULTS, error=ConfigurationError)
        self._lambda_mult = check_lambda_mult(lambda_mult, ConfigurationError)

    @property
    def name(self) -> str:
        """``"mmr"``."""
        return "mmr"

    @property
    def base(self) -> RAGStrategy:
        """The strategy that finds the candidates."""
        return self._child

    @property
    def plan_store(self) -> Store:
        """The vector store's :class:`Store` (the base's plan runs on it too)."""
        return self._vectors.store

    @property
    def fetch_k(self) -> int:
        """Candidates asked of the base strategy."""
        return self._fetch_k

    @property
    def lambda_mult(self) -> float:
        """Weight of relevance against diversity, in [0, 1]."""
        return self._lambda_mult

    def __repr__(self) -> str:
        return f"MMRRAGStrategy(base={self._child.name!r}, fetch_k={self._fetch_k}, lambda_mult={self._lambda_mult})"

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as a plan: the base strategy's plan (or its ``retrieve``), then one
        read of the candidates' stored vectors (after the space row, when not cached)."""
        text = check_query(query)
        ctx = resolve_context(context)
        candidates = yield from child_plan(self._child, text, ctx.with_max_results(self._fetch_k))
        if not candidates:
            return []
        query_vector = self._vectors.embed_query(text)
        ids = [d.metadata.get("entryId") for d in candidates]
        stored = yield from self._vectors.stored_vectors_plan([i for i in ids if i is not None],
                                                              int(query_vector.shape[0]))
        missing = [n for n, i in enumerate(ids) if i is None or i not in stored]
        # Candidates without a stored vector in this space are embedded from their content.
        embedded = dict(zip(missing, self._vectors.embedding.embed_batch([candidates[n].content for n in missing]),
                            strict=True)) if missing else {}
        matrix = np.vstack([embedded[n] if n in embedded else stored[ids[n]]  # type: ignore[index]
                            for n in range(len(candidates))])
        picks = maximal_marginal_relevance(query_vector, matrix, ctx.max_results, self._lambda_mult)
        return [candidates[n] for n in picks]

