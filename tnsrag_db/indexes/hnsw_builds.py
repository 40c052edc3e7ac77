"""HNSW builds the application role cannot run, and the owner's catch-up.

``CREATE INDEX`` needs ownership of the table: an application role with DML only
(see README, "Database roles") cannot build the per-space HNSW index that
:meth:`VectorMemoryStore.add_all` builds once a space reaches ``index_threshold``
vectors. Its writes then commit as usual and the build is deferred: an
:class:`IndexBuildDeferred` warning names the space, searches stay exact (correct,
only slower) until the owner runs ``tnsrag db build-indexes`` (:func:`build_due_indexes`),
which builds every space's index that is due.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db.store.store import Store

__all__ = ["DueIndex", "IndexBuildDeferred", "build_due_indexes", "defer_build", "due_indexes", "may_build_indexes"]


class IndexBuildDeferred(UserWarning):
    """An automatic HNSW build was skipped or failed after the write committed; the write stands."""


@dataclass(frozen=True, slots=True)
class DueIndex:
    """An embedding space without its HNSW index, holding at least the threshold's vectors
    (``vectors`` is counted up to the threshold only)."""

    corpus: str
    provider: str
    dimension: int
    space_id: int
    vectors: int


def may_build_indexes(conn: Connection) -> bool:
    """True when the session's role may create indexes on ``embeddings`` (it owns the table,
    directly or through a role it belongs to; superusers always may) and the session can
    write (not read-only, not a hot standby)."""
    row = conn.execute(sa.text(
        "SELECT pg_has_role(current_user, c.relowner, 'USAGE') AND NOT pg_is_in_recovery() "
        "AND current_setting('transaction_read_only') = 'off' AS ok "
        "FROM pg_class c WHERE c.oid = CAST('embeddings' AS regclass)")).one()
    return bool(row.ok)


def defer_build(store: Store, space_id: int, vectors: int, reason: str) -> None:
    """Warn (:class:`IndexBuildDeferred`) that space ``space_id``'s HNSW build did not run."""
    warnings.warn(IndexBuildDeferred(
        f"HNSW index of embedding space {space_id} (corpus {store.corpus!r}, {vectors}+ vectors) not built: "
        f"{reason}. The write committed; searches scan exactly until the schema's owner runs "
        f"`tnsrag db build-indexes --schema {store.schema}`"), stacklevel=4)


def due_indexes(store: Store, threshold: int) -> list[DueIndex]:
    """Every space of ``store``'s schema (all corpora) without a valid HNSW index and with at
    least ``threshold`` vectors, by corpus and space id."""
    with store.transaction() as conn:
        rows = conn.execute(sa.text(
            # Every corpus on purpose: the owner's sweep (Citus runs it as a multi-shard query).
            "/* tnsrag:all-corpora */ "
            "SELECT s.corpus, s.provider, s.dimension, s.space_id, n.vectors FROM embedding_spaces s "
            "CROSS JOIN LATERAL (SELECT count(*) AS vectors FROM (SELECT 1 FROM embeddings x "
            "  WHERE x.corpus = s.corpus AND x.space_id = s.space_id LIMIT :t) l) n "
            "WHERE n.vectors >= :t AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indisvalid AND i.indexrelid = "
            "  to_regclass(:schema || '.ix_embeddings_hnsw_' || s.space_id::text) "
            "  AND s.index_name IS NOT DISTINCT FROM 'ix_embeddings_hnsw_' || s.space_id::text) "
            "ORDER BY s.corpus, s.space_id"), {"t": threshold, "schema": store.schema}).all()
    return [DueIndex(r.corpus, r.provider, int(r.dimension), int(r.space_id), int(r.vectors)) for r in rows]


class _NoEmbedding:
    """A stand-in embedding function for building a space's index: it is never called."""

    def __call__(self, text: str) -> npt.NDArray[np.float32]:  # pragma: no cover - never called
        raise AssertionError("index builds embed nothing")

    def embed_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:  # pragma: no cover
        raise AssertionError("index builds embed nothing")


def build_due_indexes(store: Store, threshold: int) -> list[tuple[DueIndex, str]]:
    """Build (and record) the HNSW index of every space :func:`due_indexes` lists; returns
    each space with its index name. Run by the schema's owner; the builds take turns with
    any other build on the table and do not block writes (see
    :meth:`VectorMemoryStore.build_index`). Raises :class:`PermissionDeniedError` for a role
    that may not create indexes."""
    from tnsrag_db.embeddings import ValidatingEmbedding
    from tnsrag_db.indexes.vector import VectorMemoryStore

    built: list[tuple[DueIndex, str]] = []
    for due in due_indexes(store, threshold):
        embedding = ValidatingEmbedding(_NoEmbedding(), name=due.provider, dimension=due.dimension)
        view = VectorMemoryStore(store.with_corpus(due.corpus), embedding, index_threshold=None)
        name = view.build_index()
        if name is not None:
            built.append((due, name))
    return built
