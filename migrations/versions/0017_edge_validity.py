"""Validity in time of graph edges: ``edges.valid_from`` and ``edges.valid_until``.

An edge may state the interval in which it holds (``Edge.valid_from``, inclusive, and
``valid_until``, exclusive; NULL: unbounded), as an entry does since revision 0015; a walk
(the graph strategy, hybrid's graph stream, their explanations) and the neighbour listing
follow only the edges valid at the read's instant (its ``as_of``, else the statement's
start). Both columns are nullable without a default: adding them rewrites nothing, and an
edge without validity is a row with two NULLs, as every edge is after this revision.

Additive: processes of earlier releases keep reading and writing the schema. They do not
know the columns, so their walks follow edges outside their validity, and their edge writes
leave an edge's validity as it was (a new edge theirs is unbounded). Nothing waits for
``tnsrag db upgrade --finish``: the floor of served releases is left as it is.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The columns this revision adds to ``edges``.
COLUMNS = ("valid_from", "valid_until")


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.execute(f"ALTER TABLE {s}.edges " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c} timestamptz" for c in COLUMNS))


def downgrade() -> None:
    s = _schema()
    op.execute(f"ALTER TABLE {s}.edges " + ", ".join(f"DROP COLUMN IF EXISTS {c}" for c in COLUMNS))
