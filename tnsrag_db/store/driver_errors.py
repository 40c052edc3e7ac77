"""Driver errors mapped to the library's tree, in one place, most specific first.

Both SQLAlchemy's wrappers and bare psycopg errors (the write path streams COPY through
the driver connection) are mapped by SQLSTATE, so a cancelled statement, a missing
privilege or a broken connection reaches the caller as its own :class:`DatabaseError`
subclass with the driver error as ``__cause__``.
"""

from __future__ import annotations

import psycopg
import sqlalchemy as sa

from tnsrag_db.errors import ConnectionLostError, DatabaseError, PermissionDeniedError, StatementTimeoutError

__all__ = ["DISCONNECT_SQLSTATES", "driver_error", "sqlstate_of"]

#: SQLSTATEs of a server that went away: admin/crash shutdown, cannot connect now, and
#: the connection exception class (08).
DISCONNECT_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
_TIMEOUT = frozenset({"57014", "55P03"})  # query_canceled (statement_timeout), lock_not_available
_DENIED = frozenset({"42501", "25006"})  # insufficient_privilege, read_only_sql_transaction


def sqlstate_of(exc: BaseException | None) -> str | None:
    """The SQLSTATE of a driver error, of the SQLAlchemy error wrapping it, or of a library
    error whose ``__cause__`` is one; None when there is none."""
    seen = 0
    while exc is not None and seen < 4:
        code = getattr(exc, "sqlstate", None)
        if isinstance(code, str):
            return code
        orig = getattr(exc, "orig", None)
        exc = orig if isinstance(orig, BaseException) else exc.__cause__
        seen += 1
    return None


def _lost(exc: BaseException) -> bool:
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    if isinstance(orig, psycopg.OperationalError) and getattr(orig, "sqlstate", None) is None:
        return True  # psycopg's own "server closed the connection" / "consuming input failed"
    code = sqlstate_of(orig)
    return code is not None and (code in DISCONNECT_SQLSTATES or code.startswith("08"))


def driver_error(exc: BaseException, what: str) -> DatabaseError:
    """The library error for driver error ``exc`` (raise it ``from exc``); ``what`` says where."""
    code = sqlstate_of(exc)
    if code in _TIMEOUT:
        return StatementTimeoutError(f"{what}: statement cancelled ({code}): {exc}")
    if code in _DENIED:
        return PermissionDeniedError(f"{what}: not allowed for this database role or session ({code}): {exc}")
    if _lost(exc):
        return ConnectionLostError(f"{what}: the connection to the server was lost; work not yet "
                                   f"committed was rolled back: {exc}")
    return DatabaseError(f"{what}: {exc}")
