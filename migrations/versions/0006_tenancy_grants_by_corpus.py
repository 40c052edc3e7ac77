"""Tenant grants looked up by corpus ("which roles may see this corpus"), index built concurrently.

``tnsrag db tenant list --corpus C`` and an operator's audit read ``tenant_grants`` by
corpus, which its primary key ``(role_name, corpus)`` does not serve. The index is built
with ``CREATE INDEX CONCURRENTLY`` outside the revision's transaction
(:func:`tnsrag_db._db.migration_ops.create_index_concurrently`), the pattern every revision
that indexes a populated table follows: writers are never blocked by the build. A
concurrent build commits on its own, so it sits in a revision of its own: if it fails,
the revision stays unapplied and running the upgrade again only retries the build (an
invalid leftover index is dropped first).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context

from tnsrag_db._db.migration_ops import create_index_concurrently, drop_index_concurrently

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    create_index_concurrently("ix_tenant_grants_corpus", "tenant_grants", ["corpus"], schema=_schema())


def downgrade() -> None:
    drop_index_concurrently("ix_tenant_grants_corpus", schema=_schema())
