"""The write path's stage tables, declared in one place.

A write streams its batch (entries, their text chunks, extra terms, edges) by COPY into
per-session temp tables and then reaches the shared tables with set-based statements
driven by the stage rows. The tables are ``ON COMMIT DELETE ROWS``: created once per
connection, emptied at every commit.

Only writes need them, so a connection that only reads creates nothing: a role without
the TEMP privilege, a ``default_transaction_read_only`` session and a hot standby can
read. The pool knows nothing of them (see :mod:`tnsrag_db._db.hooks`): the flag that a
connection has them lives in the connection's ``info`` and goes with it.
"""

from __future__ import annotations

from tnsrag_db._db.pool import Connection

__all__ = ["EDGE_STAGE_DDL", "VECTOR_STAGE_DDL", "ENTRY_STAGE_TABLES", "STAGE_DDL", "STAGE_READY", "ensure_stage_tables",
           "prepare_stage_tables", "reset_entry_stage"]

#: Key in a connection's ``info`` set when its stage tables exist (committed).
STAGE_READY = "tnsrag_stage_ready"
#: Key in a connection's ``info``: the transaction whose entry write last filled the stage.
_STAGE_TX = "tnsrag_stage_tx"

#: The entry write's stage tables (see :mod:`tnsrag_db._store.write`).
STAGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_entries (ord int PRIMARY KEY, id text NOT NULL, "
    "content text NOT NULL, tier text NOT NULL, source text, parent_id text, ts timestamptz, metadata jsonb NOT NULL, "
    "content_hash bytea NOT NULL, state char(1), expires_at timestamptz, ttl float8, tid tid, valid_from timestamptz, "
    "valid_until timestamptz) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_chunks (ord int NOT NULL, chunk text NOT NULL, "
    "single boolean NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_extras (ord int NOT NULL, term text NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_terms (ord int NOT NULL, lexeme text NOT NULL, tf int NOT NULL) "
    "ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_df (lexeme text NOT NULL, delta int NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_lens (ord int PRIMARY KEY, doc_len int NOT NULL, "
    "lexemes text[] NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_ids (id text PRIMARY KEY) ON COMMIT DELETE ROWS",
    # The rows of bm25_postings (with their lexeme) or embeddings that a rewrite or delete
    # removes, by ctid: found by primary-key probes in one statement, deleted by a TID scan
    # in the next (see tnsrag_db._store.bm25.sql.OLD_POSTINGS_GONE_SQL and
    # tnsrag_db._store.sql.OLD_VECTORS_GONE_SQL). Emptied before each use.
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_old (tid tid NOT NULL, lexeme text) ON COMMIT DELETE ROWS",
)

#: The stage tables one entry write fills (emptied before a second write in one transaction).
ENTRY_STAGE_TABLES = ("tnsrag_stage_entries", "tnsrag_stage_chunks", "tnsrag_stage_extras", "tnsrag_stage_terms",
                      "tnsrag_stage_df", "tnsrag_stage_lens")

#: The stage of a vector write under row-level security (PostgreSQL refuses COPY FROM into
#: a table whose policies apply to the session; see tnsrag_db._indexes.vector.copy).
VECTOR_STAGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_vectors (corpus text NOT NULL, space_id bigint NOT NULL, "
    "entry_id text NOT NULL, embedding vector NOT NULL) ON COMMIT DELETE ROWS"
)

#: The edge write's stage table (see :mod:`tnsrag_db._store.edges`), created by the edge
#: write itself inside its transaction (a cheap no-op when it exists).
EDGE_STAGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_edges (ord int NOT NULL, src text NOT NULL, dst text NOT NULL, "
    "relation text NOT NULL, weight float8 NOT NULL, source text, valid_from timestamptz, valid_until timestamptz) "
    "ON COMMIT DELETE ROWS"
)


def prepare_stage_tables(conn: Connection) -> None:
    """Create the stage tables on ``conn`` (outside any transaction) in a transaction of
    their own, once per connection.

    For a role or session that may not create temp tables, a write fails here, before
    anything is written, with :class:`PermissionDeniedError` (raised by the caller's error
    mapping).
    """
    if conn.info.get(STAGE_READY):
        return
    with conn.begin():
        for ddl in STAGE_DDL:
            conn.execute(ddl)
    conn.info[STAGE_READY] = True


def ensure_stage_tables(conn: Connection) -> None:
    """Create the stage tables inside the current transaction unless this connection has
    them (committed): a write run inside another transaction than the write path's own
    (cheap no-ops when they exist)."""
    if not conn.info.get(STAGE_READY):
        for ddl in STAGE_DDL:
            conn.execute(ddl)


def reset_entry_stage(conn: Connection) -> None:
    """Make the entry stage tables ready for one write in ``conn``'s open transaction:
    created if needed, and emptied when an earlier write of this same transaction filled
    them (``ON COMMIT DELETE ROWS`` empties them only at commit)."""
    ensure_stage_tables(conn)
    transaction = conn.transaction_number()
    if conn.info.get(_STAGE_TX) == transaction:
        for table in ENTRY_STAGE_TABLES:
            conn.execute(f"DELETE FROM {table}")
    conn.info[_STAGE_TX] = transaction
