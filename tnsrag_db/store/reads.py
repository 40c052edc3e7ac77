"""The store's entry reads as I/O-free statements (``get``, ``get_many``, ``count``), for the
sync and the async driver alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tnsrag_db.db.statement import Plan, Statement
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.types import MemoryEntry

__all__ = ["ENTRY_FIELDS", "count_plan", "get_many_plan", "get_plan"]

#: The columns of an entry as :func:`_row_to_entry <tnsrag_db.store.store>` reads them.
ENTRY_FIELDS = ("id", "content", "tier", "source", "parent_id", "ts", "metadata")
_SELECT = f"SELECT {', '.join(ENTRY_FIELDS)} FROM entries"


def get_plan(corpus: str, entry_id: str) -> Plan[MemoryEntry | None]:
    """The entry ``entry_id`` of ``corpus``, or None."""
    from tnsrag_db.store.store import _row_to_entry

    rows = yield Statement(f"{_SELECT} WHERE corpus = :c AND id = :id", {"c": corpus, "id": entry_id}, ENTRY_FIELDS)
    return _row_to_entry(rows[0]) if rows else None


def get_many_plan(corpus: str, entry_ids: Sequence[str]) -> Plan[dict[str, MemoryEntry]]:
    """The entries of ``corpus`` with these ids that exist, by id."""
    from tnsrag_db.store.store import _row_to_entry

    rows = yield Statement(f"{_SELECT} WHERE corpus = :c AND id = ANY(:ids)", {"c": corpus, "ids": list(entry_ids)},
                           ENTRY_FIELDS)
    return {r.id: _row_to_entry(r) for r in rows}


def count_plan(corpus: str, filters: Mapping[str, str] | None = None) -> Plan[int]:
    """How many entries of ``corpus`` match ``filters`` (exact-match, as in retrieval; checked
    when the plan starts)."""
    predicate, params = filter_sql(filters)
    rows = yield Statement(f"SELECT count(*) AS n FROM entries e WHERE e.corpus = :c AND {predicate}",
                           {"c": corpus, **params}, ("n",))
    return int(rows[0].n)
