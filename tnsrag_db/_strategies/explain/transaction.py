"""The one read-only snapshot an explanation's statements share."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by every strategy module
    from tnsrag_db._db.statement import Rows, Statement
    from tnsrag_db._store.store import Store

__all__ = ["snapshot"]


def snapshot(store: Store) -> AbstractContextManager[Callable[[Statement], Rows]]:
    """A statement executor whose statements all run in one read-only REPEATABLE READ
    transaction, so every figure of an explanation comes from the same committed data:
    ``with snapshot(store) as execute: rows = execute(statement)``.

    The store's read path (:meth:`~tnsrag_db._db.session.Session.executor` with
    ``snapshot=True``): its statement timeout, its read replicas, and its driver-error
    mapping (a cancelled statement is a :class:`~tnsrag_db._errors.StatementTimeoutError`,
    every other driver error a :class:`~tnsrag_db._errors.DatabaseError` subclass)."""
    return store.session.executor(snapshot=True)
