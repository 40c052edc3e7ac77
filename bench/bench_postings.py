"""Postings layouts for BM25, measured side by side (a study, not the library's schema).

Fills the postings of ``n`` synthetic documents (Zipfian vocabulary of 5,000 words, 20-60
tokens per document, about a quarter of them topical, ~25 distinct terms each, like
:func:`bench._corpus.generate_corpus` but generated in SQL) in a scratch database on an
embedded server of its own, in these layouts:

* ``A`` today's per-entry rows ``(corpus, lexeme, entry_id text, tf, doc_len)`` with the
  primary key ``(corpus, lexeme, entry_id) INCLUDE (tf, doc_len)``; queried with the
  library's own ranking statements (plain, then MaxScore) and with a plain exact SQL;
* ``C`` the same rows with an integer document number instead of the text id;
* ``B`` blocks: one row per (corpus, lexeme, block) of up to :data:`BLOCK` postings in
  document-number order (``docnos int4[]``, ``tfs``, ``dls``) with the block's
  ``max_tf`` and ``min_dl`` (a term's part of a score grows with tf and shrinks with the
  document's length, so ``wt·max_tf / (max_tf + k1(1−b) + kbl·min_dl)`` bounds it for
  every posting of the block whatever the corpus statistics), plus a delta table of
  per-entry rows that writers insert into and a merge that folds the delta into blocks.
  Queried exactly (every block of the query terms) and with block-max pruning in two
  passes (:func:`blockmax_sql`).

For each size it reports the size on disk, top-10 medians over the queries (warm cache),
an ``EXPLAIN (ANALYZE, BUFFERS)`` of one query, whether every method returns exactly the
reference's rows and scores, the cost of a batch of 256 new documents (time, WAL bytes)
alone and with 8 concurrent writers (lock waits sampled), for the delta and for blocks
written in place, and the merge's cost. Run it niced: ``nice -n 10 python -m
bench.bench_postings --sizes 100000 1000000``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

__all__ = ["BLOCK", "blockmax_sql", "main"]

#: Postings per block.
BLOCK = 128
#: Documents per write batch.
BATCH = 256
#: Concurrent writers and batches each.
WRITERS, WRITER_BATCHES = 8, 4
#: Single-writer batches measured per layout.
SOLO_BATCHES = 5
#: Batches each layout's write tests take.
PER_LAYOUT = SOLO_BATCHES + WRITERS * WRITER_BATCHES
#: First document number of the documents written by the write tests.
NEW_BASE = 5_000_000
#: Segments scored in the first pass of the block-max query.
PASS1_SEGMENTS = 64
CORPUS = "bench"
K1, B = 1.2, 0.75
K = 10
#: Absolute slack on segment bounds (their running sums round; scores are ~1-30).
TOL = 1e-7

# ---------------------------------------------------------------------------- schema

SCHEMA = f"""
CREATE TABLE vocab (term int PRIMARY KEY, lexeme text NOT NULL);
CREATE UNLOGGED TABLE src (docno int NOT NULL, term int NOT NULL, tf int NOT NULL, dl int NOT NULL);
CREATE UNLOGGED TABLE src_new (docno int NOT NULL, term int NOT NULL, tf int NOT NULL, dl int NOT NULL);
CREATE TABLE corpora (corpus text PRIMARY KEY, text_config text NOT NULL DEFAULT 'simple');
CREATE TABLE bm25_stats (corpus text, shard smallint, n_docs bigint NOT NULL, total_len bigint NOT NULL,
                         PRIMARY KEY (corpus, shard));
CREATE TABLE bm25_df (corpus text, lexeme text, shard smallint, df bigint NOT NULL,
                      PRIMARY KEY (corpus, lexeme, shard) INCLUDE (df));
-- A: today's layout, same name and columns, so the library's statements run on it.
CREATE TABLE bm25_postings (corpus text NOT NULL, lexeme text NOT NULL, entry_id text NOT NULL,
                            tf int NOT NULL, doc_len int NOT NULL);
-- The entries the library's statements check for expiry and validity (none expires or has a
-- validity here): the columns and a partial index they read.
CREATE TABLE entries (corpus text NOT NULL, id text NOT NULL, expires_at timestamptz, valid_from timestamptz,
  valid_until timestamptz, recorded_at timestamptz, recorded_until timestamptz, version_of text,
  created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (corpus, id));
CREATE INDEX ix_entries_corpus_expires_at ON entries (corpus, expires_at) INCLUDE (id) WHERE expires_at IS NOT NULL;
-- The library's merged layout, empty here: its statements read it beside A.
CREATE TABLE bm25_docs (corpus text NOT NULL, docno bigint NOT NULL, entry_id text NOT NULL,
                        PRIMARY KEY (corpus, docno) INCLUDE (entry_id));
CREATE TABLE bm25_blocks (corpus text NOT NULL, lexeme text NOT NULL, first_docno bigint NOT NULL,
                          last_docno bigint NOT NULL, n int NOT NULL, docnos bigint[] NOT NULL, tfs int[] NOT NULL,
                          dls int[] NOT NULL, PRIMARY KEY (corpus, lexeme, first_docno));
CREATE TABLE bm25_tombstones (corpus text NOT NULL, docno bigint NOT NULL, lexemes text[] NOT NULL,
                              PRIMARY KEY (corpus, docno));
-- C: per-entry rows keyed by a document number.
CREATE TABLE post_c (corpus text NOT NULL, lexeme text NOT NULL, docno int NOT NULL, tf int NOT NULL,
                     dl int NOT NULL);
-- B: blocks of up to {BLOCK} postings in docno order, with their bound's inputs; the
-- key carries the header so the first pass of a pruned query reads the index only.
CREATE TABLE blk (corpus text NOT NULL, lexeme text NOT NULL, first_docno int NOT NULL, last_docno int NOT NULL,
                  n int NOT NULL, max_tf int NOT NULL, min_dl int NOT NULL,
                  docnos int[] NOT NULL, tfs int[] NOT NULL, dls int[] NOT NULL);
-- B's delta: per-entry rows written by writers, folded into blk by the merge.
CREATE TABLE blk_delta (corpus text NOT NULL, lexeme text NOT NULL, docno int NOT NULL, tf int NOT NULL,
                        dl int NOT NULL, PRIMARY KEY (corpus, lexeme, docno) INCLUDE (tf, dl));
INSERT INTO corpora VALUES ('{CORPUS}');
"""

# Documents [lo, hi): length 20-60 tokens, a quarter from the document's cluster's 8 topic
# words (100 clusters), the rest Zipfian (p ~ 1/rank) over the vocabulary.
GENERATE = """
INSERT INTO {table} (docno, term, tf, dl)
SELECT t.docno, t.term, count(*), t.len
FROM (
  SELECT d.docno, d.len,
         CASE WHEN j <= d.len / 4 THEN (%(topic)s::int[])[d.cl * 8 + 1 + floor(random() * 8)::int]
              ELSE width_bucket(random(), %(cum)s::float8[]) END AS term
  FROM (SELECT g AS docno, 20 + floor(random() * 41)::int AS len, (g::int8 * 7919) %% 100 AS cl
        FROM generate_series(%(lo)s::int, %(hi)s::int - 1) g) d
  CROSS JOIN LATERAL generate_series(1, d.len) j
) t
GROUP BY t.docno, t.term, t.len
"""

ENTRY_ID = "'doc-' || lpad({}::text, 7, '0')"


def build_sql(n: int) -> list[tuple[str, str]]:
    """(label, statement) building every layout and the statistics for documents < n."""
    eid = ENTRY_ID.format("s.docno")
    return [
        ("truncate", "TRUNCATE bm25_postings, post_c, blk, blk_delta, bm25_df, bm25_stats"),
        ("drop keys", "ALTER TABLE bm25_postings DROP CONSTRAINT IF EXISTS bm25_postings_pkey; "
                      "ALTER TABLE post_c DROP CONSTRAINT IF EXISTS post_c_pkey; "
                      "ALTER TABLE blk DROP CONSTRAINT IF EXISTS blk_pkey"),
        ("stats", f"INSERT INTO bm25_stats SELECT '{CORPUS}', 0, count(*), coalesce(sum(dl), 0) "
                  f"FROM (SELECT DISTINCT docno, dl FROM src WHERE docno < {n}) d"),
        ("df", f"INSERT INTO bm25_df SELECT '{CORPUS}', v.lexeme, 0, count(*) FROM src s JOIN vocab v USING (term) "
               f"WHERE s.docno < {n} GROUP BY v.lexeme"),
        ("A rows", f"INSERT INTO bm25_postings SELECT '{CORPUS}', v.lexeme, {eid}, s.tf, s.dl "
                   f"FROM src s JOIN vocab v USING (term) WHERE s.docno < {n}"),
        ("A key", "ALTER TABLE bm25_postings ADD CONSTRAINT bm25_postings_pkey "
                  "PRIMARY KEY (corpus, lexeme, entry_id) INCLUDE (tf, doc_len)"),
        ("C rows", f"INSERT INTO post_c SELECT '{CORPUS}', v.lexeme, s.docno, s.tf, s.dl "
                   f"FROM src s JOIN vocab v USING (term) WHERE s.docno < {n}"),
        ("C key", "ALTER TABLE post_c ADD CONSTRAINT post_c_pkey PRIMARY KEY (corpus, lexeme, docno) INCLUDE (tf, dl)"),
        ("B blocks", f"""
            INSERT INTO blk
            SELECT '{CORPUS}', v.lexeme, min(x.docno), max(x.docno), count(*), max(x.tf), min(x.dl),
                   array_agg(x.docno ORDER BY x.docno), array_agg(x.tf ORDER BY x.docno),
                   array_agg(x.dl ORDER BY x.docno)
            FROM (SELECT s.term, s.docno, s.tf, s.dl,
                         (row_number() OVER (PARTITION BY s.term ORDER BY s.docno) - 1) / {BLOCK} AS bno
                  FROM src s WHERE s.docno < {n}) x
            JOIN vocab v USING (term)
            GROUP BY v.lexeme, x.bno"""),
        ("B key", "ALTER TABLE blk ADD CONSTRAINT blk_pkey PRIMARY KEY (corpus, lexeme, first_docno) "
                  "INCLUDE (last_docno, max_tf, min_dl)"),
        ("vacuum", "VACUUM (ANALYZE) bm25_postings, post_c, blk, blk_delta, bm25_df, bm25_stats"),
    ]


# ---------------------------------------------------------------------------- queries

# The query terms' df, weight and length factor, exactly as the library's statement
# computes them (tnsrag_db._indexes.bm25.sql._term_ctes), so scores are bit-identical.
W_CTE = """w AS MATERIALIZED (
  SELECT q.lexeme, d.df,
         ln(1.0::float8 + (st.n - d.df + 0.5::float8) / (d.df + 0.5::float8)) * CAST(:k1p1 AS float8) AS wt,
         CASE WHEN st.tl > 0 THEN CAST(:kb1 AS float8) * st.n / st.tl ELSE 0.0::float8 END AS kbl
  FROM unnest(CAST(:terms AS text[])) AS q(lexeme)
  CROSS JOIN (SELECT coalesce(sum(n_docs), 0)::float8 AS n, coalesce(sum(total_len), 0)::float8 AS tl
              FROM bm25_stats WHERE corpus = :c) st
  CROSS JOIN LATERAL (SELECT coalesce(sum(dp.df), 0)::float8 AS df FROM bm25_df dp
                      WHERE dp.corpus = :c AND dp.lexeme = q.lexeme) d
  WHERE d.df > 0)"""


def part(post: str, tf: str = "tf", dl: str = "dl") -> str:
    """A term's part of a score (the library's factorisation, operation for operation)."""
    return f"w.wt * {post}.{tf} / ({post}.{tf} + CAST(:kb0 AS float8) + w.kbl * {post}.{dl})"


A_PLAIN = f"""WITH {W_CTE}
SELECT p.entry_id AS id, sum({part('p', dl='doc_len')} ORDER BY p.lexeme) AS score
FROM w JOIN bm25_postings p ON p.corpus = :c AND p.lexeme = w.lexeme
GROUP BY p.entry_id ORDER BY score DESC, p.entry_id LIMIT {K}"""

C_PLAIN = f"""WITH {W_CTE}
SELECT p.docno AS id, sum({part('p')} ORDER BY p.lexeme) AS score
FROM w JOIN post_c p ON p.corpus = :c AND p.lexeme = w.lexeme
GROUP BY p.docno ORDER BY score DESC, p.docno LIMIT {K}"""

B_PLAIN = f"""WITH {W_CTE}, post AS (
  SELECT b.lexeme, u.docno, u.tf, u.dl
  FROM w JOIN blk b ON b.corpus = :c AND b.lexeme = w.lexeme
  CROSS JOIN LATERAL unnest(b.docnos, b.tfs, b.dls) AS u(docno, tf, dl)
  UNION ALL
  SELECT d.lexeme, d.docno, d.tf, d.dl FROM w JOIN blk_delta d ON d.corpus = :c AND d.lexeme = w.lexeme)
SELECT p.docno AS id, sum({part('p')} ORDER BY p.lexeme) AS score
FROM post p JOIN w ON w.lexeme = p.lexeme
GROUP BY p.docno ORDER BY score DESC, p.docno LIMIT {K}"""


def _scored(sel: str) -> str:
    """Exact scores of the documents in the selected segments (``{sel}``: a CTE with ``starts``
    (every segment start, sorted), ``flags`` (selected, aligned) and ``picked`` (the selected
    starts, sorted)). A block (or a term's delta, as one pseudo-block) is read when a selected
    segment starts inside it; since segment boundaries are block boundaries, every block
    overlapping a selected segment is read, so a document of a selected segment has every one
    of its postings, and documents of other segments (partly read) are dropped."""
    return f"""SELECT x.docno, x.score FROM (
    SELECT p.docno, sum({part('p')} ORDER BY p.lexeme) AS score
    FROM (
      SELECT b.lexeme, u.docno, u.tf, u.dl
      FROM bl CROSS JOIN {sel} s
      JOIN blk b ON b.corpus = :c AND b.lexeme = bl.lexeme AND b.first_docno = bl.f
      CROSS JOIN LATERAL unnest(b.docnos, b.tfs, b.dls) AS u(docno, tf, dl)
      WHERE NOT bl.delta AND width_bucket(bl.l, s.picked) > width_bucket(bl.f - 1, s.picked)
      UNION ALL
      SELECT d.lexeme, d.docno, d.tf, d.dl
      FROM bl CROSS JOIN {sel} s
      JOIN blk_delta d ON d.corpus = :c AND d.lexeme = bl.lexeme
      WHERE bl.delta AND width_bucket(bl.l, s.picked) > width_bucket(bl.f - 1, s.picked)
    ) p JOIN w ON w.lexeme = p.lexeme
    GROUP BY p.docno
  ) x CROSS JOIN {sel} s
  WHERE s.flags[width_bucket(x.docno, s.starts)]"""


def blockmax_sql() -> str:
    """The exact top-k over blocks with block-max pruning, in two passes.

    The blocks' bounds (from the key alone) are summed over the document-number axis into
    segments (between consecutive block boundaries) with a bound each: no document of a
    segment scores above it. Pass 1 scores the documents of the :data:`PASS1_SEGMENTS`
    segments of highest bound; the k-th best of those scores, θ, is a lower bound of the
    final k-th score, so pass 2 scores only segments whose bound reaches θ (minus slack)
    and its top k is exact. A term's delta rows count as one block with their own maximum."""
    return f"""WITH {W_CTE}, bl AS MATERIALIZED (
  SELECT b.lexeme, b.first_docno AS f, b.last_docno AS l, false AS delta,
         w.wt * b.max_tf / (b.max_tf + CAST(:kb0 AS float8) + w.kbl * b.min_dl) AS ub
  FROM w JOIN blk b ON b.corpus = :c AND b.lexeme = w.lexeme
  UNION ALL
  SELECT d.lexeme, min(d.docno), max(d.docno), true, max({part('d')})
  FROM w JOIN blk_delta d ON d.corpus = :c AND d.lexeme = w.lexeme
  GROUP BY d.lexeme
), seg AS MATERIALIZED (
  SELECT e.pos AS s, sum(sum(e.du)) OVER (ORDER BY e.pos) AS bound
  FROM (SELECT f AS pos, ub AS du FROM bl UNION ALL SELECT l + 1, -ub FROM bl) e
  GROUP BY e.pos
), top1 AS MATERIALIZED (
  SELECT s FROM seg WHERE bound > {TOL} ORDER BY bound DESC, s LIMIT {PASS1_SEGMENTS}
), sel1 AS MATERIALIZED (
  SELECT array_agg(seg.s ORDER BY seg.s) AS starts,
         array_agg(seg.s IN (SELECT s FROM top1) ORDER BY seg.s) AS flags,
         (SELECT array_agg(s ORDER BY s) FROM top1) AS picked
  FROM seg
), pass1 AS MATERIALIZED (
  {_scored('sel1')}
  ORDER BY x.score DESC, x.docno LIMIT {K}
), theta AS MATERIALIZED (
  SELECT CASE WHEN count(*) >= {K} THEN min(score) ELSE '-Infinity'::float8 END AS t FROM pass1
), sel2 AS MATERIALIZED (
  SELECT array_agg(seg.s ORDER BY seg.s) AS starts,
         array_agg(seg.bound >= (SELECT t FROM theta) - {TOL} ORDER BY seg.s) AS flags,
         array_agg(seg.s ORDER BY seg.s) FILTER (WHERE seg.bound >= (SELECT t FROM theta) - {TOL}) AS picked
  FROM seg
)
SELECT x.docno AS id, x.score FROM (
  {_scored('sel2')}
) x ORDER BY x.score DESC, x.docno LIMIT {K}"""


B_PRUNED = blockmax_sql()


def _ne_postings(cands: str) -> str:
    """The non-essential terms' postings of the documents of ``{cands}`` (a CTE with ``docno``):
    each candidate finds its block by binary search over the term's block starts
    (``width_bucket``, blocks of a term being disjoint), each needed block is read once, and
    the term's delta rows are joined by key."""
    arr = f"(SELECT array_agg(docno ORDER BY docno) FROM {cands})"
    return f"""SELECT b.lexeme, u.docno, u.tf, u.dl FROM (
      SELECT DISTINCT n.lexeme, n.starts[width_bucket(c.docno, n.starts)] AS f
      FROM nes n CROSS JOIN {cands} c WHERE width_bucket(c.docno, n.starts) > 0
    ) nb
    JOIN blk b ON b.corpus = :c AND b.lexeme = nb.lexeme AND b.first_docno = nb.f
    CROSS JOIN LATERAL unnest(b.docnos, b.tfs, b.dls) AS u(docno, tf, dl)
    CROSS JOIN (SELECT {arr} AS a) ca
    WHERE ca.a[width_bucket(u.docno, ca.a)] = u.docno
    UNION ALL
    SELECT d.lexeme, d.docno, d.tf, d.dl FROM nes n JOIN blk_delta d ON d.corpus = :c AND d.lexeme = n.lexeme
    WHERE d.docno IN (SELECT docno FROM {cands})"""


def maxscore_sql() -> str:
    """The exact top-k over blocks with MaxScore, as the library prunes per-entry rows today:
    the most frequent terms (the library's rule: df >= PRUNE_MIN_DF, summed weights at most
    PRUNE_RATIO of the others', one term kept) are non-essential; the essential terms'
    blocks give every candidate's partial score; only candidates whose partial score plus
    the non-essential bound ``bne`` reaches the k-th full score of the best partial scores
    are scored in full, reading just the non-essential blocks that hold them. Full scores
    are summed over all terms in lexeme order, as the reference does. When the k-th score
    does not exceed ``bne`` (an entry holding only non-essential terms might enter), the
    plain scan runs instead."""
    return f"""WITH {W_CTE}, t AS MATERIALIZED (
  SELECT x.lexeme, x.wt, x.kbl,
         (x.rk < x.nt AND x.df >= 1000 AND x.cum <= 0.5 * (x.tot - x.cum)) AS ne
  FROM (SELECT w.*, row_number() OVER (ORDER BY w.df DESC, w.lexeme) AS rk, count(*) OVER () AS nt,
               sum(w.wt) OVER (ORDER BY w.df DESC, w.lexeme ROWS UNBOUNDED PRECEDING) AS cum,
               sum(w.wt) OVER () AS tot FROM w) x
), bne AS MATERIALIZED (
  SELECT coalesce(sum(wt) FILTER (WHERE ne), 0.0::float8) AS bne, count(*) FILTER (WHERE ne) AS n_ne FROM t
), nes AS MATERIALIZED (
  SELECT t.lexeme, (SELECT array_agg(b.first_docno ORDER BY b.first_docno) FROM blk b
                    WHERE b.corpus = :c AND b.lexeme = t.lexeme) AS starts
  FROM t WHERE t.ne AND (SELECT n_ne FROM bne) > 0
), ep AS MATERIALIZED (
  SELECT b.lexeme, u.docno, u.tf, u.dl
  FROM t JOIN blk b ON b.corpus = :c AND b.lexeme = t.lexeme
  CROSS JOIN LATERAL unnest(b.docnos, b.tfs, b.dls) AS u(docno, tf, dl)
  WHERE NOT t.ne AND (SELECT n_ne FROM bne) > 0
  UNION ALL
  SELECT d.lexeme, d.docno, d.tf, d.dl FROM t JOIN blk_delta d ON d.corpus = :c AND d.lexeme = t.lexeme
  WHERE NOT t.ne AND (SELECT n_ne FROM bne) > 0
), pa AS MATERIALIZED (
  SELECT p.docno, sum({part('p').replace('w.', 't.')}) AS ps FROM ep p JOIN t ON t.lexeme = p.lexeme GROUP BY p.docno
), c1 AS MATERIALIZED (
  SELECT docno FROM pa ORDER BY ps DESC, docno LIMIT {K}
), f1 AS MATERIALIZED (
  SELECT p.docno, sum({part('p').replace('w.', 't.')} ORDER BY p.lexeme) AS score
  FROM (SELECT * FROM ep WHERE docno IN (SELECT docno FROM c1) UNION ALL {_ne_postings('c1')}) p
  JOIN t ON t.lexeme = p.lexeme GROUP BY p.docno
), cands AS MATERIALIZED (
  SELECT pa.docno FROM pa
  WHERE pa.ps >= (SELECT coalesce((SELECT score FROM f1 ORDER BY score DESC LIMIT 1 OFFSET {K} - 1),
                                  '-Infinity'::float8)) - (SELECT bne FROM bne) - {TOL}
), fin AS MATERIALIZED (
  SELECT p.docno, sum({part('p').replace('w.', 't.')} ORDER BY p.lexeme) AS score
  FROM (SELECT * FROM ep WHERE docno IN (SELECT docno FROM cands) UNION ALL {_ne_postings('cands')}) p
  JOIN t ON t.lexeme = p.lexeme GROUP BY p.docno
  ORDER BY score DESC, p.docno LIMIT {K}
), use AS MATERIALIZED (
  SELECT (SELECT n_ne FROM bne) > 0 AND (SELECT count(*) FROM fin) = {K}
         AND (SELECT min(score) FROM fin) > (SELECT bne FROM bne) + {TOL} AS pruned
), post AS (
  SELECT b.lexeme, u.docno, u.tf, u.dl
  FROM w JOIN blk b ON b.corpus = :c AND b.lexeme = w.lexeme
  CROSS JOIN LATERAL unnest(b.docnos, b.tfs, b.dls) AS u(docno, tf, dl)
  WHERE NOT (SELECT pruned FROM use)
  UNION ALL
  SELECT d.lexeme, d.docno, d.tf, d.dl FROM w JOIN blk_delta d ON d.corpus = :c AND d.lexeme = w.lexeme
  WHERE NOT (SELECT pruned FROM use)
), plainq AS (
  SELECT p.docno AS id, sum({part('p')} ORDER BY p.lexeme) AS score
  FROM post p JOIN w ON w.lexeme = p.lexeme
  GROUP BY p.docno ORDER BY score DESC, p.docno LIMIT {K}
)
SELECT id, score FROM (
  SELECT docno AS id, score FROM fin WHERE (SELECT pruned FROM use)
  UNION ALL
  SELECT id, score FROM plainq
) r ORDER BY score DESC, id"""


B_MAXSCORE = maxscore_sql()

# ---------------------------------------------------------------------------- writes


def _batch_rows(table: str, cols: str, select: str) -> str:
    return f"INSERT INTO {table} ({cols}) {select} FROM src_new s JOIN vocab v USING (term) " \
           "WHERE s.docno >= %(lo)s AND s.docno < %(hi)s ORDER BY 2, 3"


WRITE_A = _batch_rows("bm25_postings", "corpus, lexeme, entry_id, tf, doc_len",
                      f"SELECT '{CORPUS}', v.lexeme, {ENTRY_ID.format('s.docno')}, s.tf, s.dl")
WRITE_C = _batch_rows("post_c", "corpus, lexeme, docno, tf, dl", f"SELECT '{CORPUS}', v.lexeme, s.docno, s.tf, s.dl")
WRITE_DELTA = _batch_rows("blk_delta", "corpus, lexeme, docno, tf, dl",
                          f"SELECT '{CORPUS}', v.lexeme, s.docno, s.tf, s.dl")
# Blocks written in place: each term's tail block (locked in lexeme order, so writers
# cannot deadlock) takes the batch's postings while it holds fewer than BLOCK; else the
# batch's postings of that term start a new block.
WRITE_DIRECT = [
    """CREATE TEMP TABLE nb ON COMMIT DROP AS
        SELECT v.lexeme, array_agg(s.docno ORDER BY s.docno) AS d, array_agg(s.tf ORDER BY s.docno) AS t,
               array_agg(s.dl ORDER BY s.docno) AS l, count(*)::int AS c, max(s.tf) AS mt, min(s.dl) AS md,
               min(s.docno) AS f, max(s.docno) AS la
        FROM src_new s JOIN vocab v USING (term) WHERE s.docno >= %(lo)s AND s.docno < %(hi)s GROUP BY v.lexeme""",
    f"""CREATE TEMP TABLE tl ON COMMIT DROP AS
        SELECT b.ctid AS tid, b.lexeme FROM blk b
        WHERE b.corpus = '{CORPUS}' AND (b.lexeme, b.first_docno) IN (
          SELECT x.lexeme, max(x.first_docno) FROM blk x JOIN nb ON x.corpus = '{CORPUS}' AND x.lexeme = nb.lexeme
          GROUP BY x.lexeme)
        ORDER BY b.lexeme FOR UPDATE OF b""",
    f"""WITH u AS (
          UPDATE blk b SET docnos = b.docnos || nb.d, tfs = b.tfs || nb.t, dls = b.dls || nb.l, n = b.n + nb.c,
                 last_docno = greatest(b.last_docno, nb.la), max_tf = greatest(b.max_tf, nb.mt),
                 min_dl = least(b.min_dl, nb.md)
          FROM nb, tl
          WHERE b.ctid = ANY (ARRAY(SELECT tid FROM tl)) AND b.ctid = tl.tid AND b.lexeme = nb.lexeme
            AND b.n < {BLOCK}
          RETURNING b.lexeme)
        INSERT INTO blk SELECT '{CORPUS}', nb.lexeme, nb.f, nb.la, nb.c, nb.mt, nb.md, nb.d, nb.t, nb.l FROM nb
        WHERE nb.lexeme NOT IN (SELECT lexeme FROM u)""",
]

# The merge: one transaction folds every delta row it sees into blocks. Each touched
# term's last block, when not full, is taken apart and re-chunked with the delta rows;
# other blocks are never rewritten. Rows inserted by writers after the merge's snapshot
# stay in the delta. An advisory lock keeps two merges of one corpus apart.
MERGE = [
    f"SELECT pg_advisory_xact_lock(hashtext('{CORPUS}'))",
    f"""CREATE TEMP TABLE md ON COMMIT DROP AS
        WITH d AS (DELETE FROM blk_delta WHERE corpus = '{CORPUS}' RETURNING lexeme, docno, tf, dl)
        SELECT * FROM d""",
    f"""CREATE TEMP TABLE mt ON COMMIT DROP AS
        WITH t AS (
          DELETE FROM blk b WHERE b.corpus = '{CORPUS}' AND b.n < {BLOCK} AND (b.lexeme, b.first_docno) IN (
            SELECT x.lexeme, max(x.first_docno) FROM blk x
            WHERE x.corpus = '{CORPUS}' AND x.lexeme IN (SELECT DISTINCT lexeme FROM md) GROUP BY x.lexeme)
          RETURNING b.lexeme, b.docnos, b.tfs, b.dls)
        SELECT t.lexeme, u.docno, u.tf, u.dl FROM t CROSS JOIN LATERAL unnest(t.docnos, t.tfs, t.dls) AS u(docno, tf, dl)""",
    f"""INSERT INTO blk
        SELECT '{CORPUS}', x.lexeme, min(x.docno), max(x.docno), count(*), max(x.tf), min(x.dl),
               array_agg(x.docno ORDER BY x.docno), array_agg(x.tf ORDER BY x.docno), array_agg(x.dl ORDER BY x.docno)
        FROM (SELECT a.*, (row_number() OVER (PARTITION BY a.lexeme ORDER BY a.docno) - 1) / {BLOCK} AS bno
              FROM (SELECT * FROM md UNION ALL SELECT * FROM mt) a) x
        GROUP BY x.lexeme, x.bno""",
]

# ---------------------------------------------------------------------------- harness


@dataclass
class SizeReport:
    n: int
    postings: int = 0
    build_s: dict[str, float] = field(default_factory=dict)
    size_mb: dict[str, dict[str, float]] = field(default_factory=dict)
    query_ms: dict[str, float] = field(default_factory=dict)
    query_p90_ms: dict[str, float] = field(default_factory=dict)
    identical: dict[str, bool] = field(default_factory=dict)
    same_ids: dict[str, bool] = field(default_factory=dict)
    plans: dict[str, str] = field(default_factory=dict)
    solo: dict[str, dict[str, float]] = field(default_factory=dict)
    concurrent: dict[str, dict[str, float]] = field(default_factory=dict)
    merge: dict[str, float] = field(default_factory=dict)
    pass2_share: float = 0.0


def _psycopg_url(url: Any) -> str:
    return str(url.set(drivername="postgresql").render_as_string(hide_password=False))


def _vocab(size: int = 5000, seed: int = 42) -> list[str]:
    from bench._corpus import _vocabulary

    return _vocabulary(size, np.random.default_rng(seed))


def _zipf(size: int) -> list[float]:
    p = 1.0 / np.arange(1, size + 1, dtype=np.float64)
    p /= p.sum()
    return [float(x) for x in np.cumsum(p)[:-1]]


def generate(conn: Any, table: str, lo: int, hi: int, seed: float, chunk: int = 100_000) -> None:
    """Documents [lo, hi) into ``table`` (deterministic for a given seed and chunking)."""
    rng = np.random.default_rng(42)
    topic = [int(x) for x in rng.integers(0, 5000, size=100 * 8)]
    cum = _zipf(5000)
    for start in range(lo, hi, chunk):
        conn.execute("SELECT setseed(%s)", (((seed + start / 1e7) % 1.0) * 2 - 1,))
        conn.execute(GENERATE.format(table=table), {"topic": topic, "cum": cum, "lo": start,
                                                    "hi": min(hi, start + chunk)})


def _queries(conn: Any, n: int, m: int, seed: int) -> list[list[str]]:
    """``m`` queries of 2-3 distinct terms of a random document (bench_scale draws them the
    same way from a document's words, so frequent terms come up as often as in text)."""
    rng = np.random.default_rng(seed)
    docs = [int(d) for d in rng.integers(0, n, size=m)]
    words = dict(conn.execute(
        "SELECT s.docno, array_agg(v.lexeme ORDER BY v.lexeme) FROM src s JOIN vocab v USING (term) "
        "WHERE s.docno = ANY(%s) GROUP BY s.docno", (docs,)).fetchall())
    out: list[list[str]] = []
    for d in docs:
        k = min(len(words[d]), int(rng.integers(2, 4)))
        out.append(sorted(rng.choice(words[d], size=k, replace=False).tolist()))
    return out


def _params(terms: Sequence[str]) -> dict[str, Any]:
    return {"c": CORPUS, "terms": list(terms), "k1p1": K1 + 1.0, "kb0": K1 * (1.0 - B), "kb1": K1 * B}


def _production(pool: Any, terms: Sequence[str]) -> list[tuple[str, float]]:
    """The library's own ranking statements over layout A (plain, then MaxScore when a term is frequent)."""

    from tnsrag_db._db.statement import AS_OF_PARAM
    from tnsrag_db._indexes.bm25 import index as bindex, sql as bsql

    p = "k"
    params = {"k_c": CORPUS, "k_chunks": [], "k_extras": list(terms), "k_k1p1": K1 + 1.0, "k_kb0": K1 * (1.0 - B),
              "k_kb1": K1 * B, "k_min": 0.0, "k_lim": K, "k_nedf": float(bindex.DEFAULT_PRUNE_MIN_DF),
              "k_fsmall": bindex.DEFAULT_FILTER_PROBE_MAX, AS_OF_PARAM: None}  # answers now
    with pool.connect() as conn:
        rows = conn.execute((bsql.plain_ranking_sql(p, limit=K)), params).fetchall()
        if rows and rows[0][0] is None:
            params.update({"k_ner": bindex.DEFAULT_PRUNE_RATIO, "k_tol": bsql.BOUND_TOLERANCE,
                           "k_pc": bindex.DEFAULT_PROBE_COST})
            rows = conn.execute((bsql.ranking_sql(p, limit=K)), params).fetchall()
    return [(str(r[0]), float(r[1])) for r in rows]


def _run(pool: Any, sql: str, terms: Sequence[str]) -> list[tuple[str, float]]:

    with pool.connect() as conn:
        rows = conn.execute(sql, _params(terms)).fetchall()
    return [(r[0] if isinstance(r[0], str) else f"doc-{int(r[0]):07d}", float(r[1])) for r in rows]


def _explain(pool: Any, sql: str, terms: Sequence[str]) -> str:

    with pool.connect() as conn:
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, _params(terms)).fetchall()
    return "\n".join(r[0] for r in rows)


METHODS: dict[str, Callable[[Any, Sequence[str]], list[tuple[str, float]]]] = {
    "A library (plain/MaxScore)": _production,
    "A plain": lambda e, t: _run(e, A_PLAIN, t),
    "C plain": lambda e, t: _run(e, C_PLAIN, t),
    "B plain": lambda e, t: _run(e, B_PLAIN, t),
    "B block-max": lambda e, t: _run(e, B_PRUNED, t),
    "B MaxScore": lambda e, t: _run(e, B_MAXSCORE, t),
}


def measure_queries(pool: Any, queries: list[list[str]], rep: SizeReport, methods: Sequence[str],
                    suffix: str = "") -> None:
    reference = [_run(pool, A_PLAIN, q) for q in queries]
    for name in methods:
        fn = METHODS[name]
        for q in queries[:10]:  # warm the cache
            fn(pool, q)
        times, same, close = [], True, True
        for q, ref in zip(queries, reference):
            t = time.perf_counter()
            got = fn(pool, q)
            times.append((time.perf_counter() - t) * 1000)
            same = same and got == ref
            close = close and [g[0] for g in got] == [r[0] for r in ref] and all(
                abs(g[1] - r[1]) <= 1e-12 * max(1.0, abs(r[1])) for g, r in zip(got, ref))
        key = name + suffix
        rep.query_ms[key] = statistics.median(times)
        rep.query_p90_ms[key] = float(np.percentile(times, 90))
        rep.identical[key] = same
        rep.same_ids[key] = close
        print(f"  {key:40s} median {rep.query_ms[key]:8.2f} ms  p90 {rep.query_p90_ms[key]:8.2f} ms  "
              f"identical={same} same ids, scores within 1e-12={close}", flush=True)


def _one(conn: Any, sql: str) -> tuple[Any, ...]:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return tuple(row)


def _lsn(conn: Any) -> str:
    return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])


def _wal(conn: Any, start: str) -> int:
    return int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start,)).fetchone()[0])


def _write_batch(conn: Any, stmts: Sequence[str], batch: int) -> None:
    lo = NEW_BASE + batch * BATCH
    with conn.transaction():
        for s in stmts:
            conn.execute(s, {"lo": lo, "hi": lo + BATCH})


def solo_writes(url: str, stmts: Sequence[str], first: int) -> dict[str, float]:

    times, wal = [], []
    with psycopg.connect(url, autocommit=True) as conn:
        for b in range(first, first + SOLO_BATCHES):
            start = _lsn(conn)
            t = time.perf_counter()
            _write_batch(conn, stmts, b)
            times.append((time.perf_counter() - t) * 1000)
            wal.append(_wal(conn, start))
    return {"ms": statistics.median(times), "wal_kb": statistics.median(wal) / 1024}


def concurrent_writes(url: str, stmts: Sequence[str], first: int) -> dict[str, float]:
    """WRITERS threads, WRITER_BATCHES batches each; a sampler counts backends waiting on a lock."""

    errors: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    samples: list[tuple[int, int]] = []

    def writer(w: int) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            for i in range(WRITER_BATCHES):
                b = first + w + i * WRITERS
                while True:
                    t = time.perf_counter()
                    try:
                        _write_batch(conn, stmts, b)
                        break
                    except psycopg.errors.DeadlockDetected as exc:
                        with lock:
                            errors.append(type(exc).__name__)
                with lock:
                    latencies.append((time.perf_counter() - t) * 1000)

    def sampler() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.is_set():
                # Row locks (a writer waiting for another's transaction or tuple) apart from
                # relation extension locks (writers growing the same table).
                row, other = _one(conn,
                    "SELECT count(*) FILTER (WHERE wait_event IN ('transactionid', 'tuple')), "
                    "count(*) FILTER (WHERE wait_event NOT IN ('transactionid', 'tuple')) "
                    "FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
                samples.append((int(row), int(other)))
                time.sleep(0.005)

    with psycopg.connect(url, autocommit=True) as conn:
        start = _lsn(conn)
        s = threading.Thread(target=sampler)
        s.start()
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t
        stop.set()
        s.join()
        wal = _wal(conn, start)
    docs = WRITERS * WRITER_BATCHES * BATCH
    return {"wall_s": wall, "docs_per_s": docs / wall, "batch_median_ms": statistics.median(latencies),
            "batch_max_ms": max(latencies), "wal_kb_per_batch": wal / 1024 / (WRITERS * WRITER_BATCHES),
            "mean_row_lock_waiters": float(np.mean([x[0] for x in samples])) if samples else 0.0,
            "mean_other_lock_waiters": float(np.mean([x[1] for x in samples])) if samples else 0.0,
            "deadlocks": float(len(errors))}


def _sizes(conn: Any) -> dict[str, dict[str, float]]:
    out = {}
    for t in ("bm25_postings", "post_c", "blk", "blk_delta"):
        heap, idx = conn.execute("SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)",
                                 (t, t)).fetchone()
        out[t] = {"heap_mb": heap / 2**20, "index_mb": idx / 2**20, "total_mb": (heap + idx) / 2**20}
    return out


def _pass2_share(pool: Any, queries: list[list[str]]) -> float:
    """Share of the query terms' blocks the second pass reads (mean over the queries)."""

    probe = B_PRUNED.replace(
        f"SELECT x.docno AS id, x.score FROM (\n  {_scored('sel2')}\n) x ORDER BY x.score DESC, x.docno LIMIT {K}",
        "SELECT (SELECT count(*) FROM bl CROSS JOIN sel2 s WHERE width_bucket(bl.l, s.picked) > "
        "width_bucket(bl.f - 1, s.picked))::float8 / greatest(1, (SELECT count(*) FROM bl))")
    assert probe != B_PRUNED
    shares = []
    with pool.connect() as conn:
        for q in queries:
            shares.append(float(conn.execute(probe, _params(q)).scalar_one()))
    return float(np.mean(shares))


def run_size(url: str, pool: Any, n: int, generated: int, nq: int) -> tuple[SizeReport, int]:

    rep = SizeReport(n)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET work_mem = '256MB'")
        conn.execute("SET maintenance_work_mem = '1GB'")
        if generated < n:
            t = time.perf_counter()
            generate(conn, "src", generated, n, 0.42)
            rep.build_s["generate"] = time.perf_counter() - t
            generated = n
        for label, stmt in build_sql(n):
            t = time.perf_counter()
            conn.execute(stmt)
            rep.build_s[label] = time.perf_counter() - t
            print(f"  build {label}: {rep.build_s[label]:.1f} s", flush=True)
        rep.postings = int(_one(conn, "SELECT count(*) FROM post_c")[0])
        rep.size_mb = _sizes(conn)
        queries = _queries(conn, n, nq, seed=7)
    print(f"n={n}: {rep.postings} postings; sizes {json.dumps(rep.size_mb)}", flush=True)
    measure_queries(pool, queries, rep, list(METHODS))
    for name, sql in (("A plain", A_PLAIN), ("C plain", C_PLAIN), ("B plain", B_PLAIN), ("B block-max", B_PRUNED)):
        rep.plans[name] = _explain(pool, sql, queries[0])
    rep.pass2_share = _pass2_share(pool, queries)
    print(f"  block-max pass 2 reads {rep.pass2_share:.1%} of the query terms' blocks (mean)", flush=True)

    # Writes: A and the delta take the same documents, so after them the reference (A) and
    # blocks + delta hold the same postings and must still answer alike.
    first_conc = SOLO_BATCHES
    for name, stmts in (("A (today)", [WRITE_A]), ("C", [WRITE_C]), ("B delta", [WRITE_DELTA])):
        rep.solo[name] = solo_writes(url, stmts, 0)
        rep.concurrent[name] = concurrent_writes(url, stmts, first_conc)
        print(f"  writes {name}: solo {rep.solo[name]}; 8 writers {rep.concurrent[name]}", flush=True)
    with psycopg.connect(url, autocommit=True) as conn:
        total = SOLO_BATCHES + WRITERS * WRITER_BATCHES
        hi = NEW_BASE + total * BATCH
        conn.execute(f"UPDATE bm25_stats SET n_docs = n_docs + x.n, total_len = total_len + x.tl FROM ("
                     f"SELECT count(*) AS n, sum(dl) AS tl FROM (SELECT DISTINCT docno, dl FROM src_new "
                     f"WHERE docno < {hi}) d) x WHERE corpus = '{CORPUS}'")
        conn.execute(f"INSERT INTO bm25_df AS t SELECT '{CORPUS}', v.lexeme, 0, count(*) FROM src_new s "
                     f"JOIN vocab v USING (term) WHERE s.docno < {hi} GROUP BY v.lexeme "
                     "ON CONFLICT (corpus, lexeme, shard) DO UPDATE SET df = t.df + excluded.df")
        conn.execute("ANALYZE blk_delta")
    print(f"  queries with {total * BATCH} documents in the delta:", flush=True)
    measure_queries(pool, queries, rep, ["A plain", "B plain", "B block-max", "B MaxScore"], suffix=" +delta")
    with psycopg.connect(url, autocommit=True) as conn:
        start = _lsn(conn)
        t = time.perf_counter()
        with conn.transaction():
            for s in MERGE:
                conn.execute(s)
        rep.merge = {"docs": float(total * BATCH), "s": time.perf_counter() - t, "wal_mb": _wal(conn, start) / 2**20}
        conn.execute("VACUUM (ANALYZE) blk, blk_delta")
        left = int(_one(conn, "SELECT count(*) FROM blk_delta")[0])
        rep.merge["delta_left"] = float(left)
    print(f"  merge: {rep.merge}; delta rows left {left}", flush=True)
    measure_queries(pool, queries, rep, ["B plain", "B block-max", "B MaxScore"], suffix=" merged")
    # Blocks written in place last (they leave blk with postings of documents merged above).
    rep.solo["B in place"] = solo_writes(url, WRITE_DIRECT, PER_LAYOUT)
    rep.concurrent["B in place"] = concurrent_writes(url, WRITE_DIRECT, PER_LAYOUT + first_conc)
    print(f"  writes B in place: solo {rep.solo['B in place']}; 8 writers {rep.concurrent['B in place']}", flush=True)
    return rep, generated


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--url", default=None, help="superuser URL of a server (default: an embedded one of its own)")
    ap.add_argument("--out", type=Path, default=Path("bench_postings.json"))
    args = ap.parse_args(argv)

    from bench._common import scratch_database
    from tnsrag_db._db.pool import Pool

    reports = []
    with scratch_database(args.url, "postings") as (db_url, _):
        url = _psycopg_url(db_url)
        pool = Pool(db_url, schema="public", pool_size=2)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SCHEMA)
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO vocab VALUES (%s, %s)", list(enumerate(_vocab())))
            generate(conn, "src_new", NEW_BASE, NEW_BASE + 2 * PER_LAYOUT * BATCH, 0.77)
            conn.execute("CREATE INDEX ON src_new (docno)")
        generated = 0
        for n in sorted(args.sizes):
            rep, generated = run_size(url, pool, n, generated, args.queries)
            reports.append(rep)
            args.out.write_text(json.dumps([r.__dict__ for r in reports], indent=1))
        pool.close()
    if len(reports) >= 2:
        a, b = reports[0], reports[-1]
        for key in a.query_ms:
            print(f"{key:40s} {b.n}/{a.n}: {b.query_ms[key] / a.query_ms[key]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
