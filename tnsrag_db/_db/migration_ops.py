"""Online schema changes: what the revisions use so that an upgrade never stalls the
application's writers (the lock rules ``migrations/env.py`` runs them under are
:mod:`~tnsrag_db._db.lock_retries`').

* :func:`compat_function_sql` (re)defines the function that tells which releases the
  schema serves.
* :func:`create_index_concurrently` / :func:`drop_index_concurrently` are for revisions:
  an index on a populated table is built with ``CONCURRENTLY`` in alembic's
  ``autocommit_block()`` (outside the revision's transaction, writers keep writing), an
  invalid leftover of an interrupted build is dropped first, and ``lock_timeout`` is
  lifted for the build (its waits block no writer).

Revisions import this module; it must stay importable without a database. Only what
migrates imports it (alembic runs then): it imports alembic and SQLAlchemy at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import context, op
from sqlalchemy.engine import Connection

__all__ = ["COMPAT_REVISION", "compat_function_sql", "create_index_concurrently", "drop_index_concurrently"]

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


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


@contextmanager
def _no_lock_timeout() -> Iterator[Connection | None]:
    """alembic's autocommit block with ``lock_timeout`` lifted and then restored; yields the
    connection, or None when alembic only prints SQL (``tnsrag db sql``)."""
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
    drop = f"DROP INDEX CONCURRENTLY IF EXISTS {_ident(schema)}.{_ident(name)}"
    with _no_lock_timeout() as bind:
        if bind is None:
            op.execute(drop)
        else:
            bind.execute(sa.text(drop))
