"""BM25's write statements: the terms of staged texts, and the postings, document
frequencies and corpus statistics that an entry write or delete keeps in its own transaction.

Run by the steps of :mod:`tnsrag_db._store.write` on the stage rows of
:mod:`tnsrag_db._store.staging`; the shared tables are reached only through
:func:`~tnsrag_db._store.sql.probe` lookups; ``:c`` is the corpus. An entry's postings are
rows of ``bm25_postings`` (the delta) or, once merged, in ``bm25_blocks`` under its document
number (:mod:`.merge`). The statements are dedented templates, one named CTE per step with
a comment saying why; ``{...}`` fields are filled with code constants only (every value is
bound).
"""

from __future__ import annotations

import os
import textwrap
import threading

from tnsrag_db._db.pool import Connection
from tnsrag_db._store.sql import probe

__all__ = ["APPLY_DF_SQL", "BM25_STAT_SHARDS", "DELETE_LOCKED_SQL", "INSERT_POSTINGS_SQL", "OLD_POSTINGS_GONE_SQL",
           "STAGED_TERMS_SQL", "STAGE_DF_SQL", "STAGE_LOCKED_SQL", "STAGE_OLD_POSTINGS_SQL", "bump_stats", "stat_shard"]

#: Number of counter rows per corpus for BM25 corpus statistics (see schema.bm25_stats).
BM25_STAT_SHARDS = 16


def stat_shard() -> int:
    """This thread's statistics shard.

    Stable per thread, so one transaction always touches one counter row (no deadlock
    between shards), while threads and processes spread over the rows."""
    return hash((os.getpid(), threading.get_ident())) % BM25_STAT_SHARDS


# One counter row per (corpus, shard): concurrent writers on other threads add to other rows.
_BUMP_STATS_SQL = textwrap.dedent("""\
    INSERT INTO bm25_stats AS s (corpus, shard, n_docs, total_len) VALUES (:c, :shard, :dn, :dl)
    ON CONFLICT (corpus, shard) DO UPDATE
    SET n_docs = s.n_docs + excluded.n_docs, total_len = s.total_len + excluded.total_len""")


def bump_stats(conn: Connection, corpus: str, d_docs: int, d_len: int) -> None:
    """Move ``corpus``'s statistics (this thread's shard) by ``d_docs`` documents and ``d_len`` terms."""
    if d_docs == 0 and d_len == 0:
        return
    conn.execute(_BUMP_STATS_SQL, {"c": corpus, "shard": stat_shard(), "dn": d_docs, "dl": d_len})


# Applies df deltas ({source}: a table or CTE of (lexeme, delta) rows) in lexeme order:
# every writer locks bm25_df rows in the same order (after its entry rows, before its
# bm25_stats row), so concurrent writers cannot deadlock.
APPLY_DF_SQL = textwrap.dedent("""\
    INSERT INTO bm25_df AS t (corpus, lexeme, shard, df)
    SELECT :c, lexeme, :shard, sum(delta) FROM {source} GROUP BY lexeme HAVING sum(delta) <> 0 ORDER BY lexeme
    ON CONFLICT (corpus, lexeme, shard) DO UPDATE SET df = t.df + excluded.df""")


#: SQL filling ``tnsrag_stage_terms`` (ord, lexeme, tf) and ``tnsrag_stage_lens`` (ord,
#: doc_len, lexemes) from the staged chunks and extra terms of the current transaction;
#: ``:cfg`` is the corpus's text search configuration. A tsvector holds each lexeme once,
#: so an entry staged as one chunk without extra terms (``single``, the common case)
#: needs no aggregation: its terms are the tsvector's rows and its length and lexemes are
#: computed from that tsvector alone (a grouping over all terms of a large batch spills
#: to disk). The others sum over chunks and extra terms.
STAGED_TERMS_SQL = """
WITH v AS MATERIALIZED (
    SELECT c.ord, to_tsvector(CAST(:cfg AS regconfig), c.chunk) AS tsv FROM tnsrag_stage_chunks c WHERE c.single
), m AS MATERIALIZED (
    SELECT ord, lexeme, sum(tf)::int AS tf FROM (
        SELECT c.ord, t.lexeme, cardinality(t.positions) AS tf
        FROM tnsrag_stage_chunks c CROSS JOIN LATERAL unnest(to_tsvector(CAST(:cfg AS regconfig), c.chunk)) AS t
        WHERE NOT c.single
        UNION ALL
        SELECT x.ord, x.term, 1 FROM tnsrag_stage_extras x
    ) terms
    GROUP BY ord, lexeme
), ins AS (
    INSERT INTO tnsrag_stage_terms (ord, lexeme, tf)
    SELECT v.ord, t.lexeme, cardinality(t.positions) FROM v CROSS JOIN LATERAL unnest(v.tsv) AS t
    UNION ALL
    SELECT ord, lexeme, tf FROM m
)
INSERT INTO tnsrag_stage_lens (ord, doc_len, lexemes)
SELECT v.ord, coalesce((SELECT sum(cardinality(t.positions)) FROM unnest(v.tsv) AS t), 0)::int, tsvector_to_array(v.tsv)
FROM v
UNION ALL
SELECT ord, sum(tf)::int, array_agg(lexeme) FROM m GROUP BY ord
"""


# -- writes -------------------------------------------------------------------------------
# The old postings of the entries whose text changed, counted as negative df deltas. An
# entry's postings are rows of bm25_postings (the delta) or, once merged, in bm25_blocks
# under its document number (see tnsrag_db._store.bm25.merge); a merged entry is retired here,
# before its row changes (so the trigger of revision 0011, for writers that do not, finds
# nothing to do). Rows of the delta are found here and deleted by OLD_POSTINGS_GONE_SQL.
STAGE_OLD_POSTINGS_SQL = textwrap.dedent(f"""\
    WITH
    -- staged, the old postings in the delta, found through the entry's stored lexemes
    -- (the entry by its ctid from the comparison, then primary-key probes; postings carry
    -- no per-entry index, which keeps bulk writes fast), staged by ctid with their lexeme.
    staged AS (
      INSERT INTO tnsrag_stage_old (tid, lexeme)
      SELECT q.ctid, q.lexeme FROM tnsrag_stage_entries s
      {probe('entries', 'x', 'x.id, x.lexemes', 'x.ctid = s.tid')}
      CROSS JOIN unnest(x.lexemes) AS l(lexeme)
      {probe('bm25_postings', 'q', 'q.ctid, q.lexeme', 'q.lexeme = l.lexeme AND q.entry_id = x.id')}
      WHERE s.state = 'c'
      RETURNING lexeme
    ),
    -- m, the merged ones: their numbers retired, tombstoned with their terms (queries skip
    -- them until a merge takes them out of the blocks).
    m AS (
      DELETE FROM bm25_docs k
      WHERE k.corpus = :c AND k.entry_id = ANY (ARRAY(SELECT s.id FROM tnsrag_stage_entries s WHERE s.state = 'c'))
      RETURNING k.docno, k.entry_id
    ),
    ml AS MATERIALIZED (
      SELECT m.docno, x.lexemes FROM m {probe('entries', 'x', 'x.lexemes', 'x.id = m.entry_id')}
    ),
    tomb AS (
      INSERT INTO bm25_tombstones (corpus, docno, lexemes) SELECT :c, docno, lexemes FROM ml
    )
    INSERT INTO tnsrag_stage_df (lexeme, delta)
    SELECT lexeme, -count(*)
    FROM (SELECT lexeme FROM staged UNION ALL SELECT l.lexeme FROM ml CROSS JOIN unnest(ml.lexemes) AS l(lexeme)) u
    GROUP BY lexeme""")


# The staged rows of bm25_postings deleted by their ctids :tids
# (tnsrag_db._store.sql.STAGED_OLD_SQL), run under tnsrag_db._store.sql.tid_scans_only: see
# tnsrag_db._store.sql.OLD_VECTORS_GONE_SQL, which deletes stale vectors the same way.
OLD_POSTINGS_GONE_SQL = textwrap.dedent("""\
    DELETE FROM bm25_postings p
    WHERE p.corpus = :c AND p.ctid = ANY (CAST(:tids AS tid[]))""")

# The postings of new and rewritten texts, in primary-key order: btree inserts then touch
# each leaf page once.
INSERT_POSTINGS_SQL = textwrap.dedent("""\
    INSERT INTO bm25_postings (corpus, lexeme, entry_id, tf, doc_len)
    SELECT :c, t.lexeme, s.id, t.tf, l.doc_len
    FROM tnsrag_stage_terms t
    JOIN tnsrag_stage_entries s ON s.ord = t.ord AND s.state IN ('i', 'c')
    JOIN tnsrag_stage_lens l ON l.ord = t.ord
    ORDER BY t.lexeme, s.id""")

# The df deltas of the new postings; returns the new texts' total length.
STAGE_DF_SQL = textwrap.dedent("""\
    WITH
    -- dfs, one +count delta per lexeme of the new and rewritten texts.
    dfs AS (
      INSERT INTO tnsrag_stage_df (lexeme, delta)
      SELECT t.lexeme, count(*)
      FROM tnsrag_stage_terms t JOIN tnsrag_stage_entries s ON s.ord = t.ord AND s.state IN ('i', 'c')
      GROUP BY t.lexeme
    )
    SELECT coalesce(sum(l.doc_len), 0)
    FROM tnsrag_stage_entries s JOIN tnsrag_stage_lens l ON l.ord = s.ord
    WHERE s.state IN ('i', 'c')""")


# -- deletes ------------------------------------------------------------------------------
# The entries matching a delete are first locked and remembered in tnsrag_stage_ids
# (tnsrag_db._store.sql.lock_matching_sql).
# Then, in statements whose snapshots see every change committed by the writers waited
# for, delete exactly those rows with their postings and df counts. Deleting by the
# predicate again instead would reach rows committed in between, and wait for (and orphan
# the postings of) a writer that locked one of them meanwhile. First the locked rows' ctids
# (returned) and their postings in the delta (staged by ctid with their lexeme, deleted by
# OLD_POSTINGS_GONE_SQL; the postings of a locked entry change only under its lock).
STAGE_LOCKED_SQL = textwrap.dedent(f"""\
    WITH
    -- locked, the locked entries (primary-key probes) with the lexemes that lead to their postings.
    locked AS MATERIALIZED (
      SELECT x.ctid AS tid, x.id, x.lexemes FROM tnsrag_stage_ids k
      {probe('entries', 'x', 'x.ctid, x.id, x.lexemes', 'x.id = k.id')}
    ),
    -- staged, their postings in the delta, found through the stored lexemes.
    staged AS (
      INSERT INTO tnsrag_stage_old (tid, lexeme)
      SELECT q.ctid, q.lexeme FROM locked g
      CROSS JOIN unnest(g.lexemes) AS l(lexeme)
      {probe('bm25_postings', 'q', 'q.ctid, q.lexeme', 'q.lexeme = l.lexeme AND q.entry_id = g.id')}
    )
    SELECT tid FROM locked""")

# Last the entries themselves, named by their ctids :tids (a constant array, tested by hash:
# see tnsrag_db._store.sql.UPDATE_CHANGED_SQL), each staged posting a -1 df delta. Returns how many went and
# their total length.
DELETE_LOCKED_SQL = textwrap.dedent("""\
    WITH
    -- gone, the locked entries deleted, with their lengths and lexemes.
    gone AS (
      DELETE FROM entries e
      WHERE e.corpus = :c AND e.ctid = ANY (CAST(:tids AS tid[]))
      RETURNING e.id, e.doc_len, e.lexemes
    ),
    -- m, the merged ones: numbers retired and tombstoned (in this statement, so the trigger
    -- of revision 0011, run after it, finds nothing to do), each term a -1 df delta.
    m AS (
      DELETE FROM bm25_docs k
      WHERE k.corpus = :c AND k.entry_id = ANY (ARRAY(SELECT g.id FROM gone g))
      RETURNING k.docno, k.entry_id
    ),
    ml AS MATERIALIZED (SELECT m.docno, g.lexemes FROM m JOIN gone g ON g.id = m.entry_id),
    tomb AS (
      INSERT INTO bm25_tombstones (corpus, docno, lexemes) SELECT :c, docno, lexemes FROM ml
    ),
    dm AS (
      SELECT o.lexeme, -1 AS delta FROM tnsrag_stage_old o
      UNION ALL
      SELECT l.lexeme, -1 FROM ml CROSS JOIN unnest(ml.lexemes) AS l(lexeme)
    ),
    -- df, the deltas applied (in lexeme order, as every writer does).
    df AS (
    {apply_df}
    )
    SELECT count(*), coalesce(sum(doc_len), 0) FROM gone""").format(
    apply_df=textwrap.indent(APPLY_DF_SQL.format(source="dm"), "  "))
