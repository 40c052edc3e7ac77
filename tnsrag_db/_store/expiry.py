"""Entry expiry as SQL: the one source of every read path's "not expired" condition.

An entry whose ``expires_at`` is at or before the statement's start
(``statement_timestamp()``, one instant for every part of one statement) is expired: no read
returns it from that instant on, and a sweep (:meth:`tnsrag_db.Store.sweep`) deletes it with
its postings and vectors.

Every read also answers at an instant (:mod:`tnsrag_db._store.validity`: the ``as_of``
asked, else the statement's start), and these conditions include validity: an entry row is
*live* when it has not expired, is valid and was recorded at that instant (the sweep alone
compares with the statement's start, :data:`EXPIRED`). The forms, for the kinds of read:

* :func:`live` tests an entry row already read (a primary-key probe, a walk step).
* :func:`none_excluded` is the gate of every check, read once per statement: true when no
  ``as_of`` is asked and no entry of the corpus has any bound in time
  (:data:`~tnsrag_db._db.as_of.BOUNDED`: one probe of an empty range of the partial index
  over the bounded entries, revision 0018) or none is outside its bounds now (one empty
  range of each bound's index). A corpus without expiry, validity or history pays the
  first probe alone, one whose bounds exclude nothing now the others too.
* :func:`unexpired_row` checks one entry id behind the gate (one primary-key probe of the
  entry when the gate is shut): for the rankings, which check only the candidates they
  are about to return (an HNSW scan's rows, keyword search's best candidates), so a check
  costs per candidate, not per excluded entry of the corpus.
* :func:`expired_ids` selects the corpus's entries that are not live, through the partial
  indexes of each bound, and :func:`not_expired` excludes them behind the gate with ``NOT
  IN`` a hashed subplan: for the scans that read every row anyway (exact vector scans).

BM25 statistics (N, average length, df) count an entry that is not live (expired and not
swept yet, a kept version, one outside its validity); its postings are never returned.
"""

from __future__ import annotations

from dataclasses import dataclass

from tnsrag_db._db.as_of import BOUNDED
from tnsrag_db._store.validity import ASKED, INSTANT, invalid_ids, valid_row

__all__ = ["EXPIRED", "NOW", "SweepReport", "expired_ids", "gate", "live", "not_expired", "none_excluded", "unexpired_row"]

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


def live(alias: str, *, instant: str = INSTANT, asked: str = ASKED) -> str:
    """The condition that the entry row ``alias`` has not expired and is valid and recorded at
    the instant (``alias``: a code constant; ``instant`` and ``asked``: as for
    :func:`~tnsrag_db._store.validity.valid_row`)."""
    return (f"({alias}.expires_at IS NULL OR {alias}.expires_at > {instant}) "
            f"AND {valid_row(alias, instant=instant, asked=asked)}")


def expired_ids(corpus: str, *, alias: str = "xp", first: bool = False) -> str:
    """A SELECT of the ids (column ``id``, possibly repeated) of the entries of ``corpus`` (an
    SQL expression: a bound parameter such as ``:c``) expired, not valid or not recorded at
    the instant; read through the partial expiry and validity indexes. ``first``: at most
    the first of each range, each read through its index (as
    :func:`~tnsrag_db._store.validity.invalid_ids`), for an EXISTS."""
    a = alias
    expired = f"SELECT {a}.id FROM entries {a} WHERE {a}.corpus = {corpus} AND {a}.expires_at <= {INSTANT}"
    if first:
        expired = f"({expired} ORDER BY {a}.expires_at LIMIT 1)"
    return f"{expired} UNION ALL {invalid_ids(corpus, alias=a + 'v', first=first)}"


def none_excluded(corpus: str) -> str:
    """The condition that no entry of ``corpus`` (an SQL expression: a bound parameter such as
    ``:c``) needs a check, the gate of every check: no ``as_of`` is asked (the rows recorded
    after it would be left out) and either no entry has a bound in time (one probe of an
    empty range of the partial index over the bounded entries, revision 0018) or none is
    outside its bounds now (:func:`expired_ids`: one empty range of each bound's partial
    index, read only when some entry has a bound). A scalar subquery: PostgreSQL evaluates
    it once per statement (an InitPlan)."""
    # Each probe in the order of its index (the bounded entries' by id, each bound's range by
    # the bound): read through it, whatever a generic plan expects of the corpus.
    return (f"(SELECT {ASKED} IS NULL AND (NOT EXISTS (SELECT 1 FROM entries xg WHERE xg.corpus = {corpus} "
            f"AND ({BOUNDED}) ORDER BY xg.id LIMIT 1) OR NOT EXISTS ({expired_ids(corpus, alias='xn', first=True)})))")


def gate(corpus: str) -> str:
    """A SELECT of one row for a statement to read once (a CTE whose name it hands to
    :func:`unexpired_row`): ``open`` (:func:`none_excluded`), ``t`` (the instant) and
    ``asked`` (the ``as_of`` asked, or NULL)."""
    return f"SELECT {none_excluded(corpus)} AS open, {INSTANT} AS t, {ASKED} AS asked"


def unexpired_row(column: str, corpus: str, *, gate: str = "") -> str:
    """The condition that the entry id ``column`` (of ``corpus``) is live, checked row by row
    behind the gate (:func:`none_excluded`): nothing more than the gate per statement in a
    corpus where no entry needs a check, else one primary-key probe of the entry per row
    checked (an id without an entry row passes). For rows that are few: an HNSW scan's top
    k, the best rows of a ranking checked in their order. ``gate``: the name of a CTE of
    :func:`gate` (of ``corpus``) the statement defines, whose values the check then reads
    instead of computing them in each check (fewer subqueries to plan and start)."""
    # A scalar subquery, not NOT EXISTS: PostgreSQL may run a correlated EXISTS as a hashed
    # subplan over every row it could match (here the whole corpus: the condition has no
    # index of its own), where a probe per checked row is what is wanted.
    if not gate:
        return (f"({none_excluded(corpus)} OR (SELECT {live('xr')} FROM entries xr "
                f"WHERE xr.corpus = {corpus} AND xr.id = {column}) IS NOT FALSE)")
    return (f"((SELECT xq.open FROM {gate} xq) OR (SELECT {live('xr', instant='xq.t', asked='xq.asked')} "
            f"FROM {gate} xq CROSS JOIN entries xr WHERE xr.corpus = {corpus} AND xr.id = {column}) IS NOT FALSE)")


def not_expired(column: str, corpus: str) -> str:
    """The condition that the entry id ``column`` (of ``corpus``, an SQL expression) is live:
    behind the gate (:func:`none_excluded`), ``NOT IN`` :func:`expired_ids`, an uncorrelated
    subquery that PostgreSQL runs once per statement into a hash table, and only when the
    gate is shut. For scans that read every row anyway."""
    return f"({none_excluded(corpus)} OR {column} NOT IN ({expired_ids(corpus)}))"
