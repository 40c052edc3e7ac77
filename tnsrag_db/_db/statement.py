"""Statements built without I/O, and plans that run them on a sync or an async connection.

Indexes build :class:`Statement` objects (SQL text with ``:name`` parameters, the bound
values, the result columns) and never execute them. A strategy's retrieval is a
:data:`Plan`: a generator that yields statements and receives their rows, so the same
logic, and the same SQL, runs under :func:`run_plan` on a sync connection and under
:func:`arun_plan` on an async one (the httpx model: one I/O-free core, two thin drivers).
The same two drivers run the library's other connection work, written once as a generator
of calls (see :mod:`tnsrag_db._db.steps`).

Example of a plan with two rounds::

    def plan(index, text):
        rows = yield index.terms_statement(text)
        ranked = yield index.ranking_statement(text, [r.lexeme for r in rows])
        return [shape(r) for r in ranked]
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

__all__ = ["AS_OF_PARAM", "Plan", "Rows", "Statement", "arun_plan", "hidden", "hidden_corpus", "one", "run_plan"]

_T = TypeVar("_T")
_S = TypeVar("_S")
_R = TypeVar("_R")

#: The bound parameter that carries the instant a read answers at (None: the block's
#: ``as_of``, see :mod:`tnsrag_db._db.as_of`, else now).
AS_OF_PARAM = "tnsrag_as_of"

#: Result rows: sequences with attribute access by column name (SQLAlchemy ``Row``).
Rows = Sequence[Any]

#: A retrieval as a generator: yields statements, is sent each one's rows, returns its result.
Plan = Generator["Statement", Rows, _T]


@dataclass(frozen=True, slots=True)
class Statement:
    """One read statement: ``sql`` with ``:name`` placeholders, its bound ``params``, and
    the ``columns`` its rows carry (documentation for readers and explain output; the
    driver does not check them)."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)
    columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A statement that answers at an instant (tnsrag_db._store.validity) names its
        # parameter even when its builder did not: None, the block's as_of or now.
        if f":{AS_OF_PARAM}" in self.sql and AS_OF_PARAM not in self.params:
            object.__setattr__(self, "params", {**self.params, AS_OF_PARAM: None})


def hidden(expr: str) -> str:
    """``expr`` (SQL of a bound parameter) as a scalar subquery: its value reaches the
    executor (an InitPlan, evaluated once per statement) but not the planner.

    For the values of a statement that would change the planner's estimates but not the
    best plan, such as the row count of an ``unnest`` of the query's terms: hidden, they
    leave a custom plan costing what the generic plan costs, and PostgreSQL's
    plan cache, which compares the two after five executions of a prepared statement,
    keeps the generic plan, so the statement is no longer planned at every execution.
    Values whose estimates do choose the plan (a rare filter value) stay visible, and a
    limit is best an integer literal (a hidden one leaves the planner guessing a tenth of
    the rows).
    """
    return f"(SELECT {expr})"


#: The library's names of the bound corpus: ``:c``, or ``:{p}_c`` in a statement whose CTEs
#: and parameters carry a prefix ``p`` (never ``::`` casts or longer names such as ``:k_chunks``).
_CORPUS_PARAM = re.compile(r"(?<![:\w\x5c])(?<!CAST\():(c|[a-z][a-z0-9_]*_c)(?![:\w])")


#: A column filter's value, which stays visible (``tnsrag_db._store.filters``: ``tier``,
#: ``source`` and the entry id, bound as ``:{p}_tier``, ``:{p}_source``, ``:{p}_id``).
_SHOWN_FILTER = re.compile(r"(?<![:\w\x5c]):[a-z][a-z0-9_]*_(?:tier|source|id)(?![:\w])")


@lru_cache(maxsize=512)
def hidden_corpus(sql: str) -> str:
    """``sql`` with every corpus parameter (``:c``, ``:{p}_c``) read through :func:`hidden`.

    For the statements of a retrieval, whose best plan does not depend on which corpus they
    read (each term's postings, an entry's rows, a node's edges: reads by key that start
    from the corpus). The corpus's own statistics, visible, make a custom plan of a corpus
    smaller than the average look cheaper than the generic plan, so in a database of
    several corpora PostgreSQL would plan the statement again at every execution (the long
    keyword statements: several times their run time). Hidden, the corpus costs every plan
    alike, and the generic plan is kept after the plan cache's five custom ones, as in a
    database of one corpus. Idempotent: a statement that embeds a hidden one hides the rest.

    A statement that shows a column filter's value (a rare ``tier`` or ``source`` chooses
    its plan) is planned at every run for that value anyway: it keeps its corpus visible,
    so that the plan is made for the corpus it reads, not for a corpus of average size."""
    if _SHOWN_FILTER.search(sql):
        return sql
    return _CORPUS_PARAM.sub(lambda m: hidden(f"CAST(:{m.group(1)} AS text)"), sql)


def one(statement: Statement) -> Plan[Rows]:
    """The plan that runs ``statement`` and returns its rows."""
    rows = yield statement
    return rows


def run_plan(plan: Generator[_S, _R, _T], execute: Callable[[_S], _R]) -> _T:
    """Drive ``plan`` to its result, running each statement (or other step) it yields with ``execute``.

    An exception from ``execute`` is thrown into the plan (a plan may catch it, as a
    ``try`` around ``yield``), and propagates from here when the plan does not."""
    try:
        statement = next(plan)
        while True:
            try:
                rows = execute(statement)
            except BaseException as exc:  # noqa: BLE001 - handed to the plan, re-raised by it
                statement = plan.throw(exc)
            else:
                statement = plan.send(rows)
    except StopIteration as stop:
        result: _T = stop.value
        return result
    finally:
        plan.close()


async def arun_plan(plan: Generator[_S, _R, _T], execute: Callable[[_S], Awaitable[_R]]) -> _T:
    """:func:`run_plan` for an async ``execute`` (same plan, same statements)."""
    try:
        statement = next(plan)
        while True:
            try:
                rows = await execute(statement)
            except BaseException as exc:  # noqa: BLE001 - handed to the plan, re-raised by it
                statement = plan.throw(exc)
            else:
                statement = plan.send(rows)
    except StopIteration as stop:
        result: _T = stop.value
        return result
    finally:
        plan.close()
