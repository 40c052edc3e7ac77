"""Opening a store for a command that must never create a schema (stats, query, export...).

``connect()`` on the embedded server migrates the schema it is given to head, creating
it when missing: right for ``tnsrag ingest``, wrong for a read (a mistyped ``--schema``
would leave a new, empty schema behind). :func:`open_existing` opens without migrating
(only the embedded server's default schema is still set up on first use);
a schema that is not there is an error naming the tnsrag schemas that are, and an
embedded schema of an older revision is still upgraded as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tnsrag_db.store.store import Store

__all__ = ["open_existing", "tnsrag_schemas"]

#: Schemas holding the library's tables: its alembic version table and ``entries``.
_SCHEMAS_SQL = """
SELECT n.nspname FROM pg_catalog.pg_namespace n
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'alembic_version')
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'entries')
ORDER BY n.nspname
"""


def tnsrag_schemas(url: str | None) -> list[str]:
    """Names of the schemas of ``url``'s database (None: the embedded server) that hold
    tnsrag_db's tables, sorted. Raises :class:`~tnsrag_db.errors.DatabaseError` when the
    server cannot be reached."""
    import sqlalchemy as sa

    from tnsrag_db.db.engine import create_engine
    from tnsrag_db.errors import DatabaseError
    from tnsrag_db.store.embedded.resolve import embedded_url

    engine = create_engine(embedded_url() if url is None else url, schema="public", pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            return [str(name) for name in conn.execute(sa.text(_SCHEMAS_SQL)).scalars()]
    except sa.exc.SQLAlchemyError as exc:
        raise DatabaseError(f"could not list the schemas: {exc}") from exc
    finally:
        engine.dispose()


def open_existing(url: str | None, schema: str, corpus: str, *, read_urls: Sequence[str] = ()) -> Store:
    """A :class:`Store` on ``url`` (None: the embedded server) whose ``schema`` already exists.

    Nothing is created (but the default schema on the embedded server, which any first
    command sets up): a schema without the library's tables raises
    :class:`~tnsrag_db.errors.SchemaNotReadyError` saying so and naming the tnsrag schemas
    of the database. An existing schema behind this release's head is migrated on the
    embedded server and an error on a URL's server (as :func:`~tnsrag_db.store.store.connect`
    does). Other connection failures raise :class:`~tnsrag_db.errors.DatabaseError`.
    """
    from tnsrag_db.cli._common import DEFAULT_SCHEMA
    from tnsrag_db.errors import SchemaNotReadyError
    from tnsrag_db.store.store import connect

    if url is None and schema == DEFAULT_SCHEMA:
        # The embedded server's own schema: set up on first use by any command, so that
        # `tnsrag corpora` on a new installation answers "none yet".
        return connect(None, corpus=corpus, schema=schema, read_urls=read_urls)
    try:
        return connect(url, corpus=corpus, schema=schema, auto_migrate=False, read_urls=read_urls)
    except SchemaNotReadyError:
        existing = tnsrag_schemas(url)
        if schema not in existing:
            raise SchemaNotReadyError(
                f"schema {schema!r} does not exist in this database (a read creates none); tnsrag schemas here: "
                + (", ".join(existing) if existing else "none yet (" + (
                    "tnsrag ingest creates one)" if url is None else "tnsrag db upgrade --url ... creates one)"))
            ) from None
        if url is not None:
            raise
    # The embedded server's schema exists at an older revision: brought to head, as always.
    return connect(url, corpus=corpus, schema=schema, auto_migrate=None, read_urls=read_urls)
