"""Moved to :mod:`tnsrag_db.db.schema`; this module re-exports it for existing imports."""

from __future__ import annotations

from tnsrag_db.db.schema import (
    DEFAULT_SCHEMA,
    TIERS,
    bm25_df,
    bm25_postings,
    bm25_stats,
    corpora,
    edges,
    embedding_spaces,
    embeddings,
    entries,
    hnsw_index_name,
    metadata,
)

__all__ = [
    "DEFAULT_SCHEMA",
    "TIERS",
    "bm25_df",
    "bm25_postings",
    "bm25_stats",
    "corpora",
    "edges",
    "embedding_spaces",
    "embeddings",
    "entries",
    "hnsw_index_name",
    "metadata",
]
