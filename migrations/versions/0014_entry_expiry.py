"""Entries that expire: ``entries.expires_at`` and the partial index that finds the expired.

An entry may carry an instant after which no read returns it (``MemoryEntry.expires_at``
or ``ttl``, or the corpus's default time-to-live in ``corpora.expiry``); ``Store.sweep()`` (``tnsrag db sweep``) deletes it with its postings and
vectors. The column is nullable without a default (adding it rewrites nothing), and its
two indexes are partial (``WHERE expires_at IS NOT NULL``), one by expiry (the expired
entries of a corpus) and one by id (is this entry expired?): a corpus without expiring
entries has no row in them, so the reads' lookups find nothing at the cost of one empty
index probe, and writes of entries that do not expire do not touch them.

Additive: processes of earlier releases keep reading and writing the schema (they do not
know the column, so they still return expired entries until a sweep deletes them), and
nothing waits for ``tnsrag db upgrade --finish``: the floor of served releases is left as
it is.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

from tnsrag_db._db.migration_ops import create_index_concurrently, drop_index_concurrently

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_entries_corpus_expires_at"
PROBE_INDEX = "ix_entries_corpus_id_expiring"


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    # corpora first: writers read its row before they touch entries, and a revision that
    # locked entries first would wait for writers waiting for it (until lock_timeout, every try).
    # The corpus's default time-to-live of entries written without an expiry (Store.set_expiry).
    op.execute(f"ALTER TABLE {s}.corpora ADD COLUMN IF NOT EXISTS expiry jsonb")
    op.execute(f"ALTER TABLE {s}.entries ADD COLUMN IF NOT EXISTS expires_at timestamptz")
    # The ids included: the reads' lookup of a corpus's expired entries is an index-only scan.
    create_index_concurrently(INDEX, "entries", ["corpus", "expires_at"], schema=s, include=["id"],
                              where="expires_at IS NOT NULL")
    # By id, for the check of one entry (an HNSW scan's rows): an index-only probe of the
    # expiring entries alone, not of the whole table's primary key and heap.
    create_index_concurrently(PROBE_INDEX, "entries", ["corpus", "id"], schema=s, include=["expires_at"],
                              where="expires_at IS NOT NULL")


def downgrade() -> None:
    s = _schema()
    drop_index_concurrently(PROBE_INDEX, schema=s)
    drop_index_concurrently(INDEX, schema=s)
    op.execute(f"ALTER TABLE {s}.corpora DROP COLUMN IF EXISTS expiry")
    op.execute(f"ALTER TABLE {s}.entries DROP COLUMN IF EXISTS expires_at")
