"""Validity in time as SQL: the instant every read answers at, and the one source of every
read path's "valid and recorded then" condition.

An entry may state the interval in which it is true (``valid_from``, inclusive, and
``valid_until``, exclusive; NULL: unbounded). A corpus that keeps history
(:meth:`tnsrag_db.Store.set_history`) keeps each version a write replaces, or a delete
closes, as an entry row of its own (``version_of``: the id it was a version of), recorded
from ``recorded_at`` (NULL: the row's ``created_at``) until ``recorded_until``. A read
answers *at an instant*: the ``as_of`` it was asked (:func:`as_of`, ``RAGContext.as_of``),
else the statement's start; an entry row is seen when

* it is valid then: ``valid_from <= t < valid_until``;
* it was recorded then: ``recorded_at <= t < recorded_until`` (the lower bound only
  when an ``as_of`` is asked: a row a statement sees was written before it started);
* it has not expired then (:mod:`tnsrag_db._store.expiry`, which composes this module's
  conditions into its own: every read path takes them from there).

A graph edge may state a validity too (revision 0017): a walk follows an edge only when it
is valid at the instant (:func:`edge_valid`); in a corpus whose edges state none
(:func:`edges_bounded`), it reads them without the test.

The instant is a bound parameter, ``:tnsrag_as_of`` (NULL: the statement's start), which
the plan runner fills from this module's context variable when a statement does not give
it: no statement builder passes it along, and :func:`as_of` sets it for a block.

Two forms, as for expiry: :func:`valid_row` tests a row already read; :func:`invalid_ids`
selects the ids of a corpus's entries not valid at the instant through the partial
indexes of revision 0015 (one per bound, ``WHERE <bound> IS NOT NULL``): in a corpus
without validity or history each is one empty index probe. Only an ``as_of`` reads the
rows recorded after it, by a scan of the corpus's rows behind a one-time gate.
"""

from __future__ import annotations

from tnsrag_db._db.as_of import AS_OF_PARAM, as_of, asked_as_of, check_as_of, honours_as_of

__all__ = ["AS_OF_PARAM", "ASKED", "INSTANT", "VERSION_KEY", "VERSION_SEPARATOR", "as_of", "asked_as_of", "check_as_of",
           "edge_valid", "edges_bounded", "honours_as_of", "invalid_ids", "valid_row"]

#: Between an entry's id and the number of one of its kept versions (tnsrag_db._store.history).
VERSION_SEPARATOR = "\x1e"
#: The metadata key a kept version carries: the id of the entry it was a version of.
VERSION_KEY = "versionOf"

#: The ``as_of`` asked, or NULL. A scalar subquery (an InitPlan): its value reaches the
#: executor, not the planner, so a statement's generic plan costs what its custom plans do
#: and is kept (a visible NULL would fold the as_of branches away from the custom plans).
ASKED = f"(SELECT CAST(:{AS_OF_PARAM} AS timestamptz))"
#: The instant a statement answers at: the ``as_of`` asked, else the statement's start.
INSTANT = f"coalesce({ASKED}, statement_timestamp())"


def valid_row(alias: str, *, instant: str = INSTANT, asked: str = ASKED) -> str:
    """The condition that entry row ``alias`` (a code constant) is valid and recorded at the
    instant (``instant`` and ``asked``: :data:`INSTANT` and :data:`ASKED` as a statement
    read them once, when it did)."""
    a, t = alias, instant
    return (f"{_holds(a, instant)} AND ({a}.recorded_until IS NULL OR {a}.recorded_until > {t}) "
            f"AND ({asked} IS NULL OR coalesce({a}.recorded_at, {a}.created_at) <= {t})")


def edge_valid(alias: str) -> str:
    """The condition that edge row ``alias`` (a code constant) is valid at the instant: every
    walk and edge listing follows only such edges. An edge states no recording interval (a
    write replaces it), so this is the validity half of :func:`valid_row`."""
    return _holds(alias)


def edges_bounded(corpus: str, *, alias: str = "eb") -> str:
    """Whether some edge of ``corpus`` (an SQL expression: a bound parameter such as ``:c``)
    states a validity: a scalar subquery, run once per statement (an InitPlan) as one probe
    of the partial index of revision 0017, empty for a corpus whose edges state none. A walk
    gates its two ways of reading a node's edges on it: the fan-out index alone (an
    index-only scan) when it is false, each edge tested by :func:`edge_valid` when true."""
    a = alias
    return (f"(SELECT EXISTS (SELECT 1 FROM edges {a} WHERE {a}.corpus = {corpus} "
            f"AND ({a}.valid_from IS NOT NULL OR {a}.valid_until IS NOT NULL)))")


def _holds(a: str, t: str = INSTANT) -> str:
    """Row ``a``'s ``valid_from``/``valid_until`` hold the instant ``t`` (inclusive, exclusive; NULL: unbounded)."""
    return f"({a}.valid_from IS NULL OR {a}.valid_from <= {t}) AND ({a}.valid_until IS NULL OR {a}.valid_until > {t})"


def invalid_ids(corpus: str, *, alias: str = "vi") -> str:
    """A SELECT of the ids (column ``id``, possibly repeated) of the entries of ``corpus`` (an
    SQL expression: a bound parameter such as ``:c``) not valid or not recorded at the
    instant: one range of a partial index per bound, and with an ``as_of`` the rows
    recorded after it."""
    a, t = alias, INSTANT

    def part(condition: str) -> str:
        return f"SELECT {a}.id FROM entries {a} WHERE {a}.corpus = {corpus} AND {condition}"

    return " UNION ALL ".join((
        part(f"{a}.valid_from > {t}"), part(f"{a}.valid_until <= {t}"), part(f"{a}.recorded_until <= {t}"),
        part(f"{ASKED} IS NOT NULL AND coalesce({a}.recorded_at, {a}.created_at) > {t}")))
