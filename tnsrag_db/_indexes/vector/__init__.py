"""Vector retrieval over pgvector: :class:`VectorMemoryStore`, one class with its collaborators.

:mod:`.index` holds :class:`VectorMemoryStore` (options, embedding, search, statements and
plans, writes, HNSW builds; how a search is answered is described there); :mod:`.spaces`
the embedding spaces of a corpus (which one a query uses, and
:class:`~tnsrag_db._indexes.vector.spaces.ProviderSpaces`, what a view knows of its own);
:mod:`.sql` the read statements as templates and the HNSW parameters; :mod:`.write` the
write extension that joins an entry write (the pre-read, the vectors after the entries);
:mod:`.copy` the binary COPY of vectors; :mod:`.hnsw` HNSW builds and drops, deferred
builds; :mod:`.ingest` the streaming ingest loop. Only :mod:`.write`, :mod:`.copy`,
:mod:`.hnsw` and :mod:`.ingest` load SQLAlchemy, and the view imports them when it writes;
:mod:`.progress` holds the progress callbacks' types they and the view share (so none of
them imports the view).
"""

from tnsrag_db._indexes.vector.index import (
    DEFAULT_EF_SEARCH,
    DEFAULT_EXACT_THRESHOLD,
    DEFAULT_FILTERED_EF_SEARCH,
    DEFAULT_INDEX_THRESHOLD,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    IndexProgress,
    IngestProgress,
    QueryBasis,
    VectorMemoryStore,
)

__all__ = [
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_FILTERED_EF_SEARCH",
    "DEFAULT_INDEX_THRESHOLD",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "IndexProgress",
    "IngestProgress",
    "QueryBasis",
    "VectorMemoryStore",
]
