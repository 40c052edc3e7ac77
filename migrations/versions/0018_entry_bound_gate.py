"""One partial index over every entry with a bound in time, the gate of the reads' checks.

Every read leaves out the entries expired, not valid or not recorded at its instant
(revisions 0014 and 0015). A corpus in which no entry has any bound (no expiry, no
validity, no closed version) needs no check at all: ``ix_entries_corpus_bounded`` holds
the entries that have one (``expires_at``, ``valid_from``, ``valid_until`` or
``recorded_until`` set; the predicate is ``tnsrag_db._db.schema.BOUNDED``), so one probe of
an empty range of it tells a read to skip the checks, where before each statement probed
the four indexes of the bounds.

Additive and online (``CREATE INDEX CONCURRENTLY``): processes of earlier releases do not
read it and write it as any index. Nothing waits for ``tnsrag db upgrade --finish``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-08
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context

from tnsrag_db._db.migration_ops import create_index_concurrently, drop_index_concurrently

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_entries_corpus_bounded"
#: The index's predicate as this revision builds it (tnsrag_db._db.schema.BOUNDED at the time).
BOUNDED = ("expires_at IS NOT NULL OR valid_from IS NOT NULL OR valid_until IS NOT NULL "
           "OR recorded_until IS NOT NULL")


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    create_index_concurrently(INDEX, "entries", ["corpus", "id"], schema=_schema(), where=BOUNDED)


def downgrade() -> None:
    drop_index_concurrently(INDEX, schema=_schema())
