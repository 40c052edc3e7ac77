"""Async execution of plans (issue 13, in progress): ``await arun(store, plan)`` runs a
:data:`~tnsrag_db.db.statement.Plan` on an async psycopg connection for ``store``'s
database, with the same statements :meth:`Store.run` sends."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tnsrag_db.db.statement import Plan
    from tnsrag_db.store.store import Store

__all__ = ["arun"]

_T = TypeVar("_T")


async def arun(store: Store, plan: Plan[_T], *, snapshot: bool = False) -> _T:
    """Drive ``plan`` on an async connection of ``store``'s database (see :meth:`Store.run`)."""
    raise NotImplementedError("async execution lands with the async API (issue 13)")
