"""How a store learns whether metadata filters go through the filter pairs
(:data:`FILTER_PAIRS_SQL`): :class:`FilterPairs`, kept by a store and its views."""

from __future__ import annotations

from tnsrag_db._db.statement import Plan, Statement

__all__ = ["FILTER_PAIRS_SQL", "FILTER_PAIRS_TRIGGERS", "FilterPairs"]

#: The triggers on ``entries`` that keep the metadata filter pairs (revision 0007) while
#: tenancy is on (attached by :func:`tnsrag_db.tenancy.enable`).
FILTER_PAIRS_TRIGGERS = ("tnsrag_filter_pairs_insert", "tnsrag_filter_pairs_update", "tnsrag_filter_pairs_delete")
#: Whether schema ``:s`` matches metadata filters through the filter pairs: tenancy is on
#: (row-level security on ``entries``) and every pair trigger is attached and enabled. One
#: catalog query, sent once per store by its first filtered retrieval, as that plan's first
#: statement (:meth:`~tnsrag_db._store.store.Store.filter_pairs_plan`).
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
