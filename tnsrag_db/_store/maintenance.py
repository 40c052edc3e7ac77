"""Schema-wide upkeep a store runs on behalf of every corpus: dropping HNSW indexes whose
embedding space no longer exists (left by a process that died between a corpus drop and
its index drop)."""

from __future__ import annotations

from tnsrag_db._db.pool import Connection
from tnsrag_db._db.session import Session

__all__ = ["drop_orphan_hnsw_indexes"]


def drop_orphan_hnsw_indexes(session: Session, schema: str) -> list[str]:
    """Drop the HNSW indexes on ``schema``'s ``embeddings`` whose space is gone (``DROP INDEX
    CONCURRENTLY``, under the schema's HNSW build lock); returns their names."""
    # The catalog and the spaces are read by two statements: Citus refuses a catalog table
    # joined to a distributed one. Only indexes this role could drop: under row-level
    # security a tenant role does not see other tenants' spaces, so their indexes would
    # look orphaned.
    indexes = (
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = :schema AND t.relname = 'embeddings' AND c.relname ~ '^ix_embeddings_hnsw_[0-9]+$' "
        "AND pg_has_role(c.relowner, 'USAGE') ORDER BY c.relname")
    # Every corpus's spaces on purpose: an orphan index belongs to no corpus.
    spaces = ("/* tnsrag:all-corpora */ SELECT s.space_id FROM embedding_spaces s "
                     "WHERE s.space_id = ANY (CAST(:ids AS bigint[]))")

    def orphans(conn: Connection) -> list[str]:
        names = [str(n) for n in conn.execute(indexes, {"schema": schema}).scalars()]
        if not names:
            return []
        ids = {int(n.rsplit("_", 1)[1]): n for n in names}
        alive = {int(i) for i in conn.execute(spaces, {"ids": list(ids)}).scalars()}
        return [name for space_id, name in ids.items() if space_id not in alive]

    dropped: list[str] = []
    with session.autocommit() as conn:
        if not orphans(conn):
            return dropped  # the common case: no wait for a build running on the table
        with session.hnsw_build_lock(conn):
            for name in orphans(conn):
                # Names matched ^ix_embeddings_hnsw_[0-9]+$ above: safe to format in.
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                dropped.append(name)
    return dropped
