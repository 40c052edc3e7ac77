"""Metadata filters as SQL predicates, applied before top-K in every stream.

Semantics (spec, "Metadata Filtering"; DESIGN): exact, case-sensitive string
equality; every entry must match (AND); a missing key excludes. ``tier``,
``entryId`` and ``source`` map to typed columns; any other key must be present in
the entry's own jsonb metadata with exactly that string value (one ``@>``
containment, served by the GIN index). Values are always bound parameters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tnsrag_db.types import validate_filters

__all__ = ["filter_sql"]

_COLUMN_KEYS = {"tier": "tier", "entryId": "id", "source": "source"}


def filter_sql(filters: Mapping[str, str] | None, *, alias: str = "e", prefix: str = "f") -> tuple[str, dict[str, Any]]:
    """Return ``(predicate, params)`` for ``filters`` on table alias ``alias``.

    The predicate is ``TRUE`` when there is no filter. ``prefix`` keeps parameter
    names unique when several predicates share one statement. ``alias`` and
    ``prefix`` are code constants, never user input.
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
    if custom:
        name = f"{prefix}_meta"
        clauses.append(f"{alias}.metadata @> CAST(:{name} AS jsonb)")
        params[name] = json.dumps(custom, ensure_ascii=False)
    return (" AND ".join(clauses) if clauses else "TRUE"), params
