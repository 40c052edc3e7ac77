"""Restore: an export (or any JSONL file the loaders read) back into a corpus, in one transaction."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tnsrag_db.admin.reports import RestoreCounts
from tnsrag_db.store.store import Store

__all__ = ["restore_corpus"]


def restore_corpus(store: Store, path: str | os.PathLike[str], *, embedding: Any = None) -> RestoreCounts:
    """Read an export (or any JSONL file :class:`~tnsrag_db.loaders.FileLoader` reads) into
    the store's corpus: entries with their vectors, then their edges, in one transaction.

    Entries are upserted by id, so restoring into a corpus that holds other entries
    keeps them. ``embedding`` defaults to the process embedding provider. Raises
    :class:`InvalidEntryError` naming the line of a bad record,
    :class:`DanglingReferenceError` when an edge names an entry that is neither in the
    file nor in the corpus (nothing is written then), :class:`DatabaseError`.
    """
    from tnsrag_db.embeddings import get_process_embedding
    from tnsrag_db.indexes.graph import GraphStore
    from tnsrag_db.indexes.vector import VectorMemoryStore
    from tnsrag_db.loaders import FileLoader

    loader = FileLoader(Path(path))
    entries = list(loader.load())
    edges = loader.edges
    graph = GraphStore(store)
    edge_counts: list[Any] = []
    vectors = VectorMemoryStore(store, embedding if embedding is not None else get_process_embedding())

    def write_edges(conn: sa.Connection) -> None:
        edge_counts[:] = [graph.write_edges(conn, edges)]

    counts = vectors.add_all(entries, check=write_edges if edges else None)
    e = edge_counts[0] if edge_counts else None
    return RestoreCounts(
        {"inserted": counts.inserted, "updated": counts.updated, "unchanged": counts.unchanged},
        {"inserted": e.inserted if e else 0, "updated": e.updated if e else 0, "unchanged": e.unchanged if e else 0})
