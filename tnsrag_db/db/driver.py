"""The library's read statements on a bare psycopg connection, without SQLAlchemy.

The store's read path (:meth:`tnsrag_db.db.session.Session.run`) drives a
:data:`~tnsrag_db.db.statement.Plan` on a connection of a SQLAlchemy engine's pool;
SQLAlchemy takes ~0.4 s to import. A short process that only reads (``tnsrag query
--strategy keyword``) runs the very same plans on the same runner here, on one psycopg
connection opened without SQLAlchemy:

- :class:`ReadStore`: what the read side of an index needs of a store (corpus, schema,
  ``max_query_terms``, :meth:`~ReadStore.run`, :meth:`~ReadStore.read`); a
  :class:`~tnsrag_db.store.store.Store` is one, and so is
- :class:`DriverStore`: a read-only store on one psycopg connection (the search path
  and ``statement_timeout`` a store's connections get), whose plans run on the library's
  one read runner (:class:`~tnsrag_db.db.runner.PlanRunner`), as a full store's do. It
  writes nothing, migrates nothing and has no replicas: :meth:`DriverStore.at_head`
  tells the caller whether the schema is ready, and anything else is the full store's job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import psycopg

from tnsrag_db._validate import is_number
from tnsrag_db.db.driver_errors import map_db_errors
from tnsrag_db.db.runner import TIMEOUT_SET, PlanRunner
from tnsrag_db.db.statement import Plan, Statement, one
from tnsrag_db.errors import ConfigurationError, DatabaseError

__all__ = ["FILTER_PAIRS_SQL", "FILTER_PAIRS_TRIGGERS", "DriverStore", "ReadStore", "check_timeout", "libpq_url",
           "migrations_dir", "schema_revisions_plan", "shipped_head", "validate_schema_name"]

_T = TypeVar("_T")

#: The triggers on ``entries`` that keep the metadata filter pairs (revision 0007) while
#: tenancy is on (attached by :func:`tnsrag_db.tenancy.enable`).
FILTER_PAIRS_TRIGGERS = ("tnsrag_filter_pairs_insert", "tnsrag_filter_pairs_update", "tnsrag_filter_pairs_delete")
#: Whether schema ``:s`` matches metadata filters through the filter pairs: tenancy is on
#: (row-level security on ``entries``) and every pair trigger is attached and enabled. One
#: catalog query, sent once per store by its first filtered retrieval
#: (:meth:`ReadStore.uses_filter_pairs`).
FILTER_PAIRS_SQL = (
    "SELECT coalesce((SELECT c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :s AND c.relname = 'entries'), false) "
    "AND (SELECT count(*) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relname = 'entries' "
    "AND tg.tgenabled <> 'D' AND tg.tgname IN ("
    + ", ".join(f"'{name}'" for name in FILTER_PAIRS_TRIGGERS) + f")) = {len(FILTER_PAIRS_TRIGGERS)} AS pairs"
)


@runtime_checkable
class ReadStore(Protocol):
    """The read side of a store, as an index's read methods use it: one corpus of one schema."""

    @property
    def corpus(self) -> str:
        """The corpus every statement is confined to."""
        ...

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the library's tables."""
        ...

    @property
    def max_query_terms(self) -> int:
        """How many words of a query are analysed."""
        ...

    def uses_filter_pairs(self) -> bool:
        """Whether metadata filters go through the filter pairs (tenancy on for the schema:
        :data:`FILTER_PAIRS_SQL`, asked once and remembered); False: ``metadata @>``."""
        ...

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement (``:name`` parameters) and return its rows."""
        ...

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive a read plan on one connection and return its result."""
        ...


def libpq_url(url: str) -> str | None:
    """``url`` (libpq or SQLAlchemy form: ``postgresql://``, ``postgres://``,
    ``postgresql+psycopg://``) as a libpq URL, or None when it is no PostgreSQL URL of
    that shape (the caller then leaves it to :func:`tnsrag_db.db.engine.normalize_url`,
    which says what is wrong with it)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.partition("+")[0] not in ("postgresql", "postgres"):
        return None
    return f"postgresql://{rest}"


# The schema-name rule, the timeout check, the migrations folder and the head revision live
# here, since this module imports neither SQLAlchemy nor alembic (the CLI's fast path needs
# them); tnsrag_db.db.engine, .session and .migrate re-export them.
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_REVISION_RE = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_DOWN_REVISION_RE = re.compile(r"^down_revision(?:\s*:[^=]+)?\s*=\s*(None|['\"]([^'\"]+)['\"])", re.M)


def migrations_dir() -> Path:
    """The folder holding ``env.py`` and ``versions/``: the packaged copy, else the source tree's."""
    try:
        import tnsrag_db._migrations as packaged  # type: ignore[import-not-found]

        return Path(packaged.__file__).parent
    except ImportError:
        return Path(__file__).resolve().parents[2] / "migrations"


@lru_cache(maxsize=1)
def shipped_head() -> str | None:
    """This installation's head revision read from the revision files (no alembic), or None
    when they are not a plain linear chain of literal ``revision``/``down_revision`` strings."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (migrations_dir() / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        rev, down = _REVISION_RE.search(source), _DOWN_REVISION_RE.search(source)
        if rev is None and down is None:
            continue  # __init__.py and helpers
        if rev is None or down is None:
            return None
        revisions.add(rev.group(1))
        if down.group(2) is not None:
            parents.add(down.group(2))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


#: SQLSTATE undefined_table.
_UNDEFINED_TABLE = "42P01"


def schema_revisions_plan(schema: str) -> Plan[list[str] | None]:
    """The alembic revisions recorded in ``schema`` (this release's head alone: migrated
    to head), or None when it has no version table (schema missing or never migrated).
    One statement; raises :class:`ConfigurationError` for a bad schema name."""
    validate_schema_name(schema)
    try:
        # The schema name matched [a-z_][a-z0-9_]* above, so it is safe as an identifier.
        rows = yield Statement(f"SELECT version_num FROM {schema}.alembic_version", {}, ("version_num",))
    except DatabaseError as exc:
        if exc.sqlstate != _UNDEFINED_TABLE:
            raise
        return None  # run in autocommit (every runner's reads): the connection stays usable
    return [str(r.version_num) for r in rows]


def validate_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case identifier (``[a-z_][a-z0-9_]*``, ≤ 63 chars).

    Raises :class:`ConfigurationError` otherwise. Only such names are accepted, so the
    schema can be quoted safely wherever PostgreSQL needs an identifier.
    """
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise ConfigurationError(
            f"schema name must match [a-z_][a-z0-9_]* and be at most 63 characters, got {schema!r}"
        )
    return schema


def check_timeout(seconds: object, what: str = "statement_timeout") -> int | None:
    """``seconds`` (None, or a positive finite number) as whole milliseconds (at least 1)."""
    if seconds is None:
        return None
    if not is_number(seconds) or not 0 < seconds < 86_400 * 24:  # type: ignore[operator]
        raise ConfigurationError(f"{what} must be None or a positive number of seconds (under 24 days), "
                                 f"got {seconds!r}")
    return max(1, round(float(seconds) * 1000))  # type: ignore[arg-type]


class DriverStore:
    """A read-only view of corpus ``corpus`` of ``schema`` on one psycopg connection to
    ``conninfo`` (a libpq URL or key/value string), opened at the first statement.

    Its connection searches ``<schema>, public`` and runs in autocommit, like the store's
    read fast lane; ``statement_timeout`` (seconds, None: the server's) bounds every
    statement; ``max_query_terms`` as in :class:`~tnsrag_db.store.store.Store`. A
    connection that cannot be opened raises :class:`~tnsrag_db.errors.DatabaseError`
    starting ``could not connect:`` (the words of :func:`~tnsrag_db.store.store.connect`);
    other driver errors leave as :class:`~tnsrag_db.errors.DatabaseError` subclasses whose
    message starts ``database error in corpus '<corpus>'``. Not
    thread-safe (one connection). Raises :class:`ConfigurationError` for a bad option.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, conninfo: str, *, corpus: str, schema: str, max_query_terms: int,
                 statement_timeout: float | None = None) -> None:
        validate_schema_name(schema)
        self._timeout_ms = check_timeout(statement_timeout)
        self._conninfo = conninfo
        self._corpus = corpus
        self._schema = schema
        self._max_query_terms = max_query_terms
        self._what = f"database error in corpus {corpus!r}"
        self._conn: psycopg.Connection[Any] | None = None
        self._info: dict[Any, Any] = {}
        self._pairs: bool | None = None
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
    def max_query_terms(self) -> int:
        """How many words of a query are analysed."""
        return self._max_query_terms

    def uses_filter_pairs(self) -> bool:
        """Whether metadata filters go through the filter pairs (see :class:`ReadStore`):
        the same test as a full store's, on this connection."""
        if self._pairs is None:
            self._pairs = bool(self.read(FILTER_PAIRS_SQL, {"s": self._schema})[0][0])
        return self._pairs

    def __repr__(self) -> str:
        return f"DriverStore(corpus={self._corpus!r}, schema={self._schema!r})"

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            # Start-up options, as tnsrag_db.db.engine.create_engine and Session give a
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
            self._info = {} if self._timeout_ms is None else {TIMEOUT_SET: self._timeout_ms}
        return self._conn

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
        """Drive a read :data:`~tnsrag_db.db.statement.Plan` on this store's connection and
        return its result; ``snapshot=True``: all its statements in one read-only REPEATABLE
        READ transaction (as :meth:`tnsrag_db.db.session.Session.run`)."""
        return self._runner.run(plan, snapshot=snapshot)

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement (``:name`` parameters) and return its rows."""
        return list(self.run(one(Statement(sql, params))))

    def at_head(self) -> bool:
        """True when the schema is migrated to this release's head (one statement,
        :func:`schema_revisions_plan`); False also when that cannot be told without
        alembic. Raises :class:`DatabaseError` when the server cannot be reached."""
        head = shipped_head()
        return head is not None and self.run(schema_revisions_plan(self._schema)) == [head]

    def close(self) -> None:
        """Close the connection (a no-op when none is open)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> DriverStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
