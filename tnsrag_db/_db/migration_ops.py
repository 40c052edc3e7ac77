"""Online schema changes: what ``migrations/env.py`` and the revisions use so that an upgrade
never stalls the application's writers.

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
* :func:`create_index_concurrently` / :func:`drop_index_concurrently` are for revisions:
  an index on a populated table is built with ``CONCURRENTLY`` in alembic's
  ``autocommit_block()`` (outside the revision's transaction, writers keep writing), an
  invalid leftover of an interrupted build is dropped first, and ``lock_timeout`` is
  lifted for the build (its waits block no writer).

Revisions import this module; it must stay importable without a database.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "COMPAT_REVISION",
    "DEFAULT_LOCK_RETRIES",
    "DEFAULT_LOCK_TIMEOUT",
    "LockRetriesExhausted",
    "compat_function_sql",
    "create_index_concurrently",
    "drop_index_concurrently",
    "hold_migration_lock",
    "run_with_lock_retries",
]

#: Seconds a revision's DDL waits for a table lock before it gives up and is retried.
DEFAULT_LOCK_TIMEOUT = 2.0
#: How many times a revision that timed out on a lock is tried again.
DEFAULT_LOCK_RETRIES = 5

_LOCK_NOT_AVAILABLE = "55P03"
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class LockRetriesExhausted(RuntimeError):
    """An upgrade gave up: its DDL could not take a table lock within ``lock_timeout``, every try."""


def _ident(name: str) -> str:
    # Names come from revisions and the validated schema, never from users; checked anyway
    # because they are formatted into DDL.
    if not _IDENT.match(name):
        raise ValueError(f"not a plain lower-case identifier: {name!r}")
    return name


#: A revision id as the compatibility function stores it.
COMPAT_REVISION = re.compile(r"^[0-9a-z_]{1,32}$")


def compat_function_sql(schema: str, serves_from: str, finish_to: str | None) -> str:
    """The statement that (re)defines ``<schema>.tnsrag_schema_compat()``: which releases the
    schema serves. ``serves_from`` is the oldest revision whose release can still read and
    write it; ``finish_to`` the floor ``tnsrag db upgrade --finish`` moves it to (None:
    nothing waits for the finish). A function, not a table: every role that may use the
    schema can call it (no grant, no row-level security), on a standby as well."""
    for value in (serves_from, finish_to):
        if value is not None and not COMPAT_REVISION.match(value):
            raise ValueError(f"not a revision id: {value!r}")
    finish = "NULL" if finish_to is None else f"'{finish_to}'"
    return (f"CREATE OR REPLACE FUNCTION {_ident(schema)}.tnsrag_schema_compat(OUT serves_from text, "
            f"OUT finish_to text) LANGUAGE sql STABLE PARALLEL SAFE "
            f"AS $tnsrag$ SELECT CAST('{serves_from}' AS text), CAST({finish} AS text) $tnsrag$")


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
    from tnsrag_db._db.pool import Connection as Ours

    if isinstance(connection, Ours):
        return connection.execute(sql, params)
    import sqlalchemy as sa

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


@contextmanager
def _no_lock_timeout() -> Iterator[Connection | None]:
    """alembic's autocommit block with ``lock_timeout`` lifted and then restored; yields the
    connection, or None when alembic only prints SQL (``tnsrag db sql``)."""
    import sqlalchemy as sa
    from alembic import context, op

    with op.get_context().autocommit_block():
        if context.is_offline_mode():
            yield None
            return
        bind = op.get_bind()
        before = bind.execute(sa.text("SELECT current_setting('lock_timeout')")).scalar_one()
        bind.execute(sa.text("SET lock_timeout = 0"))
        try:
            yield bind
        finally:
            bind.execute(sa.text("SELECT set_config('lock_timeout', :v, false)"), {"v": before})


def create_index_concurrently(name: str, table: str, columns: Sequence[str], *, schema: str,
                              using: str = "btree", where: str | None = None,
                              include: Sequence[str] = ()) -> None:
    """In a revision: build index ``name`` on ``schema.table`` (``columns`` are plain column
    names or expressions from the revision's code) with ``CREATE INDEX CONCURRENTLY``, outside
    the revision's transaction.

    ``include`` names columns the index carries without ordering by them (``INCLUDE``), for
    index-only scans. An invalid index of that name (left by an interrupted build) is
    dropped first; a valid one is kept (the revision can be run again).
    """
    import sqlalchemy as sa
    from alembic import op

    s, n, t = _ident(schema), _ident(name), _ident(table)
    predicate = f" WHERE {where}" if where else ""
    covering = f" INCLUDE ({', '.join(_ident(c) for c in include)})" if include else ""
    create = (f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {n} ON {s}.{t} "
              f"USING {_ident(using)} ({', '.join(columns)}){covering}{predicate}")
    with _no_lock_timeout() as bind:
        if bind is None:
            op.execute(create)
            return
        invalid = bind.execute(sa.text(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = :s AND c.relname = :n"),
            {"s": s, "n": n}).scalar_one_or_none()
        if invalid:
            bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {s}.{n}"))
        bind.execute(sa.text(create))


def drop_index_concurrently(name: str, *, schema: str) -> None:
    """In a revision: ``DROP INDEX CONCURRENTLY IF EXISTS``, outside the revision's transaction."""
    import sqlalchemy as sa
    from alembic import op

    drop = f"DROP INDEX CONCURRENTLY IF EXISTS {_ident(schema)}.{_ident(name)}"
    with _no_lock_timeout() as bind:
        if bind is None:
            op.execute(drop)
        else:
            bind.execute(sa.text(drop))
