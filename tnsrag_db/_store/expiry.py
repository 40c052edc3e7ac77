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
  first probe alone, one whose bounds exclude nothing now the others too. It is a case of
  :func:`exclusion`, which also tells a read now of a corpus whose only rows left out are
  kept versions (revision 0019's index of the entries a delete closed, one empty probe):
  their ids tell them apart, and no row is probed.
* :func:`unexpired_row` checks one entry id behind the gate (one primary-key probe of the
  entry when the gate is shut, a test of the id when only kept versions are left out):
  for the rankings, which check only the candidates they are about to return (an HNSW
  scan's rows, keyword search's best candidates), so a check costs per candidate, not per
  excluded entry of the corpus.
* :func:`expired_ids` selects the corpus's entries that are not live, through the partial
  indexes of each bound, and :func:`not_expired` excludes them behind the gate with ``NOT
  IN`` a hashed subplan: for the scans that read every row anyway (exact vector scans).

BM25 statistics (N, average length, df) count an entry that is not live (expired and not
swept yet, a kept version, one outside its validity); its postings are never returned.
"""

from __future__ import annotations

from dataclasses import dataclass

from tnsrag_db._db.as_of import BOUNDED
from tnsrag_db._store.validity import ASKED, INSTANT, VERSION_SEPARATOR, invalid_ids, valid_row

__all__ = ["EXPIRED", "NOW", "SweepReport", "exclusion", "expired_ids", "gate", "live", "not_expired", "none_excluded",
           "unexpired_row"]

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


def expired_ids(corpus: str, *, alias: str = "xp") -> str:
    """A SELECT of the ids (column ``id``, possibly repeated) of the entries of ``corpus`` (an
    SQL expression: a bound parameter such as ``:c``) expired, not valid or not recorded at
    the instant; read through the partial expiry and validity indexes."""
    a = alias
    expired = f"SELECT {a}.id FROM entries {a} WHERE {a}.corpus = {corpus} AND {a}.expires_at <= {INSTANT}"
    return f"{expired} UNION ALL {invalid_ids(corpus, alias=a + 'v')}"


def none_excluded(corpus: str) -> str:
    """The condition that no entry of ``corpus`` (an SQL expression: a bound parameter such as
    ``:c``) needs a check, the gate of every check: no ``as_of`` is asked (the rows recorded
    after it would be left out) and either no entry has a bound in time (one probe of an
    empty range of the partial index over the bounded entries, revision 0018) or none is
    outside its bounds now: :func:`exclusion` is 0."""
    return f"({exclusion(corpus)} = 0)"


def _first(corpus: str, condition: str, order: str) -> str:
    """EXISTS of an entry of ``corpus`` meeting ``condition``, read as the first row of an
    index range in the order ``order`` (so that it is read through that index however many
    rows a generic plan expects: expecting many, it would scan the table for the first)."""
    return f"EXISTS (SELECT 1 FROM entries xg WHERE xg.corpus = {corpus} AND {condition} ORDER BY {order} LIMIT 1)"


def exclusion(corpus: str) -> str:
    """What the reads of ``corpus`` (an SQL expression) leave out at the statement's instant, a
    scalar subquery PostgreSQL evaluates once per statement, each probe only when reached:

    * 0, nothing: no ``as_of`` is asked and no entry has a bound in time
      (:data:`~tnsrag_db._db.as_of.BOUNDED`, one empty probe of revision 0018's index), or
      none is outside its bounds now (an empty range of each bound's partial index);
    * 1, kept versions alone: a read now, no entry expired or outside its validity, and the
      rows whose recording ended are all kept versions (no entry a delete closed: an empty
      range of revision 0019's index), all ended by now. A row is then live exactly when its
      id is not a version's (:data:`~tnsrag_db._store.validity.VERSION_SEPARATOR`, which no
      application id holds): a test of the id, no probe;
    * 2, rows to check one by one (an ``as_of``, expired entries, entries outside their
      validity, entries a delete closed)."""
    c, t = corpus, INSTANT
    shut = " OR ".join((
        _first(c, f"xg.expires_at <= {t}", "xg.expires_at"),
        _first(c, f"xg.valid_from > {t}", "xg.valid_from"),
        _first(c, f"xg.valid_until <= {t}", "xg.valid_until"),
        _first(c, f"xg.recorded_until > {t}", "xg.recorded_until DESC")))
    return (f"(SELECT CASE WHEN {ASKED} IS NOT NULL THEN 2 WHEN NOT {_first(c, f'({BOUNDED})', 'xg.id')} THEN 0 "
            f"WHEN {shut} THEN 2 WHEN NOT {_first(c, f'xg.recorded_until <= {t}', 'xg.recorded_until')} THEN 0 "
            f"WHEN {_first(c, 'xg.recorded_until IS NOT NULL AND xg.version_of IS NULL', 'xg.recorded_until')} "
            "THEN 2 ELSE 1 END)")


def _not_version(column: str) -> str:
    """The condition that entry id ``column`` is not a kept version's (no application id
    holds the separator)."""
    return f"strpos({column}, chr({ord(VERSION_SEPARATOR)})) = 0"


def gate(corpus: str) -> str:
    """A SELECT of one row for a statement to read once (a CTE whose name it hands to
    :func:`unexpired_row`): ``open`` (:func:`none_excluded`), ``s`` (:func:`exclusion`),
    ``t`` (the instant) and ``asked`` (the ``as_of`` asked, or NULL)."""
    return (f"SELECT xs.s = 0 AS open, xs.s, {INSTANT} AS t, {ASKED} AS asked "
            f"FROM (SELECT {exclusion(corpus)} AS s OFFSET 0) xs")


def unexpired_row(column: str, corpus: str, *, gate: str = "") -> str:
    """The condition that the entry id ``column`` (of ``corpus``) is live, checked row by row
    behind the gate (:func:`exclusion`): nothing more than the gate per statement in a corpus
    where no entry needs a check; a test of the id where only kept versions are left out;
    else one primary-key probe of the entry per row checked (an id without an entry row
    passes). For rows that are few: an HNSW scan's top k, the best rows of a ranking checked
    in their order. ``gate``: the name of a CTE of :func:`gate` (of ``corpus``) the
    statement defines, whose values the check then reads instead of computing them in each
    check (fewer subqueries to plan and start)."""
    # A scalar subquery, not NOT EXISTS: PostgreSQL may run a correlated EXISTS as a hashed
    # subplan over every row it could match (here the whole corpus: the condition has no
    # index of its own), where a probe per checked row is what is wanted.
    if not gate:
        return (f"({none_excluded(corpus)} OR (SELECT {live('xr')} FROM entries xr "
                f"WHERE xr.corpus = {corpus} AND xr.id = {column}) IS NOT FALSE)")
    return (f"(CASE (SELECT xq.s FROM {gate} xq) WHEN 0 THEN TRUE WHEN 1 THEN {_not_version(column)} "
            f"ELSE (SELECT {live('xr', instant='xq.t', asked='xq.asked')} FROM {gate} xq CROSS JOIN entries xr "
            f"WHERE xr.corpus = {corpus} AND xr.id = {column}) IS NOT FALSE END)")


def not_expired(column: str, corpus: str) -> str:
    """The condition that the entry id ``column`` (of ``corpus``, an SQL expression) is live:
    behind the gate (:func:`none_excluded`), ``NOT IN`` :func:`expired_ids`, an uncorrelated
    subquery that PostgreSQL runs once per statement into a hash table, and only when the
    gate is shut. For scans that read every row anyway."""
    return f"({none_excluded(corpus)} OR {column} NOT IN ({expired_ids(corpus)}))"
