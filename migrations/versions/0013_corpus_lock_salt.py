"""Corpus lock keys no other tenant can compute: a random salt in each corpus's row.

Every write of a corpus takes the corpus's advisory lock in shared mode, ``drop_corpus``
takes it exclusively, and merges of its BM25 postings take a second key. Those keys were
hashes of the schema and corpus names, which any role can compute: under tenancy a tenant
holding another corpus's key stalled that corpus's writes (or its merges) for as long as
it liked. The keys now mix in ``corpora.lock_salt``, a random uuid drawn when the corpus
row is created, which row-level security hides from every other tenant.

Processes of earlier releases take the unsalted keys, so until ``tnsrag db upgrade
--finish`` (once no such process runs) this release takes both, unsalted first: a drop of
either release still waits for the writes of both. The floor of served releases
(revision 0012) moves to this revision at the finish; a schema created by this upgrade
needs no finish.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op
from sqlalchemy import text

from tnsrag_db._db.migration_ops import compat_function_sql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: This revision: the first whose releases take the salted keys only once it is the floor.
SALTED = "0013"
#: The first revision whose releases read postings in blocks (revision 0012's floor after its finish).
BLOCKS = "0011"


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def _compat() -> tuple[str, str | None] | None:
    """The schema's floor and the floor its finish moves to (None offline: cannot tell)."""
    if context.is_offline_mode():
        return None
    row = op.get_bind().execute(text(f"SELECT serves_from, finish_to FROM {_schema()}.tnsrag_schema_compat()")).one()
    return str(row.serves_from), row.finish_to


def upgrade() -> None:
    s = _schema()
    op.execute(f"ALTER TABLE {s}.corpora ADD COLUMN lock_salt uuid NOT NULL DEFAULT gen_random_uuid()")
    attributes = context.config.attributes
    fresh = "tnsrag_upgrade_from" in attributes and attributes["tnsrag_upgrade_from"] is None
    compat = _compat()
    if fresh:
        op.execute(compat_function_sql(s, SALTED, None))
    else:
        # Offline the floor is unknown: the most cautious one (merges wait for the finish too).
        floor = compat[0] if compat is not None else "0010"
        op.execute(compat_function_sql(s, floor, SALTED))


def downgrade() -> None:
    s = _schema()
    compat = _compat()
    floor, finish = compat if compat is not None else ("0010", SALTED)
    # Back to revision 0012's floors: its releases know none above 0011.
    if floor == SALTED:
        op.execute(compat_function_sql(s, BLOCKS, None))
    else:
        op.execute(compat_function_sql(s, floor, BLOCKS if finish is not None and floor < BLOCKS else None))
    op.execute(f"ALTER TABLE {s}.corpora DROP COLUMN IF EXISTS lock_salt")
