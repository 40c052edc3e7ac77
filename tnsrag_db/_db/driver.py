"""The library's read statements on a bare psycopg connection, without SQLAlchemy.

The store's read path (:meth:`tnsrag_db._db.session.Session.run`) drives a
:data:`~tnsrag_db._db.statement.Plan` on a connection of a SQLAlchemy engine's pool;
SQLAlchemy takes ~0.4 s to import. A short process that only reads (``tnsrag query
--strategy keyword``) runs the very same plans on the same runner here, on one psycopg
connection opened without SQLAlchemy:

- :class:`DriverStore` (a :class:`~tnsrag_db._db.read_store.ReadStore`, as a full
  :class:`~tnsrag_db._store.store.Store` is): a read-only store on one psycopg connection (the search path
  and ``statement_timeout`` a store's connections get), whose plans run on the library's
  one read runner (:class:`~tnsrag_db._db.runner.PlanRunner`), as a full store's do. It
  writes nothing, migrates nothing and has no replicas: :meth:`DriverStore.at_head`
  tells the caller whether the schema is ready, and anything else is the full store's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo

from tnsrag_db._db.driver_errors import map_db_errors
from tnsrag_db._db.lock_holders import plan_lookup, with_holders
from tnsrag_db._db.read_store import FilterPairs
from tnsrag_db._db.revisions import schema_state_plan
from tnsrag_db._db.runner import TIMEOUT_SET, PlanRunner
from tnsrag_db._db.settings import check_timeout, validate_schema_name
from tnsrag_db._db.statement import Plan, Statement, one
from tnsrag_db._errors import DatabaseError, LockTimeoutError

__all__ = ["DriverStore"]

_T = TypeVar("_T")

class DriverStore:
    """A read-only view of corpus ``corpus`` of ``schema`` on one psycopg connection to
    ``conninfo`` (a libpq URL or key/value string), opened at the first statement.

    Its connection searches ``<schema>, public`` and runs in autocommit, like the store's
    read fast lane; ``statement_timeout`` (seconds, None: the server's) bounds every
    statement; ``max_query_terms`` as in :class:`~tnsrag_db._store.store.Store`;
    ``pgvector`` (default False) registers pgvector's types on the connection when it
    opens (a few catalog reads; what vector searches need, never keyword ones). A
    connection that cannot be opened raises :class:`~tnsrag_db._errors.DatabaseError`
    starting ``could not connect:`` (the words of :func:`~tnsrag_db._store.store.connect`);
    other driver errors leave as :class:`~tnsrag_db._errors.DatabaseError` subclasses whose
    message starts ``database error in corpus '<corpus>'``. Not
    thread-safe (one connection). Raises :class:`ConfigurationError` for a bad option.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, conninfo: str, *, corpus: str, schema: str, max_query_terms: int,
                 statement_timeout: float | None = None, pgvector: bool = False) -> None:
        validate_schema_name(schema)
        self._timeout_ms = check_timeout(statement_timeout)
        self._conninfo = conninfo
        self._pgvector = pgvector
        self._corpus = corpus
        self._schema = schema
        self._max_query_terms = max_query_terms
        self._what = f"database error in corpus {corpus!r}"
        self._conn: psycopg.Connection[Any] | None = None
        self._info: dict[Any, Any] = {}
        self._pairs = FilterPairs(schema)
        timeout = self._timeout_ms
        self._runner = PlanRunner(self, what=self._what, timeout_ms=lambda: timeout)

    @property
    def corpus(self) -> str:
        """The corpus every query of this store is confined to."""
        return self._corpus

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the library's tables."""
        return self._schema

    @property
    def location(self) -> str:
        """The database this store reads: its connection string without the password."""
        params = psycopg.conninfo.conninfo_to_dict(self._conninfo)
        params.pop("password", None)
        return psycopg.conninfo.make_conninfo("", **params)

    @property
    def max_query_terms(self) -> int:
        """How many words of a query are analysed."""
        return self._max_query_terms

    def filter_pairs_plan(self) -> Plan[bool]:
        """Whether metadata filters go through the filter pairs (see :class:`ReadStore`):
        the same test as a full store's, on this connection."""
        return self._pairs.plan()

    def __repr__(self) -> str:
        return f"DriverStore(corpus={self._corpus!r}, schema={self._schema!r})"

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            # Start-up options, as tnsrag_db._db.engine.create_engine and Session give a
            # store's connections: no round trip for either setting.
            options = f"-c search_path={self._schema},public"
            if self._timeout_ms is not None:
                options += f" -c statement_timeout={self._timeout_ms}"
            try:
                self._conn = psycopg.connect(self._conninfo, autocommit=True, options=options)
            except psycopg.Error as exc:
                # The words of the full store's connect(): nothing of the plan ran.
                error = DatabaseError(f"could not connect: {exc}")
                error.sqlstate = exc.sqlstate
                raise error from exc
            if self._pgvector:
                self._register_pgvector(self._conn)
            self._info = {} if self._timeout_ms is None else {TIMEOUT_SET: self._timeout_ms}
        return self._conn

    def _register_pgvector(self, conn: psycopg.Connection[Any]) -> None:
        """pgvector's types on ``conn`` (its catalog lookups), as a store's connections get
        them: a query vector (a numpy array) then binds as a ``vector``."""
        from pgvector.psycopg import register_vector

        with map_db_errors(self._what):
            try:
                register_vector(conn)
            except psycopg.ProgrammingError as exc:
                if exc.sqlstate is not None:
                    raise
                # pgvector's own "vector type not found" (no server error): an unmigrated
                # database, which the schema check sends to the full path before any vector.

    # -- the runner's Source and Checkout: this store's one connection --------------------
    def checkout(self, *, snapshot: bool) -> DriverStore:
        self._connection()
        return self

    def failed(self, checkout: object) -> bool:
        return False

    @property
    def driver(self) -> psycopg.Connection[Any]:
        assert self._conn is not None
        return self._conn

    @property
    def info(self) -> dict[Any, Any]:
        return self._info

    def release(self) -> None:
        pass  # kept open for the next plan

    def discard(self) -> None:
        self.close()

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive a read :data:`~tnsrag_db._db.statement.Plan` on this store's connection and
        return its result; ``snapshot=True``: all its statements in one read-only REPEATABLE
        READ transaction (as :meth:`tnsrag_db._db.session.Session.run`)."""
        try:
            return self._runner.run(plan, snapshot=snapshot)
        except LockTimeoutError as exc:
            raise with_holders(exc, plan_lookup(self._runner.run, self._schema)) from exc.__cause__

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement (``:name`` parameters) and return its rows."""
        return list(self.run(one(Statement(sql, params))))

    def at_head(self) -> bool:
        """True when this release can use the schema: migrated to its head, or upgraded by a
        later release that still serves it (:func:`schema_state_plan`, one statement for a
        schema at head); False also when that cannot be told without alembic. Raises
        :class:`DatabaseError` when the server cannot be reached."""
        state = self.run(schema_state_plan(self._schema))
        return state is not None and state.usable

    def close(self) -> None:
        """Close the connection (a no-op when none is open)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> DriverStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
