"""Entry expiry as SQL: the one source of every read path's "not expired" condition.

An entry whose ``expires_at`` is at or before the statement's start
(``statement_timestamp()``, one instant for every part of one statement) is expired: no read
returns it from that instant on, and a sweep (:meth:`tnsrag_db.Store.sweep`) deletes it with
its postings and vectors. Two forms, for the two kinds of read:

* :func:`live` tests an entry row already read (a primary-key probe, a walk step): a
  comparison of one column.
* :func:`expired_ids` selects the corpus's expired entries through the partial index on
  ``(corpus, expires_at) WHERE expires_at IS NOT NULL`` (revision 0014). The rankings, which
  score postings and vectors without reading entry rows, exclude those ids with ``NOT IN``
  a hashed subplan (:func:`not_expired`; merged postings: their document numbers, beside
  the tombstones): in a corpus without expired entries the index
  probe finds nothing and PostgreSQL answers ``NOT IN`` an empty subplan without hashing
  the left side, so an unexpiring corpus pays one empty index probe per statement.

BM25 statistics (N, average length, df) count an expired entry until the sweep deletes it;
its postings are never scored.

Every read also answers at an instant (:mod:`tnsrag_db._store.validity`: the ``as_of``
asked, else the statement's start), and these conditions include validity: :func:`live`,
:func:`expired_ids` and the two exclusions leave out the entries expired, not valid or not
recorded at that instant (the sweep alone compares with the statement's start,
:data:`EXPIRED`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tnsrag_db._store.validity import INSTANT, invalid_ids, valid_row

__all__ = ["EXPIRED", "NOW", "SweepReport", "expired_ids", "live", "not_expired", "unexpired_row"]

#: The instant a statement compares expiries with.
NOW = "statement_timestamp()"


#: The condition that entry row ``e`` has expired (what a sweep deletes; an index range).
EXPIRED = f"e.expires_at <= {NOW}"


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What :meth:`tnsrag_db.Store.sweep` did: ``deleted`` expired entries (with their postings,
    vectors and edges), ``tombstones`` purged from the merged BM25 blocks by the merge that
    follows, and whether the tables were vacuumed (``vacuumed``: their space, HNSW entries
    included, is then free for new rows)."""

    deleted: int = 0
    tombstones: int = 0
    vacuumed: bool = False


def live(alias: str) -> str:
    """The condition that the entry row ``alias`` has not expired and is valid and recorded at
    the instant (``alias``: a code constant)."""
    return f"({alias}.expires_at IS NULL OR {alias}.expires_at > {INSTANT}) AND {valid_row(alias)}"


def expired_ids(corpus: str, *, alias: str = "xp") -> str:
    """A SELECT of the ids (column ``id``, possibly repeated) of the entries of ``corpus`` (an
    SQL expression: a bound parameter such as ``:c``) expired, not valid or not recorded at
    the instant; read through the partial expiry and validity indexes."""
    return (f"SELECT {alias}.id FROM entries {alias} WHERE {alias}.corpus = {corpus} "
            f"AND {alias}.expires_at <= {INSTANT} UNION ALL {invalid_ids(corpus, alias=alias + 'v')}")


def unexpired_row(column: str, corpus: str) -> str:
    """The condition that the entry id ``column`` (of ``corpus``) is not an expired entry's,
    nor one not valid or not recorded at the instant, checked row by row: nothing more than one empty index probe per statement in a corpus
    without expired entries, else one primary-key probe of the entry per row checked. For
    scans that stop after a few rows (an HNSW scan's top k), where :func:`not_expired` would
    read every expired id of the corpus first."""
    # A scalar subquery, not NOT EXISTS: PostgreSQL may run a correlated EXISTS as a hashed
    # subplan over every row it could match (here the whole corpus: the condition has no
    # index of its own), where a probe per scanned row is what an HNSW scan wants.
    return (f"((SELECT NOT EXISTS ({expired_ids(corpus, alias='xa')})) OR (SELECT {live('xr')} FROM entries xr "
            f"WHERE xr.corpus = {corpus} AND xr.id = {column}) IS NOT FALSE)")


def not_expired(column: str, corpus: str) -> str:
    """The condition that the entry id ``column`` (of ``corpus``, an SQL expression) is not
    an expired entry's: ``NOT IN`` :func:`expired_ids`, an uncorrelated subquery that
    PostgreSQL runs once per statement into a hash table."""
    return f"{column} NOT IN ({expired_ids(corpus)})"
