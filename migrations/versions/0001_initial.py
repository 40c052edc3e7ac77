"""Initial schema: corpora, entries, embedding spaces and embeddings, BM25 postings and statistics, edges.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


def upgrade() -> None:
    s = _schema()
    op.create_table(
        "corpora",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("text_config", sa.Text(), server_default="english", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("corpus", name="pk_corpora"),
        schema=s,
    )
    op.create_table(
        "entries",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tier", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("parent_id", sa.Text(), nullable=True),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=True),
        sa.Column("metadata", JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("content_hash", sa.LargeBinary(), nullable=False),
        sa.Column("doc_len", sa.Integer(), server_default="0", nullable=False),
        sa.Column("lexemes", ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("tier IN ('WORKING', 'EPISODIC', 'SEMANTIC', 'PROCEDURAL')", name="tier"),
        sa.ForeignKeyConstraint(["corpus"], [f"{s}.corpora.corpus"], ondelete="CASCADE",
                                name="fk_entries_corpus_corpora"),
        sa.PrimaryKeyConstraint("corpus", "id", name="pk_entries"),
        schema=s,
    )
    op.create_index("ix_entries_corpus_tier", "entries", ["corpus", "tier"], schema=s)
    op.create_index("ix_entries_corpus_source", "entries", ["corpus", "source"], schema=s)
    op.create_index("ix_entries_corpus_parent_id", "entries", ["corpus", "parent_id"], schema=s)
    op.create_index("ix_entries_corpus_ts", "entries", ["corpus", "ts"], schema=s)
    op.execute(f"CREATE STATISTICS {s}.st_entries_corpus_tier (dependencies, mcv) ON corpus, tier FROM {s}.entries")
    op.create_index("ix_entries_metadata", "entries", ["metadata"], schema=s, postgresql_using="gin",
                    postgresql_ops={"metadata": "jsonb_path_ops"})
    op.create_table(
        "embedding_spaces",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("space_id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column("index_name", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("dimension BETWEEN 1 AND 16000", name="dimension"),
        sa.ForeignKeyConstraint(["corpus"], [f"{s}.corpora.corpus"], ondelete="CASCADE",
                                name="fk_embedding_spaces_corpus_corpora"),
        sa.PrimaryKeyConstraint("corpus", "space_id", name="pk_embedding_spaces"),
        sa.UniqueConstraint("corpus", "provider", "dimension", name="uq_embedding_spaces_corpus_provider_dimension"),
        sa.UniqueConstraint("space_id", name="uq_embedding_spaces_space_id"),
        schema=s,
    )
    op.create_table(
        "embeddings",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("space_id", sa.BigInteger(), nullable=False),
        sa.Column("entry_id", sa.Text(), nullable=False),
        sa.Column("embedding", Vector(), nullable=False),
        sa.ForeignKeyConstraint(["corpus", "entry_id"], [f"{s}.entries.corpus", f"{s}.entries.id"],
                                ondelete="CASCADE", name="fk_embeddings_corpus_entry_id_entries"),
        sa.ForeignKeyConstraint(["corpus", "space_id"], [f"{s}.embedding_spaces.corpus",
                                                         f"{s}.embedding_spaces.space_id"],
                                ondelete="CASCADE", name="fk_embeddings_corpus_space_id_embedding_spaces"),
        sa.PrimaryKeyConstraint("corpus", "space_id", "entry_id", name="pk_embeddings"),
        schema=s,
    )
    op.create_index("ix_embeddings_corpus_entry_id", "embeddings", ["corpus", "entry_id"], schema=s)
    # Corpora share one table: without these the planner takes a small corpus's (or
    # space's) row count from the whole table and picks full sorts over indexes.
    op.execute(f"CREATE STATISTICS {s}.st_embeddings_corpus_space (dependencies, mcv) ON corpus, space_id "
               f"FROM {s}.embeddings")
    op.create_table(
        "bm25_postings",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("lexeme", sa.Text(), nullable=False),
        sa.Column("entry_id", sa.Text(), nullable=False),
        sa.Column("tf", sa.Integer(), nullable=False),
        sa.Column("doc_len", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("corpus", "lexeme", "entry_id", name="pk_bm25_postings",
                                postgresql_include=["tf", "doc_len"]),
        schema=s,
    )
    op.create_table(
        "bm25_stats",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("n_docs", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("total_len", sa.BigInteger(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(["corpus"], [f"{s}.corpora.corpus"], ondelete="CASCADE",
                                name="fk_bm25_stats_corpus_corpora"),
        sa.PrimaryKeyConstraint("corpus", "shard", name="pk_bm25_stats"),
        schema=s,
    )
    op.create_table(
        "bm25_df",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("lexeme", sa.Text(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("df", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["corpus"], [f"{s}.corpora.corpus"], ondelete="CASCADE",
                                name="fk_bm25_df_corpus_corpora"),
        sa.PrimaryKeyConstraint("corpus", "lexeme", "shard", name="pk_bm25_df", postgresql_include=["df"]),
        schema=s,
    )
    op.create_table(
        "edges",
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("src", sa.Text(), nullable=False),
        sa.Column("dst", sa.Text(), nullable=False),
        sa.Column("relation", sa.Text(), server_default="related", nullable=False),
        sa.Column("weight", sa.Float(precision=53), server_default="1.0", nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("weight = weight AND weight > '-Infinity'::float8 AND weight < 'Infinity'::float8",
                           name="weight_finite"),
        sa.ForeignKeyConstraint(["corpus", "src"], [f"{s}.entries.corpus", f"{s}.entries.id"], ondelete="CASCADE",
                                name="fk_edges_corpus_src_entries"),
        sa.ForeignKeyConstraint(["corpus", "dst"], [f"{s}.entries.corpus", f"{s}.entries.id"], ondelete="CASCADE",
                                name="fk_edges_corpus_dst_entries"),
        sa.PrimaryKeyConstraint("corpus", "src", "relation", "dst", name="pk_edges"),
        schema=s,
    )
    op.create_index("ix_edges_corpus_src_weight", "edges", ["corpus", "src", sa.text("weight DESC"), "dst"], schema=s)
    op.create_index("ix_edges_corpus_dst", "edges", ["corpus", "dst"], schema=s)


def downgrade() -> None:
    s = _schema()
    # HNSW indexes the library built per embedding space go with the table.
    for table in ("edges", "bm25_df", "bm25_stats", "bm25_postings", "embeddings", "embedding_spaces", "entries", "corpora"):
        op.drop_table(table, schema=s)
