"""Metadata filters keyed by corpus: one GIN index over (corpus, metadata).

The GIN index of 0001 covered ``metadata`` alone, so ``metadata @> filter`` found the
matching rows of every corpus and the heap recheck threw the other corpora's away: in a
database holding many tenants' corpora with the same metadata keys, a filtered query
paid for all of them. With ``btree_gin`` the corpus is a column of the same GIN index,
and the index intersects it with the filter before the heap is read.

``btree_gin`` ships with PostgreSQL (contrib) and is a trusted extension: a role with
CREATE on the database may create it; otherwise a superuser creates it once, like
``vector``. It goes to ``public`` and a downgrade leaves it there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin WITH SCHEMA public")
    op.drop_index("ix_entries_metadata", table_name="entries", schema=s)
    op.create_index("ix_entries_corpus_metadata", "entries", ["corpus", "metadata"], schema=s,
                    postgresql_using="gin", postgresql_ops={"metadata": "jsonb_path_ops"})


def downgrade() -> None:
    s = _schema()
    op.drop_index("ix_entries_corpus_metadata", table_name="entries", schema=s)
    op.create_index("ix_entries_metadata", "entries", ["metadata"], schema=s, postgresql_using="gin",
                    postgresql_ops={"metadata": "jsonb_path_ops"})
