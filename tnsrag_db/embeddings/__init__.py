"""Embedding functions: the protocol, the validating wrapper, the hash fallback, the
ONNX sentence-embedding provider, the shipped model (the ``embed`` extra) and model
folders (your own exported model), the resolution of provider names, and the process-wide provider of the declarative path
(entry-point group ``tnsrag_db.embedding_functions``).
"""

from __future__ import annotations

from tnsrag_db.embeddings._contextual import CONTEXT_SUFFIX, ContextualEmbedding, embedding_text
from tnsrag_db.embeddings._discovery import (
    ENTRY_POINT_GROUP,
    ProcessEmbedding,
    discover_embedding_providers,
    get_process_embedding,
    load_process_embedding,
    reset_process_embedding,
)
from tnsrag_db.embeddings._folder import model_folder
from tnsrag_db.embeddings._hashing import DEFAULT_HASH_DIMENSION, HashingEmbedding
from tnsrag_db.embeddings._onnx import OnnxEmbedding
from tnsrag_db.embeddings._protocol import EmbeddingFunction, batch_method, provider_name
from tnsrag_db.embeddings._shipped import (
    DEFAULT_EMBEDDING_NAME,
    EMBED_EXTRA,
    SHIPPED_MODEL_NAME,
    default_model,
    embedding_install_hint,
    resolve_embedding,
    shipped_model_available,
    shipped_model_dir,
)
from tnsrag_db.embeddings._validating import MAX_EMBEDDING_DIMENSION, ValidatingEmbedding

__all__ = [
    "CONTEXT_SUFFIX",
    "ContextualEmbedding",
    "DEFAULT_EMBEDDING_NAME",
    "DEFAULT_HASH_DIMENSION",
    "EMBED_EXTRA",
    "ENTRY_POINT_GROUP",
    "EmbeddingFunction",
    "HashingEmbedding",
    "MAX_EMBEDDING_DIMENSION",
    "OnnxEmbedding",
    "ProcessEmbedding",
    "SHIPPED_MODEL_NAME",
    "ValidatingEmbedding",
    "batch_method",
    "default_model",
    "discover_embedding_providers",
    "embedding_install_hint",
    "embedding_text",
    "get_process_embedding",
    "load_process_embedding",
    "model_folder",
    "provider_name",
    "reset_process_embedding",
    "resolve_embedding",
    "shipped_model_available",
    "shipped_model_dir",
]
