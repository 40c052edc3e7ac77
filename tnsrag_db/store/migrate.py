"""Moved to :mod:`tnsrag_db.db.migrate`; this module re-exports it for existing imports."""

from __future__ import annotations

from tnsrag_db.db.migrate import (
    RUNTIME_INDEX,
    advisory_lock_key,
    bootstrap_statements,
    check,
    current_revision,
    describe_difference,
    downgrade,
    ensure_at_head,
    head_revision,
    include_object,
    is_at_head,
    migrations_dir,
    offline_sql,
    shipped_head,
    upgrade,
)

__all__ = [
    "RUNTIME_INDEX",
    "advisory_lock_key",
    "bootstrap_statements",
    "check",
    "current_revision",
    "describe_difference",
    "downgrade",
    "ensure_at_head",
    "head_revision",
    "include_object",
    "is_at_head",
    "migrations_dir",
    "offline_sql",
    "shipped_head",
    "upgrade",
]
