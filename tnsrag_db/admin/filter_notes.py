"""Why a metadata filter matched nothing: the values its key does take, or the keys that exist.

The reads are a plan (:func:`empty_filter_notes_plan`), so any read runner answers them
(the command line's query, on its one connection)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._store.reads import count_plan
from tnsrag_db._types import validate_filters

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["empty_filter_notes", "empty_filter_notes_plan"]

#: Distinct values read per metadata key when explaining a filter that matched nothing.
_VALUE_SAMPLE = 10_000
#: Values a filter note names at most.
_NAMED_VALUES = 8

_COLUMN_VALUES = {
    "tier": ("tiers", "SELECT DISTINCT tier AS v FROM entries WHERE corpus = :c ORDER BY 1 LIMIT :n"),
    "source": ("sources", "SELECT DISTINCT source AS v FROM entries WHERE corpus = :c AND source IS NOT NULL "
                          "ORDER BY 1 LIMIT :n"),
    "entryId": ("ids", "SELECT id AS v FROM entries WHERE corpus = :c ORDER BY 1 LIMIT :n"),
}


def _nearest(value: str, values: Sequence[str]) -> list[str]:
    """``values`` when few, else those closest to ``value`` (case-insensitively), best first."""
    if len(values) <= _NAMED_VALUES:
        return list(values)
    folded = {v.casefold(): v for v in values}
    close = difflib.get_close_matches(value.casefold(), list(folded), n=_NAMED_VALUES, cutoff=0.5)
    return [folded[v] for v in close] or list(values[:_NAMED_VALUES])


def _values(sql: str, params: Mapping[str, Any]) -> Plan[list[Any]]:
    rows = yield Statement(sql, params)
    return [r[0] for r in rows]


def empty_filter_notes(store: Store, filters: Mapping[str, str] | None) -> list[str]:
    """Why ``filters`` match no entry of the store's corpus (see
    :func:`empty_filter_notes_plan`), read on the store's read path."""
    return store.run(empty_filter_notes_plan(store.corpus, filters))


def empty_filter_notes_plan(corpus: str, filters: Mapping[str, str] | None) -> Plan[list[str]]:
    """Why ``filters`` match no entry of ``corpus``: one note per cause, none when
    some entry matches them all.

    A filter that matches nothing on its own is named with the values its key does take
    (the nearest ones when there are many): ``tier=semantic matches no entry; tiers here:
    SEMANTIC, WORKING``; a metadata key no entry carries is named with the keys that
    exist. When every filter matches some entry but none matches all, the note says so.
    Raises :class:`InvalidFilterError` for a malformed filter.
    """
    checked = validate_filters(filters)
    if not checked or (yield from count_plan(corpus, checked)) > 0:
        return []
    c = {"c": corpus, "n": _VALUE_SAMPLE}
    notes: list[str] = []
    for key, value in checked.items():
        # One filter alone is the whole filter, counted above: not counted again.
        if len(checked) > 1 and (yield from count_plan(corpus, {key: value})) > 0:
            continue
        shown = f"{key}={value}"
        if key in _COLUMN_VALUES:
            plural, sql = _COLUMN_VALUES[key]
            values = yield from _values(sql, c)
        else:
            values = yield from _values("SELECT DISTINCT e.metadata ->> :k AS v FROM entries e "
                                        "WHERE e.corpus = :c AND e.metadata ? :k ORDER BY 1 LIMIT :n", {**c, "k": key})
            plural = f"values of {key} here"
            if not values:
                keys = yield from _values("SELECT DISTINCT jsonb_object_keys(e.metadata) AS k FROM entries e "
                                          "WHERE e.corpus = :c ORDER BY 1 LIMIT :n", c)
                extra = ["tier", "entryId", "source"]
                notes.append(f"{shown} matches no entry; no entry has the metadata key {key!r}; keys here: "
                             f"{', '.join(_nearest(key, extra + keys))}")
                continue
        if not values:
            notes.append(f"{shown} matches no entry; the corpus has no {plural.split()[0]}")
            continue
        label = plural if plural.endswith(" here") else f"{plural} here"
        near = _nearest(value, values)
        more = "" if len(near) == len(values) else " ..."
        notes.append(f"{shown} matches no entry; {label}: {', '.join(near)}{more}")
    if not notes:
        joined = ", ".join(f"{k}={v}" for k, v in checked.items())
        notes.append(f"each of the filters {joined} matches some entry, but no entry matches all of them")
    return notes
