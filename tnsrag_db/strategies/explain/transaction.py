"""The one read-only snapshot an explanation's statements share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tnsrag_db.errors import DatabaseError, TnsragError

if TYPE_CHECKING:  # imported by every strategy module; SQLAlchemy only when a snapshot is taken
    from sqlalchemy.engine import Connection

    from tnsrag_db.store.store import Store

__all__ = ["snapshot"]


@contextmanager
def snapshot(store: Store) -> Iterator[Connection]:
    """One read-only REPEATABLE READ transaction: every statement of an explanation sees
    the same committed data. Driver errors become :class:`DatabaseError`."""
    import sqlalchemy as sa

    try:
        with store.engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
            conn.execute(sa.text("SET TRANSACTION READ ONLY"))
            yield conn
    except TnsragError:
        raise
    except sa.exc.SQLAlchemyError as exc:
        raise DatabaseError(f"database error in corpus {store.corpus!r}: {exc}") from exc
