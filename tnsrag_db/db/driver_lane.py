"""The read path's driver lane: a statement run straight on a pooled psycopg connection.

:meth:`~tnsrag_db.db.session.Session.run` sends its statements here unless SQLAlchemy
execution events have listeners (:func:`watched`): the statement goes out with
PostgreSQL's own ``$n`` parameters through a psycopg ``RawCursor`` (psycopg parses no
query text), rows come back as named tuples, and a failure is handed to SQLAlchemy's own
error handling, so callers see exactly the errors SQLAlchemy's execution would raise.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, cast

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import PoolProxiedConnection

from tnsrag_db.db.statement import Rows

__all__ = ["DRIVER_CURSOR", "PooledReader", "engine_watched", "native_sql", "send_on_driver", "watched"]

#: The psycopg dialect rendering PostgreSQL's own ``$n`` parameters.
_NATIVE_DIALECT = psycopg_dialect.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]

#: SQLAlchemy's statement execution events: while any of them has a listener on a
#: connection (or its engine, or all engines), :meth:`Session.run` sends its statements
#: through SQLAlchemy so the listeners (tracing, statement counters) see them.
_EXECUTION_EVENTS = ("before_execute", "after_execute", "before_cursor_execute", "after_cursor_execute")


def watched(conn: Connection) -> bool:
    """Whether SQLAlchemy execution events have a listener on ``conn`` (its engine's and
    the class-wide ones included)."""
    dispatch = conn.dispatch
    return any(getattr(dispatch, name) for name in _EXECUTION_EVENTS)


def engine_watched(engine: Engine) -> bool:
    """Whether SQLAlchemy execution events have a listener on ``engine`` (the engine class's
    included): what :func:`watched` finds on every connection of that engine."""
    dispatch = engine.dispatch
    return any(getattr(dispatch, name) for name in _EXECUTION_EVENTS)


@lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> Callable[[Sequence[Any]], Any]:
    """A tuple class with attribute access by column name (duplicate or invalid names
    renamed ``_<position>``, as :func:`collections.namedtuple` does)."""
    row: Any = namedtuple("Row", names, rename=True)  # type: ignore[misc]
    make: Callable[[Sequence[Any]], Any] = row._make
    return make


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], Any]:
    """psycopg row factory of the driver lane: rows as :func:`_row_class` tuples (what the
    plans read of SQLAlchemy's ``Row``: indexing, unpacking, attributes by column name)."""
    result = cursor.pgresult
    if result is None or not result.nfields:
        return tuple
    encoding = cursor.connection.info.encoding
    return _row_class(tuple((result.fname(i) or b"").decode(encoding) for i in range(result.nfields)))


#: The driver lane's cursor class (``$n`` parameters, no query parsing); the test suite's
#: corpus-scope plugin substitutes a subclass that records the statements.
DRIVER_CURSOR: type[psycopg.RawCursor[Any]] = psycopg.RawCursor


def send_on_driver(conn: Connection, sql: str, params: dict[str, Any], driver_sql: Callable[[str], str]) -> Rows:
    """Run ``sql`` (``:name`` parameters) on ``conn``'s psycopg connection and return its
    rows: what ``conn.exec_driver_sql(driver_sql(sql), params).all()`` does, without
    SQLAlchemy's execution context and result objects and without psycopg parsing the
    query. A failure goes through SQLAlchemy's own error handling (wrapped as
    ``sqlalchemy.exc.DBAPIError``, disconnects detected and the pool invalidated,
    ``handle_error`` events), exactly as if SQLAlchemy had run it; ``driver_sql`` gives the
    ``%(name)s`` form SQLAlchemy would have sent (for error reports)."""
    driver = conn.connection.driver_connection
    assert driver is not None
    return _send(driver, sql, params, driver_sql, lambda: conn)


def _send(driver: Any, sql: str, params: dict[str, Any], driver_sql: Callable[[str], str],
          connection: Callable[[], Connection]) -> Rows:
    """:func:`send_on_driver` on a psycopg connection; ``connection`` gives the SQLAlchemy
    connection whose error handling a failure goes through."""
    text, names = native_sql(sql)
    try:
        values: tuple[Any, ...] | dict[str, Any] = tuple(params[name] for name in names)
    except KeyError:  # a missing parameter: let psycopg name it, as it would through SQLAlchemy
        text, values = driver_sql(sql), params
    cursor = (DRIVER_CURSOR if isinstance(values, tuple) else psycopg.Cursor)(driver, row_factory=_row_factory)
    try:
        cursor.execute(text, values)
        rows: Rows = cursor.fetchall()
        return rows
    except BaseException as exc:
        if isinstance(exc, psycopg.Error) or not isinstance(exc, Exception):
            # Driver errors and interruptions (KeyboardInterrupt, cancellation): as SQLAlchemy.
            # Reported with the statement and parameters SQLAlchemy would have sent.
            connection()._handle_dbapi_exception(exc, driver_sql(sql), params, cast(Any, cursor), None)
        raise
    finally:
        cursor.close()


class PooledReader:
    """A pooled connection checked out for autocommit reads without a SQLAlchemy
    :class:`~sqlalchemy.engine.Connection` (the read path's cheapest checkout).

    The checkout is the pool's own (``engine.raw_connection()``: the same pool events and
    connection hooks as ``engine.connect()``); the psycopg connection is switched to
    autocommit for the reads and back before it returns to the pool, as SQLAlchemy's
    ``isolation_level="AUTOCOMMIT"`` does. Only on a failure is a SQLAlchemy connection
    made around it, so that the error goes through SQLAlchemy's handling (typed,
    disconnects invalidating the pool, ``handle_error`` events) exactly as on
    :func:`send_on_driver`; from then on that connection owns it.
    """

    __slots__ = ("_conn", "_driver", "_engine", "_fairy")

    def __init__(self, engine: Engine, fairy: PoolProxiedConnection) -> None:
        self._engine = engine
        self._fairy = fairy
        self._conn: Connection | None = None
        driver = fairy.driver_connection
        assert driver is not None
        driver.autocommit = True
        self._driver = driver

    @property
    def info(self) -> dict[Any, Any]:
        """The pooled connection's ``info`` (what ``Connection.info`` of it gives)."""
        return self._fairy.info

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(self._engine, connection=self._fairy)
        return self._conn

    def send(self, sql: str, params: dict[str, Any], driver_sql: Callable[[str], str]) -> Rows:
        """:func:`send_on_driver` on this connection."""
        if self._conn is not None:  # it failed once: SQLAlchemy's from now on
            return send_on_driver(self._conn, sql, params, driver_sql)
        return _send(self._driver, sql, params, driver_sql, self._connection)

    def close(self) -> None:
        """Give the connection back to the pool with autocommit off again (also when a
        SQLAlchemy connection took it over: that one did not switch it), or discard it
        when it is broken."""
        try:
            if self._fairy.is_valid:
                if self._driver.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    self._driver.autocommit = False
                else:  # broken, or mid-statement: the pool must not hand it out again
                    self.invalidate()
        finally:
            if self._conn is not None:
                self._conn.close()
            else:
                self._fairy.close()

    def invalidate(self) -> None:
        """Discard the connection (the pool opens a new one in its place)."""
        if self._conn is not None:
            self._conn.invalidate()
        else:
            self._fairy.invalidate()


@lru_cache(maxsize=512)
def native_sql(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with ``:name`` parameters as PostgreSQL's own ``$1, $2, ...`` (one number per
    name) and the names in number order: what the driver lane sends, so psycopg parses no
    query text (it re-parses a ``%(name)s`` statement longer than 4 kB at every execution)."""
    compiled = sa.text(sql).compile(dialect=_NATIVE_DIALECT)
    return compiled.string, tuple(compiled.positiontup or ())
