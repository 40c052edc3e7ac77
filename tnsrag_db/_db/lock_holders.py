"""Who holds the lock a session waited for: the roles named by a :class:`LockTimeoutError`.

A session of a tenant role runs under ``lock_timeout`` (``tnsrag db tenant grant`` sets it
on the role), so a lock another session holds delays it by that long at most and then
fails with SQLSTATE 55P03, which :func:`~tnsrag_db._db.driver_errors.map_db_errors` maps to
:class:`~tnsrag_db._errors.LockTimeoutError`. At that moment the wait is over, so
``pg_blocking_pids`` has nothing to say: :func:`holders` looks in ``pg_locks`` instead,
right after the timeout, for the sessions still holding

- the advisory keys the session was waiting for, when the waiting statement was one of
  the library's advisory locks (:func:`advisory_lock` records its key on the error), or
- otherwise a lock on a table of the schema in a mode that stops reads or writes
  (``SHARE`` and stronger: what ``LOCK TABLE`` takes), the one kind of lock other than
  advisory locks that a tenant can take on rows it cannot see.

Row locks are not listed in ``pg_locks`` (a tenant can lock only rows its policy shows it
anyway): a timeout behind one names no holder. Where ``pg_locks`` is not readable by the
role (``REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC``: docs/deployment.md, "What
tenancy isolates, and what it does not"), the error says the holder is unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from tnsrag_db._db.driver_errors import LOCK_TIMEOUT_SQLSTATE, sqlstate_of
from tnsrag_db._db.statement import Plan, Rows, Statement
from tnsrag_db._errors import DatabaseError, LockTimeoutError

if TYPE_CHECKING:
    from tnsrag_db._db.pool import Connection, Connections

__all__ = ["ADVISORY_KEYS", "advisory_lock", "holders", "holders_plan", "name_holders", "plan_lookup",
           "try_advisory_lock", "waited_keys", "with_holders"]

#: The attribute of a driver error (and of the :class:`LockTimeoutError` mapped from it)
#: naming the advisory keys its statement waited for.
ADVISORY_KEYS = "tnsrag_advisory_keys"

#: The table lock modes that stop a reader or a writer (what ``LOCK TABLE`` takes by default
#: and in its stronger modes).
_BLOCKING_MODES = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")

#: Sessions other than this one holding one of the keys ``:keys`` (advisory locks on one
#: bigint: ``classid`` its high half, ``objid`` its low half, ``objsubid`` 1), or, with no
#: keys, a blocking lock on a table of schema ``:s``; each with its role and pid.
_HOLDERS_SQL = f"""\
SELECT a.usename::text AS role, l.pid FROM pg_catalog.pg_locks l
JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
  AND CASE WHEN cardinality(CAST(:keys AS bigint[])) > 0 THEN
        l.locktype = 'advisory' AND l.objsubid = 1 AND EXISTS (
          SELECT 1 FROM unnest(CAST(:keys AS bigint[])) k
          WHERE l.classid::bigint = (k >> 32) & 4294967295 AND l.objid::bigint = k & 4294967295)
      ELSE
        l.locktype = 'relation' AND l.mode IN ({", ".join(f"'{m}'" for m in _BLOCKING_MODES)})
        AND l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c
                           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s)
      END
GROUP BY a.usename, l.pid ORDER BY 1, 2"""


def _lock_sql(shared: bool, xact: bool, attempt: bool) -> str:
    return (f"pg_{'try_' if attempt else ''}advisory_{'xact_' if xact else ''}lock{'_shared' if shared else ''}"
            "(CAST(:key AS bigint))")


def advisory_lock(conn: Connection, key: int, *, shared: bool) -> None:
    """Take the transaction-level advisory lock ``key`` (a bigint) on ``conn``, waiting at
    most ``lock_timeout``; a timeout's driver error carries the key for :func:`name_holders`."""

    try:
        conn.execute(f"SELECT {_lock_sql(shared, True, False)}", {"key": key})
    except Exception as exc:
        if sqlstate_of(exc) == LOCK_TIMEOUT_SQLSTATE:
            setattr(exc, ADVISORY_KEYS, (key,))
        raise


def try_advisory_lock(conn: Connection, key: int, *, shared: bool = False) -> bool:
    """Take the transaction-level advisory lock ``key`` if no other session holds it; False if one does."""

    return bool(conn.execute(f"SELECT {_lock_sql(shared, True, True)}", {"key": key}).scalar_one())


def holders(conn: Connection, *, schema: str, keys: tuple[int, ...] = ()) -> list[tuple[str, int]] | None:
    """``(role, pid)`` of each other session holding advisory key ``keys`` (or, with none, a
    blocking lock on a table of ``schema``), by role; None when ``pg_locks`` is not readable.

    Runs in a savepoint of ``conn``'s transaction, if one is open, so a refusal leaves it usable.
    """

    params: dict[str, Any] = {"keys": list(keys), "s": schema}
    try:
        if conn.in_transaction():
            with conn.begin_nested():
                rows = conn.execute(_HOLDERS_SQL, params).all()
        else:
            with conn.begin():
                rows = conn.execute(_HOLDERS_SQL, params).all()
    except psycopg.Error as exc:
        if sqlstate_of(exc) == "42501":  # pg_locks revoked
            return None
        raise
    return [(str(r.role), int(r.pid)) for r in rows]


def describe(found: list[tuple[str, int]] | None) -> str:
    """The end of a lock timeout's message: who held the lock."""
    if found is None:
        return "the holder is unknown (this role may not read pg_locks)"
    if not found:
        return "no holder found (it let go, or held a row lock)"
    return "held by " + ", ".join(f"role {role!r} (pid {pid})" for role, pid in found)


def holders_plan(schema: str, keys: tuple[int, ...] = ()) -> Plan[list[tuple[str, int]]]:
    """:func:`holders` as a read plan, for a store that reads through the plan runner alone
    (the CLI's lean path); a refusal raises :class:`~tnsrag_db._errors.PermissionDeniedError`."""
    rows: Rows = yield Statement(_HOLDERS_SQL, {"keys": list(keys), "s": schema}, ("role", "pid"))
    return [(str(r.role), int(r.pid)) for r in rows]


def waited_keys(error: BaseException) -> tuple[int, ...]:
    """The advisory keys the statement behind ``error`` waited for (:func:`advisory_lock`), if any."""
    cause: BaseException | None = error
    while cause is not None:
        keys: tuple[int, ...] = getattr(cause, ADVISORY_KEYS, ())
        if keys:
            return keys
        orig = getattr(cause, "orig", None)
        cause = orig if isinstance(orig, BaseException) else cause.__cause__
    return ()


def with_holders(error: LockTimeoutError, lookup: Callable[[tuple[int, ...]], list[tuple[str, int]] | None]
                 ) -> LockTimeoutError:
    """``error`` again with the roles ``lookup(keys)`` finds holding the lock it waited for
    (None: ``pg_locks`` not readable), raised ``from`` the same driver error; ``error``
    itself when the lookup fails (it is never worse than the timeout)."""
    if error.holders_known:
        return error
    try:
        found = lookup(waited_keys(error))
    except Exception:  # noqa: BLE001 - the timeout is the error to report, not the lookup's
        return error
    # On the first line: the driver's message may go on with the statement and a caret.
    first, newline, rest = str(error).partition("\n")
    named = LockTimeoutError(f"{first}; {describe(found)}{newline}{rest}", holders=tuple(dict.fromkeys(r for r, _ in found or ())),
                             holders_known=found is not None)
    named.sqlstate = error.sqlstate
    named.__cause__ = error.__cause__
    return named


def name_holders(error: LockTimeoutError, pool: Connections, *, schema: str) -> LockTimeoutError:
    """:func:`with_holders`, looked up on a connection of ``pool`` checked out for the purpose."""
    def lookup(keys: tuple[int, ...]) -> list[tuple[str, int]] | None:

        with pool.begin() as conn:
            conn.execute("SELECT set_config('statement_timeout', '5000', true)")
            return holders(conn, schema=schema, keys=keys)

    return with_holders(error, lookup)


def plan_lookup(run: Callable[[Plan[list[tuple[str, int]]]], list[tuple[str, int]]], schema: str
                ) -> Callable[[tuple[int, ...]], list[tuple[str, int]] | None]:
    """A lookup for :func:`with_holders` through a plan runner ``run``."""
    def lookup(keys: tuple[int, ...]) -> list[tuple[str, int]] | None:
        try:
            return run(holders_plan(schema, keys))
        except DatabaseError as exc:
            if exc.sqlstate == "42501":
                return None
            raise

    return lookup
