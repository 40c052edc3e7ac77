"""The async store: ``await connect_async(url, corpus=...)`` → :class:`AsyncStore`.

Reads (:meth:`AsyncStore.get`, :meth:`~AsyncStore.get_many`, :meth:`~AsyncStore.count`,
:meth:`~AsyncStore.run` and every strategy's ``aretrieve``) run natively on psycopg's
async connections (see :mod:`tnsrag_db._db.aio`), except on a store with read replicas,
whose reads the sync store routes (in a worker thread). Writes and deletes (``add``,
``add_all``, ``delete``, ``delete_many``, ``delete_where``, ``clear``, ``drop_corpus``)
run the sync store's path (COPY into stage tables, one transaction, deadlock retries)
in a worker thread of the event loop's default executor: they do not block the loop,
but each one in flight takes a thread and a sync pool connection. Cancelling the
``await`` of a write does not stop it: it commits or rolls back whole in its thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.aio import aclose_pools, arun
from tnsrag_db._db.replicas import DEFAULT_MAX_LAG, DEFAULT_WAIT_TIMEOUT
from tnsrag_db._db.settings import DEFAULT_SCHEMA
from tnsrag_db._db.statement import Plan, Rows, Statement, one
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._store.bm25.analysis import DEFAULT_MAX_QUERY_TERMS
from tnsrag_db._store.consolidate import ConsolidationReport, PromotionReport
from tnsrag_db._store.expiry import SweepReport
from tnsrag_db._store.reads import EntryVersion, check_ids, count_plan, get_many_plan, get_plan, history_plan
from tnsrag_db._store.store import Store, connect
from tnsrag_db._types import MemoryEntry, MemoryTier

__all__ = ["AsyncStore", "connect_async"]

_T = TypeVar("_T")


class AsyncStore:
    """The async face of one corpus: a :class:`Store` (``.store``) with awaitable reads and writes.

    Build indexes and strategies over :attr:`store` as in sync code; their ``aretrieve``
    then runs on this store's async connections::

        strategy = KeywordRAGStrategy(BM25Index(astore.store))
        docs = await strategy.aretrieve("query")

    Use ``async with`` or ``await close()``. After :meth:`close` every call raises
    :class:`ConfigurationError` at once (never waits on a closed pool). Errors are those
    of the sync :class:`Store` methods.
    """

    def __init__(self, store: Store, *, owns_store: bool = False) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"AsyncStore wraps a Store, got {type(store).__name__}")
        self._store = store
        self._owns_store = owns_store
        self._closed = False

    # -- properties -------------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The sync store (its connections and options): build indexes and strategies over it."""
        self._check_open()
        return self._store

    @property
    def corpus(self) -> str:
        """The corpus every call is confined to."""
        return self._store.corpus

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the library's tables."""
        return self._store.schema

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"AsyncStore(corpus={self._store.corpus!r}, schema={self._store.schema!r}{state})"

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError(f"this AsyncStore (corpus {self._store.corpus!r}) is closed; "
                                     "open another with connect_async()")

    # -- lifecycle --------------------------------------------------------------------
    async def close(self) -> None:
        """Close the async connections (and the sync store when :func:`connect_async` opened
        it). Idempotent. Calls still in flight finish or fail with a database error."""
        if self._closed:
            return
        self._closed = True
        await aclose_pools(self._store.pool)  # type: ignore[arg-type]
        if self._owns_store:
            self._store.close()

    async def __aenter__(self) -> AsyncStore:
        self._check_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- reads (native async) ---------------------------------------------------------
    async def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive ``plan`` on an async connection (see :func:`tnsrag_db._db.aio.arun`)."""
        self._check_open()
        return await arun(self._store, plan, snapshot=snapshot)

    async def read(self, sql: str, params: Mapping[str, Any]) -> Rows:
        """Run one read-only statement (``:name`` parameters) and return its rows."""
        return list(await self.run(one(Statement(sql, params))))

    async def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry with ``entry_id``, or None."""
        if self._store.read_replicas is not None:  # the sync store reads entries on the primary
            return await self._in_thread(self._store.get, entry_id)
        [entry_id] = check_ids([entry_id])
        return await self.run(get_plan(self._store.corpus, entry_id))

    async def get_many(self, entry_ids: Sequence[str]) -> dict[str, MemoryEntry]:
        """The entries with these ids that exist, by id."""
        if self._store.read_replicas is not None:
            return await self._in_thread(self._store.get_many, list(entry_ids))
        return await self.run(get_many_plan(self._store.corpus, check_ids(entry_ids)))

    async def count(self, filters: Mapping[str, str] | None = None) -> int:
        """Number of entries in the corpus matching ``filters`` (exact-match, as in retrieval)."""
        if self._store.read_replicas is not None:
            return await self._in_thread(self._store.count, filters)
        return await self.run(count_plan(self._store.corpus, filters))

    # -- writes (the sync path in a worker thread) ------------------------------------
    async def _in_thread(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        self._check_open()
        # to_thread copies this task's context: Store.timeout() around the await applies.
        return await asyncio.to_thread(method, *args, **kwargs)

    async def add(self, entry: MemoryEntry) -> IngestCounts:
        """Insert or update one entry (see :meth:`Store.add`); runs in a worker thread."""
        return await self._in_thread(self._store.add, entry)

    async def add_all(self, entries: Iterable[MemoryEntry], *,
                      progress: Callable[[int], None] | None = None) -> IngestCounts:
        """Write a batch in one transaction through COPY (see :meth:`Store.add_all`); runs in a
        worker thread (``progress`` is called from it)."""
        batch = list(entries)  # an iterable is consumed here, not in the thread
        return await self._in_thread(self._store.add_all, batch, progress=progress)

    async def delete(self, entry_id: str) -> bool:
        """Delete one entry with its postings, embeddings and edges; runs in a worker thread."""
        return await self._in_thread(self._store.delete, entry_id)

    async def delete_many(self, entry_ids: Sequence[str]) -> int:
        """Delete the entries with these ids in one transaction; runs in a worker thread."""
        return await self._in_thread(self._store.delete_many, list(entry_ids))

    async def delete_where(self, filters: Mapping[str, str] | None = None, *,
                           older_than: timedelta | datetime | None = None) -> int:
        """Delete every entry matching ``filters`` and ``older_than`` (see :meth:`Store.delete_where`);
        runs in a worker thread."""
        return await self._in_thread(self._store.delete_where, filters, older_than=older_than)

    async def sweep(self, *, vacuum: bool = False) -> SweepReport:
        """Delete the corpus's expired entries (see :meth:`Store.sweep`); runs in a worker thread."""
        return await self._in_thread(self._store.sweep, vacuum=vacuum)

    async def set_history(self, keep: bool = True) -> None:
        """Keep history or not (see :meth:`Store.set_history`); runs in a worker thread."""
        await self._in_thread(self._store.set_history, keep)

    async def history(self, entry_id: str) -> list[EntryVersion]:
        """The versions of the entry ``entry_id``, oldest first (see :meth:`Store.history`)."""
        if self._store.read_replicas is not None:
            return await self._in_thread(self._store.history, entry_id)
        [entry_id] = check_ids([entry_id])
        return await self.run(history_plan(self._store.corpus, entry_id))

    async def consolidate(self, tier: MemoryTier | str, **options: Any) -> ConsolidationReport:
        """Merge or link the duplicates of ``tier`` (the options of :meth:`Store.consolidate`);
        runs in a worker thread (``merge`` and ``progress`` are called from it)."""
        return await self._in_thread(self._store.consolidate, tier, **options)

    async def promote(self, from_tier: MemoryTier | str, to_tier: MemoryTier | str, *,
                      filters: Mapping[str, str] | None = None, older_than: timedelta | datetime | None = None,
                      dry_run: bool = False) -> PromotionReport:
        """Move the entries of ``from_tier`` that meet the rule to ``to_tier`` (see
        :meth:`Store.promote`); runs in a worker thread."""
        return await self._in_thread(self._store.promote, from_tier, to_tier, filters=filters,
                                     older_than=older_than, dry_run=dry_run)

    async def clear(self) -> int:
        """Delete every entry of the corpus; runs in a worker thread."""
        return await self._in_thread(self._store.clear)

    async def drop_corpus(self) -> None:
        """Delete the whole corpus (see :meth:`Store.drop_corpus`); runs in a worker thread."""
        await self._in_thread(self._store.drop_corpus)


async def connect_async(url: str | None = None, *, corpus: str = "default", schema: str = DEFAULT_SCHEMA,
                        auto_migrate: bool | None = None, text_config: str = "english", pool_size: int = 5,
                        max_overflow: int = 10, max_query_terms: int = DEFAULT_MAX_QUERY_TERMS,
                        statement_timeout: float | None = None, read_urls: Sequence[str] = (),
                        replicas_optional: bool = False, max_replica_lag: float | None = DEFAULT_MAX_LAG,
                        replica_wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
                        consistency: str = "eventual") -> AsyncStore:
    """Open an :class:`AsyncStore`: the options and errors of :func:`tnsrag_db.connect`.

    The connection checks and migrations of :func:`~tnsrag_db.connect` (and the embedded
    server's start when ``url`` is None) run in a worker thread; the async pool (same
    ``pool_size`` and ``max_overflow``) opens on the first read. With ``read_urls`` the
    reads are routed to the standbys by the sync driver, in a worker thread (see
    :func:`tnsrag_db._db.aio.arun`).
    """
    store = await asyncio.to_thread(
        connect, url, corpus=corpus, schema=schema, auto_migrate=auto_migrate, text_config=text_config,
        pool_size=pool_size, max_overflow=max_overflow, max_query_terms=max_query_terms,
        statement_timeout=statement_timeout, read_urls=read_urls, replicas_optional=replicas_optional,
        max_replica_lag=max_replica_lag, replica_wait_timeout=replica_wait_timeout, consistency=consistency)
    return AsyncStore(store, owns_store=True)
