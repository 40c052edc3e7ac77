"""The one way a read statement reaches PostgreSQL: a plan runner on a psycopg connection.

Every read of the library (``Store.run`` and ``Store.read``, their async forms, reads
routed to standbys, explanations, the ``tnsrag query`` command) is a
:data:`~tnsrag_db._db.statement.Plan` driven here, statement by statement, on a psycopg
connection:

- :func:`bind`: the one conversion of a statement's ``:name`` parameters, to PostgreSQL's
  own ``$1, $2, ...`` (one number per name; ``::`` casts and ``\\:`` escapes as SQLAlchemy's
  ``text()`` reads them). Statements go out through psycopg's raw cursor, so psycopg parses
  no query text; rows come back as named tuples (indexing, unpacking, attributes by
  column name, as SQLAlchemy's ``Row``).
- :class:`PlanRunner` drives a plan on connections handed out by a :class:`Source`, sync
  (:meth:`PlanRunner.run`) or async (:meth:`PlanRunner.arun`): the work is written once,
  as steps (:mod:`tnsrag_db._db.steps`), and only the two drivers differ. A connection is
  checked out at a plan's first
  statement and kept to its end; its ``statement_timeout`` is set only when it differs
  from the one the connection has; ``snapshot=True`` runs every statement of the plan in
  one read-only REPEATABLE READ transaction; a pooled connection found dead at the
  plan's first statement is replaced once, and a standby that went away is left out
  (:meth:`Source.failed`). Driver errors leave through
  :func:`~tnsrag_db._db.driver_errors.map_db_errors` (thrown into the plan first).
- :func:`add_statement_listener`: callables that see each statement as it is sent
  (tracing, the test suite's corpus-scope check).

The writes' :class:`~tnsrag_db._db.pool.Connection` sends its statements the same way
(:func:`bind`, the raw cursor, the named-tuple rows, the statement listeners).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections import namedtuple
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import lru_cache
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from tnsrag_db import _telemetry
from tnsrag_db._db.as_of import AS_OF_PARAM, asked_as_of
from tnsrag_db._db.driver_errors import map_db_errors, sqlstate_of
from tnsrag_db._db.hooks import ROUTES_BY_CORPUS
from tnsrag_db._db.statement import Plan, Rows, Statement, arun_plan, hidden_corpus, run_plan
from tnsrag_db._db.steps import Steps, arun_steps, run_steps

__all__ = ["Checkout", "PlanRunner", "Source", "StatementListener", "add_statement_listener", "bind", "notify",
           "remove_statement_listener", "row_factory", "set_statement_timeout", "statement_timeout_steps"]

_T = TypeVar("_T")

# SQLAlchemy's own patterns (sqlalchemy.sql.elements.TextClause, sqlalchemy.sql.compiler):
# ``:name`` not preceded by ``:``, a word character or a backslash (so ``::int`` casts stay),
# and ``\:`` as an escaped colon.
_BIND = re.compile(r"(?<![:\w\x5c]):(\w+)(?![:\w])", re.UNICODE)
_BIND_ESCAPED = re.compile(r"\x5c(:\w*)(?![:\w])", re.UNICODE)


@lru_cache(maxsize=1024)
def bind(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its ``:name`` parameters as ``$1, $2, ...`` (a name used twice keeps its
    number) and ``\\:`` unescaped, and the names in number order."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    text = _BIND_ESCAPED.sub(r"\1", _BIND.sub(number, sql))
    return text, tuple(numbers)


def _values(statement: Statement, info: MutableMapping[Any, Any]) -> tuple[str, tuple[Any, ...]]:
    """The text and positional values sent for ``statement`` on the connection whose state
    is ``info``; a parameter it does not give is a driver error (nothing sent).

    The statement's corpus parameters are read through
    :func:`~tnsrag_db._db.statement.hidden_corpus` (one plan cached for every corpus) unless
    the connection's database routes by corpus (Citus, :data:`~tnsrag_db._db.hooks.ROUTES_BY_CORPUS`;
    unknown counts as routing): a worker is chosen by the corpus value the statement names."""
    routes = info.get(ROUTES_BY_CORPUS, True)
    text, names = bind(statement.sql if routes else hidden_corpus(statement.sql))
    params = statement.params
    missing = [name for name in names if name not in params and name != AS_OF_PARAM]
    if missing:
        raise psycopg.ProgrammingError(f"the statement needs parameter(s) {', '.join(missing)}, "
                                       "which were not given")
    # The instant of the validity conditions (tnsrag_db._store.validity): the statement's
    # own, else the block's as_of (None: now).
    return text, tuple(params[name] if name != AS_OF_PARAM else params.get(name) or asked_as_of() for name in names)


#: ``listener(text, values)``: called before each statement is sent, with the ``$n`` text
#: and the positional values that go out.
StatementListener = Callable[[str, Sequence[Any]], None]
_listeners: list[StatementListener] = []


def add_statement_listener(listener: StatementListener) -> None:
    """Call ``listener(text, values)`` before every statement the library sends through a
    runner or a :class:`~tnsrag_db._db.pool.Connection` (``text`` with ``$n`` parameters,
    as sent; ``values`` in number order; a batch: its first values)."""
    if listener not in _listeners:
        _listeners.append(listener)


def notify(text: str, values: Sequence[Any]) -> None:
    """Show a statement about to be sent to the listeners (see :func:`add_statement_listener`)."""
    for listener in _listeners:
        listener(text, values)


def remove_statement_listener(listener: StatementListener) -> None:
    """Stop calling ``listener`` (no error when it was not added)."""
    if listener in _listeners:
        _listeners.remove(listener)


@lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> Callable[[Sequence[Any]], Any]:
    """A tuple class with attribute access by column name (duplicate or invalid names
    renamed ``_<position>``, as :func:`collections.namedtuple` does)."""
    row: Any = namedtuple("Row", names, rename=True)  # type: ignore[misc]
    make: Callable[[Sequence[Any]], Any] = row._make
    return make


def row_factory(cursor: Any) -> Callable[[Sequence[Any]], Any]:
    result = cursor.pgresult
    if result is None or not result.nfields:
        return tuple
    encoding = cursor.connection.info.encoding
    return _row_class(tuple((result.fname(i) or b"").decode(encoding) for i in range(result.nfields)))


#: Key in a connection's ``info``: the ``statement_timeout`` (ms) set on its session by the
#: library (absent: the server's or role's default).
TIMEOUT_SET = "tnsrag_statement_timeout"
#: Attempts at changing a session's statement_timeout that the previous one cancels.
_TIMEOUT_SET_ATTEMPTS = 5
#: SQLSTATEs of a standby that went away or refuses work: shutdowns, starting up, recovery conflict.
_GONE_STATES = ("57P01", "57P02", "57P03", "40001")


def _set_sql(ms: int | None) -> str:
    return "RESET statement_timeout" if ms is None else f"SET statement_timeout = {int(ms)}"


def statement_timeout_steps(driver: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
                            info: MutableMapping[Any, Any], ms: int | None) -> Steps[None]:
    """Give ``driver``'s session ``statement_timeout`` ``ms`` (None: the server's), outside
    any transaction (one it opened is committed), as steps for a sync or an async connection;
    nothing when ``info`` (kept with the pooled connection) says it has it already."""
    if info.get(TIMEOUT_SET) == ms:
        return
    for attempt in range(_TIMEOUT_SET_ATTEMPTS):
        try:
            yield lambda: driver.execute(_set_sql(ms))
            break
        except psycopg.errors.QueryCanceled:
            # The SET itself runs under the session's previous timeout: a very short one (a
            # Store.timeout block's) can cancel it on a busy server. Nothing changed; again.
            if driver.info.transaction_status != TransactionStatus.IDLE:
                yield driver.rollback
            if attempt == _TIMEOUT_SET_ATTEMPTS - 1:
                raise
    if driver.info.transaction_status != TransactionStatus.IDLE:
        yield driver.commit
    _remember(info, ms)


def set_statement_timeout(driver: psycopg.Connection[Any], info: MutableMapping[Any, Any], ms: int | None) -> None:
    """:func:`statement_timeout_steps` on a sync connection (the write path's)."""
    run_steps(statement_timeout_steps(driver, info, ms))


def _remember(info: MutableMapping[Any, Any], ms: int | None) -> None:
    if ms is None:
        info.pop(TIMEOUT_SET, None)
    else:
        info[TIMEOUT_SET] = ms


class Checkout(Protocol):
    """A connection a :class:`Source` handed out for one plan: a sync one, whose ``release``
    and ``discard`` return None, or an async one, whose ``release`` and ``discard`` return
    awaitables (calls of :mod:`tnsrag_db._db.steps`)."""

    @property
    def driver(self) -> psycopg.Connection[Any] | psycopg.AsyncConnection[Any]:
        """The psycopg connection."""
        ...

    @property
    def info(self) -> MutableMapping[Any, Any]:
        """State kept with the connection while it lives (its statement timeout)."""
        ...

    def release(self) -> Awaitable[None] | None:
        """Hand the connection (idle, autocommit off) back."""
        ...

    def discard(self) -> Awaitable[None] | None:
        """Close the connection for good (a pool opens another in its place)."""
        ...


class Source(Protocol):
    """Where a :class:`PlanRunner` gets its connections: sync ones for :meth:`PlanRunner.run`,
    async ones (``checkout`` returns an awaitable) for :meth:`PlanRunner.arun`."""

    def checkout(self, *, snapshot: bool) -> Checkout | Awaitable[Checkout]:
        """A connection for one plan (``snapshot``: its statements will share a transaction)."""
        ...

    def failed(self, checkout: Checkout) -> bool:
        """Called when the server of ``checkout`` went away under a statement: True when
        it was a standby, now left out (the statement runs again on the next checkout)."""
        ...


def server_gone(exc: BaseException, driver: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``exc``, raised by a statement on ``driver``, says the server is gone (not
    that the statement failed)."""
    if driver.closed or driver.broken:
        return True
    state = sqlstate_of(exc)
    if state is None:
        return isinstance(exc, psycopg.OperationalError)  # a lost connection carries no SQLSTATE
    return state.startswith("08") or state in _GONE_STATES


_SNAPSHOT_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


def _at_rest(driver: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``driver`` may be handed out again: open and outside any transaction."""
    return not driver.closed and not driver.broken and driver.info.transaction_status == TransactionStatus.IDLE


class _Attempts:
    """What a statement that failed because its server went away may do next (the rule
    both runners share): run again on a standby's replacement (a snapshot only at its
    first statement), or once more on a fresh pooled connection when nothing of the plan
    ran yet on the dead one; else the error stands."""

    __slots__ = ("fresh", "retried", "snapshot")

    def __init__(self, *, fresh: bool, snapshot: bool) -> None:
        self.fresh = fresh
        self.snapshot = snapshot
        self.retried = False

    def again(self, on_standby_left_out: bool) -> bool:
        if on_standby_left_out:
            self.fresh = True
            return True
        if self.snapshot or not self.fresh or self.retried:
            return False
        self.retried = True
        return True

    def may_leave_out(self) -> bool:
        return self.fresh or not self.snapshot


class PlanRunner:
    """Drives read plans on connections of ``source``; ``what`` starts every mapped driver
    error's message; ``timeout_ms()`` gives the ``statement_timeout`` (ms, None: the
    server's) a plan's statements get, read at each checkout.

    :meth:`run` and :meth:`executor` drive on sync connections, :meth:`arun` and
    :meth:`aexecutor` on async ones (a source of async connections); the work itself (the
    checkout, each statement with its retry, the hand-back) is written once, as steps
    (:class:`_Held`, :mod:`tnsrag_db._db.steps`), and only these drivers differ. A
    cancelled await cancels the running statement on the server (psycopg sends a cancel
    request and waits for the backend to stop); the connection is then discarded."""

    def __init__(self, source: Source, *, what: str, timeout_ms: Callable[[], int | None]) -> None:
        self._source = source
        self._what = what
        self._timeout_ms = timeout_ms

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive ``plan`` to its result on one connection (see the module docstring)."""
        with self.executor(snapshot=snapshot) as execute:
            return run_plan(plan, execute)

    async def arun(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """:meth:`run` on an async connection."""
        async with self.aexecutor(snapshot=snapshot) as execute:
            return await arun_plan(plan, execute)

    @contextmanager
    def executor(self, *, snapshot: bool = False) -> Iterator[Callable[[Statement], Rows]]:
        """The statement executor :meth:`run` drives a plan with: one connection, checked
        out at the first statement, handed back at the block's end."""
        held = _Held(self._source, self._what, self._timeout_ms, snapshot)
        try:
            yield lambda statement: run_steps(held.execute(statement))
        finally:
            run_steps(held.release())

    @asynccontextmanager
    async def aexecutor(self, *, snapshot: bool = False) -> AsyncIterator[Callable[[Statement], Awaitable[Rows]]]:
        """:meth:`executor` on async connections."""
        held = _Held(self._source, self._what, self._timeout_ms, snapshot)
        try:
            yield lambda statement: arun_steps(held.execute(statement))
        finally:
            await arun_steps(held.release())


class _Held:
    """The connection of one plan, as steps: checked out at the first statement (autocommit,
    the runner's statement timeout, the snapshot's transaction), kept to the plan's end."""

    __slots__ = ("_snapshot", "_source", "_timeout_ms", "_what", "held")

    def __init__(self, source: Source, what: str, timeout_ms: Callable[[], int | None], snapshot: bool) -> None:
        self._source = source
        self._what = what
        self._timeout_ms = timeout_ms
        self._snapshot = snapshot
        self.held: list[Checkout] = []

    def checkout(self) -> Steps[Checkout]:
        got: Checkout = yield lambda: self._source.checkout(snapshot=self._snapshot)
        self.held.append(got)
        driver = got.driver
        yield lambda: driver.set_autocommit(True)
        yield from statement_timeout_steps(driver, got.info, self._timeout_ms())
        if self._snapshot:
            yield lambda: driver.execute(_SNAPSHOT_BEGIN)
        return got

    def execute(self, statement: Statement) -> Steps[Rows]:
        """Send ``statement`` (on a fresh connection once more when the first one's server was gone)."""
        with map_db_errors(self._what):
            attempts = _Attempts(fresh=not self.held, snapshot=self._snapshot)
            while True:
                current = self.held[-1] if self.held else (yield from self.checkout())
                text, values = _values(statement, current.info)
                try:
                    notify(text, values)
                    with _telemetry.statement(text) as sent:
                        rows: Rows = yield functools.partial(_send, current.driver, text, values)
                        sent.rows(rows)
                        return rows
                except psycopg.Error as exc:
                    if not server_gone(exc, current.driver):
                        raise
                    left_out = attempts.may_leave_out() and self._source.failed(current)
                    if not attempts.again(left_out):
                        raise
                    yield self.held.pop().discard
                except Exception:
                    raise  # nothing sent (a value the driver cannot adapt): the connection is fine
                except BaseException:
                    yield self.held.pop().discard  # interrupted mid-statement: never handed out again
                    raise

    def release(self) -> Steps[None]:
        """End a snapshot (it only read) and hand each connection back, or discard it.

        The snapshot ends with ``COMMIT``, which for a read-only transaction is what a
        rollback is, because psycopg forgets every statement it prepared on a connection
        (``DEALLOCATE ALL``) when it sees a ``ROLLBACK``: each explanation would make the
        next retrievals on that connection plan again (a failed transaction is rolled back
        by its ``COMMIT`` all the same)."""
        for got in self.held:
            driver = got.driver
            try:
                if not driver.closed and driver.info.transaction_status in _OPEN:
                    yield lambda: driver.execute("COMMIT")
            except psycopg.Error:
                pass  # broken: discarded below
            if _at_rest(driver):
                yield lambda: driver.set_autocommit(False)
                yield got.release
            else:
                yield got.discard


def _send(driver: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], text: str,
          values: tuple[Any, ...]) -> Rows | Awaitable[Rows]:
    """Send one statement through psycopg's raw cursor: now on a sync connection, an awaitable
    of its rows on an async one (:func:`_asend`)."""
    if isinstance(driver, psycopg.AsyncConnection):
        return _asend(driver, text, values)
    return run_steps(_sending(psycopg.RawCursor(driver, row_factory=row_factory), text, values))


def _sending(cursor: psycopg.RawCursor[Any] | psycopg.AsyncRawCursor[Any], text: str,
             values: tuple[Any, ...]) -> Steps[Rows]:
    try:
        yield lambda: cursor.execute(text, values)
        rows: Rows = (yield cursor.fetchall) if cursor.pgresult is not None and cursor.pgresult.nfields else []
        return rows
    finally:
        yield cursor.close


#: Seconds a cancelled statement may take to stop on the server before its connection is closed.
CANCEL_GRACE_SECONDS = 10.0


async def _asend(driver: psycopg.AsyncConnection[Any], text: str, values: tuple[Any, ...]) -> Rows:
    """Send one statement. A cancelled await asks the server to cancel the statement and waits,
    however often it is cancelled again meanwhile, until the backend has stopped (or closes the
    connection after :data:`CANCEL_GRACE_SECONDS`); only then does the cancellation propagate.
    (psycopg waits for the backend itself, but a second ``task.cancel()`` interrupts that
    wait and the error reached the caller while the backend still ran.)"""
    sending = asyncio.ensure_future(_asend_now(driver, text, values))
    try:
        return await asyncio.shield(sending)
    except asyncio.CancelledError:
        if not sending.done():
            with contextlib.suppress(psycopg.Error, asyncio.CancelledError):  # again: it still goes on
                await asyncio.shield(driver.cancel_safe())
            deadline = time.monotonic() + CANCEL_GRACE_SECONDS
            while not sending.done() and time.monotonic() < deadline:
                with contextlib.suppress(asyncio.CancelledError):  # cancelled again: keep waiting
                    await asyncio.wait({sending}, timeout=max(0.0, deadline - time.monotonic()))
            if not sending.done():
                await driver.close()  # the backend ends with its connection
        if sending.done() and not sending.cancelled():
            sending.exception()  # retrieved: a QueryCanceled is the expected end
        raise


async def _asend_now(driver: psycopg.AsyncConnection[Any], text: str, values: tuple[Any, ...]) -> Rows:
    return await arun_steps(_sending(psycopg.AsyncRawCursor(driver, row_factory=row_factory), text, values))
