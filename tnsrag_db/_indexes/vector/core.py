"""The part of :class:`~tnsrag_db._indexes.vector.VectorMemoryStore` that reads and writes
share: its options, the embedding function and vector validation, and the spaces it knows.

The view's classes stack: this core, then the write path (:mod:`.write`), then the
search (:mod:`.index`); each module stays about one concern.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db._validate import check_int
from tnsrag_db._db.statement import Plan, Rows
from tnsrag_db.embeddings import EmbeddingFunction, ValidatingEmbedding
from tnsrag_db._errors import ConfigurationError, EmbeddingValidationError
from tnsrag_db._indexes.vector.spaces import (
    Space,
    ensure_space,
    provider_dimensions,
    read_space,
    space_from_rows,
    space_statement,
)
from tnsrag_db._store.store import Store

__all__ = ["DEFAULT_EF_SEARCH", "DEFAULT_EXACT_THRESHOLD", "DEFAULT_INDEX_THRESHOLD", "SPACE_RECHECK_SECONDS"]

#: Default ``hnsw.ef_search`` of unfiltered queries (recall@10 ≈ 0.97-0.99 on the 100k benchmark corpus).
DEFAULT_EF_SEARCH = 100
#: Seconds a query trusts its cached "no HNSW index yet" state of a space.
SPACE_RECHECK_SECONDS = 5.0
#: Default number of matching entries up to which a filtered query is answered exactly.
#: Exact through the filter costs one random heap read per match, HNSW with iterative
#: scan about k / selectivity graph visits, so below a few thousand matches exact wins on
#: recall (1.0) at a similar cost (figures in docs/performance.md).
DEFAULT_EXACT_THRESHOLD = 5_000
#: Default size of a space (number of vectors) at which ``add_all`` builds its HNSW index.
DEFAULT_INDEX_THRESHOLD = 10_000

MAX_EF_SEARCH = 1000  # pgvector's upper bound


class _Rows:
    """An embedding 'provider' that returns precomputed rows, so they pass the same wrapper rules."""

    def __init__(self, rows: Sequence[Sequence[float]] | npt.NDArray[Any]) -> None:
        self._rows = rows

    def __call__(self, text: str) -> Sequence[float]:  # pragma: no cover - only embed_batch is used
        raise NotImplementedError

    def embed_batch(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return self._rows  # type: ignore[return-value]  # an ndarray of rows serves as a sequence


class VectorCore:
    """Options, embedding and spaces of a vector view (see :class:`VectorMemoryStore`)."""

    def __init__(self, store: Store, embedding: EmbeddingFunction | Callable[[str], object], *,
                 name: str | None = None, ef_search: int = DEFAULT_EF_SEARCH,
                 exact_threshold: int = DEFAULT_EXACT_THRESHOLD,
                 index_threshold: int | None = DEFAULT_INDEX_THRESHOLD) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"store must be a Store, got {type(store).__name__}")
        check_int(ef_search, "ef_search", minimum=1, maximum=MAX_EF_SEARCH, error=ConfigurationError)
        check_int(exact_threshold, "exact_threshold", minimum=0, maximum=10**9, error=ConfigurationError)
        if index_threshold is not None:
            check_int(index_threshold, "index_threshold", minimum=1, error=ConfigurationError)
        if isinstance(embedding, ValidatingEmbedding) and (name is None or name == embedding.name):
            self._embedding = embedding
        else:
            self._embedding = ValidatingEmbedding(embedding, name=name)
        self._store = store
        self._ef_search = ef_search
        self._exact_threshold = exact_threshold
        self._index_threshold = index_threshold
        self._lock = threading.Lock()
        self._dimension: int | None = self._embedding.dimension
        self._spaces: dict[int, Space] = {}
        self._space_checked: dict[int, float] = {}

    # -- properties -----------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The corpus this view writes to and searches."""
        return self._store

    @property
    def embedding(self) -> ValidatingEmbedding:
        """The validating embedding function (its ``name`` keys the embedding space)."""
        return self._embedding

    @property
    def ef_search(self) -> int:
        """``hnsw.ef_search`` of unfiltered queries."""
        return self._ef_search

    @property
    def exact_threshold(self) -> int:
        """Matching entries up to which a filtered query scans exactly."""
        return self._exact_threshold

    def __repr__(self) -> str:
        return f"VectorMemoryStore(corpus={self._store.corpus!r}, provider={self._embedding.name!r})"

    # -- vectors --------------------------------------------------------------------
    def _fix_dimension(self, dim: int) -> None:
        with self._lock:
            if self._dimension is None:
                self._dimension = dim
            expected = self._dimension
        if dim != expected:
            raise EmbeddingValidationError(f"embedding provider {self._embedding.name}: embedding has dimension "
                                           f"{dim}, expected {expected} (fixed by the first vector)")

    def _validate_rows(self, rows: Sequence[Sequence[float]] | npt.NDArray[Any],
                       count: int, *, fix: bool = True) -> npt.NDArray[np.float32]:
        """Validate precomputed vectors by the wrapper's rules; returns a (count, dim) float32 array.

        ``fix=False`` (query vectors) checks against a known dimension without fixing an
        unknown one: a wrong-dimension query vector used to fix the dimension of a fresh
        view, and the next correct write failed."""
        if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
            raise EmbeddingValidationError(f"embeddings must be a sequence of vectors, got {type(rows).__name__}")
        if len(rows) != count:
            raise EmbeddingValidationError(f"got {len(rows)} embeddings for {count} entries")
        if count == 0:
            return np.zeros((0, self._dimension or 1), dtype=np.float32)
        checker = ValidatingEmbedding(_Rows(rows), name=self._embedding.name, dimension=self._dimension,
                                      max_dimension=self._embedding.max_dimension)
        vectors = checker.embed_batch([""] * count)
        if fix:
            self._fix_dimension(int(vectors[0].shape[0]))
        return np.vstack(vectors)

    def _embed(self, texts: Sequence[str], batch_size: int,
               progress: Callable[[int], None] | None = None, done: int = 0) -> npt.NDArray[np.float32]:
        out: list[npt.NDArray[np.float32]] = []
        for start in range(0, len(texts), batch_size):
            for vec in self._embedding.embed_batch(texts[start:start + batch_size]):
                self._fix_dimension(int(vec.shape[0]))
                out.append(vec)
            if progress is not None:
                progress(done + min(start + batch_size, len(texts)))
        return np.vstack(out) if out else np.zeros((0, self._dimension or 1), dtype=np.float32)

    def embed_query(self, query: str) -> npt.NDArray[np.float32]:
        """The validated embedding of ``query`` (its dimension must match the stored vectors')."""
        vec = self._embedding(query)
        self._fix_dimension(int(vec.shape[0]))
        return vec

    # -- spaces ---------------------------------------------------------------------
    def _remember(self, dimension: int, space: Space | None) -> Space | None:
        if space is None:
            self._spaces.pop(dimension, None)
        else:
            self._spaces[dimension] = space
        return space

    def _ensure_space(self, conn: Connection, dimension: int) -> Space:
        """The space row for ``dimension``, created if missing (race-safe). Needs the corpus row."""
        space = ensure_space(conn, self._store, self._embedding.name, dimension)
        self._spaces[dimension] = space
        return space

    def _lookup_space(self, conn: Connection, dimension: int) -> Space | None:
        cached = self._spaces.get(dimension)
        if cached is not None and cached.index_name is not None:
            return cached
        # Unindexed (or unknown) spaces are re-read: another process may have built the index.
        return self._remember(dimension, read_space(conn, self._store, self._embedding.name, dimension))

    def _known_dimension(self, conn: Connection) -> int | None:
        if self._dimension is not None:
            return self._dimension
        dims = provider_dimensions(conn, self._store, self._embedding.name)
        return dims[0] if len(dims) == 1 else None

    def _current_space(self) -> Space | None:
        """This view's space (one transaction of reads; None before the first write)."""
        with self._store.session.transaction() as conn:
            dim = self._known_dimension(conn)
            return None if dim is None else self._lookup_space(conn, dim)

    def _query_space_plan(self, dimension: int) -> Plan[Space | None]:
        """The space a query of ``dimension`` searches, as a plan: no statement when the
        cache answers. An indexed space never changes; an unindexed one is re-read at most
        every few seconds (another process may build its index meanwhile: until then
        queries take the exact path, which is correct, only slower)."""
        cached = self._spaces.get(dimension)
        now = time.monotonic()
        if cached is not None and (cached.index_name is not None
                                   or now - self._space_checked.get(dimension, 0.0) < SPACE_RECHECK_SECONDS):
            return cached
        rows: Rows = yield space_statement(self._store, self._embedding.name, dimension)
        space = self._remember(dimension, space_from_rows(rows, dimension))
        self._space_checked[dimension] = now
        return space

    def _space_for_query(self, dimension: int) -> Space | None:
        """:meth:`_query_space_plan` run on its own (at most one round trip)."""
        return self._store.run(self._query_space_plan(dimension))

    def count(self) -> int:
        """Number of vectors stored in this view's space (0 before the first write)."""
        with self._store.session.transaction() as conn:
            dim = self._known_dimension(conn)
            space = None if dim is None else self._lookup_space(conn, dim)
            if space is None:
                return 0
            return int(conn.execute(sa.text(
                "SELECT count(*) FROM embeddings WHERE corpus = :c AND space_id = :s"),
                {"c": self._store.corpus, "s": space.space_id}).scalar_one())
