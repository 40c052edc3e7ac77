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
from sqlalchemy.engine import Connection

from tnsrag_db.db.statement import Rows

__all__ = ["DRIVER_CURSOR", "native_sql", "send_on_driver", "watched"]

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
    text, names = native_sql(sql)
    try:
        values: tuple[Any, ...] | dict[str, Any] = tuple(params[name] for name in names)
    except KeyError:  # a missing parameter: let psycopg name it, as it would through SQLAlchemy
        text, values = driver_sql(sql), params
    driver = conn.connection.driver_connection
    assert driver is not None
    cursor = (DRIVER_CURSOR if isinstance(values, tuple) else psycopg.Cursor)(driver, row_factory=_row_factory)
    try:
        cursor.execute(text, values)
        rows: Rows = cursor.fetchall()
        return rows
    except BaseException as exc:
        if isinstance(exc, psycopg.Error) or not isinstance(exc, Exception):
            # Driver errors and interruptions (KeyboardInterrupt, cancellation): as SQLAlchemy.
            # Reported with the statement and parameters SQLAlchemy would have sent.
            conn._handle_dbapi_exception(exc, driver_sql(sql), params, cast(Any, cursor), None)
        raise
    finally:
        cursor.close()


@lru_cache(maxsize=512)
def native_sql(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with ``:name`` parameters as PostgreSQL's own ``$1, $2, ...`` (one number per
    name) and the names in number order: what the driver lane sends, so psycopg parses no
    query text (it re-parses a ``%(name)s`` statement longer than 4 kB at every execution)."""
    compiled = sa.text(sql).compile(dialect=_NATIVE_DIALECT)
    return compiled.string, tuple(compiled.positiontup or ())
