"""Embedding functions: the protocol, the validating wrapper, the hash fallback and the
process-wide provider of the declarative path (entry-point group
``tnsrag_db.embedding_functions``).
"""

from __future__ import annotations

from tnsrag_db.embeddings._discovery import (
    ENTRY_POINT_GROUP,
    ProcessEmbedding,
    discover_embedding_providers,
    get_process_embedding,
    load_process_embedding,
    reset_process_embedding,
)
from tnsrag_db.embeddings._hashing import DEFAULT_HASH_DIMENSION, HashingEmbedding
from tnsrag_db.embeddings._protocol import EmbeddingFunction, batch_method, provider_name
from tnsrag_db.embeddings._validating import MAX_EMBEDDING_DIMENSION, ValidatingEmbedding

__all__ = [
    "DEFAULT_HASH_DIMENSION",
    "ENTRY_POINT_GROUP",
    "EmbeddingFunction",
    "HashingEmbedding",
    "MAX_EMBEDDING_DIMENSION",
    "ProcessEmbedding",
    "ValidatingEmbedding",
    "batch_method",
    "discover_embedding_providers",
    "get_process_embedding",
    "load_process_embedding",
    "provider_name",
    "reset_process_embedding",
]
