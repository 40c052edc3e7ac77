"""The planner counts ``embeddings.corpus`` as one distinct value, so that filtered vector statements keep their generic plan.

A space belongs to one corpus, so in ``embeddings`` the condition ``corpus = $1 AND
space_id = N`` selects exactly the rows of ``space_id = N``; the planner, which takes the
two as independent, multiplies in the corpus's share a second time. In a custom plan
(the corpus value known) that share is the corpus's own most-common-value frequency; in
the generic plan (the value a parameter) it is ``1 / n_distinct``. The HNSW branch of a
vector statement is a ``LIMIT k`` over the ordered index scan, costed as the scan's cost
times ``k / rows``: for a corpus larger than the average, fewer estimated rows made the
generic plan dearer than every custom plan, and PostgreSQL planned the statement afresh
at every run. Measured on a tenant role's 1 %-filtered vector query (20k entries beside
2 x 10k, ``bench/bench_tenancy.py``): 0 generic / 60 custom plans, 1.2 ms of planning on
a 1.6 ms query; the row-level security policy makes each row check dearer in the
estimate, and with it the difference, but the owner's plans had the same bias.

This revision sets ``n_distinct = 1`` on ``embeddings.corpus`` (an attribute option
ANALYZE uses instead of its own count). The generic estimate of ``corpus = $1`` is then
the largest corpus's share (PostgreSQL caps it at the most common value's frequency),
never less than a custom plan's, and a statement that also names its space is not
charged for the corpus twice. Estimates of the corpus value known are unchanged. The
table's other columns, and every other table, keep their statistics; the vector
statements' shapes are fixed by their SQL either way (their paths are chosen at run
time), so only the plan cache's choice moves.

The option takes the table's SHARE UPDATE EXCLUSIVE lock (reads and writes go on) and
applies from the next ANALYZE, which the revision runs (a sample: a few seconds on a
large table).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.execute(f"ALTER TABLE {s}.embeddings ALTER COLUMN corpus SET (n_distinct = 1)")
    op.execute(f"ANALYZE {s}.embeddings")


def downgrade() -> None:
    s = _schema()
    op.execute(f"ALTER TABLE {s}.embeddings ALTER COLUMN corpus RESET (n_distinct)")
    op.execute(f"ANALYZE {s}.embeddings")
