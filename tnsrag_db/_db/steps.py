"""Connection work written once for sync and async psycopg connections.

psycopg's own model: the work is a generator of *calls*. It yields zero-argument callables
(``driver.commit``, ``lambda: driver.execute(sql)``) and is sent each one's result;
:func:`run_steps` drives it on a sync connection, where a call's result is the result, and
:func:`arun_steps` on an async one, where a call returns an awaitable, awaited before its
result is sent. An exception a call raises is thrown into the generator, so a ``try``
around a ``yield`` handles it under both drivers. psycopg 3's sync and async connections
share their method names (``execute``, ``commit``, ``rollback``, ``set_autocommit``,
``close``), so one generator serves both: the checkout, the statement timeout, the
hand-back and the retries of the read runner (:mod:`tnsrag_db._db.runner`), the pools' set-up
and reset of a connection (:mod:`tnsrag_db._db.pool`, :mod:`tnsrag_db._db.aio`) and the
library's connection hooks (:mod:`tnsrag_db._db.hooks`). The two drivers are the plans'
(:func:`~tnsrag_db._db.statement.run_plan`, :func:`~tnsrag_db._db.statement.arun_plan`).

Example: a ``SET`` whose transaction is committed, on either kind of connection::

    def set_work_mem(driver):
        yield lambda: driver.execute("SET work_mem = '64MB'")
        yield driver.commit

    run_steps(set_work_mem(sync_driver))
    await arun_steps(set_work_mem(async_driver))
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import psycopg

from tnsrag_db._db.statement import arun_plan, run_plan

__all__ = ["Steps", "arun_steps", "run_steps", "steps_for"]

_T = TypeVar("_T")

#: Connection work: a generator of zero-argument calls, sent each call's (awaited) result.
Steps = Generator[Callable[[], Any], Any, _T]


def run_steps(steps: Steps[_T]) -> _T:
    """Drive ``steps`` on a sync connection: each call's result is sent back as it is."""
    return run_plan(steps, operator.call)


async def arun_steps(steps: Steps[_T]) -> _T:
    """Drive ``steps`` on an async connection: each call's awaitable is awaited first."""
    return await arun_plan(steps, _acall)


def steps_for(driver: object, steps: Steps[None]) -> Awaitable[None] | None:
    """``steps`` on ``driver``'s kind of connection, as a connection hook returns its work: run
    now on a sync connection (None), an awaitable for an async one (psycopg's ``AsyncConnection``)."""
    if isinstance(driver, psycopg.AsyncConnection):
        return arun_steps(steps)
    run_steps(steps)
    return None


async def _acall(call: Callable[[], Any]) -> Any:
    result = call()
    return await result if inspect.isawaitable(result) else result
