"""Validity in time and kept versions: ``entries.valid_from``, ``valid_until``,
``recorded_at``, ``recorded_until`` and ``version_of``, ``corpora.history``, and partial
indexes that find the entries not valid at an instant.

An entry may state the interval in which it is true (``MemoryEntry.valid_from`` and
``valid_until``); a corpus that keeps history (``Store.set_history``) closes a version it
replaces or deletes (``recorded_until``) and keeps it as a row of its own, named by
``version_of`` after the entry it was a version of. Every column is nullable without a default (adding
them rewrites nothing); the indexes are partial (``WHERE <column> IS NOT NULL``), so a corpus
without validity or history has no row in them: the reads' lookups of the entries not valid
now find nothing at the cost of one empty index probe each, and writes of entries without
validity do not touch them. ``recorded_at`` is set by writes of a corpus that keeps history
(the instant the version was written); NULL means ``created_at``, the entry's first write.

Additive: processes of earlier releases keep reading and writing the schema. They do not
know the columns, so they return entries outside their validity and closed versions, write
over an entry instead of keeping its version and delete outright; a corpus should keep
history only once every process runs a release that knows this revision. Nothing waits for
``tnsrag db upgrade --finish``: the floor of served releases is left as it is.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

from tnsrag_db._db.migration_ops import create_index_concurrently, drop_index_concurrently

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: (index, column): the entries of a corpus by one bound of their validity, for the ranges
#: "valid from later than t", "valid until t or earlier", "recorded until t or earlier".
BOUNDS = (("ix_entries_corpus_valid_from", "valid_from"), ("ix_entries_corpus_valid_until", "valid_until"),
          ("ix_entries_corpus_recorded_until", "recorded_until"))
VERSIONS = "ix_entries_corpus_version_of"
COLUMNS = ("valid_from", "valid_until", "recorded_at", "recorded_until")


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    # corpora first, as in revision 0014: writers read its row before they touch entries.
    op.execute(f"ALTER TABLE {s}.corpora ADD COLUMN IF NOT EXISTS history boolean")
    op.execute(f"ALTER TABLE {s}.entries " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c} timestamptz" for c in COLUMNS)
               + ", ADD COLUMN IF NOT EXISTS version_of text")
    for name, column in BOUNDS:
        create_index_concurrently(name, "entries", ["corpus", column], schema=s, include=["id"],
                                  where=f"{column} IS NOT NULL")
    create_index_concurrently(VERSIONS, "entries", ["corpus", "version_of"], schema=s,
                              where="version_of IS NOT NULL")


def downgrade() -> None:
    s = _schema()
    drop_index_concurrently(VERSIONS, schema=s)
    for name, _column in BOUNDS:
        drop_index_concurrently(name, schema=s)
    op.execute(f"ALTER TABLE {s}.corpora DROP COLUMN IF EXISTS history")
    op.execute(f"ALTER TABLE {s}.entries " + ", ".join(f"DROP COLUMN IF EXISTS {c}" for c in (*COLUMNS, "version_of")))
