"""The SQL of the entry write and delete paths, and their small shared helpers.

Every statement here is driven by stage rows (see :mod:`tnsrag_db._store.staging`) and
reaches the shared tables only through :func:`probe` lookups; ``:c`` is the corpus. The
statements are dedented templates, one named CTE per step with a comment saying why;
``{...}`` fields are filled with code constants only (every value is bound). BM25's
statements (postings, document frequencies, statistics, and the delete of locked entries
with their postings) are :mod:`tnsrag_db._store.bm25.sql`; the planner settings here
(:func:`planner_nodes_off`, :func:`tid_scans_only`, :func:`hash_joins_only`) serve both,
and the merge.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg

from tnsrag_db._db.pool import Connection

__all__ = ["WRITTEN", "count_written", "hash_joins_only", "insert_or_lock_sql", "lock_matching_sql", "planner_nodes_off",
           "probe", "tid_scans_only"]

#: Key in a connection's ``info`` counting the entries written by the current write
#: transaction (absent outside one).
WRITTEN = "tnsrag_written"


def probe(table: str, alias: str, columns: str, key: str) -> str:
    """``CROSS JOIN LATERAL`` of one primary-key (or unique-prefix) lookup in ``table`` per
    outer row: ``corpus = :c AND <key>``.

    The write path reaches the shared tables only this way, driven by its stage rows.
    ``OFFSET 0`` keeps the planner from turning the lookups into a join it may reorder:
    a corpus created after the last ANALYZE is estimated at one row (the statistics'
    most-common-values list covers every row then), and the planner would scan the whole
    corpus once per stage row. Targets of UPDATE and DELETE are then named by ``ctid``
    (a TID scan), for the same reason.
    """
    return (f"CROSS JOIN LATERAL (SELECT {columns} FROM {table} {alias} "
            f"WHERE {alias}.corpus = :c AND {key} OFFSET 0) {alias}")


@contextmanager
def planner_nodes_off(conn: Connection, *names: str) -> Iterator[None]:
    """The planner's ``enable_*`` settings ``names`` off for the statements of the block (in
    ``conn``'s transaction). The planner takes a disabled kind of node only where no other
    plan exists (PostgreSQL 18 counts them, earlier releases add a prohibitive cost): the
    choice no longer rests on the statistics.

    A statement of the block that fails (a deadlock, say) leaves the settings to the
    transaction's rollback: setting them back in the aborted transaction would fail, and
    hide the error the caller retries on."""
    settings = ", ".join(f"set_config('{name}', :v, true)" for name in names)
    conn.execute(f"SELECT {settings}", {"v": "off"})
    try:
        yield
    except BaseException:
        raw = conn.driver
        if raw is None or raw.info.transaction_status != psycopg.pq.TransactionStatus.INERROR:
            conn.execute(f"SELECT {settings}", {"v": "on"})
        raise
    conn.execute(f"SELECT {settings}", {"v": "on"})


def tid_scans_only(conn: Connection) -> AbstractContextManager[None]:
    """Index and sequential scans off for the statements of the block (in ``conn``'s
    transaction): a statement choosing its rows by ``ctid = ANY (...)`` beside ``corpus =
    :c`` is then a TID scan whatever the statistics (stale ones can make an index scan of
    the whole corpus, testing every row against the array, look cheaper; and the planner
    costs each ctid of a long constant array as a random page read, so that a scan of the
    whole table, every corpus's rows, looks cheaper than a few thousand of them)."""
    return planner_nodes_off(conn, "enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan", "enable_seqscan")


def hash_joins_only(conn: Connection) -> AbstractContextManager[None]:
    """Nested loops and merge joins off for the statements of the block (in ``conn``'s
    transaction): each join is a hash join, one pass over each side (a lateral probe, which
    only a nested loop can run, stays one). Stale statistics can take a corpus for one row
    and plan a nested loop that reads the other side once per row."""
    return planner_nodes_off(conn, "enable_nestloop", "enable_mergejoin")


def count_written(conn: Connection, n: int) -> None:
    """Count ``n`` written entries toward the statistics refresh of the write transaction
    ``conn`` belongs to (nothing outside one)."""
    if WRITTEN in conn.info:
        conn.info[WRITTEN] += n


def _expires(stage: str) -> str:
    """A staged entry's expiry (alias ``stage``): its instant, or its time-to-live from this
    statement's start (the database's clock), or NULL."""
    return f"coalesce({stage}.expires_at, statement_timestamp() + {stage}.ttl * interval '1 second')"


# One pass in id order inserts the new entries and locks the existing ones. Returns the
# inserted ids in batch order.
INSERT_OR_LOCK_SQL = textwrap.dedent("""\
    WITH
    -- ins, every staged entry inserted, in id order, with its final length and lexemes. The
    -- DO UPDATE ... WHERE false updates nothing but locks every conflicting row (its newest
    -- version, waiting for a concurrent writer or deleter to finish; a row deleted meanwhile
    -- is inserted instead): every entry of the batch is ours after this statement, taken in
    -- the same order by every writer and deleter (no deadlock, no lost write). Only a
    -- key-preserving column is "set", so the lock is FOR NO KEY UPDATE and does not block
    -- edge inserts checking their foreign keys.
    ins AS (
      INSERT INTO entries AS e (corpus, id, content, tier, source, parent_id, ts, metadata, content_hash,
                                doc_len, lexemes{EXPIRY_COLUMN})
      SELECT :c, s.id, s.content, s.tier, s.source, s.parent_id, s.ts, s.metadata, s.content_hash,
             coalesce(l.doc_len, 0), coalesce(l.lexemes, '{}'){EXPIRY_VALUE}
      FROM tnsrag_stage_entries s LEFT JOIN tnsrag_stage_lens l ON l.ord = s.ord
      ORDER BY s.id
      ON CONFLICT (corpus, id) DO UPDATE SET content = e.content WHERE false
      RETURNING id
    ),
    -- marked, the stage rows of the inserted entries set to state 'i', so the later steps
    -- join the stage instead of passing id arrays.
    marked AS (
      UPDATE tnsrag_stage_entries s SET state = 'i' FROM ins WHERE s.id = ins.id
      RETURNING s.ord, s.id
    )
    SELECT id FROM marked ORDER BY ord""")


def insert_or_lock_sql(expiring: bool, bounded: bool = False) -> str:
    """:data:`INSERT_OR_LOCK_SQL` for a batch with (``expiring``) or without an entry that
    expires, and with (``bounded``) or without one that states a validity: without, the
    statement leaves those columns alone (NULL), so a batch without expiry or validity
    writes a schema from before revision 0014 (0015) as well."""
    columns = (", expires_at" if expiring else "") + (", valid_from, valid_until" if bounded else "")
    values = (", " + _expires("s") if expiring else "") + (", s.valid_from, s.valid_until" if bounded else "")
    return INSERT_OR_LOCK_SQL.replace("{EXPIRY_COLUMN}", columns).replace("{EXPIRY_VALUE}", values)

# The existing rows are locked by INSERT_OR_LOCK_SQL; this statement's snapshot sees their
# newest committed versions. Identical hash = unchanged, unless a time-to-live is given: each
# write of it sets the expiry anew. Returns each row's ctid too: the row stays where it is
# until this write updates it (it is locked), so the steps before the update reach it by ctid.
COMPARE_SQL = textwrap.dedent(f"""\
    SELECT x.id, s.ord, x.content_hash = s.content_hash AND s.ttl IS NULL AS same, x.content <> s.content AS text_changed, x.doc_len,
           x.ctid AS tid
    FROM tnsrag_stage_entries s
    {probe('entries', 'x', 'x.id, x.content_hash, x.content, x.doc_len, x.ctid', 'x.id = s.id')}
    WHERE s.state IS NULL
    ORDER BY x.id""")

# The states the comparison found ('c' text changed, 'u' other fields, 'n' unchanged) and
# the rows' ctids, by ord.
SET_STATES_SQL = textwrap.dedent("""\
    UPDATE tnsrag_stage_entries s SET state = v.state, tid = v.tid
    FROM unnest(CAST(:ords AS int[]), CAST(:states AS text[]), CAST(:tids AS tid[])) AS v(ord, state, tid)
    WHERE s.ord = v.ord""")

# The ctids staged in tnsrag_stage_old, as one array (its text: one value to carry, which
# the caller binds again as :tids; NULL when none is staged).
STAGED_OLD_SQL = "SELECT CAST(array_agg(o.tid) AS text) FROM tnsrag_stage_old o"

# The staged rows of embeddings deleted by their ctids :tids (STAGED_OLD_SQL), run under
# tid_scans_only: a TID scan whatever the statistics (BM25's OLD_POSTINGS_GONE_SQL deletes
# old postings the same way). Planned on them, a corpus the statistics do not know yet (estimated at one row) is read whole through its
# index instead, every row tested against every target. The ctids are a bound constant, not
# a read of the stage table: a statement that changes rows named by ctid must read no table
# of the session's own (see tnsrag_db._store.citus, "Modifications by ctid").
OLD_VECTORS_GONE_SQL = textwrap.dedent("""\
    DELETE FROM embeddings v
    WHERE v.corpus = :c AND v.ctid = ANY (CAST(:tids AS tid[]))""")

# The changed entries' ids, for UPDATE_CHANGED_SQL.
CHANGED_IDS_SQL = "SELECT s.id FROM tnsrag_stage_entries s WHERE s.state IN ('u', 'c') ORDER BY s.id"

# Every changed entry's new fields; length and lexemes only where the text changed. The
# targets are named by their keys: the constant array :ids (tested by hash, once per row
# read, whether the rows are read by the primary key or, on statistics that do not know
# the corpus yet, through another index of the corpus), joined to their stage rows by hash
# (the caller turns nested loops off: on such statistics the corpus looks like one row,
# and a nested loop would read the stage once per row). Not by ctid: the stage rows are a
# table of the session's own, and a statement reading one may not name the rows it changes
# by ctid (see tnsrag_db._store.citus, "Modifications by ctid"). The expiry is computed in
# v, from the stage row alone. Index scans stay on: the triggers on entries probe other
# tables by key.
UPDATE_CHANGED_SQL = textwrap.dedent(f"""\
    WITH
    -- v, each changed entry's stage row, new length and expiry.
    v AS MATERIALIZED (
      SELECT s.*, l.doc_len AS new_len, l.lexemes AS new_lexemes, {_expires('s')} AS new_expires
      FROM tnsrag_stage_entries s LEFT JOIN tnsrag_stage_lens l ON l.ord = s.ord
      WHERE s.state IN ('u', 'c')
    )
    UPDATE entries e
    SET content = v.content, tier = v.tier, source = v.source, parent_id = v.parent_id, ts = v.ts,
        metadata = v.metadata, content_hash = v.content_hash, expires_at = v.new_expires,
        valid_from = v.valid_from, valid_until = v.valid_until,
        doc_len = CASE WHEN v.state = 'c' THEN coalesce(v.new_len, 0) ELSE e.doc_len END,
        lexemes = CASE WHEN v.state = 'c' THEN coalesce(v.new_lexemes, '{{}}') ELSE e.lexemes END,
        updated_at = now()
    FROM v
    WHERE e.corpus = :c AND e.id = ANY (CAST(:ids AS text[])) AND e.id = v.id""")

# Stale vectors must not outlive the text they were computed from: staged here, deleted
# by OLD_VECTORS_GONE_SQL.
STAGE_STALE_VECTORS_SQL = textwrap.dedent(f"""\
    INSERT INTO tnsrag_stage_old (tid)
    SELECT q.ctid FROM tnsrag_stage_entries s
    {probe('embeddings', 'q', 'q.ctid', 'q.entry_id = s.id')}
    WHERE s.state = 'c'""")

# -- deletes ------------------------------------------------------------------------------
# {predicate} is the library's own filter SQL over e (values bound).
_LOCK_MATCHING_SQL = textwrap.dedent("""\
    WITH
    -- l, the matching entries locked in id order, as writers take them.
    l AS (SELECT e.id FROM entries e WHERE e.corpus = :c AND {predicate} ORDER BY e.id FOR UPDATE OF e)
    INSERT INTO tnsrag_stage_ids (id) SELECT id FROM l""")


def lock_matching_sql(predicate: str) -> str:
    """First lock the entries matching ``predicate`` (the library's own filter SQL over
    ``e``, values bound), in id order as writers do (so deletes and upserts cannot
    deadlock), and remember them in ``tnsrag_stage_ids``; then
    :data:`~tnsrag_db._store.bm25.sql.STAGE_LOCKED_SQL` and
    :data:`~tnsrag_db._store.bm25.sql.DELETE_LOCKED_SQL` delete them with their postings."""
    return _LOCK_MATCHING_SQL.format(predicate=predicate)
