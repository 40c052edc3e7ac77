"""Tenant isolation: a grants table and one row-level security policy per corpus-keyed table.

``tenant_grants`` maps a database role to the corpora it may use. Every table keyed by
corpus gets the policy ``tenant_isolation``: a row is visible, and may be written, only
when its corpus is granted to ``current_user``. The policies are inert until row-level
security is switched on (``tnsrag db upgrade --tenancy rls``, or
:func:`tnsrag_db.tenancy.enable`), and they never apply to the tables' owner (the
migrator) or to a superuser: only to the application's tenant roles.

The grant lookup is an uncorrelated ``ARRAY(SELECT ...)``: the planner runs it once per
statement (an InitPlan) and compares ``corpus`` with the result, which the corpus-led
indexes serve. ``tenant_grants`` has row-level security of its own, always on, with a
SELECT policy only: a tenant role sees its own grants and can never insert, change or
delete one, whatever table privileges it was given.

Creating a policy takes a brief ACCESS EXCLUSIVE lock on each table; env.py's ``lock_timeout``
and retries keep it from queueing behind a long transaction.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Every table keyed by corpus (see tnsrag_db.tenancy.TENANT_TABLES, which a test keeps equal).
TABLES = ("corpora", "entries", "embedding_spaces", "embeddings", "bm25_postings", "bm25_stats", "bm25_df", "edges")


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.create_table(
        "tenant_grants",
        sa.Column("role_name", sa.Text(), nullable=False),
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("role_name", "corpus", name="pk_tenant_grants"),
        schema=s,
    )
    op.execute(f"ALTER TABLE {s}.tenant_grants ENABLE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY own_grants ON {s}.tenant_grants FOR SELECT USING (role_name = current_user::text)")
    granted = f"corpus = ANY (ARRAY(SELECT g.corpus FROM {s}.tenant_grants g WHERE g.role_name = current_user::text))"
    for table in TABLES:
        op.execute(f"CREATE POLICY tenant_isolation ON {s}.{table} USING ({granted}) WITH CHECK ({granted})")


def downgrade() -> None:
    s = _schema()
    for table in TABLES:
        op.execute(f"DROP POLICY IF EXISTS tenant_isolation ON {s}.{table}")
        op.execute(f"ALTER TABLE {s}.{table} DISABLE ROW LEVEL SECURITY")
    op.drop_table("tenant_grants", schema=s)
