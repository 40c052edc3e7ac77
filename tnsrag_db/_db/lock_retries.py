"""Waiting for locks during schema changes without stalling the application's writers:
the rule ``migrations/env.py`` runs the revisions under, and tenancy's switch too
(:mod:`tnsrag_db.tenancy`), which must not import alembic or SQLAlchemy for it.

* :func:`hold_migration_lock` takes the per-schema migration lock by polling
  ``pg_try_advisory_lock`` with no transaction open. A process blocked inside
  ``pg_advisory_lock`` holds a snapshot, and ``CREATE INDEX CONCURRENTLY`` run by the
  lock holder waits for every older snapshot: the two would wait for each other.
* :func:`run_with_lock_retries` runs the revisions with ``lock_timeout`` set. A revision
  whose DDL needs a table lock that a long transaction holds gives up after
  ``lock_timeout`` instead of queueing, and while it queues every writer of that table
  queues behind it; the revision's transaction rolls back and is tried again after a
  pause, at most ``retries`` more times, then the upgrade fails with
  :class:`LockRetriesExhausted` naming the oldest open transactions.

Both take alembic's SQLAlchemy connection or the library's own
:class:`~tnsrag_db._db.pool.Connection`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tnsrag_db._db.pool import Connection

__all__ = ["DEFAULT_LOCK_RETRIES", "DEFAULT_LOCK_TIMEOUT", "LockRetriesExhausted", "hold_migration_lock",
           "run_with_lock_retries"]

#: Seconds a revision's DDL waits for a table lock before it gives up and is retried.
DEFAULT_LOCK_TIMEOUT = 2.0
#: How many times a revision that timed out on a lock is tried again.
DEFAULT_LOCK_RETRIES = 5

_LOCK_NOT_AVAILABLE = "55P03"


class LockRetriesExhausted(RuntimeError):
    """An upgrade gave up: its DDL could not take a table lock within ``lock_timeout``, every try."""


def _sqlstate(exc: BaseException) -> str | None:
    while exc is not None:
        code = getattr(exc, "sqlstate", None) or getattr(getattr(exc, "orig", None), "sqlstate", None)
        if isinstance(code, str):
            return code
        if exc.__cause__ is None:
            return None
        exc = exc.__cause__
    return None


def _run(connection: Any, sql: str, params: dict[str, Any] | None = None) -> Any:
    """Send ``sql`` on ``connection``: alembic's SQLAlchemy connection (a revision, the
    upgrade's lock) or the library's own :class:`~tnsrag_db._db.pool.Connection` (tenancy's
    switch, which runs under the same lock-retry rule)."""
    if isinstance(connection, Connection):
        return connection.execute(sql, params)
    import sqlalchemy as sa  # only alembic's connection comes here: tenancy's switch runs without SQLAlchemy

    return connection.execute(sa.text(sql), params or {})


@contextmanager
def hold_migration_lock(connection: Any, key: int, *, poll: float = 0.05) -> Iterator[None]:
    """Hold the session-level advisory lock ``key`` on ``connection`` for the block.

    Waits by polling ``pg_try_advisory_lock`` and committing between tries, so no
    snapshot is held while waiting (see the module docstring).
    """
    delay = poll
    while True:
        got = _run(connection, "SELECT pg_try_advisory_lock(:key)", {"key": key}).scalar_one()
        connection.commit()
        if got:
            break
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    try:
        yield
    finally:
        if connection.in_transaction():
            connection.rollback()
        _run(connection, "SELECT pg_advisory_unlock(:key)", {"key": key})
        connection.commit()


def _set_lock_timeout(connection: Any, seconds: float) -> None:
    _run(connection, "SELECT set_config('lock_timeout', :v, false)", {"v": f"{int(seconds * 1000)}ms"})
    connection.commit()


def _long_transactions(connection: Any) -> str:
    """The oldest open transactions of this database, for the error message."""
    try:
        rows = _run(connection,
            "SELECT pid, state, round(extract(epoch FROM now() - xact_start))::int AS age "
            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND xact_start IS NOT NULL ORDER BY xact_start LIMIT 3").all()
        connection.commit()
    except Exception:  # noqa: BLE001 - only the message's detail is lost
        connection.rollback()
        return ""
    if not rows:
        return ""
    return "; oldest open transactions: " + ", ".join(f"pid {r.pid} ({r.state}, {r.age} s)" for r in rows)


def run_with_lock_retries(connection: Any, run: Callable[[], None], *,
                          lock_timeout: float = DEFAULT_LOCK_TIMEOUT, retries: int = DEFAULT_LOCK_RETRIES,
                          pause: float = 1.0) -> None:
    """Call ``run`` (alembic's ``run_migrations`` with one transaction per revision) with
    ``lock_timeout`` set on ``connection``; on a lock timeout, roll back and call it again
    (alembic resumes after the last committed revision) up to ``retries`` more times, each
    after ``pause`` × the attempt number seconds.

    ``lock_timeout`` ≤ 0 waits without limit (PostgreSQL's default). Raises
    :class:`LockRetriesExhausted` when every attempt timed out.
    """
    _set_lock_timeout(connection, max(lock_timeout, 0.0))
    try:
        for attempt in range(retries + 1):
            try:
                run()
                return
            except Exception as exc:
                if _sqlstate(exc) != _LOCK_NOT_AVAILABLE:
                    raise
                if connection.in_transaction():
                    connection.rollback()
                if attempt == retries:
                    raise LockRetriesExhausted(
                        f"gave up after {retries + 1} attempts: a revision's DDL could not take its table lock "
                        f"within lock_timeout={lock_timeout:g} s (it gives up rather than queue, which would "
                        f"block every writer of the table){_long_transactions(connection)}. End the long "
                        "transaction or run the upgrade again later (--lock-timeout / --lock-retries)"
                    ) from exc
                time.sleep(pause * (attempt + 1))
    finally:
        if connection.in_transaction():
            connection.rollback()
        _run(connection, "RESET lock_timeout")
        connection.commit()
