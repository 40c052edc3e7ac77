"""Moved to :mod:`tnsrag_db.db.engine` (and the embedded server's URL to
:mod:`tnsrag_db.store.embedded.resolve`); this module re-exports the old names for existing imports."""

from __future__ import annotations

from tnsrag_db.db.engine import (
    PING_AFTER_IDLE_SECONDS,
    ConnectionHooks,
    create_engine,
    normalize_url,
    redact_url,
    register_connection_hooks,
    validate_schema_name,
)

__all__ = [
    "PING_AFTER_IDLE_SECONDS",
    "ConnectionHooks",
    "create_engine",
    "normalize_url",
    "redact_url",
    "register_connection_hooks",
    "validate_schema_name",
]
