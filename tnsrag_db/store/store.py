"""The persistent corpus: ``Store`` and :func:`connect`.

A ``Store`` is one corpus in one schema of one database. It writes entries (with
their BM25 postings and statistics, in the same transaction), reads and deletes
them. The strategy-facing views (``VectorMemoryStore``, ``BM25Index``, ``GraphStore``,
...) are built over a ``Store`` and share its engine and corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timezone
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import URL, Connection, Engine

from tnsrag_db.db.replicas import (
    DEFAULT_MAX_LAG,
    DEFAULT_WAIT_TIMEOUT,
    ReadReplicas,
    Replica,
    WriteToken,
    current_token,
    verify_standby,
)
from tnsrag_db.db.statement import Plan, Rows, Statement, one, run_plan
from tnsrag_db.errors import ConfigurationError, DatabaseError, InvalidEntryError, TnsragError, ValidationError
from tnsrag_db.store import migrate
from tnsrag_db.store.analysis import DEFAULT_MAX_QUERY_TERMS, STAGED_TERMS_SQL, analyze
from tnsrag_db.store.driver_errors import driver_error, sqlstate_of
from tnsrag_db.store.engine import create_engine, embedded_url, redact_url, validate_schema_name
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.store.schema import DEFAULT_SCHEMA
from tnsrag_db.types import MemoryEntry, MemoryTier, is_unicode_text

__all__ = ["BM25_STAT_SHARDS", "DEADLOCK_RETRIES", "STAGE_DDL", "STAGE_READY", "IngestCounts", "Store", "WriteReport",
           "connect", "retry_on_deadlock"]

#: Number of counter rows per corpus for BM25 corpus statistics (see schema.bm25_stats).
BM25_STAT_SHARDS = 16
#: How often a process waiting for a session lock (HNSW build, declarative ingestion) checks it.
SESSION_LOCK_POLL_SECONDS = 0.2
_MAX_CORPUS = 200


@dataclass(frozen=True, slots=True)
class IngestCounts:
    """How a write classified its entries: new, changed, or identical to what was stored."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        """All entries of the write."""
        return self.inserted + self.updated + self.unchanged

    def __add__(self, other: IngestCounts) -> IngestCounts:
        return IngestCounts(self.inserted + other.inserted, self.updated + other.updated,
                            self.unchanged + other.unchanged)


@dataclass(slots=True)
class WriteReport:
    """Ids of a write by outcome; ``content_changed`` are the updated ids whose text changed."""

    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    content_changed: list[str] = field(default_factory=list)

    @property
    def counts(self) -> IngestCounts:
        """The counts of this report."""
        return IngestCounts(len(self.inserted), len(self.updated), len(self.unchanged))


def _stat_shard() -> int:
    # Stable per thread, so one transaction always touches one counter row (no
    # deadlock between shards), while threads and processes spread over the rows.
    return hash((os.getpid(), threading.get_ident())) % BM25_STAT_SHARDS


def content_hash(entry: MemoryEntry) -> bytes:
    """SHA-256 over every stored field of ``entry``: equal hashes mean an identical entry."""
    ts = entry.timestamp.astimezone(timezone.utc).isoformat() if entry.timestamp is not None else None
    payload = [entry.content, entry.tier.name, entry.source, entry.parent_id, ts, sorted(entry.metadata.items())]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()).digest()


def validate_batch(entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
    """Check every entry of a batch (type, fields, duplicate ids) before anything is written.

    Raises :class:`InvalidEntryError` naming the entry (id and position).
    """
    batch = list(entries)
    seen: dict[str, int] = {}
    for index, entry in enumerate(batch):
        if not isinstance(entry, MemoryEntry):
            raise InvalidEntryError(f"batch item {index} is a {type(entry).__name__}, not a MemoryEntry", index=index)
        entry.validate(index)
        first = seen.setdefault(entry.id, index)
        if first != index:
            raise InvalidEntryError(f"entry id {entry.id!r} appears twice in the batch (positions {first} and {index})",
                                    entry_id=entry.id, index=index)
    return batch


def _not_text(exc: UnicodeEncodeError) -> ValidationError:
    # A str with a lone surrogate reached the driver through an argument the public
    # methods do not check one by one (an id to get or delete, say): nothing was sent.
    return ValidationError(f"an argument is not Unicode text (a lone surrogate at position {exc.start}); "
                           "nothing was written")


def _no_nul(entry_ids: Iterable[object]) -> None:
    # The driver refuses NUL in any text parameter with a DataError of its own (nothing is
    # sent): say which argument, as for a lone surrogate.
    for entry_id in entry_ids:
        if isinstance(entry_id, str) and "\x00" in entry_id:
            raise ValidationError(f"entry id {entry_id!r} contains a NUL character (PostgreSQL text cannot "
                                  "hold it); nothing was read or written")


def _row_to_entry(row: Any) -> MemoryEntry:
    return MemoryEntry(
        id=row.id,
        content=row.content,
        tier=MemoryTier[row.tier],
        source=row.source,
        parent_id=row.parent_id,
        timestamp=row.ts,
        metadata=row.metadata or {},
    )


_DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


@lru_cache(maxsize=512)
def _driver_sql(sql: str) -> str:
    """``sql`` with ``:name`` parameters in the driver's ``%(name)s`` form (as SQLAlchemy compiles it)."""
    return sa.text(sql).compile(dialect=_DIALECT).string


#: Bulk writes of at least this many entries refresh the planner statistics (see
#: :meth:`Store.refresh_statistics`).
ANALYZE_AFTER_ROWS = 5000
_ANALYZABLE = frozenset({"embeddings", "edges", "bm25_df", "bm25_stats"})

#: How often a whole write runs again after PostgreSQL aborted it to break a deadlock.
DEADLOCK_RETRIES = 3

_T = TypeVar("_T")


def retry_on_deadlock(operation: Callable[[], _T], retries: int = DEADLOCK_RETRIES) -> _T:
    """Run ``operation`` (which opens and commits its own transaction) and run it again,
    up to ``retries`` times, when PostgreSQL aborted it to break a deadlock (SQLSTATE
    40P01). Its transaction was rolled back, so nothing of the failed attempt remains.
    """
    attempt = 0
    while True:
        try:
            return operation()
        except DatabaseError as exc:
            if attempt >= retries or sqlstate_of(exc) != "40P01":
                raise
            attempt += 1


def _probe(table: str, alias: str, columns: str, key: str) -> str:
    """``CROSS JOIN LATERAL`` of one primary-key (or unique-prefix) lookup in ``table`` per
    outer row: ``corpus = :c AND <key>``.

    The write path reaches the shared tables only this way, driven by its stage rows.
    ``OFFSET 0`` keeps the planner from turning the lookups into a join it may reorder:
    a corpus created after the last ANALYZE is estimated at one row (the statistics'
    most-common-values list covers every row then), and the planner would scan the whole
    corpus once per stage row. Targets of UPDATE and DELETE are then named by ``ctid``
    (a TID scan), for the same reason.
    """
    return (f"CROSS JOIN LATERAL (SELECT {columns} FROM {table} {alias} "
            f"WHERE {alias}.corpus = :c AND {key} OFFSET 0) {alias}")


#: Key in a connection's ``info`` counting the entries written by the current
#: :meth:`Store.write_transaction` (absent outside one).
_WRITTEN = "tnsrag_written"

#: Key in a connection's ``info`` set when its stage tables exist (committed).
STAGE_READY = "tnsrag_stage_ready"

#: Per-session temp tables that stage a batch; emptied at every commit.
STAGE_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_entries (ord int PRIMARY KEY, id text NOT NULL, "
    "content text NOT NULL, tier text NOT NULL, source text, parent_id text, ts timestamptz, metadata jsonb NOT NULL, "
    "content_hash bytea NOT NULL, state char(1)) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_chunks (ord int NOT NULL, chunk text NOT NULL, "
    "single boolean NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_extras (ord int NOT NULL, term text NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_terms (ord int NOT NULL, lexeme text NOT NULL, tf int NOT NULL) "
    "ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_df (lexeme text NOT NULL, delta int NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_lens (ord int PRIMARY KEY, doc_len int NOT NULL, "
    "lexemes text[] NOT NULL) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS tnsrag_stage_ids (id text PRIMARY KEY) ON COMMIT DELETE ROWS",
)
#: Batches at least this large ANALYZE their stage tables before the set-based steps.
_ANALYZE_STAGE_ROWS = 1000
_STAGE_TABLES = ("tnsrag_stage_entries", "tnsrag_stage_chunks", "tnsrag_stage_extras", "tnsrag_stage_terms",
                 "tnsrag_stage_df", "tnsrag_stage_lens")


def _ensure_stage_tables(conn: Connection) -> None:
    """Create the per-session stage tables inside the current transaction unless this
    connection has them (committed).

    :meth:`Store.write_transaction` creates them before its transaction, once per
    connection (see :func:`_prepare_stage_tables`); a write run inside another
    transaction creates them here (cheap no-ops when they exist)."""
    if not conn.info.get(STAGE_READY):
        for ddl in STAGE_DDL:
            conn.execute(sa.text(ddl))


def _prepare_stage_tables(conn: Connection) -> None:
    """Create the stage tables on ``conn`` (outside any transaction) in a transaction of
    their own, once per connection.

    Only writes need them, so a connection that only reads creates nothing: a role
    without the TEMP privilege, a ``default_transaction_read_only`` session and a hot
    standby can read. For those a write fails here, before anything is written, with
    :class:`PermissionDeniedError` (raised by the caller's error mapping).
    """
    if conn.info.get(STAGE_READY):
        return
    with conn.begin():
        for ddl in STAGE_DDL:
            conn.execute(sa.text(ddl))
    conn.info[STAGE_READY] = True

# Applies df deltas in lexeme order: every writer locks bm25_df rows in the same order
# (after its entry rows, before its bm25_stats row), so concurrent writers cannot deadlock.
_APPLY_DF_SQL = (
    "INSERT INTO bm25_df AS t (corpus, lexeme, shard, df) "
    "SELECT :c, lexeme, :shard, sum(delta) FROM {source} GROUP BY lexeme HAVING sum(delta) <> 0 ORDER BY lexeme "
    "ON CONFLICT (corpus, lexeme, shard) DO UPDATE SET df = t.df + excluded.df"
)


def _check_timeout(seconds: object, what: str = "statement_timeout") -> int | None:
    """``seconds`` (None, or a positive finite number) as whole milliseconds (at least 1)."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 86_400 * 24:
        raise ConfigurationError(f"{what} must be None or a positive number of seconds (under 24 days), "
                                 f"got {seconds!r}")
    return max(1, round(seconds * 1000))


_CONSISTENCY = ("eventual", "read_your_writes")
#: SQLSTATEs of a server that went away or refuses work: a standby failing so is left out.
_GONE_STATES = ("57P01", "57P02", "57P03", "40001")  # shutdowns, starting up, recovery conflict


def _server_gone(exc: sa.exc.DBAPIError) -> bool:
    """Whether ``exc`` says the connection's server is gone (not that the statement failed)."""
    if exc.connection_invalidated:
        return True
    state = sqlstate_of(exc)
    if state is None:
        return isinstance(exc, sa.exc.OperationalError)  # a lost connection carries no SQLSTATE
    return state.startswith("08") or state in _GONE_STATES


class _WriteClock:
    """The newest :class:`WriteToken` of a store and its views (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.token: WriteToken | None = None

    def advance(self, token: WriteToken) -> None:
        with self._lock:
            if self.token is None or token > self.token:
                self.token = token


#: Key in a connection's ``info``: the ``statement_timeout`` (ms) the library set on its
#: session (absent: the server's or role's default).
_TIMEOUT_SET = "tnsrag_statement_timeout"


def _apply_statement_timeout(conn: Connection, ms: int | None) -> None:
    """Give ``conn``'s session ``statement_timeout`` ``ms`` (None: the server's default),
    outside any transaction; a no-op when the session has it already (no round trip)."""
    if conn.info.get(_TIMEOUT_SET) == ms:
        return
    conn.exec_driver_sql("RESET statement_timeout" if ms is None else f"SET statement_timeout = {int(ms)}")
    if conn.in_transaction():
        conn.commit()
    if ms is None:
        conn.info.pop(_TIMEOUT_SET, None)
    else:
        conn.info[_TIMEOUT_SET] = ms


class Store:
    """One corpus of the library's schema in one PostgreSQL database.

    Construct with :func:`connect` (which resolves the database and checks or runs
    migrations) or directly from an engine you own. Thread-safe; the engine's pool
    is shared by every view built on this store. Use as a context manager or call
    :meth:`close`.

    Bounds on the work of one call: ``max_query_terms`` (default 256, 1 to 100,000) is
    how many words of a query are analysed (the rest is ignored, see
    :func:`~tnsrag_db.store.analysis.analyze_query`); ``statement_timeout`` (seconds,
    default None: the server's setting) cancels any statement of this store that runs
    longer, with :class:`StatementTimeoutError` (a write is rolled back whole).
    :meth:`timeout` sets it for the calls of one block. Index builds and the statistics
    refresh after bulk writes are not limited. Raises :class:`ConfigurationError` for a
    bad option.
    """

    def __init__(self, engine: Engine, *, corpus: str = "default", schema: str = DEFAULT_SCHEMA,
                 text_config: str = "english", owns_engine: bool = False,
                 max_query_terms: int = DEFAULT_MAX_QUERY_TERMS, statement_timeout: float | None = None,
                 read_replicas: ReadReplicas | None = None, consistency: str = "eventual") -> None:
        if consistency not in _CONSISTENCY:
            raise ConfigurationError(f"consistency must be one of {', '.join(_CONSISTENCY)}, got {consistency!r}")
        if read_replicas is not None and not isinstance(read_replicas, ReadReplicas):
            raise ConfigurationError(f"read_replicas must be a ReadReplicas, got {type(read_replicas).__name__}")
        if not isinstance(corpus, str) or not corpus.strip() or "\x00" in corpus or len(corpus) > _MAX_CORPUS \
                or not is_unicode_text(corpus):
            raise ConfigurationError(f"corpus must be a non-blank string of at most {_MAX_CORPUS} characters, "
                                     f"got {corpus!r}")
        if isinstance(max_query_terms, bool) or not isinstance(max_query_terms, int) \
                or not 1 <= max_query_terms <= 100_000:
            raise ConfigurationError(f"max_query_terms must be an int from 1 to 100000, got {max_query_terms!r}")
        self._engine = engine
        self._corpus = corpus
        self._schema = validate_schema_name(schema)
        self._text_config = text_config
        self._owns_engine = owns_engine
        self._max_query_terms = max_query_terms
        self._timeout_ms = _check_timeout(statement_timeout)
        self._timeout_override: ContextVar[int | None | bool] = ContextVar(f"tnsrag_timeout_{id(self)}",
                                                                          default=False)
        self._corpus_ready = False
        self._closed = False
        self._replicas = read_replicas
        self._consistency = consistency
        self._clock = _WriteClock()
        self._min_token: WriteToken | None = None

    # -- properties -----------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The pooled SQLAlchemy engine."""
        return self._engine

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
        """How many words of a query are analysed (default 256)."""
        return self._max_query_terms

    @property
    def statement_timeout(self) -> float | None:
        """The statement timeout in seconds in effect here (inside :meth:`timeout`, its value); None: the server's."""
        ms = self._effective_timeout()
        return None if ms is None else ms / 1000

    def with_corpus(self, corpus: str) -> Store:
        """A store over another corpus sharing this store's engine, replicas and options (closing it
        leaves the engine open); its writes advance the same :attr:`last_write_token`."""
        view = Store(self._engine, corpus=corpus, schema=self._schema, text_config=self._text_config,
                     max_query_terms=self._max_query_terms,
                     statement_timeout=None if self._timeout_ms is None else self._timeout_ms / 1000,
                     read_replicas=self._replicas, consistency=self._consistency)
        view._clock = self._clock
        view._min_token = self._min_token
        return view

    # -- read replicas ----------------------------------------------------------------
    @property
    def read_replicas(self) -> ReadReplicas | None:
        """The standbys retrieval reads go to (None: every read goes to the primary)."""
        return self._replicas

    @property
    def consistency(self) -> str:
        """``"eventual"`` (reads go to a replica without waiting) or ``"read_your_writes"``
        (a read waits until the replica has replayed this store's last write)."""
        return self._consistency

    @property
    def last_write_token(self) -> WriteToken | None:
        """The primary's WAL position after the latest write committed through this store (or a
        view of it), when it has read replicas; None before any write or without replicas."""
        return self._clock.token

    def after(self, token: WriteToken | None) -> Store:
        """A view of this store whose reads see everything committed up to ``token`` (from
        :attr:`last_write_token`, possibly of another process): a replica serves a read only once
        it has replayed past the token (waiting up to the replicas' ``wait_timeout``), else the
        primary does. ``None``: no constraint. Raises :class:`ConfigurationError` for another type."""
        if token is not None and not isinstance(token, WriteToken):
            raise ConfigurationError(f"token must be a WriteToken or None, got {type(token).__name__}")
        view = self.with_corpus(self._corpus)
        view._min_token = token
        return view

    def _read_token(self) -> WriteToken | None:
        tokens = [t for t in (self._min_token, self._clock.token if self._consistency == "read_your_writes" else None)
                  if t is not None]
        return max(tokens) if tokens else None

    @contextmanager
    def timeout(self, seconds: float | None) -> Iterator[None]:
        """Run this store's statements inside the block (this thread or task) with
        ``statement_timeout`` ``seconds`` (None: the server's), whatever the store's own.

        ``with store.timeout(2.0): strategy.retrieve(query)`` bounds one call: a statement
        running longer raises :class:`StatementTimeoutError`. Raises
        :class:`ConfigurationError` for a bad value.
        """
        token = self._timeout_override.set(_check_timeout(seconds))
        try:
            yield
        finally:
            self._timeout_override.reset(token)

    def _effective_timeout(self) -> int | None:
        override = self._timeout_override.get()
        if override is False:
            return self._timeout_ms
        assert override is None or isinstance(override, int)
        return override

    # -- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        """Release the connection pool and the replicas' pools (when this store created them). Idempotent."""
        if not self._closed and self._owns_engine:
            self._engine.dispose()
            if self._replicas is not None:
                self._replicas.dispose()
        self._closed = True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store(corpus={self._corpus!r}, schema={self._schema!r}, url={self._engine.url!r})"

    # -- transactions -----------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A connection inside one transaction (committed on success, rolled back on error).

        Driver errors are re-raised as :class:`DatabaseError` (the subclass their SQLSTATE
        names, see :mod:`tnsrag_db.store.driver_errors`); library errors pass through.
        """
        with self._transaction(stage=False) as conn:
            yield conn

    @contextmanager
    def _transaction(self, *, stage: bool, limited: bool = True) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                _apply_statement_timeout(conn, self._effective_timeout() if limited else None)
                if stage:
                    _prepare_stage_tables(conn)
                with conn.begin():
                    yield conn
        except TnsragError:
            raise
        except UnicodeEncodeError as exc:
            raise _not_text(exc) from exc
        except (sa.exc.SQLAlchemyError, psycopg.Error) as exc:
            raise driver_error(exc, f"database error in corpus {self._corpus!r}") from exc

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection in autocommit mode: each statement commits on its own.

        For statements that cannot run inside a transaction block (``CREATE INDEX
        CONCURRENTLY``) and for session-level advisory locks. If the block raises, the
        connection is closed instead of going back to the pool, so no session state
        (settings, locks) it set outlives the error. Driver errors are re-raised as
        :class:`DatabaseError`; library errors pass through.
        """
        try:
            with self._engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                _apply_statement_timeout(conn, None)  # index builds run as long as they need
                try:
                    yield conn
                except BaseException:
                    conn.invalidate()
                    raise
        except TnsragError:
            raise
        except UnicodeEncodeError as exc:
            raise _not_text(exc) from exc
        except (sa.exc.SQLAlchemyError, psycopg.Error) as exc:
            raise driver_error(exc, f"database error in corpus {self._corpus!r}") from exc

    @contextmanager
    def session_lock(self, conn: Connection, name: str) -> Iterator[None]:
        """Hold the session-level advisory lock ``name`` on ``conn``, an :meth:`autocommit` connection.

        Waited for by polling ``pg_try_advisory_lock`` with no transaction open. A
        session blocked inside ``pg_advisory_lock`` holds a snapshot, and a ``CREATE
        INDEX CONCURRENTLY`` run by the lock's holder (an HNSW build) waits for that
        snapshot while the waiter waits for the holder: a deadlock.
        """
        key = {"k": name}
        while not conn.execute(sa.text("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))"), key).scalar_one():
            time.sleep(SESSION_LOCK_POLL_SECONDS)
        try:
            yield
        except BaseException:
            try:
                conn.execute(sa.text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), key)
            except sa.exc.SQLAlchemyError:
                pass  # a broken connection: Store.autocommit closes it, which releases the lock
            raise
        conn.execute(sa.text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), key)

    def hnsw_build_lock(self, conn: Connection) -> AbstractContextManager[None]:
        """The :meth:`session_lock` under which HNSW builds and index drops on this schema's
        ``embeddings`` table take turns (PostgreSQL runs one concurrent build per table
        at a time anyway)."""
        return self.session_lock(conn, f"tnsrag_db.hnsw_build:{self._schema}")

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement (``:name`` parameters) and return its rows.

        Shorthand for :meth:`run` of a one-statement plan. Driver errors become
        :class:`DatabaseError`.
        """
        return list(self.run(one(Statement(sql, params))))

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive a read :data:`~tnsrag_db.db.statement.Plan` on one connection and return its result.

        The search paths' fast lane: autocommit (no BEGIN/COMMIT round trips; a
        ``set_config(..., true)`` inside a statement lasts for that statement), each
        statement compiled once per distinct text, then run as driver SQL (SQLAlchemy's
        engine events still see it, so tracing instrumentation keeps working). With
        ``snapshot=True`` every statement runs in one read-only REPEATABLE READ
        transaction instead, so all of them see the same committed data (explanations).
        The connection is checked out at the plan's first statement. Driver errors become
        :class:`DatabaseError` (thrown into the plan first).
        """
        with self._plan_executor(snapshot=snapshot) as execute:
            return run_plan(plan, execute)

    @contextmanager
    def _plan_executor(self, *, snapshot: bool) -> Iterator[Callable[[Statement], Rows]]:
        conns: list[Connection] = []
        on_replica: list[Replica] = []  # the replica conns[-1] is on, if any

        def replica_connection() -> Connection | None:
            assert self._replicas is not None
            token = self._read_token()
            for replica in self._replicas.candidates():
                try:
                    conn = replica.engine.connect().execution_options(
                        isolation_level="REPEATABLE READ" if snapshot else "AUTOCOMMIT")
                except sa.exc.DBAPIError:
                    self._replicas.mark_failed(replica)
                    continue
                try:
                    _apply_statement_timeout(conn, self._effective_timeout())
                    if self._replicas.usable(conn, replica, token):
                        if snapshot:
                            conn.begin()
                        on_replica[:] = [replica]
                        return conn
                    conn.close()
                except sa.exc.DBAPIError:
                    conn.invalidate()
                    self._replicas.mark_failed(replica)
            return None

        def checkout() -> Connection:
            if self._replicas is not None:
                replica_conn = replica_connection()
                if replica_conn is not None:
                    conns.append(replica_conn)
                    return replica_conn
            on_replica.clear()
            if snapshot:
                conn = self._engine.connect().execution_options(isolation_level="REPEATABLE READ")
                conns.append(conn)
                _apply_statement_timeout(conn, self._effective_timeout())
                conn.begin()
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            else:
                conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                conns.append(conn)
                _apply_statement_timeout(conn, self._effective_timeout())
            return conn

        def execute(statement: Statement) -> Rows:
            fresh = not conns
            for attempt in range(1, 3 + (len(self._replicas.replicas) if self._replicas is not None else 0)):
                try:
                    conn = conns[-1] if conns else checkout()
                    return conn.exec_driver_sql(_driver_sql(statement.sql), dict(statement.params)).all()
                except sa.exc.DBAPIError as exc:
                    if on_replica and self._replicas is not None and (fresh or not snapshot) and _server_gone(exc):
                        # A standby that went away mid-run: leave it out, and run the
                        # statement again on the next standby or the primary (reads only).
                        self._replicas.mark_failed(on_replica[0])
                        conns.pop().invalidate()
                        on_replica.clear()
                        fresh = True
                        continue
                    # A pooled connection whose server went away (reused too soon after its
                    # last use to be pinged): SQLAlchemy has invalidated the pool; a read on
                    # a connection that ran nothing yet is safe to run again, once.
                    if attempt == 1 and fresh and exc.connection_invalidated and not snapshot:
                        conns.pop().close()
                        continue
                    raise driver_error(exc, f"database error in corpus {self._corpus!r}") from exc
                except sa.exc.SQLAlchemyError as exc:
                    raise driver_error(exc, f"database error in corpus {self._corpus!r}") from exc
                except UnicodeEncodeError as exc:
                    raise _not_text(exc) from exc
            raise AssertionError("unreachable")  # pragma: no cover

        try:
            yield execute
        finally:
            for conn in conns:
                try:
                    conn.close()  # rolls back a snapshot transaction: it only read
                except sa.exc.SQLAlchemyError:
                    pass  # a broken connection: the pool has already discarded it

    def text_config(self, conn: Connection) -> str:
        """The corpus's text search configuration, creating the corpus row on first use.

        First takes the corpus's write lock in shared mode until ``conn``'s transaction
        ends (see :meth:`_lock_corpus`), as every write does before it touches an entry.
        """
        self._lock_corpus(conn, shared=True)
        if not self._corpus_ready:
            conn.execute(sa.text("INSERT INTO corpora (corpus, text_config) VALUES (:c, :cfg) "
                                 "ON CONFLICT (corpus) DO NOTHING"), {"c": self._corpus, "cfg": self._text_config})
        cfg = conn.execute(sa.text("SELECT text_config FROM corpora WHERE corpus = :c"),
                           {"c": self._corpus}).scalar_one_or_none()
        if cfg is None:  # the corpus was deleted meanwhile
            self._corpus_ready = False
            return self.text_config(conn)
        self._corpus_ready = True
        return str(cfg)

    def _lock_corpus(self, conn: Connection, *, shared: bool) -> None:
        """Take the corpus's transaction-level advisory lock: shared for writes and deletes,
        exclusive for :meth:`drop_corpus`.

        BM25 postings carry no foreign key (bulk writes stay fast), so nothing else stops a
        write that only rewrites existing entries (it locks no corpus row) from committing
        new postings behind a concurrent drop's back: orphans, and later writes of the same
        ids failed on the postings' primary key. With the lock, a drop waits for the writes
        in flight and writes arriving later wait for the drop, which the lock manager queues
        fairly (a drop waiting for ``FOR UPDATE`` on the corpus row instead would starve
        behind writers whose ``FOR KEY SHARE`` locks overlap).
        """
        fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        conn.execute(sa.text(f"SELECT {fn}(hashtextextended(:k, 0))"),
                     {"k": f"tnsrag_db.corpus:{self._schema}:{self._corpus}"})

    # -- writes -----------------------------------------------------------------------
    def add(self, entry: MemoryEntry) -> IngestCounts:
        """Insert or update one entry (an upsert keyed by id). Returns its classification."""
        return self.add_all([entry])

    def add_all(self, entries: Iterable[MemoryEntry], *,
                progress: Callable[[int], None] | None = None) -> IngestCounts:
        """Write a batch in one transaction, through COPY; re-ingesting identical entries is a no-op.

        Every entry is validated first: one bad entry rejects the whole batch with an
        :class:`InvalidEntryError` naming it, and nothing is written. ``progress`` is
        called with the number of entries staged so far.
        """
        batch = validate_batch(entries)
        if not batch:
            return IngestCounts()
        return self.write_transaction(lambda conn: self.write_entries(conn, batch, progress=progress)).counts

    def write_transaction(self, work: Callable[[Connection], _T], *, analyze: Sequence[str] = ()) -> _T:
        """Run ``work(conn)`` in one transaction: the one way the library's writes commit.

        When PostgreSQL aborts the transaction to break a deadlock, ``work`` runs again,
        whole (see :func:`retry_on_deadlock`). After the commit, the entries ``work`` wrote
        through :meth:`write_entries` count toward :meth:`refresh_statistics` (``analyze``
        names further library tables to include, e.g. ``("embeddings",)``).
        """
        written = 0

        def attempt() -> _T:
            nonlocal written
            with self._transaction(stage=True) as conn:
                # The dict itself, not conn.info again in the finally: after a disconnect
                # SQLAlchemy refuses every use of conn ("Can't reconnect until invalid
                # transaction is rolled back"), which hid the error that broke the write.
                info = conn.info
                info[_WRITTEN] = 0
                try:
                    result = work(conn)
                    written = info[_WRITTEN]
                finally:
                    info.pop(_WRITTEN, None)
            return result

        result = retry_on_deadlock(attempt)
        if self._replicas is not None:
            self._note_write()
        self.refresh_statistics(written, analyze)
        return result

    def _note_write(self) -> None:
        """Advance :attr:`last_write_token` to the primary's WAL position after a commit."""
        try:
            with self._engine.connect() as conn:
                self._clock.advance(current_token(conn))
        except sa.exc.SQLAlchemyError as exc:
            raise driver_error(exc, f"database error in corpus {self._corpus!r}") from exc

    def refresh_statistics(self, written: int, extra_tables: Sequence[str] = ()) -> bool:
        """ANALYZE ``entries`` and ``bm25_postings`` (and ``extra_tables``, library table
        names) after a bulk write of ``written`` rows, when that is at least 10 % of the
        ``entries`` table (autovacuum's rule, but now rather than a minute later: until then
        the planner sizes a freshly loaded corpus from stale statistics and picks slow plans).

        Skipped below :data:`ANALYZE_AFTER_ROWS` rows. Runs in a transaction of its own after
        the write committed and never waits for a table lock (``SKIP_LOCKED``): a table that
        another session is analysing, vacuuming or indexing concurrently is left to it.
        Waiting there could deadlock with a ``CREATE INDEX CONCURRENTLY``, which waits for
        this transaction's snapshot. Returns True when it ran, False when skipped.
        """
        unknown = sorted(set(extra_tables) - _ANALYZABLE)
        if unknown:
            raise ConfigurationError(f"cannot analyse {', '.join(map(repr, unknown))}; "
                                     f"choose from {', '.join(sorted(_ANALYZABLE))}")
        if written < ANALYZE_AFTER_ROWS:
            return False
        try:
            with self._transaction(stage=False, limited=False) as conn:
                rows = conn.execute(sa.text("SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass")
                                    ).scalar_one()
                if rows >= 0 and written < 0.1 * rows:
                    return False
                tables = ", ".join(("entries", "bm25_postings", *extra_tables))
                conn.execute(sa.text(f"ANALYZE (SKIP_LOCKED) {tables}"))
            return True
        except sa.exc.SQLAlchemyError as exc:
            raise driver_error(exc, f"database error in corpus {self._corpus!r}") from exc

    def write_entries(self, conn: Connection, batch: Sequence[MemoryEntry], *,
                      progress: Callable[[int], None] | None = None) -> WriteReport:
        """Write already-validated entries inside the caller's transaction ``conn``.

        This is the building block views use to write entries together with their own
        rows (embeddings, edges) atomically. Maintains BM25 postings and statistics.
        """
        cfg = self.text_config(conn)
        info = conn.info
        _ensure_stage_tables(conn)
        transaction = conn.get_transaction()
        if info.get("tnsrag_stage_tx") is transaction:
            # An earlier write of this same transaction left rows (ON COMMIT DELETE ROWS
            # empties them only at commit).
            for table in _STAGE_TABLES:
                conn.execute(sa.text(f"DELETE FROM {table}"))
        info["tnsrag_stage_tx"] = transaction
        raw = conn.connection.driver_connection
        assert raw is not None
        hashes = [content_hash(e) for e in batch]
        with raw.cursor() as cur:
            with cur.copy("COPY tnsrag_stage_entries (ord, id, content, tier, source, parent_id, ts, metadata, "
                          "content_hash) FROM STDIN") as copy:
                for i, (e, h) in enumerate(zip(batch, hashes)):
                    copy.write_row((i, e.id, e.content, e.tier.name, e.source, e.parent_id, e.timestamp,
                                    json.dumps(dict(e.metadata), ensure_ascii=False), h))
            # One COPY at a time per connection: analyse first, then stream each table.
            analyzed = []
            for i, e in enumerate(batch):
                analyzed.append(analyze(e.content))
                if progress is not None and (i + 1) % 1000 == 0:
                    progress(i + 1)
            with cur.copy("COPY tnsrag_stage_chunks (ord, chunk, single) FROM STDIN") as copy:
                for i, a in enumerate(analyzed):
                    single = len(a.chunks) == 1 and not a.extra_terms
                    for chunk in a.chunks:
                        copy.write_row((i, chunk, single))
            if any(a.extra_terms for a in analyzed):  # most batches have none: one round trip less
                with cur.copy("COPY tnsrag_stage_extras (ord, term) FROM STDIN") as copy:
                    for i, a in enumerate(analyzed):
                        for term in a.extra_terms:
                            copy.write_row((i, term))
        if progress is not None:
            progress(len(batch))
        c = {"c": self._corpus}
        large = len(batch) >= _ANALYZE_STAGE_ROWS
        # Temp tables get no statistics on their own; without row counts the planner
        # picks nested loops that are quadratic in the batch size.
        if large:
            for table in _STAGE_TABLES[:3]:
                conn.execute(sa.text(f"ANALYZE {table}"))
        # Terms and document lengths first, so entries are inserted with their final
        # doc_len (no second write of every new row): one pass over the terms writes the
        # term rows, and each entry's length and lexemes into a narrow table of their own
        # (updating the wide stage rows instead would rewrite them). Every later step joins
        # the stage tables instead of passing id arrays: ``= ANY(array)`` over a large array
        # is quadratic as well.
        conn.execute(sa.text(STAGED_TERMS_SQL), {"cfg": cfg})
        # One pass in id order inserts the new entries and locks the existing ones: the
        # DO UPDATE ... WHERE false updates nothing but locks every conflicting row (its
        # newest version, waiting for a concurrent writer or deleter to finish; a row
        # deleted meanwhile is inserted instead). So every entry of the batch is ours
        # after this statement, taken in the same order by every writer and deleter: no
        # deadlock, no lost write. Only key-preserving columns are "set", so the lock is
        # FOR NO KEY UPDATE and does not block edge inserts checking their foreign keys.
        inserted = list(conn.execute(sa.text(
            "WITH ins AS (INSERT INTO entries AS e (corpus, id, content, tier, source, parent_id, ts, metadata, "
            "content_hash, doc_len, lexemes) SELECT :c, s.id, s.content, s.tier, s.source, s.parent_id, s.ts, s.metadata, "
            "s.content_hash, coalesce(l.doc_len, 0), coalesce(l.lexemes, '{}') FROM tnsrag_stage_entries s "
            "LEFT JOIN tnsrag_stage_lens l ON l.ord = s.ord ORDER BY s.id "
            "ON CONFLICT (corpus, id) DO UPDATE SET content = e.content WHERE false RETURNING id), "
            "marked AS (UPDATE tnsrag_stage_entries s SET state = 'i' FROM ins WHERE s.id = ins.id "
            "RETURNING s.ord, s.id) "
            "SELECT id FROM marked ORDER BY ord"), c).scalars())
        inserted_count = len(inserted)
        report = WriteReport()
        old_len = 0
        if inserted_count < len(batch):
            # The existing rows are locked by the statement above; this one's snapshot sees
            # their newest committed versions. Identical hash = unchanged.
            rows = conn.execute(sa.text(
                "SELECT x.id, s.ord, x.content_hash = s.content_hash AS same, x.content <> s.content AS text_changed, "
                f"x.doc_len FROM tnsrag_stage_entries s {_probe('entries', 'x', 'x.id, x.content_hash, x.content, x.doc_len', 'x.id = s.id')} "
                "WHERE s.state IS NULL ORDER BY x.id"), c).all()
            if len(rows) + inserted_count != len(batch):  # cannot happen: every entry was inserted or locked
                raise DatabaseError(f"write to corpus {self._corpus!r} lost track of {len(batch) - inserted_count - len(rows)} "
                                    "entries; the transaction was rolled back")
            ords: list[int] = []
            states: list[str] = []
            for row in rows:
                if row.same:
                    report.unchanged.append(row.id)
                    state = "n"
                elif row.text_changed:
                    report.updated.append(row.id)
                    report.content_changed.append(row.id)
                    old_len += row.doc_len
                    state = "c"
                else:
                    report.updated.append(row.id)
                    state = "u"
                ords.append(row.ord)
                states.append(state)
            if ords:
                conn.execute(sa.text(
                    "UPDATE tnsrag_stage_entries s SET state = v.state "
                    "FROM unnest(CAST(:ords AS int[]), CAST(:states AS text[])) AS v(ord, state) WHERE s.ord = v.ord"),
                    {"ords": ords, "states": states})
        if large:  # the states are set now, and the steps below filter on them
            conn.execute(sa.text("ANALYZE tnsrag_stage_entries (ord, id, state)"))
            conn.execute(sa.text("ANALYZE tnsrag_stage_terms"))
            conn.execute(sa.text("ANALYZE tnsrag_stage_lens"))
        report.inserted = inserted  # in batch order
        if report.content_changed:
            # The old postings, found through the entry's stored lexemes (primary-key
            # probes; postings carry no per-entry index, which keeps bulk writes fast).
            conn.execute(sa.text(
                "WITH d AS (DELETE FROM bm25_postings p WHERE p.corpus = :c AND p.ctid = ANY (ARRAY("
                f"  SELECT q.ctid FROM tnsrag_stage_entries s {_probe('entries', 'x', 'x.id, x.lexemes', 'x.id = s.id')} "
                "  CROSS JOIN unnest(x.lexemes) AS l(lexeme) "
                f"  {_probe('bm25_postings', 'q', 'q.ctid', 'q.lexeme = l.lexeme AND q.entry_id = x.id')} "
                "  WHERE s.state = 'c')) RETURNING p.lexeme) "
                "INSERT INTO tnsrag_stage_df (lexeme, delta) SELECT lexeme, -count(*) FROM d GROUP BY lexeme"), c)
        if report.updated:
            conn.execute(sa.text(
                "WITH v AS MATERIALIZED (SELECT x.ctid AS tid, s.*, l.doc_len AS new_len, l.lexemes AS new_lexemes "
                "  FROM tnsrag_stage_entries s LEFT JOIN tnsrag_stage_lens l ON l.ord = s.ord "
                f"  {_probe('entries', 'x', 'x.ctid', 'x.id = s.id')} WHERE s.state IN ('u', 'c')) "
                "UPDATE entries e SET content = v.content, tier = v.tier, source = v.source, parent_id = v.parent_id, "
                "ts = v.ts, metadata = v.metadata, content_hash = v.content_hash, "
                "doc_len = CASE WHEN v.state = 'c' THEN coalesce(v.new_len, 0) ELSE e.doc_len END, "
                "lexemes = CASE WHEN v.state = 'c' THEN coalesce(v.new_lexemes, '{}') ELSE e.lexemes END, "
                "updated_at = now() FROM v WHERE e.corpus = :c AND e.ctid = ANY (ARRAY(SELECT tid FROM v)) AND e.ctid = v.tid"), c)
        if report.content_changed:
            # Stale vectors must not outlive the text they were computed from.
            conn.execute(sa.text(
                "DELETE FROM embeddings x WHERE x.corpus = :c AND x.ctid = ANY (ARRAY(SELECT q.ctid FROM tnsrag_stage_entries s "
                f"{_probe('embeddings', 'q', 'q.ctid', 'q.entry_id = s.id')} WHERE s.state = 'c'))"), c)
        fresh = len(report.inserted) + len(report.content_changed)
        new_len = 0
        if fresh:
            conn.execute(sa.text(
                "INSERT INTO bm25_postings (corpus, lexeme, entry_id, tf, doc_len) "
                "SELECT :c, t.lexeme, s.id, t.tf, l.doc_len FROM tnsrag_stage_terms t "
                "JOIN tnsrag_stage_entries s ON s.ord = t.ord AND s.state IN ('i', 'c') "
                "JOIN tnsrag_stage_lens l ON l.ord = t.ord "
                # In primary-key order: btree inserts then touch each leaf page once.
                "ORDER BY t.lexeme, s.id"), c)
            new_len = conn.execute(sa.text(
                "WITH dfs AS (INSERT INTO tnsrag_stage_df (lexeme, delta) SELECT t.lexeme, count(*) "
                "  FROM tnsrag_stage_terms t JOIN tnsrag_stage_entries s ON s.ord = t.ord AND s.state IN ('i', 'c') "
                "  GROUP BY t.lexeme) "
                "SELECT coalesce(sum(l.doc_len), 0) FROM tnsrag_stage_entries s JOIN tnsrag_stage_lens l "
                "ON l.ord = s.ord WHERE s.state IN ('i', 'c')")).scalar_one()
        if fresh:
            conn.execute(sa.text(_APPLY_DF_SQL.format(source="tnsrag_stage_df")), {**c, "shard": _stat_shard()})
        self._bump_stats(conn, len(report.inserted), int(new_len) - old_len)
        if _WRITTEN in info:
            info[_WRITTEN] += len(report.inserted) + len(report.updated)
        return report

    def _bump_stats(self, conn: Connection, d_docs: int, d_len: int) -> None:
        if d_docs == 0 and d_len == 0:
            return
        conn.execute(sa.text(
            "INSERT INTO bm25_stats AS s (corpus, shard, n_docs, total_len) VALUES (:c, :shard, :dn, :dl) "
            "ON CONFLICT (corpus, shard) DO UPDATE SET n_docs = s.n_docs + excluded.n_docs, "
            "total_len = s.total_len + excluded.total_len"),
            {"c": self._corpus, "shard": _stat_shard(), "dn": d_docs, "dl": d_len})

    # -- reads ------------------------------------------------------------------------
    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry with ``entry_id``, or None."""
        _no_nul([entry_id])
        with self.transaction() as conn:
            row = conn.execute(sa.text(
                "SELECT id, content, tier, source, parent_id, ts, metadata FROM entries "
                "WHERE corpus = :c AND id = :id"), {"c": self._corpus, "id": entry_id}).one_or_none()
        return None if row is None else _row_to_entry(row)

    def get_many(self, entry_ids: Sequence[str]) -> dict[str, MemoryEntry]:
        """The entries with these ids that exist, by id."""
        _no_nul(entry_ids)
        with self.transaction() as conn:
            rows = conn.execute(sa.text(
                "SELECT id, content, tier, source, parent_id, ts, metadata FROM entries "
                "WHERE corpus = :c AND id = ANY(:ids)"), {"c": self._corpus, "ids": list(entry_ids)}).all()
        return {r.id: _row_to_entry(r) for r in rows}

    def count(self, filters: Mapping[str, str] | None = None) -> int:
        """Number of entries in the corpus matching ``filters`` (exact-match, as in retrieval)."""
        predicate, params = filter_sql(filters)
        with self.transaction() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM entries e WHERE e.corpus = :c AND {predicate}"),
                                    {"c": self._corpus, **params}).scalar_one())

    def iter_entries(self, *, batch_size: int = 1000) -> Iterator[MemoryEntry]:
        """Every entry of the corpus in id order, read in batches (keyset pagination)."""
        last = ""
        while True:
            with self.transaction() as conn:
                rows = conn.execute(sa.text(
                    "SELECT id, content, tier, source, parent_id, ts, metadata FROM entries "
                    "WHERE corpus = :c AND id > :last ORDER BY id LIMIT :n"),
                    {"c": self._corpus, "last": last, "n": batch_size}).all()
            if not rows:
                return
            for r in rows:
                yield _row_to_entry(r)
            last = rows[-1].id

    # -- deletes ----------------------------------------------------------------------
    def delete(self, entry_id: str) -> bool:
        """Delete one entry with its postings, embeddings and edges. True when it existed."""
        _no_nul([entry_id])
        return self._delete("e.id = :id", {"id": entry_id}) == 1

    def delete_many(self, entry_ids: Sequence[str]) -> int:
        """Delete the entries with these ids (with their postings, embeddings and edges) in one
        transaction; returns how many existed."""
        ids = list(dict.fromkeys(entry_ids))
        _no_nul(ids)
        if not ids:
            return 0
        return self._delete("e.id = ANY(CAST(:ids AS text[]))", {"ids": ids})

    def delete_where(self, filters: Mapping[str, str]) -> int:
        """Delete every entry matching ``filters`` (exact-match, as in retrieval); returns how many.

        An empty filter is refused with :class:`ConfigurationError` (use :meth:`clear`).
        """
        predicate, params = filter_sql(filters)
        if not params:
            raise ConfigurationError("delete_where needs at least one filter; use clear() to empty the corpus")
        return self._delete(predicate, params)

    def clear(self) -> int:
        """Delete every entry of the corpus; returns how many."""
        return self._delete("TRUE", {})

    def _delete(self, predicate: str, params: dict[str, Any]) -> int:
        # A delete takes its rows in id order like every writer; only a GraphStore
        # add_with_edges reaching entries outside its batch can cross it, and then
        # PostgreSQL may pick the delete to abort: it runs again.
        return self.write_transaction(lambda conn: self._delete_in(conn, predicate, params))

    def _delete_in(self, conn: Connection, predicate: str, params: dict[str, Any]) -> int:
        # The corpus lock first, as writers take it: a drop_corpus waits for this delete
        # instead of deadlocking with its df and stats updates.
        self._lock_corpus(conn, shared=True)
        _ensure_stage_tables(conn)
        conn.execute(sa.text("DELETE FROM tnsrag_stage_ids"))
        # First lock the matching rows, in id order as writers do (so deletes and upserts
        # cannot deadlock), and remember them. Then, in a statement whose snapshot sees
        # every change committed by the writers waited for, delete exactly those rows with
        # their postings (found through the stored lexemes) and df counts. Deleting by the
        # predicate again instead would reach rows committed in between, and wait for (and
        # orphan the postings of) a writer that locked one of them meanwhile.
        conn.execute(sa.text(
            f"WITH l AS (SELECT e.id FROM entries e WHERE e.corpus = :c AND {predicate} "
            "ORDER BY e.id FOR UPDATE OF e) INSERT INTO tnsrag_stage_ids (id) SELECT id FROM l"),
            {"c": self._corpus, **params})
        count, length = conn.execute(sa.text(
            "WITH gone AS (DELETE FROM entries e WHERE e.corpus = :c AND e.ctid = ANY (ARRAY(SELECT x.ctid FROM tnsrag_stage_ids k "
            f"  {_probe('entries', 'x', 'x.ctid', 'x.id = k.id')})) RETURNING e.id, e.doc_len, e.lexemes), "
            "d AS (DELETE FROM bm25_postings p WHERE p.corpus = :c AND p.ctid = ANY (ARRAY(SELECT q.ctid FROM gone g "
            "  CROSS JOIN unnest(g.lexemes) AS l(lexeme) "
            f"  {_probe('bm25_postings', 'q', 'q.ctid', 'q.lexeme = l.lexeme AND q.entry_id = g.id')})) "
            "  RETURNING p.lexeme, -1 AS delta), "
            "df AS (" + _APPLY_DF_SQL.format(source="d") + ") "
            "SELECT count(*), coalesce(sum(doc_len), 0) FROM gone"),
            {"c": self._corpus, "shard": _stat_shard()}).one()
        if count:
            self._bump_stats(conn, -int(count), -int(length))
        return int(count)

    def drop_corpus(self) -> None:
        """Delete the whole corpus: entries, postings, statistics, embeddings, spaces and edges.

        The store stays usable; the next write creates the corpus again. Its spaces' HNSW
        indexes are dropped concurrently once the deletion has committed (see
        :meth:`drop_orphan_hnsw_indexes`). Deleting a
        ``corpora`` row by hand would leave BM25 postings behind (they carry no foreign
        key, to keep bulk writes fast): use this method.
        """
        def drop() -> None:
            with self.transaction() as conn:
                # Waits for every write and delete of the corpus in flight (see _lock_corpus);
                # the postings are deleted after the wait, by a statement that sees what
                # those writers committed.
                self._lock_corpus(conn, shared=False)
                conn.execute(sa.text("DELETE FROM bm25_postings WHERE corpus = :c"), {"c": self._corpus})
                conn.execute(sa.text("DELETE FROM corpora WHERE corpus = :c"), {"c": self._corpus})

        retry_on_deadlock(drop)
        self._corpus_ready = False
        self.drop_orphan_hnsw_indexes()

    def drop_orphan_hnsw_indexes(self) -> list[str]:
        """Drop the HNSW indexes whose embedding space no longer exists; returns their names.

        The per-space HNSW indexes are partial indexes of the shared ``embeddings``
        table. :meth:`drop_corpus` drops its spaces' indexes with ``DROP INDEX
        CONCURRENTLY`` after its transaction commits: a plain ``DROP INDEX`` inside it
        would lock the whole table and could deadlock with a build running for another
        corpus. A process that dies in between leaves an empty index behind, which the
        next call of this method (any corpus) removes.
        """
        orphans = sa.text(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
            # Every corpus's spaces on purpose: an orphan index belongs to no corpus.
            "/* tnsrag:all-corpora */ "
            "WHERE n.nspname = :schema AND t.relname = 'embeddings' AND c.relname ~ '^ix_embeddings_hnsw_[0-9]+$' "
            # Only indexes this role could drop: under row-level security a tenant role
            # does not see other tenants' spaces, so their indexes would look orphaned.
            "AND pg_has_role(c.relowner, 'USAGE') "
            "AND NOT EXISTS (SELECT 1 FROM embedding_spaces s "
            "  WHERE c.relname = 'ix_embeddings_hnsw_' || s.space_id::text) "
            "ORDER BY c.relname")
        schema = {"schema": self._schema}
        dropped: list[str] = []
        with self.autocommit() as conn:
            if not conn.execute(orphans, schema).first():
                return dropped  # the common case: no wait for a build running on the table
            with self.hnsw_build_lock(conn):
                for name in conn.execute(orphans, schema).scalars().all():
                    # Names matched ^ix_embeddings_hnsw_[0-9]+$ above: safe to format in.
                    conn.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                    dropped.append(name)
        return dropped


def connect(url: str | URL | None = None, *, corpus: str = "default", schema: str = DEFAULT_SCHEMA,
            auto_migrate: bool | None = None, text_config: str = "english", pool_size: int = 5,
            max_overflow: int = 10, max_query_terms: int = DEFAULT_MAX_QUERY_TERMS,
            statement_timeout: float | None = None, read_urls: Sequence[str | URL] = (),
            replicas_optional: bool = False, max_replica_lag: float | None = DEFAULT_MAX_LAG,
            replica_wait_timeout: float = DEFAULT_WAIT_TIMEOUT, consistency: str = "eventual") -> Store:
    """Open a :class:`Store` on ``url`` (libpq or SQLAlchemy form) or, with none, the embedded server.

    The embedded server is migrated to head automatically. A URL names a shared server
    whose schema is never created implicitly: unless ``auto_migrate=True`` the schema
    must already be at this release's head, else :class:`SchemaNotReadyError`.
    ``max_query_terms`` and ``statement_timeout`` bound the work of each call (see :class:`Store`).

    ``read_urls`` name hot standbys of this database's server (streaming replicas):
    retrieval reads go to them in turn (see :mod:`tnsrag_db.db.replicas`); writes, locks
    and migrations go to ``url``. Each must be a standby of the primary (same system
    identifier), else :class:`ConfigurationError`; an unreachable one is an error too
    unless ``replicas_optional`` (then it is tried again later). ``max_replica_lag``
    (seconds, None: no bound) skips a standby lagging further; ``consistency`` is
    ``"eventual"`` (default: reads do not wait for replication) or ``"read_your_writes"``
    (each read waits up to ``replica_wait_timeout`` seconds for the standby to replay
    this store's last write, else reads the primary); :meth:`Store.after` gives the same
    for a token of another store or process.
    """
    embedded = url is None
    target = embedded_url() if embedded else url
    assert target is not None
    if isinstance(read_urls, (str, URL)):
        raise ConfigurationError("read_urls must be a list of URLs, not a single URL")
    engine = create_engine(target, schema=schema, pool_size=pool_size, max_overflow=max_overflow)
    replicas: ReadReplicas | None = None
    try:
        if read_urls:
            replicas = _open_replicas(engine, read_urls, schema=schema, pool_size=pool_size,
                                      max_overflow=max_overflow, optional=replicas_optional,
                                      max_lag=max_replica_lag, wait_timeout=replica_wait_timeout)
        store = Store(engine, corpus=corpus, schema=schema, text_config=text_config, owns_engine=True,
                      max_query_terms=max_query_terms, statement_timeout=statement_timeout,
                      read_replicas=replicas, consistency=consistency)
        if auto_migrate or (auto_migrate is None and embedded):
            if not migrate.is_at_head(engine, schema=schema):  # one SELECT when nothing to do
                migrate.upgrade(engine, schema=schema)
                engine.dispose()  # connections opened before the extension existed lack the vector type
        else:
            migrate.ensure_at_head(engine, schema=schema)
    except TnsragError:
        engine.dispose()
        if replicas is not None:
            replicas.dispose()
        raise
    except sa.exc.SQLAlchemyError as exc:
        engine.dispose()
        if replicas is not None:
            replicas.dispose()
        raise DatabaseError(f"could not connect: {exc}") from exc
    return store


def _open_replicas(primary: Engine, urls: Sequence[str | URL], *, schema: str, pool_size: int, max_overflow: int,
                   optional: bool, max_lag: float | None, wait_timeout: float) -> ReadReplicas:
    """Engines for the standbys at ``urls``, each checked to be a standby of ``primary``."""
    replicas: list[Replica] = []
    try:
        with primary.connect() as conn:
            ident = int(conn.exec_driver_sql("SELECT system_identifier FROM pg_control_system()").scalar_one())
        for url in urls:
            name = redact_url(url)
            engine = create_engine(url, schema=schema, pool_size=pool_size, max_overflow=max_overflow, read_only=True)
            replica = Replica(name, engine)
            replicas.append(replica)
            try:
                verify_standby(primary, engine, name)
            except ConfigurationError as exc:
                if not (optional and "unreachable" in str(exc)):
                    raise
                replica.down_until = time.monotonic()  # retried at the first read
        return ReadReplicas(replicas, primary_identifier=ident, max_lag=max_lag, wait_timeout=wait_timeout)
    except BaseException:
        for replica in replicas:
            replica.engine.dispose()
        raise
