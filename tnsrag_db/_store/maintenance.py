"""Schema-wide upkeep a store runs on behalf of every corpus: dropping HNSW indexes whose
embedding space no longer exists (left by a process that died between a corpus drop and
its index drop)."""

from __future__ import annotations

import sqlalchemy as sa

from tnsrag_db._db.session import Session

__all__ = ["drop_orphan_hnsw_indexes"]


def drop_orphan_hnsw_indexes(session: Session, schema: str) -> list[str]:
    """Drop the HNSW indexes on ``schema``'s ``embeddings`` whose space is gone (``DROP INDEX
    CONCURRENTLY``, under the schema's HNSW build lock); returns their names."""
    orphans = sa.text(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
        # Every corpus's spaces on purpose: an orphan index belongs to no corpus.
        "/* tnsrag:all-corpora */ "
        "WHERE n.nspname = :schema AND t.relname = 'embeddings' AND c.relname ~ '^ix_embeddings_hnsw_[0-9]+$' "
        # Only indexes this role could drop: under row-level security a tenant role
        # does not see other tenants' spaces, so their indexes would look orphaned.
        "AND pg_has_role(c.relowner, 'USAGE') "
        "AND NOT EXISTS (SELECT 1 FROM embedding_spaces s "
        "  WHERE c.relname = 'ix_embeddings_hnsw_' || s.space_id::text) "
        "ORDER BY c.relname")
    params = {"schema": schema}
    dropped: list[str] = []
    with session.autocommit() as conn:
        if not conn.execute(orphans, params).first():
            return dropped  # the common case: no wait for a build running on the table
        with session.hnsw_build_lock(conn):
            for name in conn.execute(orphans, params).scalars().all():
                # Names matched ^ix_embeddings_hnsw_[0-9]+$ above: safe to format in.
                conn.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                dropped.append(name)
    return dropped
