"""BM25 postings in blocks: a term's postings packed by document number, beside the per-entry rows.

Until now every posting was a row of ``bm25_postings`` keyed ``(corpus, lexeme,
entry_id)``: its heap tuple and its index tuple each repeat the corpus, the term and the
entry's text id, so at a million entries the postings and their key were half of the
database, and each batch of writes inserted into random leaves of a multi-gigabyte btree.

This revision adds the compact layout. ``bm25_postings`` stays what writers insert
into (now called the *delta*); a merge (``tnsrag_db._indexes.bm25.merge``) moves whole
entries' postings out of it into

* ``bm25_docs``: each merged entry's document number, ``(corpus, docno) -> entry_id``
  and back. An entry's postings are either all in the delta (no row here) or all in
  blocks under this number; numbers are never reused;
* ``bm25_blocks``: one row per (corpus, term, run of up to 128 postings) in document-number
  order, as three parallel arrays (numbers, term frequencies, document lengths), with
  the run's bounds;
* ``bm25_tombstones``: numbers of merged entries deleted or rewritten since, with their
  terms; queries skip them and the next merge takes them out of the blocks;
* ``bm25_merge_state``: per corpus, the next document number (merges of one corpus run
  one at a time).

The library's writers retire a merged entry themselves (tombstone, document frequencies)
before they delete or rewrite it. Statement triggers on ``entries`` do the same for
writers of the previous revision, which know nothing of blocks, so an upgrade can run
beside them: for such writers' deletes and text changes of merged entries only, the
triggers move the document frequencies (on shard 0) after the statement.

Every new table is keyed by corpus and gets the ``tenant_isolation`` policy, row-level
security when ``entries`` has it on, and the tenant roles' privileges. Nothing existing
is rewritten: the new tables start empty, and today's postings are merged later, by
writers or ``tnsrag db optimize``, while queries read both layouts.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The tables this revision adds, each keyed by corpus.
TABLES = ("bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state")


def _schema() -> str:
    return str(context.config.attributes["tnsrag_schema"])


_TABLES_SQL = """
CREATE TABLE {s}.bm25_docs (
  corpus text NOT NULL,
  docno bigint NOT NULL,
  entry_id text NOT NULL,
  CONSTRAINT pk_bm25_docs PRIMARY KEY (corpus, docno) INCLUDE (entry_id),
  CONSTRAINT uq_bm25_docs_corpus_entry_id UNIQUE (corpus, entry_id) INCLUDE (docno),
  CONSTRAINT fk_bm25_docs_corpus_corpora FOREIGN KEY (corpus) REFERENCES {s}.corpora (corpus) ON DELETE CASCADE
);
CREATE TABLE {s}.bm25_blocks (
  corpus text NOT NULL,
  lexeme text NOT NULL,
  first_docno bigint NOT NULL,
  last_docno bigint NOT NULL,
  n integer NOT NULL,
  docnos bigint[] NOT NULL,
  tfs integer[] NOT NULL,
  dls integer[] NOT NULL,
  CONSTRAINT pk_bm25_blocks PRIMARY KEY (corpus, lexeme, first_docno) INCLUDE (last_docno, n),
  CONSTRAINT fk_bm25_blocks_corpus_corpora FOREIGN KEY (corpus) REFERENCES {s}.corpora (corpus) ON DELETE CASCADE
) WITH (toast_tuple_target = 8160);  -- a full block (about 2 kB) stays in its row, uncompressed
CREATE TABLE {s}.bm25_tombstones (
  corpus text NOT NULL,
  docno bigint NOT NULL,
  lexemes text[] NOT NULL,
  CONSTRAINT pk_bm25_tombstones PRIMARY KEY (corpus, docno),
  CONSTRAINT fk_bm25_tombstones_corpus_corpora FOREIGN KEY (corpus) REFERENCES {s}.corpora (corpus)
    ON DELETE CASCADE
);
CREATE TABLE {s}.bm25_merge_state (
  corpus text NOT NULL,
  next_docno bigint NOT NULL,
  CONSTRAINT pk_bm25_merge_state PRIMARY KEY (corpus),
  CONSTRAINT fk_bm25_merge_state_corpus_corpora FOREIGN KEY (corpus) REFERENCES {s}.corpora (corpus)
    ON DELETE CASCADE
)
"""

#: The retirement of merged entries for writers that do not do it themselves. ``{rows}``
#: names the gone entries (``corpus``, ``id``, ``lexemes``) of the transition tables.
_RETIRE = """
  WITH gone AS MATERIALIZED ({rows}),
  -- Each gone entry's number by a probe of the key (OFFSET 0 keeps the probes: a join
  -- could scan the numbers of a corpus the statistics do not know yet).
  k AS MATERIALIZED (
    SELECT z.tid, g.lexemes FROM gone g
    CROSS JOIN LATERAL (SELECT z.ctid AS tid FROM {s}.bm25_docs z
                        WHERE z.corpus OPERATOR(pg_catalog.=) g.corpus AND z.entry_id OPERATOR(pg_catalog.=) g.id
                        OFFSET 0) z
  ),
  r AS (
    DELETE FROM {s}.bm25_docs d USING k
    WHERE d.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT tid FROM k)) AND d.ctid OPERATOR(pg_catalog.=) k.tid
    RETURNING d.corpus, d.docno, k.lexemes
  ), t AS (
    INSERT INTO {s}.bm25_tombstones (corpus, docno, lexemes) SELECT corpus, docno, lexemes FROM r
  )
  INSERT INTO {s}.bm25_df AS x (corpus, lexeme, shard, df)
  SELECT r.corpus, l.lexeme, 0, -count(*) FROM r CROSS JOIN unnest(r.lexemes) AS l(lexeme)
  GROUP BY r.corpus, l.lexeme ORDER BY r.corpus, l.lexeme
  ON CONFLICT (corpus, lexeme, shard) DO UPDATE SET df = x.df OPERATOR(pg_catalog.+) excluded.df;
"""

_FUNCTIONS_SQL = """
CREATE FUNCTION {s}.tnsrag_bm25_retire_deleted() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
{deleted}
  RETURN NULL;
END
$f$;
CREATE FUNCTION {s}.tnsrag_bm25_retire_rewritten() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
{rewritten}
  RETURN NULL;
END
$f$;
CREATE TRIGGER tnsrag_bm25_retire_deleted AFTER DELETE ON {s}.entries
  REFERENCING OLD TABLE AS tnsrag_old FOR EACH STATEMENT EXECUTE FUNCTION {s}.tnsrag_bm25_retire_deleted();
CREATE TRIGGER tnsrag_bm25_retire_rewritten AFTER UPDATE ON {s}.entries
  REFERENCING OLD TABLE AS tnsrag_old NEW TABLE AS tnsrag_new FOR EACH STATEMENT
  EXECUTE FUNCTION {s}.tnsrag_bm25_retire_rewritten()
"""

_DELETED_ROWS = "SELECT o.corpus, o.id, o.lexemes FROM tnsrag_old o"
_REWRITTEN_ROWS = ("SELECT o.corpus, o.id, o.lexemes FROM tnsrag_old o JOIN tnsrag_new n "
                   "ON n.corpus OPERATOR(pg_catalog.=) o.corpus AND n.id OPERATOR(pg_catalog.=) o.id "
                   "WHERE n.content IS DISTINCT FROM o.content")

#: Policies, row-level security and tenant privileges, as the tables of revision 0005 have them.
_TENANCY_SQL = """
DO $tnsrag$
DECLARE
  t text;
  r record;
  rls boolean := coalesce((SELECT c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = '{s}' AND c.relname = 'entries'), false);
BEGIN
  FOREACH t IN ARRAY ARRAY[{tables}] LOOP
    EXECUTE format('CREATE POLICY tenant_isolation ON {s}.%I USING ({granted}) WITH CHECK ({granted})', t);
    IF rls THEN
      EXECUTE format('ALTER TABLE {s}.%I ENABLE ROW LEVEL SECURITY', t);
    END IF;
    FOR r IN SELECT DISTINCT g.role_name FROM {s}.tenant_grants g JOIN pg_roles o ON o.rolname = g.role_name LOOP
      EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.%I TO %I', t, r.role_name);
    END LOOP;
  END LOOP;
END
$tnsrag$
"""


def upgrade() -> None:
    s = _schema()
    op.execute(_TABLES_SQL.format(s=s))
    op.execute(_FUNCTIONS_SQL.format(s=s, deleted=_RETIRE.format(s=s, rows=_DELETED_ROWS),
                                     rewritten=_RETIRE.format(s=s, rows=_REWRITTEN_ROWS)))
    granted = f"corpus = ANY (CAST((SELECT {s}.tnsrag_tenant_corpora()) AS text[]))"
    op.execute(_TENANCY_SQL.format(s=s, tables=", ".join(f"'{t}'" for t in TABLES), granted=granted))


def downgrade() -> None:
    s = _schema()
    # Writers first: every write, delete and rewrite of an entry waits from here until the
    # downgrade commits (the lock DROP TRIGGER needs, taken before the copy, on the table
    # every writer locks first). A delete running beside the copy would otherwise be
    # retired by the trigger after its blocks were copied: orphan rows, wrong document
    # frequencies, and an id that can never be written again. The migration's lock_timeout
    # bounds the wait for writers already running (then the revision is tried again).
    op.execute(f"LOCK TABLE {s}.entries IN SHARE ROW EXCLUSIVE MODE")
    # The postings merged into blocks go back to per-entry rows: the previous revision
    # reads only those. Tombstoned numbers are left out.
    op.execute(f"""
INSERT INTO {s}.bm25_postings (corpus, lexeme, entry_id, tf, doc_len)
SELECT b.corpus, b.lexeme, d.entry_id, u.tf, u.dl
FROM {s}.bm25_blocks b CROSS JOIN LATERAL unnest(b.docnos, b.tfs, b.dls) AS u(docno, tf, dl)
JOIN {s}.bm25_docs d ON d.corpus = b.corpus AND d.docno = u.docno""")
    op.execute(f"DROP TRIGGER IF EXISTS tnsrag_bm25_retire_deleted ON {s}.entries")
    op.execute(f"DROP TRIGGER IF EXISTS tnsrag_bm25_retire_rewritten ON {s}.entries")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.tnsrag_bm25_retire_deleted()")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.tnsrag_bm25_retire_rewritten()")
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE IF EXISTS {s}.{table}")
