"""What the read side of the indexes needs of a store (:class:`ReadStore`), and how a store
learns whether metadata filters go through the filter pairs (:data:`FILTER_PAIRS_SQL`).

A :class:`~tnsrag_db._store.store.Store` is a read store, and so is the CLI's
:class:`~tnsrag_db._db.driver.DriverStore` on one psycopg connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from tnsrag_db._db.statement import Plan

__all__ = ["FILTER_PAIRS_SQL", "FILTER_PAIRS_TRIGGERS", "ReadStore"]

_T = TypeVar("_T")

#: The triggers on ``entries`` that keep the metadata filter pairs (revision 0007) while
#: tenancy is on (attached by :func:`tnsrag_db.tenancy.enable`).
FILTER_PAIRS_TRIGGERS = ("tnsrag_filter_pairs_insert", "tnsrag_filter_pairs_update", "tnsrag_filter_pairs_delete")
#: Whether schema ``:s`` matches metadata filters through the filter pairs: tenancy is on
#: (row-level security on ``entries``) and every pair trigger is attached and enabled. One
#: catalog query, sent once per store by its first filtered retrieval
#: (:meth:`ReadStore.uses_filter_pairs`).
FILTER_PAIRS_SQL = (
    "SELECT coalesce((SELECT c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :s AND c.relname = 'entries'), false) "
    "AND (SELECT count(*) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relname = 'entries' "
    "AND tg.tgenabled <> 'D' AND tg.tgname IN ("
    + ", ".join(f"'{name}'" for name in FILTER_PAIRS_TRIGGERS) + f")) = {len(FILTER_PAIRS_TRIGGERS)} AS pairs"
)


@runtime_checkable
class ReadStore(Protocol):
    """The read side of a store, as an index's read methods use it: one corpus of one schema."""

    @property
    def corpus(self) -> str:
        """The corpus every statement is confined to."""
        ...

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the library's tables."""
        ...

    @property
    def location(self) -> str:
        """The database the store reads, without the password (two stores of one corpus
        read the same rows when their locations and schemas are equal)."""
        ...

    @property
    def max_query_terms(self) -> int:
        """How many words of a query are analysed."""
        ...

    def uses_filter_pairs(self) -> bool:
        """Whether metadata filters go through the filter pairs (tenancy on for the schema:
        :data:`FILTER_PAIRS_SQL`, asked once and remembered); False: ``metadata @>``."""
        ...

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement (``:name`` parameters) and return its rows."""
        ...

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive a read plan on one connection and return its result."""
        ...
