"""The embedding spaces of a corpus (moved to :mod:`tnsrag_db.indexes.vector.spaces`; this
path stays importable, the README names it)."""

from tnsrag_db.indexes.vector.spaces import (
    EmbeddingSpace,
    bind_embedding,
    list_spaces,
    query_embedding,
    query_space,
)

__all__ = ["EmbeddingSpace", "bind_embedding", "list_spaces", "query_embedding", "query_space"]
