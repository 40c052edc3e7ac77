"""Vector retrieval over pgvector: :class:`VectorMemoryStore` and its parts.

* :mod:`.index`: :class:`VectorMemoryStore` (search, statements, plans; how a search is
  answered is described there), on :mod:`.write` (entries with their vectors, ingest,
  HNSW builds) and :mod:`.core` (options, embedding, spaces it knows);
* :mod:`.spaces`: the embedding spaces of a corpus (also importable as
  ``tnsrag_db._indexes.vector.spaces``);
* :mod:`.sql`: the read statements as templates; :mod:`.copy`: binary COPY of vectors;
* :mod:`.hnsw`: HNSW builds and drops, deferred builds (also importable as
  ``tnsrag_db._indexes.vector.hnsw``); :mod:`.ingest`: the streaming ingest loop.
"""

from tnsrag_db._indexes.vector.index import (
    DEFAULT_EF_SEARCH,
    DEFAULT_EXACT_THRESHOLD,
    DEFAULT_INDEX_THRESHOLD,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    IndexProgress,
    IngestProgress,
    VectorMemoryStore,
)

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
