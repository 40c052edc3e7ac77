"""Driver errors mapped to the library's tree, in one place: :func:`map_db_errors`.

The model is httpx's ``map_httpcore_exceptions()``: one context manager around every use
of a connection, whose rules are tried most specific first; the first that matches names
the :class:`~tnsrag_db._errors.DatabaseError` subclass raised ``from`` the driver error
(kept as ``__cause__``, its SQLSTATE as ``.sqlstate``). psycopg's errors are mapped, and
the SQLAlchemy wrappers alembic raises around them during a migration.
Callers then catch the subclass (``except DeadlockError``) instead of unpicking SQLSTATEs.

SQLAlchemy is not imported here: only alembic's migrations run on it, so a process that
never migrated holds none of its errors, and its classes are looked up in ``sys.modules``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

import psycopg

from tnsrag_db._errors import (
    ConnectionLostError,
    ConstraintViolationError,
    DatabaseError,
    DeadlockError,
    LockTimeoutError,
    PermissionDeniedError,
    StatementTimeoutError,
    TnsragError,
    ValidationError,
)

__all__ = ["DISCONNECT_SQLSTATES", "LOCK_TIMEOUT_SQLSTATE", "db_error", "driver_message", "map_db_errors", "sqlstate_of"]

#: SQLSTATEs of a server that went away: admin/crash shutdown, cannot connect now, and
#: the connection exception class (08).
DISCONNECT_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
_TIMEOUT = frozenset({"57014"})  # query_canceled (statement_timeout, a cancel request)
#: lock_not_available: ``lock_timeout``, or ``NOWAIT`` on a held lock.
LOCK_TIMEOUT_SQLSTATE = "55P03"
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


def _sqlalchemy_exc() -> ModuleType | None:
    """``sqlalchemy.exc`` when SQLAlchemy is loaded (else no error can be one of its)."""
    return sys.modules.get("sqlalchemy.exc")


def _lost(exc: BaseException, code: str | None) -> bool:
    sa_exc = _sqlalchemy_exc()
    wrapped = sa_exc is not None and isinstance(exc, sa_exc.DBAPIError)
    if wrapped and exc.connection_invalidated:  # type: ignore[attr-defined]
        return True
    orig = exc.orig if wrapped else exc  # type: ignore[attr-defined]
    if isinstance(orig, psycopg.OperationalError) and getattr(orig, "sqlstate", None) is None:
        return True  # psycopg's own "server closed the connection" / "consuming input failed"
    return code is not None and (code in DISCONNECT_SQLSTATES or code.startswith("08"))


_Rule = tuple[type[DatabaseError], Callable[[BaseException, "str | None"], bool], str]

#: Most specific first: ``(error class, matches(driver error, sqlstate), message template)``.
_RULES: tuple[_Rule, ...] = (
    (DeadlockError, lambda exc, code: code == "40P01", "{what}: {exc}"),
    (LockTimeoutError, lambda exc, code: code == LOCK_TIMEOUT_SQLSTATE,
     "{what}: a lock wait ran past lock_timeout ({code}): {exc}"),
    (StatementTimeoutError, lambda exc, code: code in _TIMEOUT, "{what}: statement cancelled ({code}): {exc}"),
    (PermissionDeniedError, lambda exc, code: code in _DENIED,
     "{what}: not allowed for this database role or session ({code}): {exc}"),
    (ConnectionLostError, _lost,
     "{what}: the connection to the server was lost; work not yet committed was rolled back: {exc}"),
    (ConstraintViolationError, lambda exc, code: code is not None and code.startswith("23"), "{what}: {exc}"),
)


def driver_message(exc: BaseException) -> str:
    """The driver's own message: a SQLAlchemy wrapper's adds the statement, its parameters
    and a link to SQLAlchemy's documentation, which a user reading one line does not need
    (they stay on the error's ``__cause__``)."""
    orig = getattr(exc, "orig", None)
    return str(orig if isinstance(orig, BaseException) else exc).strip()


def db_error(exc: BaseException, what: str) -> DatabaseError:
    """The library error for driver error ``exc`` (raise it ``from exc``); ``what`` says where."""
    code = sqlstate_of(exc)
    message = driver_message(exc)
    error: DatabaseError | None = None
    for cls, matches, template in _RULES:
        if matches(exc, code):
            error = cls(template.format(what=what, code=code, exc=message))
            break
    if error is None:
        error = DatabaseError(f"{what}: {message}")
    error.sqlstate = code
    return error


def not_text(exc: UnicodeEncodeError) -> ValidationError:
    """A str with a lone surrogate reached the driver through an argument the public
    methods do not check one by one (an id to get or delete, say): nothing was sent."""
    return ValidationError(f"an argument is not Unicode text (a lone surrogate at position {exc.start}); "
                           "nothing was written")


@contextmanager
def map_db_errors(what: str) -> Iterator[None]:
    """Re-raise driver errors inside the block as the library's :class:`DatabaseError`
    subclasses (see :func:`db_error`), ``from`` the driver error; ``what`` starts the message.

    Library errors pass through unchanged; a ``UnicodeEncodeError`` (a lone surrogate the
    driver could not encode) becomes a :class:`ValidationError`.
    """
    try:
        yield
    except TnsragError:
        raise
    except UnicodeEncodeError as exc:
        raise not_text(exc) from exc
    except Exception as exc:
        sa_exc = _sqlalchemy_exc()
        if isinstance(exc, psycopg.Error) or (sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError)):
            raise db_error(exc, what) from exc
        raise
