"""Rolling upgrades: the schema says which releases it still serves.

An upgrade runs while processes of the previous release keep serving (a deployment
pipeline, a Kubernetes rollout). Revision 0011 made the schema *readable* by those
processes, but the first merge of BM25 postings into blocks then hid every merged entry
from their keyword search, which reads postings only as rows. This revision adds the
expand/contract contract:

* ``tnsrag_schema_compat()`` returns ``serves_from``, the oldest revision whose release
  can still read and write the schema, and ``finish_to``, the floor the operator's
  ``tnsrag db upgrade --finish`` moves it to once no older process runs. A release
  accepts a schema newer than its own head when the schema still serves it, so a
  process of the previous release started after a later compatible upgrade connects.
* Merges into blocks (what the releases before 0011 cannot read) wait until
  ``serves_from`` is 0011 or later; until then postings stay rows, which every release
  reads, and queries stay exact.

The floor starts at 0010 (merges wait for the finish) unless the schema is new (this
upgrade started from nothing) or already holds blocks (a merge ran under 0011): then at
0011. The offline script (``tnsrag db sql``) cannot tell and starts at 0010.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op
from sqlalchemy import text

from tnsrag_db._db.migration_ops import compat_function_sql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The first revision whose releases read postings in blocks.
BLOCKS = "0011"
#: The last revision whose releases read postings only as rows.
ROWS_ONLY = "0010"


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    contracted = False
    if not context.is_offline_mode():
        attributes = context.config.attributes
        fresh = "tnsrag_upgrade_from" in attributes and attributes["tnsrag_upgrade_from"] is None
        contracted = fresh or bool(op.get_bind().execute(
            text(f"SELECT EXISTS (SELECT 1 FROM {s}.bm25_blocks)")).scalar_one())
    op.execute(compat_function_sql(s, BLOCKS, None) if contracted else compat_function_sql(s, ROWS_ONLY, BLOCKS))
    op.execute(f"COMMENT ON FUNCTION {s}.tnsrag_schema_compat() IS "
               "'tnsrag_db: the oldest revision whose release can use this schema, and the one "
               "tnsrag db upgrade --finish moves it to'")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_schema()}.tnsrag_schema_compat()")
