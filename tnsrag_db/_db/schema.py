"""The library's tables, declared once on one ``MetaData``.

Tables carry no schema name: every connection the library opens sets
``search_path`` to ``<schema>, public`` (the schema is configurable, default
``tnsrag``), and the alembic revisions create the same tables inside that schema.
Every table is keyed by ``corpus`` first: it is the isolation unit and the
distribution key, and no query joins across corpora.

The ``embeddings`` table stores pgvector values; every pool adapts the vector type on
its new connections (:func:`tnsrag_db._db.hooks.library_hooks`).
"""

from __future__ import annotations

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from tnsrag_db._db.as_of import BOUNDED
from tnsrag_db._db.settings import DEFAULT_SCHEMA

__all__ = [
    "BOUNDED",
    "DEFAULT_SCHEMA",
    "TIERS",
    "bm25_blocks",
    "bm25_df",
    "bm25_docs",
    "bm25_merge_state",
    "bm25_postings",
    "bm25_stats",
    "bm25_tombstones",
    "corpora",
    "edges",
    "embedding_spaces",
    "embeddings",
    "entries",
    "entry_aliases",
    "entry_filter_pairs",
    "metadata",
    "tenant_grants",
]


TIERS = ("WORKING", "EPISODIC", "SEMANTIC", "PROCEDURAL")

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

corpora = Table(
    "corpora",
    metadata,
    Column("corpus", Text, primary_key=True),
    # Fixed when the corpus is created: BM25 postings of one corpus must all come
    # from the same text search configuration.
    Column("text_config", Text, nullable=False, server_default="english"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Mixed into the corpus's advisory lock keys (revision 0013): row-level security hides
    # it from other tenants, so none of them can compute, and hold, this corpus's keys.
    Column("lock_salt", UUID(as_uuid=False), nullable=False, server_default=func.gen_random_uuid()),
    # The default time-to-live of entries written without an expiry (revision 0014): {"ttl":
    # seconds, "tiers": {tier: seconds}}; NULL: none (Store.set_expiry).
    Column("expiry", JSONB),
    # Whether the corpus keeps the versions its writes replace and its deletes close
    # (revision 0015, Store.set_history); NULL: it does not.
    Column("history", Boolean),
)

entries = Table(
    "entries",
    metadata,
    Column("corpus", Text, nullable=False),
    Column("id", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("tier", Text, nullable=False),
    Column("source", Text),
    Column("parent_id", Text),
    Column("ts", DateTime(timezone=True)),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("content_hash", LargeBinary, nullable=False),
    # Number of BM25 terms of the entry (the sum of its postings' tf).
    Column("doc_len", Integer, nullable=False, server_default="0"),
    # The entry's distinct BM25 terms: its postings are found by primary-key probes
    # (corpus, lexeme, entry_id) when it changes or goes, so bm25_postings needs no
    # second, per-entry index (which cost a third of bulk-write time).
    Column("lexemes", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The instant from which no read returns the entry (revision 0014); NULL: it never expires.
    Column("expires_at", DateTime(timezone=True)),
    # The interval in which the entry is true, as stated by the application (revision
    # 0015); NULL: unbounded on that side.
    Column("valid_from", DateTime(timezone=True)),
    Column("valid_until", DateTime(timezone=True)),
    # When this version was written in a corpus that keeps history (NULL: created_at) and
    # when a later version or a delete closed it (NULL: it is current).
    Column("recorded_at", DateTime(timezone=True)),
    Column("recorded_until", DateTime(timezone=True)),
    # A kept earlier version: the id of the entry it was a version of (NULL: an entry).
    Column("version_of", Text),
    PrimaryKeyConstraint("corpus", "id"),
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
    CheckConstraint("tier IN ('WORKING', 'EPISODIC', 'SEMANTIC', 'PROCEDURAL')", name="tier"),
    Index(None, "corpus", "tier"),
    Index(None, "corpus", "source"),
    Index(None, "corpus", "parent_id"),
    Index(None, "corpus", "ts"),
    # Only expiring entries: a corpus without any has no row here, and the reads' lookup of
    # its expired entries is one probe of an empty range (revision 0014).
    Index("ix_entries_corpus_expires_at", "corpus", "expires_at", postgresql_include=["id"],
          postgresql_where=text("expires_at IS NOT NULL")),
    Index("ix_entries_corpus_id_expiring", "corpus", "id", postgresql_include=["expires_at"],
          postgresql_where=text("expires_at IS NOT NULL")),
    # Only entries with a bound: the reads' lookups of the entries not valid at an instant
    # are empty ranges in a corpus without validity or history (revision 0015).
    Index("ix_entries_corpus_valid_from", "corpus", "valid_from", postgresql_include=["id"],
          postgresql_where=text("valid_from IS NOT NULL")),
    Index("ix_entries_corpus_valid_until", "corpus", "valid_until", postgresql_include=["id"],
          postgresql_where=text("valid_until IS NOT NULL")),
    Index("ix_entries_corpus_recorded_until", "corpus", "recorded_until", postgresql_include=["id"],
          postgresql_where=text("recorded_until IS NOT NULL")),
    # Every entry with any bound, by id: its one empty probe gates every check of the above
    # (revision 0018).
    Index("ix_entries_corpus_bounded", "corpus", "id", postgresql_where=text(BOUNDED)),
    # The entries a delete closed (their own rows, not kept versions): the gate tells a corpus
    # whose only rows left out are kept versions by one empty probe (revision 0019).
    Index("ix_entries_corpus_closed", "corpus", "recorded_until",
          postgresql_where=text("recorded_until IS NOT NULL AND version_of IS NULL")),
    Index("ix_entries_corpus_version_of", "corpus", "version_of", postgresql_where=text("version_of IS NOT NULL")),
    # GIN over (corpus, metadata) with btree_gin: a metadata filter reads only its corpus's rows.
    Index("ix_entries_corpus_metadata", "corpus", "metadata", postgresql_using="gin",
          postgresql_ops={"metadata": "jsonb_path_ops"}),
)

embedding_spaces = Table(
    "embedding_spaces",
    metadata,
    Column("corpus", Text, nullable=False),
    Column("space_id", BigInteger, Identity(always=False), nullable=False),
    # The embedding provider's name and the dimension it produces: one space each.
    Column("provider", Text, nullable=False),
    Column("dimension", Integer, nullable=False),
    # Name of the HNSW index the library built for this space, NULL until built.
    Column("index_name", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("corpus", "space_id"),
    UniqueConstraint("corpus", "provider", "dimension"),
    # space_id is unique without a constraint (an identity); a unique constraint without
    # corpus would keep the table from being distributed by corpus (migration 0003).
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
    CheckConstraint("dimension BETWEEN 1 AND 16000", name="dimension"),
)

embeddings = Table(
    "embeddings",
    metadata,
    Column("corpus", Text, nullable=False),
    Column("space_id", BigInteger, nullable=False),
    Column("entry_id", Text, nullable=False),
    # Untyped vector: each space has its own dimension; HNSW indexes are partial per
    # space on an expression cast to that dimension.
    Column("embedding", Vector(), nullable=False),
    PrimaryKeyConstraint("corpus", "space_id", "entry_id"),
    ForeignKeyConstraint(["corpus", "entry_id"], ["entries.corpus", "entries.id"], ondelete="CASCADE"),
    ForeignKeyConstraint(["corpus", "space_id"], ["embedding_spaces.corpus", "embedding_spaces.space_id"],
                         ondelete="CASCADE"),
    Index(None, "corpus", "entry_id"),
)

bm25_postings = Table(
    "bm25_postings",
    metadata,
    Column("corpus", Text, nullable=False),
    Column("lexeme", Text, nullable=False),
    Column("entry_id", Text, nullable=False),
    Column("tf", Integer, nullable=False),
    Column("doc_len", Integer, nullable=False),
    # INCLUDE lets both df counting and scoring run as index-only scans.
    PrimaryKeyConstraint("corpus", "lexeme", "entry_id", postgresql_include=["tf", "doc_len"]),
)

bm25_docs = Table(
    "bm25_docs",
    metadata,
    # The document number of each entry whose postings were merged into bm25_blocks (an
    # entry's postings are all in bm25_postings, the delta, or all in blocks under this
    # number). Both directions are probes: results and filters map numbers to entries,
    # writers entries to numbers. No foreign key to entries: a deleted entry's row must
    # still be found after the delete, to retire its number.
    Column("corpus", Text, nullable=False),
    Column("docno", BigInteger, nullable=False),
    Column("entry_id", Text, nullable=False),
    PrimaryKeyConstraint("corpus", "docno", postgresql_include=["entry_id"]),
    UniqueConstraint("corpus", "entry_id", postgresql_include=["docno"]),
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
)

entry_aliases = Table(
    "entry_aliases",
    metadata,
    # The ids of entries merged into another by a consolidation (migration 0016): reads
    # of an alias find the surviving entry. Deleting the survivor deletes its aliases.
    Column("corpus", Text, nullable=False),
    Column("alias", Text, nullable=False),
    Column("entry_id", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("corpus", "alias", postgresql_include=["entry_id"]),
    ForeignKeyConstraint(["corpus", "entry_id"], ["entries.corpus", "entries.id"], ondelete="CASCADE"),
    Index("ix_entry_aliases_corpus_entry_id", "corpus", "entry_id"),
)

bm25_blocks = Table(
    "bm25_blocks",
    metadata,
    # A term's merged postings, up to 128 per row in document-number order: parallel
    # arrays of numbers, term frequencies and document lengths. first_docno is a lower
    # bound of the row's numbers, last_docno their maximum; ranges never overlap.
    Column("corpus", Text, nullable=False),
    Column("lexeme", Text, nullable=False),
    Column("first_docno", BigInteger, nullable=False),
    Column("last_docno", BigInteger, nullable=False),
    Column("n", Integer, nullable=False),
    Column("docnos", ARRAY(BigInteger), nullable=False),
    Column("tfs", ARRAY(Integer), nullable=False),
    Column("dls", ARRAY(Integer), nullable=False),
    PrimaryKeyConstraint("corpus", "lexeme", "first_docno", postgresql_include=["last_docno", "n"]),
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
    # A full block (about 2 kB) stays in its row, uncompressed: no TOAST read per block.
    postgresql_with={"toast_tuple_target": 8160},
)

bm25_tombstones = Table(
    "bm25_tombstones",
    metadata,
    # Numbers of merged entries deleted or rewritten since: queries skip them, the next
    # merge takes them out of the blocks of their terms.
    Column("corpus", Text, nullable=False),
    Column("docno", BigInteger, nullable=False),
    Column("lexemes", ARRAY(Text), nullable=False),
    PrimaryKeyConstraint("corpus", "docno"),
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
)

bm25_merge_state = Table(
    "bm25_merge_state",
    metadata,
    # The next document number of the corpus (merges of one corpus run one at a time).
    Column("corpus", Text, nullable=False),
    Column("next_docno", BigInteger, nullable=False),
    PrimaryKeyConstraint("corpus"),
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
)

bm25_stats = Table(
    "bm25_stats",
    metadata,
    # Sharded counters: writers touch one of N rows so concurrent writers do not
    # queue on a single hot row; readers sum the shards.
    Column("corpus", Text, nullable=False),
    Column("shard", SmallInteger, nullable=False),
    Column("n_docs", BigInteger, nullable=False, server_default="0"),
    Column("total_len", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("corpus", "shard"),
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
)

bm25_df = Table(
    "bm25_df",
    metadata,
    # Document frequency per term, sharded like bm25_stats: a query reads at most
    # BM25_STAT_SHARDS rows per term instead of counting every posting of a frequent
    # term. Shard values may be negative (a delete on another shard); sums are exact.
    Column("corpus", Text, nullable=False),
    Column("lexeme", Text, nullable=False),
    Column("shard", SmallInteger, nullable=False),
    Column("df", BigInteger, nullable=False),
    PrimaryKeyConstraint("corpus", "lexeme", "shard", postgresql_include=["df"]),
    ForeignKeyConstraint(["corpus"], ["corpora.corpus"], ondelete="CASCADE"),
)

edges = Table(
    "edges",
    metadata,
    Column("corpus", Text, nullable=False),
    Column("src", Text, nullable=False),
    Column("dst", Text, nullable=False),
    Column("relation", Text, nullable=False, server_default="related"),
    Column("weight", Float(53), nullable=False, server_default="1.0"),
    Column("source", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The interval in which the edge holds, as stated by the application (revision 0017);
    # NULL: unbounded on that side. Walks follow only the edges valid at their instant.
    Column("valid_from", DateTime(timezone=True)),
    Column("valid_until", DateTime(timezone=True)),
    # Destination first: lookups by src go to the weight index below, never to the key
    # (migration 0004); the key serves lookups by destination.
    PrimaryKeyConstraint("corpus", "dst", "relation", "src"),
    ForeignKeyConstraint(["corpus", "src"], ["entries.corpus", "entries.id"], ondelete="CASCADE"),
    ForeignKeyConstraint(["corpus", "dst"], ["entries.corpus", "entries.id"], ondelete="CASCADE"),
    # Heaviest-first fan-out per node for bounded traversal.
    Index("ix_edges_corpus_src_weight", "corpus", "src", text("weight DESC"), "dst"),
    # Only edges with a bound (revision 0017): a walk of a corpus without any finds this
    # empty and reads the weight index alone, without testing each edge's validity.
    Index("ix_edges_corpus_bounded", "corpus",
          postgresql_where=text("valid_from IS NOT NULL OR valid_until IS NOT NULL")),
    CheckConstraint("weight = weight AND weight > '-Infinity'::float8 AND weight < 'Infinity'::float8",
                    name="weight_finite"),
)

# Which database role may use which corpora when row-level security is on (migrations
# 0005/0006, tnsrag_db.tenancy). Not keyed by corpus first: the policies look grants
# up by role. No foreign key: a grant may precede the corpus, which the tenant creates
# on its first write, and outlives a drop of it.
tenant_grants = Table(
    "tenant_grants",
    metadata,
    Column("role_name", Text, nullable=False),
    Column("corpus", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("role_name", "corpus"),
    Index("ix_tenant_grants_corpus", "corpus"),
)

# One row per top-level string value of an entry's metadata (migration 0007), written by
# triggers on entries that only tenancy attaches (tnsrag_db.tenancy.enable): a tenant's
# metadata filters look entries up here with leakproof text equality (see
# tnsrag_db._store.filters). No foreign key: without tenancy, writes never touch it.
entry_filter_pairs = Table(
    "entry_filter_pairs",
    metadata,
    Column("corpus", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("value", Text, nullable=False),
    Column("entry_id", Text, nullable=False),
    PrimaryKeyConstraint("corpus", "key", "value", "entry_id"),
    Index(None, "corpus", "entry_id"),
)
