"""One partial index over the entries a delete closed, so that a read tells a corpus whose
only rows left out are kept versions.

In a corpus that keeps history every write of a changed entry keeps its old version as a
row of its own, closed at the write (``recorded_until``), so the reads' gate (revision
0018) found rows outside their bounds at every read now and checked each row a ranking
returned by a primary-key probe of its entry. What such a read leaves out is kept versions
alone, unless an entry was closed by a delete (its own row, ``recorded_until`` set and
``version_of`` NULL): the versions' ids tell them apart (``<id>\\x1e<n>``; no application
id holds U+001E), with no probe. ``ix_entries_corpus_closed`` holds the entries a delete
closed, by the end of their recording: one probe of an empty range of it tells the gate
that the ids suffice (:func:`tnsrag_db._store.expiry.exclusion`).

Additive and online (``CREATE INDEX CONCURRENTLY``): processes of earlier releases do not
read it and write it as any index. Nothing waits for ``tnsrag db upgrade --finish``.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-08
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context

from tnsrag_db._db.migration_ops import create_index_concurrently, drop_index_concurrently

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_entries_corpus_closed"
#: The entries a delete closed: their own rows (not kept versions) whose recording ended.
CLOSED = "recorded_until IS NOT NULL AND version_of IS NULL"


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    create_index_concurrently(INDEX, "entries", ["corpus", "recorded_until"], schema=_schema(), where=CLOSED)


def downgrade() -> None:
    drop_index_concurrently(INDEX, schema=_schema())
