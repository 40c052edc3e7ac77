"""Every unique constraint includes corpus: drop the global unique constraint on space_id.

Citus accepts a primary key or unique constraint on a distributed table only when it
includes the distribution column (``corpus``). ``embedding_spaces`` had a second unique
constraint on ``space_id`` alone; the primary key ``(corpus, space_id)`` is what every
lookup and foreign key uses, and ``space_id`` stays unique without the constraint
because it comes from an identity column (which also keeps the per-space HNSW index
names, ``ix_embeddings_hnsw_<space_id>``, distinct).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    op.drop_constraint("uq_embedding_spaces_space_id", "embedding_spaces", schema=_schema(), type_="unique")


def downgrade() -> None:
    op.create_unique_constraint("uq_embedding_spaces_space_id", "embedding_spaces", ["space_id"], schema=_schema())
