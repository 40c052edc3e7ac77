"""The instant reads answer at: an ``as_of`` for a block (a context variable), carried to
every statement as the bound parameter :data:`AS_OF_PARAM`, which the plan runner fills
when a statement does not give it (see :mod:`tnsrag_db._store.validity` for the conditions
that read it)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from functools import wraps
from typing import Any, TypeVar

from tnsrag_db._db.statement import AS_OF_PARAM, Plan, Statement
from tnsrag_db._errors import ValidationError

__all__ = ["AS_OF_PARAM", "BOUNDED", "as_of", "asked_as_of", "check_as_of", "honours_as_of", "with_instant"]

#: The condition that an entry row has a bound in time (an expiry, a validity or the end of
#: its recording): the predicate of the partial index ``ix_entries_corpus_bounded`` (revision
#: 0018, declared in :mod:`tnsrag_db._db.schema`), whose one empty probe tells the reads that
#: no entry of a corpus needs a check (:func:`tnsrag_db._store.expiry.exclusion`). Column
#: names alone, so it reads the same in the index and in a query of one ``entries`` row
#: source; a change is a new revision. Here, not beside the declaration, so that the reads
#: that use it do not import SQLAlchemy.
BOUNDED = ("expires_at IS NOT NULL OR valid_from IS NOT NULL OR valid_until IS NOT NULL "
           "OR recorded_until IS NOT NULL")


_AS_OF: ContextVar[datetime | None] = ContextVar("tnsrag_as_of", default=None)

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")


def check_as_of(value: object, what: str = "as_of") -> datetime | None:
    """``value`` if it is None or a timezone-aware datetime; :class:`ValidationError` otherwise."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError(f"{what} must be a timezone-aware datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{what} {value.isoformat()} has no time zone")
    return value


def asked_as_of() -> datetime | None:
    """The ``as_of`` of the current block (thread or task), or None: reads answer now."""
    return _AS_OF.get()


@contextmanager
def as_of(instant: datetime | None) -> Iterator[None]:
    """Every read of the block (this thread or task) answers at ``instant`` (a timezone-aware
    datetime): from the entries valid, recorded and not expired then. None: now (as outside
    any block). Raises :class:`ValidationError` for another value."""
    token = _AS_OF.set(check_as_of(instant))
    try:
        yield
    finally:
        _AS_OF.reset(token)


def honours_as_of(method: _F) -> _F:
    """Decorate a strategy's ``retrieve``, ``explain`` or ``plan(query, context)``: the call
    answers at ``context.as_of`` when the context gives one (else at the block's, see
    :func:`as_of`). A plan's statements carry the instant as their parameter, so a plan
    driven elsewhere (an async runner) answers at it too."""
    if inspect.isgeneratorfunction(method):
        @wraps(method)
        def planned(self: Any, query: Any, context: Any = None, *args: Any, **kwargs: Any) -> Any:
            plan = method(self, query, context, *args, **kwargs)
            instant = getattr(context, "as_of", None)
            return plan if instant is None else _plan_at(plan, instant)

        return planned  # type: ignore[return-value]

    @wraps(method)
    def wrapper(self: Any, query: Any, context: Any = None, *args: Any, **kwargs: Any) -> Any:
        instant = getattr(context, "as_of", None)
        if instant is None:
            return method(self, query, context, *args, **kwargs)
        token = _AS_OF.set(instant)
        try:
            return method(self, query, context, *args, **kwargs)
        finally:
            _AS_OF.reset(token)

    return wrapper  # type: ignore[return-value]


def with_instant(sql: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``sql`` and ``params`` with the block's ``as_of`` bound (:data:`AS_OF_PARAM`) when
    ``sql`` needs it: for statements handed to callers that run them on their own."""
    if f":{AS_OF_PARAM}" in sql:
        params = {**params, AS_OF_PARAM: _AS_OF.get()}
    return sql, params


def _at(statement: Statement, instant: datetime) -> Statement:
    if statement.params.get(AS_OF_PARAM) is not None:
        return statement
    return Statement(statement.sql, {**statement.params, AS_OF_PARAM: instant}, statement.columns)


def _plan_at(plan: Plan[_T], instant: datetime) -> Plan[_T]:
    """``plan`` with each statement answering at ``instant`` (unless it names its own)."""
    try:
        statement = next(plan)
        while True:
            try:
                rows = yield _at(statement, instant)
            except GeneratorExit:
                plan.close()
                raise
            except BaseException as exc:  # a driver error thrown into the plan: the plan's to handle
                statement = plan.throw(exc)
            else:
                statement = plan.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
