"""Edges: the primary key leads with the destination, so a walk's fan-out always reads the weight index.

The walk follows a node's heaviest edges first: ``WHERE corpus = :c AND src = :id ORDER BY
weight DESC, dst LIMIT n``, which the index ``(corpus, src, weight DESC, dst)`` answers
by reading n rows. The primary key ``(corpus, src, relation, dst)`` answered the same
``src`` lookup too (then a sort), and with a per-source estimate of about one row the
planner took either: on a hub that read every edge (300 of 300 where 20 were due, in
``tests/db/test_graph.py``), depending on the statistics of the moment. Keyed
``(corpus, dst, relation, src)`` the primary key keeps the same uniqueness and
``ON CONFLICT (corpus, src, relation, dst)`` target, serves lookups by destination (so
the separate ``(corpus, dst)`` index goes), and no longer competes for ``src`` lookups.

The primary key is rebuilt, which locks the edges table for the time it takes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.drop_constraint("pk_edges", "edges", schema=s, type_="primary")
    op.create_primary_key("pk_edges", "edges", ["corpus", "dst", "relation", "src"], schema=s)
    op.drop_index("ix_edges_corpus_dst", table_name="edges", schema=s)


def downgrade() -> None:
    s = _schema()
    op.create_index("ix_edges_corpus_dst", "edges", ["corpus", "dst"], schema=s)
    op.drop_constraint("pk_edges", "edges", schema=s, type_="primary")
    op.create_primary_key("pk_edges", "edges", ["corpus", "src", "relation", "dst"], schema=s)
