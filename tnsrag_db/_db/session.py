"""The one way the library talks to its database: a :class:`Session` over a pool of connections.

A session is the plumbing a :class:`~tnsrag_db._store.store.Store` holds as ``store.session``:

- one read path, :meth:`Session.run` (a :data:`~tnsrag_db._db.statement.Plan` on one
  connection) and :meth:`Session.read` (its one-statement case);
- transactions (:meth:`~Session.transaction`, :meth:`~Session.write_transaction`, which runs
  its work again after a deadlock) and :meth:`~Session.autocommit` connections;
- session-level advisory locks (:meth:`~Session.session_lock`, :meth:`~Session.hnsw_build_lock`);
- the ``statement_timeout`` of its statements (:meth:`~Session.timeout` for one block);
- lock waits cut short by ``lock_timeout``: the :class:`~tnsrag_db._errors.LockTimeoutError`
  leaving a transaction or a read names the roles holding the lock (see
  :mod:`tnsrag_db._db.lock_holders`).

Every driver error leaves it through :func:`map_db_errors` as a typed
:class:`~tnsrag_db._errors.DatabaseError` subclass. It names no library table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import psycopg

from tnsrag_db._db.driver_errors import map_db_errors
from tnsrag_db._db.lock_holders import name_holders
from tnsrag_db._db.pool import Connection, Connections
from tnsrag_db._db.replicas import ReadReplicas, Replica, WriteClock, WriteToken, current_token
from tnsrag_db._db.runner import Checkout, PlanRunner, set_statement_timeout
from tnsrag_db._db.settings import check_timeout, validate_schema_name
from tnsrag_db._db.statement import Plan, Rows, Statement, one, run_plan
from tnsrag_db._errors import DatabaseError, DeadlockError, LockTimeoutError

__all__ = ["DEADLOCK_RETRIES", "SESSION_LOCK_POLL_SECONDS", "Session", "retry_on_deadlock"]

#: How often a whole write runs again after PostgreSQL aborted it to break a deadlock.
DEADLOCK_RETRIES = 3
#: How often a process waiting for a session lock (HNSW build, declarative ingestion) checks it.
SESSION_LOCK_POLL_SECONDS = 0.2

_T = TypeVar("_T")

def retry_on_deadlock(operation: Callable[[], _T], retries: int = DEADLOCK_RETRIES) -> _T:
    """Run ``operation`` (which opens and commits its own transaction) and run it again,
    up to ``retries`` times, when PostgreSQL aborted it to break a deadlock
    (:class:`DeadlockError`, SQLSTATE 40P01). Its transaction was rolled back, so nothing
    of the failed attempt remains.
    """
    attempt = 0
    while True:
        try:
            return operation()
        except DeadlockError:
            if attempt >= retries:
                raise
            attempt += 1


def _apply_statement_timeout(conn: Connection, ms: int | None) -> None:
    """Give ``conn``'s session ``statement_timeout`` ``ms`` (None: the server's), outside any
    transaction; a no-op when the session has it already (the connection's ``info``
    remembers it, for the read runner and the write path alike)."""
    set_statement_timeout(conn.driver, conn.info, ms)


class _OnStandby:
    """A connection to a read replica, checked out for the read runner."""

    __slots__ = ("_handed", "replica")

    def __init__(self, handed: Checkout, replica: Replica) -> None:
        self._handed = handed
        self.replica = replica

    @property
    def driver(self) -> psycopg.Connection[Any] | psycopg.AsyncConnection[Any]:
        return self._handed.driver

    @property
    def info(self) -> Any:
        return self._handed.info

    def release(self) -> None:
        self._handed.release()

    def discard(self) -> None:
        self._handed.discard()


class _SessionSource:
    """The read runner's connections of a :class:`Session`: the next usable standby when
    there are replicas (after the session's read token), else the primary's pool."""

    __slots__ = ("_pool", "_read_token", "_replicas")

    def __init__(self, pool: Connections, replicas: ReadReplicas | None,
                 read_token: Callable[[], WriteToken | None] | None) -> None:
        self._pool = pool
        self._replicas = replicas
        self._read_token = read_token

    def checkout(self, *, snapshot: bool) -> Checkout:
        if self._replicas is not None:
            found = self._replicas.connect(self._read_token() if self._read_token is not None else None)
            if found is not None:
                return _OnStandby(*found)
        checkout: Checkout = self._pool.checkout(snapshot=snapshot)
        return checkout

    def failed(self, checkout: Checkout) -> bool:
        if isinstance(checkout, _OnStandby) and self._replicas is not None:
            self._replicas.mark_failed(checkout.replica)
            return True
        return False


class Session:
    """Connections, transactions, locks and timeouts of one store over ``pool``.

    ``what`` starts the message of every mapped driver error (``"database error in corpus
    'x'"``); ``schema`` names the library's schema (for schema-wide locks);
    ``statement_timeout`` (seconds, None: the server's) bounds every statement except
    those of :meth:`autocommit` connections (index builds) and unlimited transactions.
    ``read_replicas``: the hot standbys :meth:`run` reads from (see
    :mod:`tnsrag_db._db.replicas`), ``read_token``: a read waits for them to replay past it
    (a callable giving the token, or None), ``clock``: advanced after each write
    transaction when there are replicas. Thread-safe, like the pool.
    """

    def __init__(self, pool: Connections, *, what: str, schema: str, statement_timeout: float | None = None,
                 read_replicas: ReadReplicas | None = None,
                 read_token: Callable[[], WriteToken | None] | None = None,
                 clock: WriteClock | None = None) -> None:
        self._pool = pool
        self._replicas = read_replicas
        self._read_token = read_token
        self._clock = clock if clock is not None else WriteClock()
        self._what = what
        self._schema = validate_schema_name(schema)
        self._timeout_ms = check_timeout(statement_timeout)
        self._timeout_override: ContextVar[int | None | bool] = ContextVar(f"tnsrag_timeout_{id(self)}",
                                                                          default=False)
        self._runner = PlanRunner(_SessionSource(pool, read_replicas, read_token), what=what,
                                  timeout_ms=self.effective_timeout_ms)
        # The same runner on the primary's pool alone: reads a write acts on (run(primary=True)).
        self._primary_runner = self._runner if read_replicas is None else PlanRunner(
            _SessionSource(pool, None, None), what=what, timeout_ms=self.effective_timeout_ms)

    @property
    def pool(self) -> Connections:
        """The connections of this session (a :class:`~tnsrag_db._db.pool.Pool`)."""
        return self._pool

    # -- timeouts ---------------------------------------------------------------------
    @property
    def statement_timeout(self) -> float | None:
        """The statement timeout in seconds in effect here (inside :meth:`timeout`, its value); None: the server's."""
        ms = self.effective_timeout_ms()
        return None if ms is None else ms / 1000

    @property
    def default_timeout(self) -> float | None:
        """The session's own statement timeout in seconds (whatever a :meth:`timeout` block says)."""
        return None if self._timeout_ms is None else self._timeout_ms / 1000

    @contextmanager
    def timeout(self, seconds: float | None) -> Iterator[None]:
        """Run this session's statements inside the block (this thread or task) with
        ``statement_timeout`` ``seconds`` (None: the server's). Raises
        :class:`ConfigurationError` for a bad value."""
        token = self._timeout_override.set(check_timeout(seconds))
        try:
            yield
        finally:
            self._timeout_override.reset(token)

    def effective_timeout_ms(self) -> int | None:
        """The statement timeout in milliseconds the next statement gets (None: the server's)."""
        override = self._timeout_override.get()
        if override is False:
            return self._timeout_ms
        assert override is None or isinstance(override, int)
        return override

    # -- connections and transactions -------------------------------------------------
    def map_errors(self) -> AbstractContextManager[None]:
        """:func:`map_db_errors` with this session's message prefix."""
        return map_db_errors(self._what)

    @contextmanager
    def transaction(self, *, prepare: Callable[[Connection], None] | None = None,
                    limited: bool = True) -> Iterator[Connection]:
        """A connection inside one transaction (committed on success, rolled back on error).

        ``prepare(conn)`` runs first, outside the transaction (the write path creates its
        stage tables there); ``limited=False`` lifts the statement timeout (statistics
        refreshes). Driver errors are re-raised as :class:`DatabaseError` subclasses (see
        :func:`map_db_errors`); library errors pass through.
        """
        try:
            with map_db_errors(self._what), self._pool.connect() as conn:
                _apply_statement_timeout(conn, self.effective_timeout_ms() if limited else None)
                if prepare is not None:
                    prepare(conn)
                with conn.begin():
                    yield conn
        except LockTimeoutError as exc:
            raise self._named(exc) from exc.__cause__

    def write_transaction(self, work: Callable[[Connection], _T], *,
                          prepare: Callable[[Connection], None] | None = None) -> _T:
        """Run ``work(conn)`` in one :meth:`transaction`, whole again when PostgreSQL aborted
        it to break a deadlock (see :func:`retry_on_deadlock`). With read replicas, the
        clock then advances to the primary's WAL position, read on the write's own
        connection right after its commit (no second checkout)."""
        def attempt() -> _T:
            # transaction(), with the commit inside the connection's block: the token is read
            # after it, on the same connection.
            with map_db_errors(self._what), self._pool.connect() as conn:
                _apply_statement_timeout(conn, self.effective_timeout_ms())
                if prepare is not None:
                    prepare(conn)
                with conn.begin():
                    result = work(conn)
                if self._replicas is not None:
                    self._clock.advance(current_token(conn))  # after the commit: a read-your-writes token
                return result

        try:
            return retry_on_deadlock(attempt)
        except LockTimeoutError as exc:
            raise self._named(exc) from exc.__cause__

    def _named(self, error: LockTimeoutError) -> LockTimeoutError:
        """``error`` naming the roles that held the lock it waited for (looked up on a
        connection of its own, after the waiting one went back to the pool)."""
        return name_holders(error, self._pool, schema=self._schema)

    def executor(self, *, snapshot: bool = False) -> AbstractContextManager[Callable[[Statement], Rows]]:
        """The statement executor :meth:`run` drives a plan with, for a caller that drives
        one itself (recording its statements, say): ``with session.executor() as execute:
        run_plan(plan, execute)``. One connection, checked out at the first statement,
        and the read path's rules (replicas, retry, timeout, ``snapshot``) as in :meth:`run`."""
        return self._runner.executor(snapshot=snapshot)

    @property
    def read_replicas(self) -> ReadReplicas | None:
        """The standbys :meth:`run` reads from (None: the primary only)."""
        return self._replicas

    @property
    def clock(self) -> WriteClock:
        """The newest write token of this session (and the sessions sharing its clock)."""
        return self._clock

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection in autocommit mode: each statement commits on its own.

        For statements that cannot run inside a transaction block (``CREATE INDEX
        CONCURRENTLY``) and for session-level advisory locks. If the block raises, the
        connection is closed instead of going back to the pool, so no session state
        (settings, locks) it set outlives the error. No statement timeout: index builds
        run as long as they need.
        """
        with map_db_errors(self._what), self._pool.connect(autocommit=True) as conn:
            _apply_statement_timeout(conn, None)
            yield conn

    # -- locks ------------------------------------------------------------------------
    @contextmanager
    def session_lock(self, conn: Connection, name: str, *, holders_own: str | None = None) -> Iterator[None]:
        """Hold the session-level advisory lock ``name`` on ``conn``, an :meth:`autocommit` connection.

        Waited for by polling ``pg_try_advisory_lock`` with no transaction open. A
        session blocked inside ``pg_advisory_lock`` holds a snapshot, and a ``CREATE
        INDEX CONCURRENTLY`` run by the lock's holder (an HNSW build) waits for that
        snapshot while the waiter waits for the holder: a deadlock.

        PostgreSQL checks no privilege on advisory locks: any session may take any key.
        With ``holders_own`` (a table of the schema), a lock that only that table's owners
        take is waited for only while its holder is one of them; a holder that is not
        (a session that took the key by hand) raises :class:`DatabaseError` naming its
        pid and role, instead of a wait without end.
        """
        key = {"k": name}
        while not conn.execute("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))", key).scalar_one():
            if holders_own is not None:
                self._refuse_foreign_holder(conn, name, holders_own)
            time.sleep(SESSION_LOCK_POLL_SECONDS)
        try:
            yield
        except BaseException:
            try:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(:k, 0))", key)
            except psycopg.Error:
                pass  # a broken connection: autocommit() closes it, which releases the lock
            raise
        conn.execute("SELECT pg_advisory_unlock(hashtextextended(:k, 0))", key)

    def _refuse_foreign_holder(self, conn: Connection, name: str, table: str) -> None:
        """Raise :class:`DatabaseError` when advisory lock ``name`` is held by a session whose
        role neither owns ``table`` (directly or through membership) nor is a superuser."""
        row = conn.execute(
            "SELECT l.pid, r.rolname FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid JOIN pg_roles r ON r.oid = a.usesysid "
            "CROSS JOIN (SELECT hashtextextended(:k, 0) AS k) h "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.database = "
            "  (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid::bigint = (h.k >> 32) & 4294967295 AND l.objid::bigint = h.k & 4294967295 "
            "AND NOT r.rolsuper AND NOT pg_has_role(r.oid, (SELECT c.relowner FROM pg_class c "
            "  WHERE c.oid = to_regclass(format('%I.%I', CAST(:s AS text), CAST(:t AS text)))), 'USAGE') "
            "LIMIT 1", {"k": name, "s": self._schema, "t": table}).first()
        if row is not None:
            raise DatabaseError(
                f"the lock {name!r} is held by pid {row.pid} (role {row.rolname!r}), which does not own "
                f"{self._schema}.{table}: a session that took the library's lock key by hand, not a build. "
                f"End it (SELECT pg_terminate_backend({row.pid})) and run this again")

    def hnsw_build_lock(self, conn: Connection) -> AbstractContextManager[None]:
        """The :meth:`session_lock` under which HNSW builds and index drops on this schema's
        ``embeddings`` table take turns (PostgreSQL runs one concurrent build per table
        at a time anyway). Only the table's owners build and drop: a holder that is not
        one raises at once (see ``holders_own``)."""
        return self.session_lock(conn, f"tnsrag_db.hnsw_build:{self._schema}", holders_own="embeddings")

    # -- the read path ----------------------------------------------------------------
    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement (``:name`` parameters) and return its rows.

        Shorthand for :meth:`run` of a one-statement plan.
        """
        return list(self.run(one(Statement(sql, params))))

    def run(self, plan: Plan[_T], *, snapshot: bool = False, primary: bool = False) -> _T:
        """Drive a read :data:`~tnsrag_db._db.statement.Plan` on one connection and return its result.

        The plan runs on the library's one read runner
        (:class:`~tnsrag_db._db.runner.PlanRunner`): on a connection of the session's pool
        (or of the next usable standby; with ``primary=True`` never a standby: a read that
        a write or an index build acts on), in autocommit (no BEGIN/COMMIT round trips; a
        ``set_config(..., true)`` inside a statement lasts for that statement), each
        statement sent as given (``:name`` parameters as PostgreSQL's ``$n``), rows as
        named tuples. With ``snapshot=True`` every statement runs in one read-only
        REPEATABLE READ transaction instead, so all of them see the same committed data
        (explanations). The connection is checked out at the plan's first statement.
        Driver errors become :class:`DatabaseError` subclasses (thrown into the plan first).
        """
        runner = self._primary_runner if primary else self._runner
        try:
            with runner.executor(snapshot=snapshot) as execute:
                return run_plan(plan, execute)
        except LockTimeoutError as exc:
            raise self._named(exc) from exc.__cause__
