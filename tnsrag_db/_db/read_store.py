"""What the read side of the indexes needs of a store (:class:`ReadStore`), and how a store
learns whether metadata filters go through the filter pairs (:data:`FILTER_PAIRS_SQL`).

A :class:`~tnsrag_db._store.store.Store` is a read store, and so is the CLI's
:class:`~tnsrag_db._db.driver.DriverStore` on one psycopg connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from tnsrag_db._db.statement import Plan, Statement

__all__ = ["FILTER_PAIRS_SQL", "FILTER_PAIRS_TRIGGERS", "FilterPairs", "ReadStore"]

_T = TypeVar("_T")

#: The triggers on ``entries`` that keep the metadata filter pairs (revision 0007) while
#: tenancy is on (attached by :func:`tnsrag_db.tenancy.enable`).
FILTER_PAIRS_TRIGGERS = ("tnsrag_filter_pairs_insert", "tnsrag_filter_pairs_update", "tnsrag_filter_pairs_delete")
#: Whether schema ``:s`` matches metadata filters through the filter pairs: tenancy is on
#: (row-level security on ``entries``) and every pair trigger is attached and enabled. One
#: catalog query, sent once per store by its first filtered retrieval, as that plan's first
#: statement (:meth:`ReadStore.filter_pairs_plan`).
FILTER_PAIRS_SQL = (
    "SELECT coalesce((SELECT c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :s AND c.relname = 'entries'), false) "
    "AND (SELECT count(*) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relname = 'entries' "
    "AND tg.tgenabled <> 'D' AND tg.tgname IN ("
    + ", ".join(f"'{name}'" for name in FILTER_PAIRS_TRIGGERS) + f")) = {len(FILTER_PAIRS_TRIGGERS)} AS pairs"
)


class FilterPairs:
    """A store's answer to :data:`FILTER_PAIRS_SQL`, learnt by the first plan that needs it
    and kept (shared by a store and its views over other corpora of the same schema)."""

    __slots__ = ("_schema", "known")

    def __init__(self, schema: str, known: bool | None = None) -> None:
        self._schema = schema
        #: The answer once learnt; None before.
        self.known = known

    def plan(self) -> Plan[bool]:
        """Whether metadata filters go through the filter pairs: from memory once known (no
        statement), else one catalog statement."""
        if self.known is None:
            rows = yield Statement(FILTER_PAIRS_SQL, {"s": self._schema}, ("pairs",))
            self.known = bool(rows[0][0])
        return self.known


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

    def filter_pairs_plan(self) -> Plan[bool]:
        """Whether metadata filters go through the filter pairs (tenancy on for the schema:
        :data:`FILTER_PAIRS_SQL`), as a plan a retrieval's plan runs first: one catalog
        statement the first time, none once known; False: ``metadata @>``."""
        ...

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement (``:name`` parameters) and return its rows."""
        ...

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive a read plan on one connection and return its result."""
        ...
