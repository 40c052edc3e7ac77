"""The persistent corpus: ``Store`` and :func:`connect`.

A ``Store`` is one corpus in one schema of one database. It writes entries (with their
BM25 postings and statistics, in the same transaction, through the pipeline of
:mod:`tnsrag_db.store.write`), reads and deletes them. The plumbing (connections,
transactions, locks, timeouts, the read path) is its :attr:`Store.session`, a
:class:`~tnsrag_db.db.session.Session`. The strategy-facing views (``VectorMemoryStore``,
``BM25Index``, ``GraphStore``, ...) are built over a ``Store`` and share its engine and corpus.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from tnsrag_db._validate import check_int, is_int
from tnsrag_db.db import migrate
from tnsrag_db.db.engine import create_engine
from tnsrag_db.db.schema import DEFAULT_SCHEMA
from tnsrag_db.db.session import DEADLOCK_RETRIES, SESSION_LOCK_POLL_SECONDS, Session, retry_on_deadlock
from tnsrag_db.db.statement import Plan
from tnsrag_db.errors import ConfigurationError, DatabaseError, TnsragError
from tnsrag_db.store.analysis import DEFAULT_MAX_QUERY_TERMS
from tnsrag_db.store.corpus import ANALYZE_AFTER_ROWS, Corpus, Writer
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.store.server import embedded_url
from tnsrag_db.store.sql import BM25_STAT_SHARDS
from tnsrag_db.store.staging import STAGE_DDL, STAGE_READY
from tnsrag_db.store.write import IngestCounts, WriteExtension, WriteReport, content_hash, validate_batch
from tnsrag_db.types import MemoryEntry, MemoryTier, is_unicode_text

__all__ = ["ANALYZE_AFTER_ROWS", "BM25_STAT_SHARDS", "DEADLOCK_RETRIES", "SESSION_LOCK_POLL_SECONDS", "STAGE_DDL",
           "STAGE_READY", "IngestCounts", "Store", "WriteExtension", "WriteReport", "connect", "content_hash",
           "retry_on_deadlock", "validate_batch"]

_MAX_CORPUS = 200
_T = TypeVar("_T")
_ENTRY_COLUMNS = "id, content, tier, source, parent_id, ts, metadata"


def _row_to_entry(row: Any) -> MemoryEntry:
    return MemoryEntry(id=row.id, content=row.content, tier=MemoryTier[row.tier], source=row.source,
                       parent_id=row.parent_id, timestamp=row.ts, metadata=row.metadata or {})


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
                 max_query_terms: int = DEFAULT_MAX_QUERY_TERMS, statement_timeout: float | None = None) -> None:
        if not isinstance(corpus, str) or not corpus.strip() or "\x00" in corpus or len(corpus) > _MAX_CORPUS \
                or not is_unicode_text(corpus):
            raise ConfigurationError(f"corpus must be a non-blank string of at most {_MAX_CORPUS} characters, "
                                     f"got {corpus!r}")
        if not is_int(max_query_terms) or not 1 <= max_query_terms <= 100_000:
            raise ConfigurationError(f"max_query_terms must be an int from 1 to 100000, got {max_query_terms!r}")
        self._session = Session(engine, what=f"database error in corpus {corpus!r}", schema=schema,
                                statement_timeout=statement_timeout)
        self._corpus = corpus
        self._schema = schema
        self._text_config = text_config
        self._owns_engine = owns_engine
        self._max_query_terms = max_query_terms
        self._corpus_row = Corpus(corpus, schema=schema, text_config=text_config)
        self._writer = Writer(self._session, self._corpus_row)
        self._closed = False

    # -- properties -----------------------------------------------------------------
    @property
    def session(self) -> Session:
        """Connections, transactions, locks, timeouts and the read path of this store."""
        return self._session

    @property
    def engine(self) -> Engine:
        """The pooled SQLAlchemy engine."""
        return self._session.engine

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
        return self._session.statement_timeout

    def with_corpus(self, corpus: str) -> Store:
        """A store over another corpus sharing this store's engine and options (closing it leaves the engine open)."""
        return Store(self.engine, corpus=corpus, schema=self._schema, text_config=self._text_config,
                     max_query_terms=self._max_query_terms, statement_timeout=self._session.default_timeout)

    def timeout(self, seconds: float | None) -> AbstractContextManager[None]:
        """Run this store's statements inside the block (this thread or task) with
        ``statement_timeout`` ``seconds`` (None: the server's), whatever the store's own.

        ``with store.timeout(2.0): strategy.retrieve(query)`` bounds one call: a statement
        running longer raises :class:`StatementTimeoutError`. Raises
        :class:`ConfigurationError` for a bad value.
        """
        return self._session.timeout(seconds)

    # -- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        """Release the connection pool (when this store created it). Idempotent."""
        if not self._closed and self._owns_engine:
            self.engine.dispose()
        self._closed = True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store(corpus={self._corpus!r}, schema={self._schema!r}, url={self.engine.url!r})"

    # -- plumbing, kept for existing callers ------------------------------------------
    def transaction(self) -> AbstractContextManager[Connection]:
        """A connection inside one transaction (see :meth:`Session.transaction`)."""
        return self._session.transaction()  # delegation: callers move to store.session

    def autocommit(self) -> AbstractContextManager[Connection]:
        """A connection in autocommit mode (see :meth:`Session.autocommit`)."""
        return self._session.autocommit()  # delegation: callers move to store.session

    def session_lock(self, conn: Connection, name: str) -> AbstractContextManager[None]:
        """Hold a session-level advisory lock on ``conn`` (see :meth:`Session.session_lock`)."""
        return self._session.session_lock(conn, name)  # delegation: callers move to store.session

    def hnsw_build_lock(self, conn: Connection) -> AbstractContextManager[None]:
        """The lock HNSW builds and drops take turns under (see :meth:`Session.hnsw_build_lock`)."""
        return self._session.hnsw_build_lock(conn)  # delegation: callers move to store.session

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement and return its rows (see :meth:`Session.read`)."""
        return self._session.read(sql, params)  # delegation: callers move to store.session

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive a read plan on one connection (see :meth:`Session.run`)."""
        return self._session.run(plan, snapshot=snapshot)  # delegation: callers move to store.session

    def write_transaction(self, work: Callable[[Connection], _T], *, analyze: Sequence[str] = ()) -> _T:
        """Run ``work(conn)`` in one write transaction, again after a deadlock (see
        :meth:`Writer.transaction <tnsrag_db.store.corpus.Writer.transaction>`); prefer
        :meth:`write` with extensions."""
        return self._writer.transaction(work, analyze=analyze)  # delegation: callers move to store.write(extensions=...)

    def write_entries(self, conn: Connection, batch: Sequence[MemoryEntry], *,
                      progress: Callable[[int], None] | None = None) -> WriteReport:
        """Write already-validated entries inside the caller's transaction ``conn``
        (maintains BM25 postings and statistics); prefer :meth:`write` with extensions."""
        return self._writer.write_in(conn, batch, progress=progress)  # delegation: callers move to store.write(extensions=...)

    def text_config(self, conn: Connection) -> str:
        """The corpus's text search configuration, creating the corpus row on first use
        (takes the corpus's shared write lock until ``conn``'s transaction ends)."""
        return self._corpus_row.text_config(conn)  # delegation: callers move to the write pipeline's Corpus

    def refresh_statistics(self, written: int, extra_tables: Sequence[str] = ()) -> bool:
        """ANALYZE after a bulk write of ``written`` rows (see :meth:`Writer.refresh_statistics
        <tnsrag_db.store.corpus.Writer.refresh_statistics>`); True when it ran."""
        return self._writer.refresh_statistics(written, extra_tables)  # delegation: callers move to the Writer

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
        return self._writer.write(entries, progress=progress).counts

    def write(self, entries: Iterable[MemoryEntry], *, extensions: Sequence[WriteExtension] = (),
              progress: Callable[[int], None] | None = None) -> WriteReport:
        """Write a batch like :meth:`add_all`, with ``extensions`` joining its transaction.

        Each :class:`~tnsrag_db.store.write.WriteExtension` may check the batch before any
        I/O, take locks before the entries are written, and write its own rows or check
        the result after them (vectors, edges, the hierarchy); any error rolls back all of
        it. Returns the entries' :class:`WriteReport` (extensions keep their own results).
        """
        return self._writer.write(entries, extensions=extensions, progress=progress)

    # -- reads ------------------------------------------------------------------------
    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry with ``entry_id``, or None."""
        with self._session.transaction() as conn:
            row = conn.execute(sa.text(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE corpus = :c AND id = :id"),
                               {"c": self._corpus, "id": entry_id}).one_or_none()
        return None if row is None else _row_to_entry(row)

    def get_many(self, entry_ids: Sequence[str]) -> dict[str, MemoryEntry]:
        """The entries with these ids that exist, by id."""
        with self._session.transaction() as conn:
            rows = conn.execute(sa.text(f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE corpus = :c AND id = ANY(:ids)"),
                                {"c": self._corpus, "ids": list(entry_ids)}).all()
        return {r.id: _row_to_entry(r) for r in rows}

    def count(self, filters: Mapping[str, str] | None = None) -> int:
        """Number of entries in the corpus matching ``filters`` (exact-match, as in retrieval)."""
        predicate, params = filter_sql(filters)
        with self._session.transaction() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM entries e WHERE e.corpus = :c AND {predicate}"),
                                    {"c": self._corpus, **params}).scalar_one())

    def iter_entries(self, *, batch_size: int = 1000) -> Iterator[MemoryEntry]:
        """Every entry of the corpus in id order, read in batches (keyset pagination).

        Raises :class:`ValidationError` for a ``batch_size`` that is not an int of at least 1.
        """
        check_int(batch_size, "batch_size", minimum=1)
        last = ""
        while True:
            with self._session.transaction() as conn:
                rows = conn.execute(sa.text(
                    f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE corpus = :c AND id > :last ORDER BY id LIMIT :n"),
                    {"c": self._corpus, "last": last, "n": batch_size}).all()
            if not rows:
                return
            for r in rows:
                yield _row_to_entry(r)
            last = rows[-1].id

    # -- deletes ----------------------------------------------------------------------
    def delete(self, entry_id: str) -> bool:
        """Delete one entry with its postings, embeddings and edges. True when it existed."""
        return self._writer.delete("e.id = :id", {"id": entry_id}) == 1

    def delete_many(self, entry_ids: Sequence[str]) -> int:
        """Delete the entries with these ids (with their postings, embeddings and edges) in one
        transaction; returns how many existed."""
        ids = list(dict.fromkeys(entry_ids))
        if not ids:
            return 0
        return self._writer.delete("e.id = ANY(CAST(:ids AS text[]))", {"ids": ids})

    def delete_where(self, filters: Mapping[str, str]) -> int:
        """Delete every entry matching ``filters`` (exact-match, as in retrieval); returns how many.

        An empty filter is refused with :class:`ConfigurationError` (use :meth:`clear`).
        """
        predicate, params = filter_sql(filters)
        if not params:
            raise ConfigurationError("delete_where needs at least one filter; use clear() to empty the corpus")
        return self._writer.delete(predicate, params)

    def clear(self) -> int:
        """Delete every entry of the corpus; returns how many."""
        return self._writer.delete("TRUE", {})

    def drop_corpus(self) -> None:
        """Delete the whole corpus: entries, postings, statistics, embeddings, spaces and edges.

        The store stays usable; the next write creates the corpus again. Its spaces' HNSW
        indexes are dropped concurrently once the deletion has committed (see
        :meth:`drop_orphan_hnsw_indexes`). Deleting a
        ``corpora`` row by hand would leave BM25 postings behind (they carry no foreign
        key, to keep bulk writes fast): use this method.
        """
        def drop() -> None:
            with self._session.transaction() as conn:
                # Waits for every write and delete of the corpus in flight (see Corpus.lock);
                # the postings are deleted after the wait, by a statement that sees what
                # those writers committed.
                self._corpus_row.lock(conn, shared=False)
                conn.execute(sa.text("DELETE FROM bm25_postings WHERE corpus = :c"), {"c": self._corpus})
                conn.execute(sa.text("DELETE FROM corpora WHERE corpus = :c"), {"c": self._corpus})

        retry_on_deadlock(drop)
        self._corpus_row.forget()
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
            "AND NOT EXISTS (SELECT 1 FROM embedding_spaces s "
            "  WHERE c.relname = 'ix_embeddings_hnsw_' || s.space_id::text) "
            "ORDER BY c.relname")
        schema = {"schema": self._schema}
        dropped: list[str] = []
        with self._session.autocommit() as conn:
            if not conn.execute(orphans, schema).first():
                return dropped  # the common case: no wait for a build running on the table
            with self._session.hnsw_build_lock(conn):
                for name in conn.execute(orphans, schema).scalars().all():
                    # Names matched ^ix_embeddings_hnsw_[0-9]+$ above: safe to format in.
                    conn.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                    dropped.append(name)
        return dropped


def connect(url: str | URL | None = None, *, corpus: str = "default", schema: str = DEFAULT_SCHEMA,
            auto_migrate: bool | None = None, text_config: str = "english", pool_size: int = 5,
            max_overflow: int = 10, max_query_terms: int = DEFAULT_MAX_QUERY_TERMS,
            statement_timeout: float | None = None) -> Store:
    """Open a :class:`Store` on ``url`` (libpq or SQLAlchemy form) or, with none, the embedded server.

    The embedded server is migrated to head automatically. A URL names a shared server
    whose schema is never created implicitly: unless ``auto_migrate=True`` the schema
    must already be at this release's head, else :class:`SchemaNotReadyError`.
    ``max_query_terms`` and ``statement_timeout`` bound the work of each call (see :class:`Store`).
    """
    embedded = url is None
    target = embedded_url() if embedded else url
    assert target is not None
    engine = create_engine(target, schema=schema, pool_size=pool_size, max_overflow=max_overflow)
    try:
        store = Store(engine, corpus=corpus, schema=schema, text_config=text_config, owns_engine=True,
                      max_query_terms=max_query_terms, statement_timeout=statement_timeout)
        if auto_migrate or (auto_migrate is None and embedded):
            if not migrate.is_at_head(engine, schema=schema):  # one SELECT when nothing to do
                migrate.upgrade(engine, schema=schema)
                engine.dispose()  # connections opened before the extension existed lack the vector type
        else:
            migrate.ensure_at_head(engine, schema=schema)
    except TnsragError:
        engine.dispose()
        raise
    except sa.exc.SQLAlchemyError as exc:
        # Not map_db_errors: any failure here, a refused login included, means "could not
        # connect" (the mapping would call a refused login a lost connection).
        engine.dispose()
        raise DatabaseError(f"could not connect: {exc}") from exc
    return store
