"""Metadata filters as SQL predicates, applied before top-K in every stream.

Semantics (the SPI's metadata filtering; docs/design.md, "Filters before top-K"): exact, case-sensitive string
equality; every entry must match (AND); a missing key excludes. ``tier``,
``entryId`` and ``source`` map to typed columns; any other key must be present in
the entry's own jsonb metadata with exactly that string value. Values are always bound
parameters.

With tenancy on (:mod:`tnsrag_db.tenancy`; a store's ``filter_pairs_plan()``), the retrieval
statements (the vector and BM25 indexes then pass ``corpus_param``) match a metadata key
through the entries' filter pairs (``entry_filter_pairs``, migration 0007: one row per
top-level string value, kept in the writing transaction by triggers on ``entries`` that
only tenancy attaches) with text equality: under a row-level security policy PostgreSQL
evaluates a condition before the policy (as an index condition) only when its operators
are LEAKPROOF, and ``texteq`` is, jsonb's ``@>`` is not. Metadata values are strings, so
a pair exists exactly when ``metadata @> {key: value}`` holds; the ids then need no read
of the entry rows (index-only scans). Everywhere else (tenancy off, the store's count and
delete, the graph walk) one ``@>`` containment, served by the GIN index.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tnsrag_db._types import validate_filters

__all__ = ["filter_sql", "pair_ids_sql", "pairs_alone"]

_COLUMN_KEYS = {"tier": "tier", "entryId": "id", "source": "source"}


#: The ids of one corpus's entries with one (key, value) pair, as an array computed once per
#: statement (an InitPlan): ``id = ANY (...)`` with leakproof ``texteq`` is then an index
#: condition on the entries' primary key, also below a row-level security policy.
_PAIR_IDS = ("{a}.id = ANY (ARRAY(SELECT {n}.entry_id FROM entry_filter_pairs {n} "
             "WHERE {n}.corpus = :{c} AND {n}.key = :{k} AND {n}.value = :{v} ORDER BY {n}.entry_id))")
#: The same test for one row (a primary-key probe), where the predicate is checked per row.
_PAIR_ROW = ("EXISTS (SELECT 1 FROM entry_filter_pairs {n} WHERE {n}.corpus = :{c} AND {n}.key = :{k} "
             "AND {n}.value = :{v} AND {n}.entry_id = {a}.{col})")
#: The ids of the entries holding every pair, from the pairs alone (the first key's pairs,
#: each other key probed by primary key): no entry row is read.
_PAIRS_ONLY = ("SELECT {n}.entry_id AS id FROM entry_filter_pairs {n} "
               "WHERE {n}.corpus = :{c} AND {n}.key = :{k} AND {n}.value = :{v}")


def filter_sql(filters: Mapping[str, str] | None, *, alias: str = "e", prefix: str = "f",
               corpus_param: str | None = None, per_row: bool = False) -> tuple[str, dict[str, Any]]:
    """Return ``(predicate, params)`` for ``filters`` on table alias ``alias``.

    The predicate is ``TRUE`` when there is no filter. ``prefix`` keeps parameter
    names unique when several predicates share one statement. ``corpus_param`` names
    the statement's bound corpus parameter (the rows of ``alias`` are of that corpus)
    and asks for the filter pairs (a schema at revision 0007 or later): looked up once
    for the statement, the form for a predicate that selects rows, or with ``per_row``
    once per row (a primary-key probe, for a predicate checked on rows already chosen).
    Without ``corpus_param`` metadata keys are matched by ``@>`` alone. ``alias``,
    ``prefix`` and ``corpus_param`` are code constants, never user input.
    """
    checked = validate_filters(filters)
    clauses: list[str] = []
    params: dict[str, Any] = {}
    custom: dict[str, str] = {}
    for key, value in checked.items():
        column = _COLUMN_KEYS.get(key)
        if column is None:
            custom[key] = value
            continue
        name = f"{prefix}_{column}"
        clauses.append(f"{alias}.{column} = :{name}")
        params[name] = value
    for i, (key, value) in enumerate(custom.items() if corpus_param is not None else ()):
        k, v = f"{prefix}_pk{i}", f"{prefix}_pv{i}"
        template = _PAIR_ROW if per_row else _PAIR_IDS
        clauses.append(template.format(a=alias, col="id", n=f"{prefix}_p{i}", c=corpus_param, k=k, v=v))
        params[k], params[v] = key, value
    if custom and corpus_param is None:
        name = f"{prefix}_meta"
        clauses.append(f"{alias}.metadata @> CAST(:{name} AS jsonb)")
        params[name] = json.dumps(custom, ensure_ascii=False)
    return (" AND ".join(clauses) if clauses else "TRUE"), params


def pair_ids_sql(filters: Mapping[str, str] | None, *, prefix: str = "f", corpus_param: str,
                 probe: str | None = None) -> str | None:
    """The entries matching ``filters`` from the filter pairs alone, when every key is a
    metadata key (else None: ``tier``, ``entryId`` and ``source`` need the entry rows).

    Without ``probe``: a SELECT of their ids (column ``id``), ascending (the pairs' primary
    key order). With ``probe`` (an SQL column expression holding an entry id, such as
    ``p.entry_id``): the condition that it is one of them, as primary-key probes of the
    pairs. The triggers that keep the pairs write them in the entries' own transaction, so
    a pair exists exactly when its entry does and holds the value: the same ids as
    :func:`filter_sql` with the same ``corpus_param`` and ``prefix``, whose parameters
    (bound by that call) it shares. ``prefix`` and ``corpus_param`` are code constants.
    """
    names = _pair_names(filters, prefix)
    if names is None:
        return None
    return _pair_probe(names, corpus_param, probe) if probe is not None else _pair_ids(names, corpus_param)


def pairs_alone(filters: Mapping[str, str] | None, *, prefix: str, corpus_param: str | None,
                probe: str) -> tuple[str, str]:
    """``(ids, condition)``: :func:`pair_ids_sql`'s SELECT of the ids and its condition on
    ``probe``, when the pairs are in use (``corpus_param`` given) and every key is a
    metadata key; else ``("", "")`` (the filter goes through the entry rows)."""
    names = _pair_names(filters, prefix) if corpus_param is not None else None
    if names is None or corpus_param is None:
        return "", ""
    return _pair_ids(names, corpus_param), _pair_probe(names, corpus_param, probe)


def _pair_names(filters: Mapping[str, str] | None, prefix: str) -> list[tuple[str, str, str]] | None:
    """Alias, key and value parameter names of each filter key (as :func:`filter_sql` binds
    them), or None when a key is not a metadata key or there is no filter."""
    checked = validate_filters(filters)
    if not checked or any(key in _COLUMN_KEYS for key in checked):
        return None
    return [(f"{prefix}_p{i}", f"{prefix}_pk{i}", f"{prefix}_pv{i}") for i in range(len(checked))]


def _pair_ids(names: list[tuple[str, str, str]], corpus_param: str) -> str:
    n0, k0, v0 = names[0]
    first = _PAIRS_ONLY.format(n=n0, c=corpus_param, k=k0, v=v0)
    others = "".join(" AND " + _PAIR_ROW.format(a=n0, col="entry_id", n=n, c=corpus_param, k=k, v=v)
                     for n, k, v in names[1:])
    return f"{first}{others} ORDER BY {n0}.entry_id"


def _pair_probe(names: list[tuple[str, str, str]], corpus_param: str, probe: str) -> str:
    alias, _, column = probe.rpartition(".")
    return " AND ".join(_PAIR_ROW.format(a=alias, col=column, n=n, c=corpus_param, k=k, v=v) for n, k, v in names)
