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

from tnsrag_db._cli._common import DEFAULT_SCHEMA
from tnsrag_db._db.pool import OneConnection
from tnsrag_db._db.session import Session
from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import SchemaNotReadyError
from tnsrag_db._store.embedded.resolve import embedded_url
from tnsrag_db._store.store import Store, connect

__all__ = ["missing_schema_error", "open_existing", "tnsrag_schemas", "tnsrag_schemas_plan"]

#: Schemas holding the library's tables: its alembic version table and ``entries``.
_SCHEMAS_SQL = """
SELECT n.nspname FROM pg_catalog.pg_namespace n
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'alembic_version')
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'entries')
ORDER BY n.nspname
"""


def tnsrag_schemas_plan() -> Plan[list[str]]:
    """The names of the schemas of the database holding tnsrag_db's tables, sorted
    (one catalog statement, any runner)."""
    rows = yield Statement(_SCHEMAS_SQL, {}, ("nspname",))
    return [str(r.nspname) for r in rows]


def missing_schema_error(schema: str, existing: Sequence[str], *, embedded: bool) -> SchemaNotReadyError:
    """The error for a read naming ``schema``, which is not among the tnsrag schemas
    ``existing`` of the database (``embedded``: the embedded server's, where ``tnsrag
    ingest`` creates one; else a URL's)."""
    return SchemaNotReadyError(
        f"schema {schema!r} does not exist in this database (a read creates none); tnsrag schemas here: "
        + (", ".join(existing) if existing else "none yet (" + (
            "tnsrag ingest creates one)" if embedded else "tnsrag db upgrade --url ... creates one)")))


def tnsrag_schemas(url: str | None) -> list[str]:
    """Names of the schemas of ``url``'s database (None: the embedded server) that hold
    tnsrag_db's tables, sorted (:func:`tnsrag_schemas_plan` on the read runner of a session
    over one connection). Raises :class:`~tnsrag_db._errors.DatabaseError` when the server
    cannot be reached."""
    db = OneConnection(embedded_url() if url is None else url, schema="public")
    try:
        return Session(db, what="could not list the schemas", schema="public").run(tnsrag_schemas_plan())
    finally:
        db.close()


def open_existing(url: str | None, schema: str, corpus: str, *, read_urls: Sequence[str] = (),
                  create_default: bool = True, one_connection: bool = False, vector_types: bool = True) -> Store:
    """A :class:`Store` on ``url`` (None: the embedded server) whose ``schema`` already exists.

    Nothing is created (but the default schema on the embedded server, which any first
    command sets up, unless ``create_default`` is False): a schema without the library's tables raises
    :class:`~tnsrag_db._errors.SchemaNotReadyError` saying so and naming the tnsrag schemas
    of the database. An existing schema behind this release's head is migrated on the
    embedded server and an error on a URL's server (as :func:`~tnsrag_db._store.store.connect`
    does). Other connection failures raise :class:`~tnsrag_db._errors.DatabaseError`.
    ``one_connection``: the store runs on one connection, without pool threads (a command
    that makes one call at a time); ``vector_types=False``: without pgvector's types (a
    command that sends no vector, such as a keyword query, does not import numpy).
    """
    if url is None and schema == DEFAULT_SCHEMA and create_default:
        # The embedded server's own schema: set up on first use by any command, so that
        # `tnsrag corpora` on a new installation answers "none yet".
        return connect(None, corpus=corpus, schema=schema, read_urls=read_urls, _one_connection=one_connection,
                       _vector_types=vector_types)
    try:
        return connect(url, corpus=corpus, schema=schema, auto_migrate=False, read_urls=read_urls,
                       _one_connection=one_connection, _vector_types=vector_types)
    except SchemaNotReadyError:
        existing = tnsrag_schemas(url)
        if schema not in existing:
            raise missing_schema_error(schema, existing, embedded=url is None) from None
        if url is not None:
            raise
    # The embedded server's schema exists at an older revision: brought to head, as always.
    return connect(url, corpus=corpus, schema=schema, auto_migrate=None, read_urls=read_urls,
                   _one_connection=one_connection, _vector_types=vector_types)
