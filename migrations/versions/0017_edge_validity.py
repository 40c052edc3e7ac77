"""Validity in time of graph edges: ``edges.valid_from`` and ``edges.valid_until``, and a
partial index that finds a corpus's edges with a bound.

An edge may state the interval in which it holds (``Edge.valid_from``, inclusive, and
``valid_until``, exclusive; NULL: unbounded), as an entry does since revision 0015; a walk
(the graph strategy, hybrid's graph stream, their explanations) and the neighbour listing
follow only the edges valid at the read's instant (its ``as_of``, else the statement's
start). Both columns are nullable without a default: adding them rewrites nothing, and an
edge without validity is a row with two NULLs, as every edge is after this revision. The
index is partial (``WHERE valid_from IS NOT NULL OR valid_until IS NOT NULL``): empty for
a corpus whose edges state no validity, which a walk learns from one empty probe of it and
then reads its edges from the fan-out index alone (an index-only scan, as before this
revision); only the corpora with such edges test each edge's validity. Writes of edges
without validity do not touch it.

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

from tnsrag_db._db.migration_ops import create_index_concurrently, drop_index_concurrently

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The columns this revision adds to ``edges``.
COLUMNS = ("valid_from", "valid_until")
#: The edges of a corpus that state a validity (a partial index).
BOUNDED = "ix_edges_corpus_bounded"


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.execute(f"ALTER TABLE {s}.edges " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c} timestamptz" for c in COLUMNS))
    create_index_concurrently(BOUNDED, "edges", ["corpus"], schema=s,
                              where="valid_from IS NOT NULL OR valid_until IS NOT NULL")


def downgrade() -> None:
    s = _schema()
    drop_index_concurrently(BOUNDED, schema=s)
    op.execute(f"ALTER TABLE {s}.edges " + ", ".join(f"DROP COLUMN IF EXISTS {c}" for c in COLUMNS))
