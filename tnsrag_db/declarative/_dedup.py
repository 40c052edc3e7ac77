"""``DeduplicatingStrategy``: the post-retrieval near-duplicate filter of the declarative runtime.

It is a decorator around any strategy, not a retrieval mode of its own. Results come
best first, so walking them in order and keeping a document only when its cosine
similarity to every kept document is below the threshold collapses each group of near
duplicates to its best-scoring member.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from tnsrag_db._db.as_of import honours_as_of
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._strategies.base import (
    RAGStrategy,
    WrappingStrategy,
    check_query,
    child_plan,
    collapsing_plan,
    resolve_context,
)
from tnsrag_db._types import RAGContext, RetrievedDocument
from tnsrag_db._validate import is_number
from tnsrag_db.declarative._config import DEFAULT_DEDUP_THRESHOLD

__all__ = ["DeduplicatingStrategy"]

#: A batch embedding function, such as ``ProcessEmbedding.embed_batch``.
BatchEmbedding = Callable[[Sequence[str]], Sequence[npt.NDArray[np.float32]]]


class DeduplicatingStrategy(WrappingStrategy):
    """Wraps ``base``; near duplicates (cosine ≥ ``threshold``, default 0.95) collapse to the best one.

    ``embed_batch`` embeds result contents (the declarative runtime passes the process
    provider's). To still return ``max_results`` documents after collapsing, the base is
    asked for twice as many, doubling while too few survive and the base had more (at most
    1,024, :func:`~tnsrag_db._strategies.base.collapsing_plan`). Embedding errors propagate
    unchanged. ``name`` is the base's name; it runs on the base's store.
    """

    def __init__(self, base: RAGStrategy, embed_batch: BatchEmbedding, *,
                 threshold: float = DEFAULT_DEDUP_THRESHOLD) -> None:
        if not callable(getattr(base, "retrieve", None)):
            raise ConfigurationError(f"base strategy must have retrieve(), got {type(base).__name__}")
        if not is_number(threshold) or not -1.0 <= threshold <= 1.0:
            raise ConfigurationError(f"threshold must be a cosine similarity in [-1, 1], got {threshold!r}")
        super().__init__(base)
        self._embed_batch = embed_batch
        self._threshold = float(threshold)

    @property
    def name(self) -> str:
        """The wrapped strategy's name (de-duplication is not a mode of its own)."""
        return self._child.name

    @property
    def base(self) -> RAGStrategy:
        """The wrapped strategy."""
        return self._child

    @honours_as_of
    def plan(self, query: str, context: RAGContext | None = None) -> Plan[list[RetrievedDocument]]:
        """:meth:`retrieve` as a plan: the base's (asked again for more when needed), then the
        collapse of near duplicates, at most ``max_results``."""
        check_query(query)
        ctx = resolve_context(context)
        vectors: dict[str, npt.NDArray[np.float64]] = {}  # each content embedded once across rounds
        docs = yield from collapsing_plan(lambda n: child_plan(self._child, query, ctx.with_max_results(n)),
                                          lambda found: found, lambda found: self.collapse(found, vectors),
                                          ctx.max_results)
        return self.collapse(docs, vectors)[:ctx.max_results]

    def collapse(self, documents: Sequence[RetrievedDocument],
                 cache: dict[str, npt.NDArray[np.float64]] | None = None) -> list[RetrievedDocument]:
        """Keep each document (in the given order) unless it is a near duplicate of one already kept."""
        vectors = {} if cache is None else cache
        missing = list(dict.fromkeys(d.content for d in documents if d.content not in vectors))
        if missing:
            for text, vec in zip(missing, self._embed_batch(missing)):
                v = np.asarray(vec, dtype=np.float64)
                norm = float(np.linalg.norm(v))
                # A zero vector is similar to nothing (cosine 0, never NaN).
                vectors[text] = v / norm if norm > 0 else v
        kept: list[RetrievedDocument] = []
        kept_vectors: list[npt.NDArray[np.float64]] = []
        for doc in documents:
            v = vectors[doc.content]
            if any(float(np.dot(v, k)) >= self._threshold for k in kept_vectors) and np.any(v):
                continue
            kept.append(doc)
            kept_vectors.append(v)
        return kept
