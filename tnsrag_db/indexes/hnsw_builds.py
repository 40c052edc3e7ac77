"""Deferred HNSW builds and the owner's catch-up (moved to :mod:`tnsrag_db.indexes.vector.hnsw`;
this path stays importable, the README names :class:`IndexBuildDeferred` here)."""

from tnsrag_db.indexes.vector.hnsw import (
    DueIndex,
    IndexBuildDeferred,
    build_due_indexes,
    defer_build,
    due_indexes,
    may_build_indexes,
)

__all__ = ["DueIndex", "IndexBuildDeferred", "build_due_indexes", "defer_build", "due_indexes", "may_build_indexes"]
