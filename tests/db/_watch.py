"""Watching the statements and commits of the library's connections in a test.

:func:`watch` wraps :meth:`tnsrag_db._db.pool.Connection.execute` and ``commit`` for the
block (every pool, every thread): ``before(conn, sql, params)`` runs before each statement
is sent, ``after(conn, sql, params)`` after it, ``commit(conn)`` after each commit.
:func:`unwatched` sends a statement of the test's own on a watched connection (an
``EXPLAIN`` of the statement being watched, say) without calling the callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tnsrag_db._db.pool import Connection, Result

_EXECUTE = Connection.execute
_COMMIT = Connection.commit

Callback = Callable[[Connection, str, Any], None]


def unwatched(conn: Connection, sql: str, params: Mapping[str, Any] | None = None) -> Result:
    """``conn.execute(sql, params)`` without the callbacks of :func:`watch`."""
    return _EXECUTE(conn, sql, params)


@contextmanager
def watch(*, before: Callback | None = None, after: Callback | None = None,
          commit: Callable[[Connection], None] | None = None) -> Iterator[None]:
    def execute(self: Connection, sql: str, params: Any = None) -> Result:
        if before is not None:
            before(self, sql, params)
        result = _EXECUTE(self, sql, params)
        if after is not None:
            after(self, sql, params)
        return result

    def committed(self: Connection) -> None:
        _COMMIT(self)
        if commit is not None:
            commit(self)

    Connection.execute = execute  # type: ignore[method-assign]
    Connection.commit = committed  # type: ignore[method-assign]
    try:
        yield
    finally:
        Connection.execute = _EXECUTE  # type: ignore[method-assign]
        Connection.commit = _COMMIT  # type: ignore[method-assign]
