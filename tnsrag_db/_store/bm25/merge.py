"""The merge of BM25 postings from per-entry rows into blocks.

Writers insert an entry's postings as rows of ``bm25_postings`` (the *delta*): one row
per (corpus, term, entry), cheap to insert and to delete in the entry's own transaction.
A merge moves whole entries' postings from there into ``bm25_blocks``, where a term's
postings are packed 128 to a row in document-number order (about an eighth of the space
of the rows, so a large corpus's postings stay in memory). It

1. locks the entries it takes ``FOR SHARE SKIP LOCKED``: an entry a writer holds is left
   for a later merge, and no writer can rewrite or delete a taken entry before the merge
   commits (its lock waits; its next statement then sees the entry merged);
2. gives each taken entry with postings the corpus's next document number
   (``bm25_merge_state``; numbers only grow, so new postings always extend a term's
   last block) and records it in ``bm25_docs``;
3. appends their postings to each term's last block (when not full), re-cut into blocks
   of :data:`BLOCK`, and deletes their delta rows;
4. takes up to ``max_tombstones`` tombstoned numbers (entries deleted or rewritten after
   their merge) out of the blocks of their terms.

All in one transaction, under an advisory lock per corpus (one merge of a corpus at a
time) and the corpus's shared write lock (a corpus drop waits for it). A reader sees the
postings of an entry in the delta or in the blocks, never both and never neither: the
move commits at once. Document frequencies and corpus statistics do not change.

Releases before revision 0011 read postings only as rows: while the schema still serves
one (a rolling upgrade not yet finished, see ``tnsrag_schema_compat()``), a merge moves
nothing and says so (:attr:`MergeReport.deferred`).
"""

from __future__ import annotations

import textwrap
from contextlib import AbstractContextManager
from dataclasses import dataclass

from tnsrag_db._db.lock_holders import advisory_lock, holders, try_advisory_lock
from tnsrag_db._db.pool import Connection
from tnsrag_db._db.revisions import COMPAT_FUNCTION, serves_releases_before
from tnsrag_db._store.lock_keys import corpus_keys
from tnsrag_db._store.sql import hash_joins_only, planner_nodes_off, probe, tid_scans_only

__all__ = ["BLOCKS_REVISION", "BLOCK", "MergeReport", "blocks_served", "merge_postings"]

#: The first revision whose releases read postings in blocks: merges wait until the schema
#: serves no release older than it.
BLOCKS_REVISION = "0011"

#: Postings per block: a run of one term's postings in one row.
BLOCK = 128
#: ``work_mem`` of a merge transaction.
MERGE_WORK_MEM = "256MB"

# Statistics. A merge often runs on a corpus its tables' statistics have never seen: the
# first merge after a bulk write of a new corpus, with ``bm25_postings`` last analysed
# while merges had emptied it (and ``entries`` before the corpus existed). The planner
# then estimates the corpus at one row in every table, and a lookup of one entry by key
# costs the same through any index led by ``corpus``: ``entries`` has six, ``bm25_docs``
# two. A per-row lookup planned on such an index reads the whole corpus once per row
# (a 30,000-entry merge took minutes). So ``entries`` and ``bm25_docs`` are never probed
# row by row: they are read in one statement for the whole list of ids in hand
# (``id = ANY (:ids)``), whose every plan (the key, another index, a sequential scan)
# reads each row at most once. The per-row probes left reach tables with one index
# (``bm25_postings``, ``bm25_blocks``, the stage tables), whose key they fill.

#: The entries whose postings are in the delta, first ``:n`` in id order: the delta's own
#: rows (its size, not the corpus's, bounds the scan). :data:`_LOCK_SQL` reads the
#: entries themselves.
_DELTA_ENTRIES_SQL = textwrap.dedent("""\
    SELECT p.entry_id FROM bm25_postings p WHERE p.corpus = :c
    GROUP BY p.entry_id ORDER BY p.entry_id LIMIT :n""")

#: The sweep of a corpus whose postings are all rows (written before blocks existed): the
#: first ``:n`` entries after ``:after`` in id order, each with whether it has terms.
_SWEEP_WINDOW_SQL = textwrap.dedent("""\
    SELECT e.id, cardinality(e.lexemes) > 0 FROM entries e
    WHERE e.corpus = :c AND e.id > :after ORDER BY e.id LIMIT :n""")

#: Which of the entries ``:ids`` have a document number (merged already).
_NUMBERED_SQL = ("SELECT d.entry_id FROM bm25_docs d "
                 "WHERE d.corpus = :c AND d.entry_id = ANY (CAST(:ids AS text[]))")

#: The merge's stage: each locked entry's id and new number (created on first use, emptied
#: at commit, like the write path's stage tables).
_STAGE_DDL = ("CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_merge (id text PRIMARY KEY, docno bigint NOT NULL) "
              "ON COMMIT DELETE ROWS")

#: ``:k`` numbers of the corpus: returns the first.
_NUMBERS_SQL = textwrap.dedent("""\
    INSERT INTO bm25_merge_state AS m (corpus, next_docno) VALUES (:c, 1 + :k)
    ON CONFLICT (corpus) DO UPDATE SET next_docno = m.next_docno + :k
    RETURNING next_docno - :k""")

#: Locks the chosen entries that still exist (a writer's lock makes an entry skipped) and
#: stages them numbered in id order from ``:base`` (a skipped entry's number goes unused);
#: returns how many.
_LOCK_SQL = textwrap.dedent("""\
    WITH l AS (
      SELECT e.id FROM entries e
      WHERE e.corpus = :c AND e.id = ANY (CAST(:ids AS text[])) AND cardinality(e.lexemes) > 0
      ORDER BY e.id FOR SHARE SKIP LOCKED
    ), staged AS (
      INSERT INTO tnsrag_stage_merge (id, docno)
      SELECT id, CAST(:base AS bigint) + row_number() OVER (ORDER BY id) - 1 FROM l RETURNING 1
    )
    SELECT count(*) FROM staged""")

#: The merge's other stage tables: the postings it moves and the blocks it re-cuts, each
#: row with its ctid in the shared table.
_MOVE_STAGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_np (tid tid NOT NULL, lexeme text NOT NULL, entry_id text NOT NULL, "
    "docno bigint NOT NULL, tf int NOT NULL, doc_len int NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_tail (tid tid NOT NULL, lexeme text NOT NULL, "
    "first_docno bigint NOT NULL, docnos bigint[] NOT NULL, tfs int[] NOT NULL, dls int[] NOT NULL) "
    "ON COMMIT DELETE ROWS",
)

# The steps of a move, in the snapshot after the locks (each sees every write the locks
# waited for, and the locked entries cannot change). The shared tables are read by
# primary-key probes or one pass, in plans that keep their shape whatever the statistics
# say (OFFSET 0, and see "Statistics" above): the delta's statistics are those of its last
# ANALYZE, often taken right after a merge had emptied it, and a join planned from them
# could scan it once per row.

#: The staged entries' delta postings, by one pass over the corpus's delta (mostly what
#: the merge takes) hash-joined to the stage (see :func:`~tnsrag_db._store.sql.hash_joins_only`).
_NP_SCAN_SQL = textwrap.dedent("""\
    INSERT INTO tnsrag_stage_np (tid, lexeme, entry_id, docno, tf, doc_len)
    SELECT p.ctid, p.lexeme, p.entry_id, i.docno, p.tf, p.doc_len
    FROM bm25_postings p JOIN tnsrag_stage_merge i ON i.id = p.entry_id
    WHERE p.corpus = :c""")

#: The same by primary-key probes through each entry's stored terms (a sweep takes a small
#: part of a large delta of postings written before blocks existed): the chosen entries
#: ``:ids`` read in one pass, those staged (locked) kept, hash-joined to the stage (see
#: :func:`~tnsrag_db._store.sql.hash_joins_only`; the stage is joined, not probed
#: laterally: a lateral subquery over a table of the session's own cannot be sent to a
#: Citus worker).
_NP_PROBE_SQL = textwrap.dedent(f"""\
    INSERT INTO tnsrag_stage_np (tid, lexeme, entry_id, docno, tf, doc_len)
    SELECT q.tid, q.lexeme, e.id, i.docno, q.tf, q.doc_len FROM entries e
    JOIN tnsrag_stage_merge i ON i.id = e.id
    CROSS JOIN unnest(e.lexemes) AS l(lexeme)
    {probe('bm25_postings', 'q', 'q.ctid AS tid, q.lexeme, q.tf, q.doc_len', 'q.lexeme = l.lexeme AND q.entry_id = e.id')}
    WHERE e.corpus = :c AND e.id = ANY (CAST(:ids AS text[]))""")

#: Each touched term's last block when it has room: re-cut with the new postings.
_TAIL_SQL = textwrap.dedent(f"""\
    INSERT INTO tnsrag_stage_tail (tid, lexeme, first_docno, docnos, tfs, dls)
    SELECT t.tid, x.lexeme, t.first_docno, t.docnos, t.tfs, t.dls
    FROM (SELECT DISTINCT lexeme FROM tnsrag_stage_np) x
    CROSS JOIN LATERAL (
      SELECT b.ctid AS tid, b.first_docno, b.n, b.docnos, b.tfs, b.dls FROM bm25_blocks b
      WHERE b.corpus = :c AND b.lexeme = x.lexeme ORDER BY b.first_docno DESC LIMIT 1
    ) t
    WHERE t.n < {BLOCK}""")

#: The staged ctids of the moved postings and of the re-cut tails, each as one array (its
#: text, bound again as ``:tids``; NULL when none).
_STAGED_NP_SQL = "SELECT CAST(array_agg(s.tid) AS text) FROM tnsrag_stage_np s"
_STAGED_TAILS_SQL = "SELECT CAST(array_agg(s.tid) AS text) FROM tnsrag_stage_tail s"

#: Deletes of staged rows by their ctids ``:tids``, planned as TID scans (see
#: :func:`~tnsrag_db._store.sql.tid_scans_only`). The ctids are bound, not read from the
#: stage in the statement: a statement that changes rows named by ctid reads no table of
#: the session's own (see :mod:`tnsrag_db._store.citus`, "Modifications by ctid").
_GONE_SQL = "DELETE FROM bm25_postings p WHERE p.corpus = :c AND p.ctid = ANY (CAST(:tids AS tid[]))"
_TAILS_GONE_SQL = "DELETE FROM bm25_blocks b WHERE b.corpus = :c AND b.ctid = ANY (CAST(:tids AS tid[]))"

#: The numbers of the entries that had postings, and the new blocks: each re-cut tail's
#: postings then the new ones (all numbered higher), in runs of BLOCK. A re-cut tail keeps
#: its lower bound (numbers purged from its start leave it lower). Returns how many of each.
_BLOCKS_SQL = textwrap.dedent(f"""\
    WITH
    docs AS (
      INSERT INTO bm25_docs (corpus, docno, entry_id)
      SELECT DISTINCT :c, s.docno, s.entry_id FROM tnsrag_stage_np s
      RETURNING 1
    ),
    cut AS (
      SELECT a.*, (row_number() OVER (PARTITION BY a.lexeme ORDER BY a.docno) - 1) / {BLOCK} AS run
      FROM (
        SELECT t.lexeme, u.docno, u.tf, u.dl, t.first_docno AS lower
        FROM tnsrag_stage_tail t CROSS JOIN LATERAL unnest(t.docnos, t.tfs, t.dls) AS u(docno, tf, dl)
        UNION ALL
        SELECT s.lexeme, s.docno, s.tf, s.doc_len, NULL FROM tnsrag_stage_np s
      ) a
    ),
    blocks AS (
      INSERT INTO bm25_blocks (corpus, lexeme, first_docno, last_docno, n, docnos, tfs, dls)
      SELECT :c, lexeme, coalesce(min(lower), min(docno)), max(docno), count(*),
             array_agg(docno ORDER BY docno), array_agg(tf ORDER BY docno), array_agg(dl ORDER BY docno)
      FROM cut GROUP BY lexeme, run
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM docs), (SELECT count(*) FROM blocks)""")


def _heap_order_scans(conn: Connection) -> AbstractContextManager[None]:
    """Plain index scans off for the statements of the block: rows a statement reads by an
    index are read by a bitmap, in heap order. Stale statistics can take a corpus for one
    row and read all of it through an index in another order, a random read per row."""
    return planner_nodes_off(conn, "enable_indexscan", "enable_indexonlyscan")


#: The first ``:m`` tombstones of the corpus, by number.
_TOMBSTONES_SQL = "SELECT t.docno FROM bm25_tombstones t WHERE t.corpus = :c ORDER BY t.docno LIMIT :m"

# Takes the tombstoned numbers :dead out of every block holding one (for each of their
# terms, the block whose range starts at or below the number: primary-key probes, then
# the rows by ctid). Each row's arrays are rebuilt from the row itself, so the plan has
# no join to misjudge. Returns each rewritten block's new size.
_PURGE_SQL = textwrap.dedent("""\
    UPDATE bm25_blocks b
    SET (docnos, tfs, dls, last_docno, n) = (
      SELECT coalesce(array_agg(u.docno ORDER BY u.docno), '{}'), coalesce(array_agg(u.tf ORDER BY u.docno), '{}'),
             coalesce(array_agg(u.dl ORDER BY u.docno), '{}'), coalesce(max(u.docno), b.first_docno), count(*)
      FROM unnest(b.docnos, b.tfs, b.dls) AS u(docno, tf, dl)
      WHERE u.docno NOT IN (SELECT unnest(CAST(:dead AS bigint[]))))
    WHERE b.corpus = :c AND b.ctid = ANY (CAST(:hit AS tid[]))
    RETURNING b.n""")

#: The blocks holding the tombstoned numbers :dead: for each of their terms, the block
#: whose range starts at or below the number (primary-key probes).
_HIT_SQL = textwrap.dedent("""\
    SELECT DISTINCT h.tid
    FROM bm25_tombstones t CROSS JOIN unnest(t.lexemes) AS l(lexeme)
    CROSS JOIN LATERAL (
      SELECT b2.ctid AS tid FROM bm25_blocks b2
      WHERE b2.corpus = :c AND b2.lexeme = l.lexeme AND b2.first_docno <= t.docno
      ORDER BY b2.first_docno DESC LIMIT 1
    ) h
    WHERE t.corpus = :c AND t.docno = ANY (CAST(:dead AS bigint[]))""")

#: The purged tombstones.
_PURGED_SQL = "DELETE FROM bm25_tombstones t WHERE t.corpus = :c AND t.docno = ANY (CAST(:dead AS bigint[]))"

#: Blocks a purge emptied.
_EMPTIED_SQL = "DELETE FROM bm25_blocks b WHERE b.corpus = :c AND b.n = 0"

#: Whether the corpus has a merged entry.
_ANY_MERGED_SQL = "SELECT EXISTS (SELECT 1 FROM bm25_docs d WHERE d.corpus = :c)"

#: Without merged entries, the blocks and tombstones go whole (a cleared corpus).
_PURGE_ALL_SQL = textwrap.dedent("""\
    WITH
    purged AS (DELETE FROM bm25_tombstones t WHERE t.corpus = :c RETURNING 1),
    emptied AS (DELETE FROM bm25_blocks b WHERE b.corpus = :c RETURNING 1)
    SELECT (SELECT count(*) FROM purged), (SELECT count(*) FROM emptied)""")

#: The advisory lock of a corpus's merges (keys: this name and the corpus row's salt).
_LOCK_KEY = "tnsrag_db.bm25-merge:{schema}:{corpus}"


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What one merge moved: entries and their postings into blocks, tombstones purged."""

    entries: int = 0
    postings: int = 0
    blocks_written: int = 0
    tombstones: int = 0
    #: The last entry id the merge looked at (a sweep continues after it), or None.
    last_id: str | None = None
    #: False when another merge of the corpus held the lock (``wait=False``), or when the
    #: merge was deferred: nothing done.
    ran: bool = True
    #: True when the schema still serves a release that reads postings only as rows (a
    #: rolling upgrade not finished: ``tnsrag db upgrade --finish``): nothing done.
    deferred: bool = False
    #: The roles, other than the merging session's own, of the sessions that held the
    #: corpus's merge lock when a merge that does not wait (``wait=False``) gave up: a role
    #: that took the key by hand. Empty when nothing was skipped, when the holder was a
    #: merge of the same role, or when ``pg_locks`` is not readable.
    held_by: tuple[str, ...] = ()


def blocks_served(conn: Connection) -> bool:
    """Whether every release the schema (on ``conn``'s search path) serves reads postings in
    blocks, so a merge may move them there."""
    floor = conn.execute(f"SELECT serves_from FROM {COMPAT_FUNCTION}()").scalar_one()
    return not serves_releases_before(str(floor), BLOCKS_REVISION)


def merge_postings(conn: Connection, *, schema: str, corpus: str, max_entries: int = 20_000,
                   after: str | None = None, max_tombstones: int = 20_000, wait: bool = True) -> MergeReport:
    """Merge up to ``max_entries`` entries' postings into blocks and purge up to
    ``max_tombstones`` tombstones, in the caller's open transaction ``conn`` (which holds
    the corpus's shared write lock).

    Entries come from the delta's rows (``after=None``: a delta of any corpus size, kept
    small by the merges after writes), or, with ``after`` (``""`` to start), from the
    corpus's entries in id order after it (a sweep of postings written before blocks
    existed; the report's ``last_id`` continues it). ``wait=False`` returns at once
    (``ran=False``, ``held_by`` naming a holder of another role) when another session
    holds the corpus's merge lock (its keys: :func:`~tnsrag_db._store.lock_keys.corpus_keys`);
    ``wait=True`` waits at most ``lock_timeout``. While the schema
    still serves a release older than :data:`BLOCKS_REVISION` nothing moves
    (``deferred=True``).
    """
    if not blocks_served(conn):
        return MergeReport(ran=False, deferred=True)
    keys = corpus_keys(conn, _LOCK_KEY.format(schema=schema, corpus=corpus), corpus)
    if keys is None:
        return MergeReport()  # no corpus row: nothing to merge
    for key in keys:
        if wait:
            advisory_lock(conn, key, shared=False)
        elif not try_advisory_lock(conn, key):
            found = holders(conn, schema=schema, keys=(key,)) or []
            me = str(conn.execute("SELECT current_user").scalar_one())
            return MergeReport(ran=False, held_by=tuple(dict.fromkeys(r for r, _ in found if r != me)))
    c = {"c": corpus}
    if after is None:
        chosen = looked = list(conn.execute(_DELTA_ENTRIES_SQL, {**c, "n": max_entries}).scalars())
    else:
        window = conn.execute(_SWEEP_WINDOW_SQL, {**c, "after": after, "n": max_entries}).all()
        looked = [entry_id for entry_id, _ in window]
        with_terms = [entry_id for entry_id, has_terms in window if has_terms]
        numbered = set(conn.execute(_NUMBERED_SQL, {**c, "ids": with_terms}).scalars()) if with_terms else set()
        chosen = [entry_id for entry_id in with_terms if entry_id not in numbered]
    entries = postings = written = 0
    if chosen:
        # A merge's sorts are large (a transaction re-cuts up to a million postings): in memory.
        conn.execute(f"SET LOCAL work_mem = '{MERGE_WORK_MEM}'")
        for ddl in (_STAGE_DDL, *_MOVE_STAGE_DDL):
            conn.execute(ddl)
        base = conn.execute(_NUMBERS_SQL, {**c, "k": len(chosen)}).scalar_one()
        with _heap_order_scans(conn):
            locked = conn.execute(_LOCK_SQL, {**c, "ids": chosen, "base": base}).scalar_one()
        if locked:
            with hash_joins_only(conn):
                if after is None:
                    conn.execute(_NP_SCAN_SQL, c)
                else:
                    conn.execute(_NP_PROBE_SQL, {**c, "ids": chosen})
            conn.execute(_TAIL_SQL, c)
            moved = conn.execute(_STAGED_NP_SQL).scalar_one()
            tails = conn.execute(_STAGED_TAILS_SQL).scalar_one()
            with tid_scans_only(conn):
                if moved is not None:
                    postings = conn.execute(_GONE_SQL, {**c, "tids": moved}).rowcount
                if tails is not None:
                    conn.execute(_TAILS_GONE_SQL, {**c, "tids": tails})
            entries, written = conn.execute(_BLOCKS_SQL, c).one()
    if conn.execute(_ANY_MERGED_SQL, c).scalar_one():
        dead = list(conn.execute(_TOMBSTONES_SQL, {**c, "m": max_tombstones}).scalars())
        purged = rewritten = 0
        if dead:
            hit = list(conn.execute(_HIT_SQL, {**c, "dead": dead}).scalars())
            with tid_scans_only(conn):
                sizes = list(conn.execute(_PURGE_SQL, {**c, "dead": dead, "hit": hit}).scalars())
            purged = conn.execute(_PURGED_SQL, {**c, "dead": dead}).rowcount
            rewritten = len(sizes)
            if 0 in sizes:
                conn.execute(_EMPTIED_SQL, c)
    else:  # no merged entry left (the corpus was cleared): every block posting is tombstoned
        purged, rewritten = conn.execute(_PURGE_ALL_SQL, c).one()
    return MergeReport(entries=entries, postings=postings, blocks_written=written + rewritten, tombstones=purged,
                       last_id=looked[-1] if looked else None)
