"""Driving a strategy's plan outside its ``retrieve`` (not collected: no ``test_`` prefix)."""

from __future__ import annotations

from typing import TypeVar

from tnsrag_db._db.statement import Plan, Rows, Statement, run_plan
from tnsrag_db._store.store import Store

__all__ = ["drive"]

_T = TypeVar("_T")


def drive(store: Store, plan: Plan[_T]) -> tuple[_T, list[Statement]]:
    """``plan`` driven by :func:`run_plan` with :meth:`Store.run`'s executor, and the statements it yielded."""
    yielded: list[Statement] = []
    with store.session.executor() as execute:
        def record(statement: Statement) -> Rows:
            yielded.append(statement)
            return execute(statement)

        return run_plan(plan, record), yielded
