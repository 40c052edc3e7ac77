"""Connections to the library's database, on psycopg alone: a :class:`Pool` of them (or one
connection, :class:`OneConnection`), each handed out as a :class:`Connection`.

- :class:`Connection`: one psycopg connection with the statement API the library's writes,
  maintenance and migrations helpers use: :meth:`Connection.execute` sends SQL text with
  ``:name`` parameters (converted once, by :func:`~tnsrag_db._db.runner.bind`, to
  PostgreSQL's ``$n``, as the read runner sends them) and returns a :class:`Result` (rows as
  named tuples, ``scalar_one()``, ``first()``, ``rowcount``...); :meth:`Connection.begin`
  runs a block as one transaction. Each statement is traced by :mod:`tnsrag_db._telemetry`.
- :class:`Pool`: psycopg_pool's ``ConnectionPool`` under the library's rules: every
  connection searches ``<schema>, public`` (a libpq start-up option: no round trip), runs
  the ``configure``/``check``/``reset`` callables of the :class:`~tnsrag_db._db.hooks.ConnectionHooks`
  it was given (pgvector's types, the ping of a connection idle for too long, then the
  application's), and is opened when first needed, never before.
- :class:`OneConnection`: the same face over one psycopg connection, opened at the first
  use and kept: a short process (the command line's query) pays no pool threads.

Both are a :class:`Connections`, what a :class:`~tnsrag_db._store.store.Store` is built on,
and both are the read runner's :class:`~tnsrag_db._db.runner.Source` (:meth:`Pool.checkout`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, Protocol, TypeVar

import psycopg
import psycopg.conninfo
from psycopg.pq import TransactionStatus

from tnsrag_db import _telemetry
from tnsrag_db._db.hooks import DEFAULT_PING_AFTER_IDLE, ConnectionHooks, hook_steps, library_hooks
from tnsrag_db._db.runner import bind, notify, row_factory
from tnsrag_db._db.settings import conninfo_of, location_of, validate_schema_name
from tnsrag_db._db.steps import Steps, run_steps, steps_for
from tnsrag_db._errors import ConfigurationError, DatabaseError

__all__ = ["FAILURES", "WAIT_SLICE", "Connection", "Connections", "Handed", "OneConnection", "Pool", "Result",
           "configure_steps", "connect_error", "info_of", "reset_steps"]

_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)
#: Key in a connection's ``info``: how many transactions ended through :class:`Connection`.
_TRANSACTIONS = "tnsrag_transactions"
#: Seconds a caller waits for a pooled connection before it looks for a failed attempt.
WAIT_SLICE = 0.1
#: psycopg_pool's ``reconnect_timeout`` of the library's pools: a failed attempt at opening
#: a connection is not retried in the background at ever longer intervals (a caller
#: arriving meanwhile would wait for the next retry, up to the pool's whole timeout); the
#: next caller that needs a connection makes a new attempt, and gets its error at once.
RECONNECT_TIMEOUT = 0.0


# psycopg_pool logs each failed attempt at WARNING and, like most libraries, adds no
# handler: in an application without logging set up, Python's last-resort handler printed
# them on stderr beside the DatabaseError ("could not connect: ...") that says the same.
# A NullHandler keeps them for applications that configure logging, and quiet otherwise.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())

#: Keyword argument of :meth:`_Driver.connect`: a list the failed attempts are put on.
FAILURES = "tnsrag_failures"


class _Driver(psycopg.Connection[Any]):
    """A psycopg connection with ``tnsrag_info``: state the library keeps with it while it
    lives (its statement timeout, whether its stage tables exist, when it went idle)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tnsrag_info: dict[Any, Any] = {}

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
        """psycopg's ``connect``; a pool's attempt that fails is also noted, with the
        time, on the list given as ``tnsrag_failures`` (the pool's waiting caller reports
        it instead of waiting out its timeout)."""
        failures: list[tuple[float, BaseException]] | None = kwargs.pop(FAILURES, None)
        try:
            driver = super().connect(conninfo, **kwargs)
        except psycopg.Error as exc:
            if failures is not None:
                failures.append((time.monotonic(), exc))
                del failures[:-1]
            raise
        if failures:
            failures.clear()
        return driver


def connect_error(exc: BaseException) -> DatabaseError:
    """The library's error for a connection that could not be opened."""
    error = DatabaseError(f"could not connect: {str(exc).strip()}")
    error.sqlstate = getattr(exc, "sqlstate", None)
    return error


def info_of(driver: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> MutableMapping[Any, Any]:
    """The state kept with ``driver`` (a fresh dict for a connection not opened here)."""
    found = getattr(driver, "tnsrag_info", None)
    if found is None:
        found = {}
        try:
            driver.tnsrag_info = found  # type: ignore[union-attr]
        except AttributeError:
            pass
    return found


class Result:
    """The rows of one statement (named tuples, as the read runner returns them) and how
    many rows it touched (``rowcount``: for ``UPDATE``/``DELETE``/``INSERT``)."""

    __slots__ = ("_next", "_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self._next = 0

    def fetchone(self) -> Any | None:
        """The next row (the first at the first call), or None after the last."""
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        """Every row."""
        return list(self._rows)

    fetchall = all

    def first(self) -> Any | None:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        """The only row; :class:`DatabaseError` when there is none or more than one."""
        if len(self._rows) != 1:
            raise DatabaseError(f"expected one row, got {len(self._rows)}")
        return self._rows[0]

    def one_or_none(self) -> Any | None:
        """The only row or None; :class:`DatabaseError` when there are several."""
        if len(self._rows) > 1:
            raise DatabaseError(f"expected at most one row, got {len(self._rows)}")
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        """The first column of the only row (see :meth:`one`)."""
        return self.one()[0]

    def scalar_one_or_none(self) -> Any:
        """The first column of the only row, or None without rows (see :meth:`one_or_none`)."""
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalars(self) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self._rows]


class Connection:
    """One psycopg connection ``driver`` handed out by a :class:`Connections`, in
    transactions by default (the first statement opens one; :meth:`commit` or the end of a
    :meth:`begin` block ends it), or in autocommit when it was asked for so."""

    __slots__ = ("_after", "driver", "info")

    def __init__(self, driver: psycopg.Connection[Any]) -> None:
        self.driver = driver
        #: State kept with the connection while it lives (shared by every hand-out of it).
        self.info = info_of(driver)
        self._after: list[Callable[[], None]] = []

    def add_after_statement(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after each statement this hand-out sends (what it raises
        leaves :meth:`execute`: a stop asked for between statements)."""
        self._after.append(callback)

    def remove_after_statement(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` (no error when it was not added)."""
        if callback in self._after:
            self._after.remove(callback)

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None) -> Result:
        """Send ``sql`` (``:name`` parameters, ``::`` casts and ``\\:`` escapes kept) with
        ``params``; a sequence of mappings runs it once per mapping (one batch). Driver
        errors leave as psycopg's (the caller's :func:`~tnsrag_db._db.driver_errors.map_db_errors`
        names them)."""
        text, names = bind(sql)
        many = params is not None and not isinstance(params, Mapping)
        batches: Sequence[Mapping[str, Any]] = (
            params if params is not None and not isinstance(params, Mapping) else [params or {}])
        rows_of = [_values(text, names, given) for given in batches]
        notify(text, rows_of[0] if rows_of else ())
        with _telemetry.statement(text) as sent, psycopg.RawCursor(self.driver, row_factory=row_factory) as cursor:
            if many:
                cursor.executemany(text, rows_of)
                result = Result([], cursor.rowcount)
            else:
                cursor.execute(text, rows_of[0])
                rows = cursor.fetchall() if cursor.pgresult is not None and cursor.pgresult.nfields else []
                result = Result(rows, cursor.rowcount)
            sent.rows(result._rows)
        for callback in self._after:
            callback()
        return result

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """The block as one transaction: committed when it ends, rolled back when it raises."""
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        self.commit()

    @contextmanager
    def begin_nested(self) -> Iterator[Connection]:
        """The block as a savepoint of the open transaction (rolled back to when it raises)."""
        with self.driver.transaction():
            yield self

    def commit(self) -> None:
        """Commit the open transaction (none: nothing happens)."""
        self.driver.commit()
        self._ended()

    def rollback(self) -> None:
        """Roll the open transaction back (a closed connection: nothing to do)."""
        if not self.driver.closed:
            self.driver.rollback()
        self._ended()

    def _ended(self) -> None:
        self.info[_TRANSACTIONS] = self.info.get(_TRANSACTIONS, 0) + 1

    def transaction_number(self) -> int:
        """A number that stays the same within one transaction and changes once it commits
        or rolls back through :meth:`commit` / :meth:`rollback` (and :meth:`begin`)."""
        return int(self.info.get(_TRANSACTIONS, 0))

    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        return self.driver.info.transaction_status in _OPEN

    def invalidate(self) -> None:
        """Close the connection for good: it is never handed out again (session state it may
        hold, such as settings or advisory locks, goes with it)."""
        self.driver.close()


def _values(text: str, names: tuple[str, ...], params: Mapping[str, Any]) -> tuple[Any, ...]:
    missing = [name for name in names if name not in params]
    if missing:
        raise psycopg.ProgrammingError(f"the statement needs parameter(s) {', '.join(missing)}, which were not given")
    return tuple(params[name] for name in names)


class Connections(Protocol):
    """Where a store's connections come from: a :class:`Pool` or a :class:`OneConnection`."""

    @property
    def schema(self) -> str:
        """The schema the connections search first."""
        ...

    @property
    def conninfo(self) -> str:
        """The libpq connection string, password included (for a connection of another kind:
        the migrations' SQLAlchemy one, an async pool)."""
        ...

    @property
    def location(self) -> str:
        """The database, as its URL without the password."""
        ...

    @property
    def hooks(self) -> tuple[ConnectionHooks, ...]:
        """The hooks each connection runs (the library's first)."""
        ...

    @property
    def max_size(self) -> int:
        """The most connections open at once."""
        ...

    def connect(self, *, autocommit: bool = False) -> AbstractContextManager[Connection]:
        """A connection for the block (see :meth:`Pool.connect`)."""
        ...

    def begin(self) -> AbstractContextManager[Connection]:
        """A connection inside one transaction (see :meth:`Pool.begin`)."""
        ...

    def checkout(self, *, snapshot: bool = False) -> Any:
        """A connection for the read runner (:class:`~tnsrag_db._db.runner.Checkout`)."""
        ...

    def failed(self, checkout: Any) -> bool:
        """The read runner's report of a server gone under ``checkout``: False (no standby)."""
        ...

    def reopen(self) -> None:
        """Close the idle connections; new ones are opened from here on."""
        ...

    def close(self) -> None:
        """Close every connection."""
        ...


# -- the pool ------------------------------------------------------------------------


#: What gives a handed-out connection back to where it came from (for an async connection,
#: an awaitable that does).
GiveBack = Callable[[Any], Awaitable[None] | None]


_D = TypeVar("_D", psycopg.Connection[Any], psycopg.AsyncConnection[Any])


class Handed(Generic[_D]):
    """A connection the read runner checked out, and what gives it back: a sync pool's or an
    async one's (then ``release`` and ``discard`` return awaitables, as steps' calls do)."""

    __slots__ = ("_give_back", "driver", "info")

    def __init__(self, give_back: GiveBack, driver: _D) -> None:
        self._give_back = give_back
        self.driver: _D = driver
        self.info = info_of(driver)

    def release(self) -> Awaitable[None] | None:
        """Hand the connection back."""
        return self._give_back(self.driver)

    def discard(self) -> Awaitable[None] | None:
        """Close the connection, then hand it back (the pool drops it)."""
        return steps_for(self.driver, self._discarding())

    def _discarding(self) -> Steps[None]:
        try:
            yield self.driver.close
        finally:
            yield functools.partial(self._give_back, self.driver)


def configure_steps(driver: Any, hooks: Sequence[ConnectionHooks]) -> Steps[None]:
    """What a new connection gets before its first use, sync or async: the ``configure`` hooks,
    the transaction they opened committed."""
    yield from hook_steps("configure", hooks, driver, info_of(driver))
    if driver.info.transaction_status != TransactionStatus.IDLE:
        yield driver.commit


def reset_steps(driver: Any, hooks: Sequence[ConnectionHooks]) -> Steps[None]:
    """A connection given back made ready for its next user, sync or async: no transaction,
    autocommit off, the ``reset`` hooks."""
    if driver.info.transaction_status != TransactionStatus.IDLE:
        yield driver.rollback
    if driver.autocommit:
        yield lambda: driver.set_autocommit(False)
    yield from hook_steps("reset", hooks, driver, info_of(driver))


class Pool:
    """A pool of connections to ``url`` whose sessions search ``<schema>, public``.

    At most ``pool_size + max_overflow`` connections are open at once; a connection is
    opened when a call needs one and none is idle, and an idle one is closed after
    ``max_idle`` seconds (the pool shrinks one connection per ``max_idle``). ``timeout``:
    seconds a call waits for a connection when all are in use, then
    :class:`DatabaseError`. ``read_only``: every session defaults to read-only transactions
    (read replicas). ``hooks`` (:class:`~tnsrag_db._db.hooks.ConnectionHooks`) run on every
    connection after the library's own (pgvector's types; a connection idle for more than
    ``ping_after_idle`` seconds is pinged when handed out and replaced if its server went
    away). ``vector_types=False`` leaves pgvector's types out (it imports numpy): for a
    process that sends no vector. Thread-safe. Raises :class:`ConfigurationError` for a bad
    URL, schema or option.
    """

    def __init__(self, url: object, *, schema: str, pool_size: int = 5, max_overflow: int = 10,
                 read_only: bool = False, hooks: Sequence[ConnectionHooks] = (),
                 ping_after_idle: float = DEFAULT_PING_AFTER_IDLE, timeout: float = 30.0,
                 max_idle: float = 600.0, vector_types: bool = True) -> None:
        for hook in hooks:
            if not isinstance(hook, ConnectionHooks):
                raise ConfigurationError(f"hooks must be ConnectionHooks, got {type(hook).__name__}")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ConfigurationError(f"pool_size must be an int of at least 1, got {pool_size!r}")
        if not isinstance(max_overflow, int) or isinstance(max_overflow, bool) or max_overflow < 0:
            raise ConfigurationError(f"max_overflow must be an int of at least 0, got {max_overflow!r}")
        self._schema = validate_schema_name(schema)
        self._read_only = read_only
        self._conninfo = conninfo_of(url, schema=schema, read_only=read_only)
        self._plain = conninfo_of(url)
        self._location = location_of(url)
        self._hooks = (*library_hooks(ping_after_idle, vector_types=vector_types), *hooks)
        self._max_size = pool_size + max_overflow
        self._timeout = timeout
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._pool: Any = None
        self._closed = False
        self._failures: list[tuple[float, BaseException]] = []
        self._on_close: list[Callable[[], object]] = []

    @property
    def schema(self) -> str:
        """The schema the connections search first."""
        return self._schema

    @property
    def conninfo(self) -> str:
        """The libpq connection string of the database (the URL's own ``options`` kept,
        without the library's), password included."""
        return self._plain

    @property
    def location(self) -> str:
        """The database, as its URL without the password."""
        return self._location

    @property
    def read_only(self) -> bool:
        """Whether sessions default to read-only transactions."""
        return self._read_only

    @property
    def hooks(self) -> tuple[ConnectionHooks, ...]:
        """The hooks each connection runs, the library's first."""
        return self._hooks

    @property
    def timeout(self) -> float:
        """Seconds a call waits for a connection when all are in use."""
        return self._timeout

    @property
    def max_idle(self) -> float:
        """Seconds an idle connection is kept."""
        return self._max_idle

    def on_close(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` when the pool closes (the async pools made for it close then)."""
        self._on_close.append(callback)

    @property
    def max_size(self) -> int:
        """The most connections open at once (``pool_size + max_overflow``)."""
        return self._max_size

    @property
    def checked_out(self) -> int:
        """How many connections are handed out now."""
        if self._pool is None:
            return 0
        stats = self._pool.get_stats()
        return int(stats.get("pool_size", 0)) - int(stats.get("pool_available", 0))

    def _opened(self) -> Any:
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._closed:
                raise ConfigurationError(f"this connection pool ({self._location}) is closed")
            if self._pool is None:
                from psycopg_pool import ConnectionPool  # its threads: not for the CLI's OneConnection

                self._pool = ConnectionPool(
                    self._conninfo, connection_class=_Driver, kwargs={FAILURES: self._failures},
                    min_size=0, max_size=self._max_size,
                    open=True, configure=self._configure, check=self._check,
                    timeout=self._timeout, max_idle=self._max_idle, reconnect_timeout=RECONNECT_TIMEOUT,
                    num_workers=1,
                    name=f"tnsrag:{self._schema}")
            return self._pool

    def _configure(self, driver: psycopg.Connection[Any]) -> None:
        run_steps(configure_steps(driver, self._hooks))

    def _check(self, driver: psycopg.Connection[Any]) -> None:
        try:
            run_steps(hook_steps("check", self._hooks, driver, info_of(driver)))
        except ConfigurationError as exc:
            # psycopg_pool takes any error of a check for a bad connection and tries the
            # next: noted, so that the waiting caller raises it (see _get).
            self._failures.append((time.monotonic(), exc))
            del self._failures[:-1]
            raise

    def _reset(self, driver: psycopg.Connection[Any]) -> None:
        """Make ``driver`` ready for its next user, in the thread that gives it back: no
        transaction, autocommit off, the reset hooks (a broken one is closed, and dropped
        by the pool). Not psycopg_pool's ``reset`` callback, which would hand every
        return to a worker thread, and the next call would wait for it."""
        try:
            if not driver.closed:
                run_steps(reset_steps(driver, self._hooks))
        except psycopg.Error:
            driver.close()

    def _give_back(self, pool: Any, driver: psycopg.Connection[Any]) -> None:
        self._reset(driver)
        pool.putconn(driver)

    def _get(self) -> tuple[GiveBack, psycopg.Connection[Any]]:
        """A connection of the pool, and what gives it back. Waits in short slices: when an
        attempt to open a connection failed meanwhile (a wrong URL, a server down, a
        refused login), the attempt's error is raised at once rather than after ``timeout``."""
        from psycopg_pool import PoolTimeout  # as in _opened (which has loaded it): a Pool's only

        pool = self._opened()
        start = time.monotonic()
        while True:
            left = self._timeout - (time.monotonic() - start)
            try:
                driver: psycopg.Connection[Any] = pool.getconn(timeout=max(0.01, min(WAIT_SLICE, left)))
                return functools.partial(self._give_back, pool), driver
            except PoolTimeout as exc:
                failed = [error for when, error in list(self._failures) if when >= start]
                if failed and isinstance(failed[-1], ConfigurationError):
                    raise failed[-1] from None
                if failed:
                    raise connect_error(failed[-1]) from failed[-1]
                if time.monotonic() - start >= self._timeout:
                    raise DatabaseError(f"no connection to {self._location} came free within {self._timeout:g} s "
                                        f"(all {self._max_size} in use): {exc}") from exc

    @contextmanager
    def connect(self, *, autocommit: bool = False) -> Iterator[Connection]:
        """A connection for the block, back to the pool at its end (an open transaction
        rolled back). ``autocommit=True``: each statement commits on its own (statements
        that cannot run in a transaction block, session-level advisory locks); such a
        connection is closed instead of returned when the block raises, so no session
        state it set outlives the error."""
        give_back, driver = self._get()
        try:
            if autocommit:
                driver.autocommit = True
            try:
                yield Connection(driver)
            except BaseException:
                if autocommit:
                    driver.close()
                raise
        finally:
            give_back(driver)

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection inside one transaction, committed when the block ends (rolled back
        when it raises)."""
        with self.connect() as conn, conn.begin():
            yield conn

    def checkout(self, *, snapshot: bool = False) -> Handed[psycopg.Connection[Any]]:
        """A connection for the read runner (handed back by its ``release``)."""
        return Handed(*self._get())

    def reopen(self) -> None:
        """Close the idle connections and open new ones from here on (those in use are
        closed when they come back): after a migration created the vector type, say, which
        connections configured before it lack."""
        with self._lock:
            old, self._pool = self._pool, None
        if old is not None:
            old.close(timeout=5.0)

    def failed(self, checkout: Any) -> bool:
        return False

    def close(self) -> None:
        """Close every connection; the pool refuses new work afterwards."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=5.0)
        for callback in self._on_close:
            callback()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Pool({self._location!r}, schema={self._schema!r}, max_size={self._max_size})"


class OneConnection(Pool):
    """A :class:`Pool` of one connection to ``url``, opened at the first use and kept until
    :meth:`close`, without psycopg_pool's worker threads: for a short process that runs one
    call at a time (the command line). Not thread-safe: asking for the connection while it
    is in use raises :class:`DatabaseError`. ``vector_types=False``: pgvector's types are
    not registered on it (a process that sends no vector does not import numpy)."""

    def __init__(self, url: object, *, schema: str, hooks: Sequence[ConnectionHooks] = (),
                 read_only: bool = False, vector_types: bool = True) -> None:
        super().__init__(url, schema=schema, pool_size=1, max_overflow=0, hooks=hooks, read_only=read_only,
                         vector_types=vector_types)
        self._driver: psycopg.Connection[Any] | None = None
        self._busy = False

    @property
    def checked_out(self) -> int:
        """1 while the connection is handed out, else 0."""
        return int(self._busy)

    def _get(self) -> tuple[GiveBack, psycopg.Connection[Any]]:
        if self._closed:
            raise ConfigurationError(f"this connection ({self._location}) is closed")
        if self._busy:
            raise DatabaseError(f"the one connection to {self._location} is in use")
        driver = self._driver
        if driver is not None and not driver.closed:
            try:
                self._check(driver)  # pinged after ping_after_idle seconds at rest
            except psycopg.Error:
                driver.close()
        if driver is None or driver.closed:
            try:
                driver = _Driver.connect(self._conninfo)
            except psycopg.Error as exc:
                raise connect_error(exc) from exc
            self._configure(driver)
            self._driver = driver
        self._busy = True
        return self._take_back, driver

    def _take_back(self, driver: psycopg.Connection[Any]) -> None:
        self._reset(driver)
        self._busy = False

    def reopen(self) -> None:
        """Close the connection (the next use opens another)."""
        if self._driver is not None:
            self._driver.close()
            self._driver = None

    def close(self) -> None:
        """Close the connection; nothing can be asked of it afterwards."""
        self.reopen()
        super().close()
