"""The persistent corpus: ``Store`` and :func:`connect`.

A ``Store`` is one corpus in one schema of one database. It writes entries (with their
BM25 postings and statistics, in the same transaction, through the pipeline of
:mod:`tnsrag_db._store.write`, which the indexes' writes join as extensions), reads and
deletes them. The plumbing (connections, transactions, locks, timeouts, the read path) is
its :attr:`Store.session`, a :class:`~tnsrag_db._db.session.Session`; the write
transactions are its :attr:`Store.writer`. The strategy-facing views (``VectorMemoryStore``,
``BM25Index``, ``GraphStore``, ...) are built over a ``Store`` and share its connections and corpus.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from tnsrag_db import _telemetry
from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.driver_errors import db_error
from tnsrag_db._db.filter_pairs import FilterPairs
from tnsrag_db._db.hooks import DEFAULT_PING_AFTER_IDLE, ConnectionHooks
from tnsrag_db._db.pool import Connection, Connections, OneConnection, Pool
from tnsrag_db._db.replicas import (
    DEFAULT_MAX_LAG,
    DEFAULT_WAIT_TIMEOUT,
    ReadReplicas,
    WriteClock,
    WriteToken,
    check_replica_options,
    open_replicas,
)
from tnsrag_db._db.revisions import ensure_at_head, is_at_head
from tnsrag_db._db.session import Session, retry_on_deadlock
from tnsrag_db._db.settings import DEFAULT_SCHEMA
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError, SchemaNotReadyError, ValidationError
from tnsrag_db._store.bm25.analysis import DEFAULT_MAX_QUERY_TERMS
from tnsrag_db._store.bm25.merge import MergeReport
from tnsrag_db._store.corpus import (
    DEFAULT_ANALYZE_AFTER_ROWS,
    DEFAULT_MERGE_AFTER_ENTRIES,
    Corpus,
    Writer,
    check_corpus_name,
)
from tnsrag_db._store.embedded.resolve import embedded_url
from tnsrag_db._store.expiry import EXPIRED, NOW, SweepReport
from tnsrag_db._store.filters import filter_sql
from tnsrag_db._store.maintenance import drop_orphan_hnsw_indexes
from tnsrag_db._store.reads import (
    EntryVersion,
    check_ids,
    content_hashes_plan,
    count_plan,
    entries_after_plan,
    get_many_plan,
    get_plan,
    history_plan,
)
from tnsrag_db._store.write import (
    WriteExtension,
    WriteReport,
)
from tnsrag_db._types import MemoryEntry, MemoryTier
from tnsrag_db._validate import check_int, is_int

__all__ = ["Store", "connect"]

if TYPE_CHECKING:
    from tnsrag_db._store.consolidate import (
        ConsolidationProgress,
        ConsolidationReport,
        EmbeddingWriter,
        MergeFunction,
        PromotionReport,
    )

_T = TypeVar("_T")


class Store:
    """One corpus of the library's schema in one PostgreSQL database.

    Construct with :func:`connect` (which resolves the database and checks or runs
    migrations) or directly over connections you own (a :class:`~tnsrag_db._db.pool.Pool`;
    ``owns_pool=True``: :meth:`close` closes it). Thread-safe; the pool is shared by every
    view built on this store. Use as a context manager or call
    :meth:`close`.

    Bounds on the work of one call: ``max_query_terms`` (default 256, 1 to 100,000) is
    how many words of a query are analysed (the rest is ignored, see
    :func:`~tnsrag_db._store.bm25.analysis.analyze_query`); ``statement_timeout`` (seconds,
    default None: the server's setting) cancels any statement of this store that runs
    longer, with :class:`StatementTimeoutError` (a write is rolled back whole).
    :meth:`timeout` sets it for the calls of one block. Index builds and the statistics
    refresh after bulk writes are not limited. ``analyze_after_rows`` (default 5,000, at
    least 1): a bulk write of at least this many entries refreshes the planner statistics
    right after it commits (see :meth:`~tnsrag_db._store.corpus.Writer.refresh_statistics`).
    ``merge_after_entries`` (default 8,192, at least 1): after writing this many entries the
    store merges the corpus's BM25 postings into blocks (see :meth:`merge_postings`).
    Raises :class:`ConfigurationError` for a bad option.
    """

    def __init__(self, pool: Connections, *, corpus: str = "default", schema: str = DEFAULT_SCHEMA,
                 text_config: str = "english", owns_pool: bool = False,
                 max_query_terms: int = DEFAULT_MAX_QUERY_TERMS, statement_timeout: float | None = None,
                 read_replicas: ReadReplicas | None = None, consistency: str = "eventual",
                 analyze_after_rows: int = DEFAULT_ANALYZE_AFTER_ROWS,
                 merge_after_entries: int = DEFAULT_MERGE_AFTER_ENTRIES, _clock: WriteClock | None = None,
                 _after: WriteToken | None = None, _pairs: FilterPairs | None = None) -> None:
        check_replica_options(read_replicas, consistency)
        corpus = check_corpus_name(corpus)
        if not is_int(max_query_terms) or not 1 <= max_query_terms <= 100_000:
            raise ConfigurationError(f"max_query_terms must be an int from 1 to 100000, got {max_query_terms!r}")
        self._consistency = consistency
        self._after = _after
        if pool.schema != schema:
            raise ConfigurationError(f"the pool's connections search schema {pool.schema!r}, "
                                     f"not this store's {schema!r}")
        self._session = Session(pool, what=f"database error in corpus {corpus!r}", schema=schema,
                                statement_timeout=statement_timeout, read_replicas=read_replicas,
                                read_token=self._read_token, clock=_clock)
        self._corpus = corpus
        self._schema = schema
        self._text_config = text_config
        self._owns_pool = owns_pool
        self._max_query_terms = max_query_terms
        self._corpus_row = Corpus(corpus, schema=schema, text_config=text_config)
        self._writer = Writer(self._session, self._corpus_row, analyze_after_rows=analyze_after_rows,
                              merge_after_entries=merge_after_entries)
        self._closed = False
        self._pairs = _pairs if _pairs is not None else FilterPairs(schema)

    # -- properties -----------------------------------------------------------------
    @property
    def session(self) -> Session:
        """Connections, transactions, locks, timeouts and the read path of this store.

        Raises :class:`ConfigurationError` once the store is closed (every read and write
        of the store and of the indexes over it goes through here)."""
        self._check_open()
        return self._session

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError(f"this Store (corpus {self._corpus!r}) is closed; open another with connect()")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (the store then refuses every read and write)."""
        return self._closed

    @property
    def writer(self) -> Writer:
        """The write transactions of this corpus (:class:`~tnsrag_db._store.corpus.Writer`): the
        plumbing under :meth:`write`, for code that writes inside a transaction of its own
        (``writer.transaction(work)``, ``writer.write_in(conn, batch)``) and the statistics
        refresh after bulk writes (``writer.refresh_statistics``)."""
        self._check_open()
        return self._writer

    @property
    def pool(self) -> Connections:
        """The connections of this store (a :class:`~tnsrag_db._db.pool.Pool`), shared by its views."""
        return self._session.pool

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
        """The database this store reads, as its URL without the password."""
        return self._session.pool.location

    @property
    def max_query_terms(self) -> int:
        """How many words of a query are analysed (default 256)."""
        return self._max_query_terms

    @property
    def statement_timeout(self) -> float | None:
        """The statement timeout in seconds in effect here (inside :meth:`timeout`, its value); None: the server's."""
        return self._session.statement_timeout

    def filter_pairs_plan(self) -> Plan[bool]:
        """Whether retrievals' metadata filters use the filter pairs (tenancy on, see :mod:`tnsrag_db.tenancy`),
        as a plan a retrieval's plan runs first: one catalog statement the first time, kept by
        this store and its views; none afterwards."""
        return self._pairs.plan()

    def uses_filter_pairs(self) -> bool:
        """:meth:`filter_pairs_plan` run on its own (for a caller outside a plan)."""
        return self.run(self._pairs.plan())

    def with_corpus(self, corpus: str) -> Store:
        """A store over another corpus sharing this store's connections, replicas, write token and options."""
        return self._view(corpus, self._after)

    def _view(self, corpus: str, after: WriteToken | None) -> Store:
        return Store(self._session.pool, corpus=corpus, schema=self._schema, text_config=self._text_config,
                     max_query_terms=self._max_query_terms, statement_timeout=self._session.default_timeout,
                     read_replicas=self._session.read_replicas, consistency=self._consistency,
                     analyze_after_rows=self._writer.analyze_after_rows,
                     merge_after_entries=self._writer.merge_after_entries, _clock=self._session.clock, _after=after,
                     _pairs=self._pairs)

    # -- read replicas ----------------------------------------------------------------
    @property
    def read_replicas(self) -> ReadReplicas | None:
        """The hot standbys retrieval reads go to (None: every read goes to the primary)."""
        return self._session.read_replicas

    @property
    def last_write_token(self) -> WriteToken | None:
        """The primary's WAL position after the latest write committed through this store (or a
        view of it), when it has read replicas; None before any write or without replicas."""
        return self._session.clock.token

    def after(self, token: WriteToken | None) -> Store:
        """A view of this store whose reads see everything committed up to ``token`` (from
        :attr:`last_write_token`, possibly of another process): a standby serves a read only
        once it has replayed past the token (waiting up to the replicas' ``wait_timeout``),
        else the primary does. ``None``: no constraint. :class:`ConfigurationError` for another type."""
        if token is not None and not isinstance(token, WriteToken):
            raise ConfigurationError(f"token must be a WriteToken or None, got {type(token).__name__}")
        return self._view(self._corpus, token)

    def _read_token(self) -> WriteToken | None:
        own = self._session.clock.token if self._consistency == "read_your_writes" else None
        tokens = [t for t in (self._after, own) if t is not None]
        return max(tokens) if tokens else None

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
        """Release the connection pool and the replicas' pools (when this store created them). Idempotent."""
        if not self._closed and self._owns_pool:
            self._session.pool.close()
            if self.read_replicas is not None:
                self.read_replicas.close()
        self._closed = True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store(corpus={self._corpus!r}, schema={self._schema!r}, url={self.location!r})"

    # -- the read path (store.session has the rest of the plumbing) ---------------------
    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read-only statement and return its rows (see :meth:`Session.read`)."""
        return self.session.read(sql, params)

    def run(self, plan: Plan[_T], *, snapshot: bool = False) -> _T:
        """Drive a read plan on one connection (see :meth:`Session.run`)."""
        _telemetry.read_corpus(self._corpus)
        return self.session.run(plan, snapshot=snapshot)

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
        return self.writer.write(entries, progress=progress).counts

    def write(self, entries: Iterable[MemoryEntry], *, extensions: Sequence[WriteExtension] = (),
              progress: Callable[[int], None] | None = None) -> WriteReport:
        """Write a batch like :meth:`add_all`, with ``extensions`` joining its transaction.

        Each :class:`~tnsrag_db._store.write.WriteExtension` may check the batch before any
        I/O, take locks before the entries are written, and write its own rows or check
        the result after them (vectors, edges, the hierarchy); any error rolls back all of
        it. Returns the entries' :class:`WriteReport` (extensions keep their own results).
        """
        return self.writer.write(entries, extensions=extensions, progress=progress)

    # -- reads ------------------------------------------------------------------------
    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry with ``entry_id``, or None."""
        [entry_id] = check_ids([entry_id])
        return self.session.run(get_plan(self._corpus, entry_id))

    def get_many(self, entry_ids: Sequence[str]) -> dict[str, MemoryEntry]:
        """The entries with these ids that exist, by id."""
        return self.session.run(get_many_plan(self._corpus, check_ids(entry_ids)))

    def content_hashes(self, entry_ids: Sequence[str]) -> dict[str, bytes]:
        """The stored change hash of each existing entry among ``entry_ids`` (equal to
        :func:`content_hash` of an identical entry), by id: what a write would skip."""
        return self.session.run(content_hashes_plan(self._corpus, entry_ids))

    def count(self, filters: Mapping[str, str] | None = None) -> int:
        """Number of entries in the corpus matching ``filters`` (exact-match, as in retrieval)."""
        return self.session.run(count_plan(self._corpus, filters))

    def iter_entries(self, *, batch_size: int = 1000) -> Iterator[MemoryEntry]:
        """Every entry of the corpus in id order, read in batches (keyset pagination): those
        not expired, whatever their validity (an entry true only in the past or from a later
        instant is still the corpus's, found by an ``as_of`` read); not the versions a
        corpus that keeps history closed (:meth:`history` lists those).

        Raises :class:`ValidationError` for a ``batch_size`` that is not an int of at least 1.
        """
        check_int(batch_size, "batch_size", minimum=1)
        last = ""
        while page := self.session.run(entries_after_plan(self._corpus, last, batch_size)):
            yield from page
            last = page[-1].id

    # -- deletes ----------------------------------------------------------------------
    def delete(self, entry_id: str) -> bool:
        """Delete one entry with its postings, embeddings and edges. True when it existed."""
        [entry_id] = check_ids([entry_id])
        return self.writer.delete("e.id = :id", {"id": entry_id}) == 1

    def delete_many(self, entry_ids: Sequence[str]) -> int:
        """Delete the entries with these ids (with their postings, embeddings and edges) in one
        transaction; returns how many existed."""
        ids = list(dict.fromkeys(check_ids(entry_ids)))
        if not ids:
            return 0
        return self.writer.delete("e.id = ANY(CAST(:ids AS text[]))", {"ids": ids})

    def delete_where(self, filters: Mapping[str, str] | None = None, *,
                     older_than: timedelta | datetime | None = None) -> int:
        """Delete every entry matching ``filters`` (exact-match, as in retrieval) and, with
        ``older_than``, written before that instant (a timezone-aware datetime) or more than
        that long ago (a positive timedelta, by the database's clock; an entry's age counts
        from its first write); returns how many. Their postings, vectors and edges go with
        them (see :meth:`sweep` for the space).

        Neither a filter nor an age is refused with :class:`ConfigurationError` (use
        :meth:`clear`); a bad ``older_than`` with :class:`ValidationError`.
        """
        predicate, params = filter_sql(filters)
        if older_than is not None:
            predicate = f"{predicate} AND e.created_at < {_cutoff(older_than, params)}"
        elif not params:
            raise ConfigurationError("delete_where needs at least one filter or older_than; use clear() to empty "
                                     "the corpus")
        return self.writer.delete(predicate, params)

    def set_expiry(self, ttl: float | None = None, *,
                   tiers: Mapping[MemoryTier | str, float | None] | None = None) -> None:
        """Set the corpus's default time-to-live: entries written from now on without an
        expiry of their own (``MemoryEntry.expires_at`` or ``ttl``) expire ``ttl`` seconds
        after their write, or, for a tier named in ``tiers``, that tier's seconds (None in
        ``tiers``: that tier never expires by default). Every write renews it, as an
        entry's own ``ttl``. ``set_expiry()`` removes the default; entries already written
        keep their expiry. Creates the corpus when it does not exist.

        Raises :class:`ValidationError` for a ``ttl`` that is not a positive finite number
        or an unknown tier.
        """
        policy: dict[str, Any] = {}
        if ttl is not None:
            policy["ttl"] = _seconds(ttl, "ttl")
        if tiers:
            named: dict[str, float | None] = {}
            for tier, seconds in tiers.items():
                try:
                    name = MemoryTier.parse(tier).name
                except ValueError as exc:
                    raise ValidationError(f"tiers: {exc}") from None
                named[name] = None if seconds is None else _seconds(seconds, f"tiers[{name!r}]")
            policy["tiers"] = named
        value = json.dumps(policy) if policy else None

        def work(conn: Connection) -> None:
            self._corpus_row.text_config(conn)  # creates the row, under the corpus's write lock
            conn.execute("UPDATE corpora SET expiry = CAST(:p AS jsonb) WHERE corpus = :c",
                         {"p": value, "c": self._corpus})

        self.writer.transaction(work)

    def expiry_policy(self) -> dict[str, Any] | None:
        """The corpus's default time-to-live as :meth:`set_expiry` stored it (``{"ttl":
        seconds, "tiers": {tier: seconds or None}}``, keys present when set), or None."""
        rows = self.read("SELECT expiry FROM corpora WHERE corpus = :c", {"c": self._corpus})
        return dict(rows[0].expiry) if rows and rows[0].expiry else None

    def set_history(self, keep: bool = True) -> None:
        """Keep history (``keep``, the default) or not: in a corpus that keeps it, a write of an
        id whose entry differs, or was deleted, keeps the entry's current version as a row of
        its own, closed at the write, and a delete closes the current version instead of
        removing it (:meth:`history` lists them; a search ``as_of`` an earlier instant finds
        them). ``set_history(False)``: writes replace and deletes remove outright again; the
        versions kept so far stay. Creates the corpus when it does not exist. Raises
        :class:`ValidationError` for a ``keep`` that is not a bool."""
        if not isinstance(keep, bool):
            raise ValidationError(f"keep must be a bool, got {type(keep).__name__}")

        def work(conn: Connection) -> None:
            self._corpus_row.text_config(conn)  # creates the row, under the corpus's write lock
            conn.execute("UPDATE corpora SET history = :h WHERE corpus = :c",
                         {"h": keep or None, "c": self._corpus})

        self.writer.transaction(work)

    def keeps_history(self) -> bool:
        """Whether the corpus keeps history (:meth:`set_history`)."""
        rows = self.read("SELECT to_jsonb(c) -> 'history' AS h FROM corpora c WHERE c.corpus = :c",
                         {"c": self._corpus})
        return bool(rows and rows[0].h is True)

    def history(self, entry_id: str) -> list[EntryVersion]:
        """Every version of the entry ``entry_id`` the corpus holds, oldest first: the versions
        kept by a corpus that keeps history, then the current row (closed when a delete
        closed it), each with the interval in which it was recorded and its stated validity.
        Empty when there is no such entry. Expired versions are listed until a sweep deletes them."""
        [entry_id] = check_ids([entry_id])
        return self.session.run(history_plan(self._corpus, entry_id))

    def sweep(self, *, vacuum: bool = False) -> SweepReport:
        """Delete the corpus's expired entries (see :class:`MemoryEntry`'s ``expires_at`` and
        ``ttl``) with their postings, vectors and edges, then take them out of the merged BM25
        blocks (a merge, unless a rolling upgrade is not finished); returns the counts.

        Reads leave an expired entry out from the instant it expires, whether swept or not;
        the sweep frees what it holds. ``vacuum`` then runs ``VACUUM`` on the library's tables
        (shared by every corpus of the schema; autovacuum does the same later), which frees
        the deleted rows' space for new ones and removes their vectors from the HNSW indexes.
        """
        with _telemetry.operation("sweep", self._corpus, vacuum=vacuum) as op:
            deleted = self.writer.delete(EXPIRED, {}, outright=True)
            # (a merge running meanwhile purges them instead: no wait for it)
            tombstones = self.writer.merge(sweep=False, wait=False).tombstones if deleted else 0
            if vacuum and deleted:
                with self._session.autocommit() as conn:
                    conn.execute(f"VACUUM (ANALYZE) {', '.join(_SWEPT_TABLES)}")
            op.count(deleted)
            op.set("tnsrag.tombstones", tombstones)
        return SweepReport(deleted=deleted, tombstones=tombstones, vacuumed=vacuum and deleted > 0)

    def consolidate(self, tier: MemoryTier | str, *, threshold: float | None = None, mode: str = "merge",
                    merge: MergeFunction | None = None, vectors: EmbeddingWriter | None = None,
                    space: str | None = None, neighbors: int | None = None,
                    relation: str | None = None, dry_run: bool = False,
                    progress: ConsolidationProgress | None = None) -> ConsolidationReport:
        """Find the duplicates among the entries of ``tier`` and merge or link them.

        Duplicates are entries of the tier with the same text and, with ``threshold`` (a
        cosine similarity in (0, 1]), entries whose vectors are at least that similar: each
        entry's ``neighbors`` (default 10) nearest vectors of an embedding space are looked
        at (its HNSW index, else an exact scan), in the space of ``vectors`` (a
        :class:`VectorMemoryStore`, whose writes embed a merged text), the space named ``space`` (a provider name), or the
        corpus's only space. Pairs join into groups (their connected components); the entry
        of a group written first (then the smallest id) is its survivor.

        ``mode="merge"`` (default): each group becomes one entry, the survivor, or what
        ``merge(entries)`` returns for the group's entries (survivor first; the result must
        carry one of their ids, which survives; None leaves the group alone). The others'
        edges move to it, their ids become its aliases (:meth:`get` and :meth:`get_many`
        of an alias return it, the graph resolves them too), and they are deleted with their
        postings and vectors. A merged text that changed is embedded through ``vectors``
        when given; without it, the survivor keeps no vector of its old text. ``merge`` runs
        for every group before anything is written: an exception it raises propagates and
        nothing is written. ``mode="link"``: an edge of ``relation`` (default
        ``"duplicate_of"``, weight: the similarity) both ways between the entries of each pair.

        ``dry_run`` finds the groups and writes nothing. ``progress(phase, done, total)``
        follows the pairs (``"pairs"``, entries looked at) and the writes (``"merge"`` or
        ``"link"``). Returns a :class:`ConsolidationReport`.

        Raises :class:`ValidationError` for an unknown tier, a threshold outside (0, 1], an
        unknown mode or a bad merge result; :class:`ConfigurationError` when ``threshold``
        has no single space to search.
        """
        from tnsrag_db._store.consolidate import consolidate  # the maintenance path only

        with _telemetry.operation("consolidate", self._corpus, mode=mode) as op:
            # None: the defaults of tnsrag_db._store.consolidate (10 neighbours, "duplicate_of").
            chosen = {k: v for k, v in (("neighbors", neighbors), ("relation", relation)) if v is not None}
            report = consolidate(self, tier, threshold=threshold, mode=mode, merge=merge, vectors=vectors,
                                 space=space, dry_run=dry_run, progress=progress, **chosen)  # type: ignore[arg-type]
            op.count(report.merged + report.linked)
        return report

    def promote(self, from_tier: MemoryTier | str, to_tier: MemoryTier | str, *,
                filters: Mapping[str, str] | None = None, older_than: timedelta | datetime | None = None,
                dry_run: bool = False) -> PromotionReport:
        """Move the entries of ``from_tier`` that match ``filters`` (exact-match metadata, as
        in retrieval) and, with ``older_than``, were first written before that instant (a
        timezone-aware datetime) or more than that long ago (a positive timedelta) to
        ``to_tier``: a rule over what every entry records, so reads pay nothing for it. Each
        entry is rewritten through the write path (its text, vectors and expiry stay);
        an entry another writer changed between the read and the move is skipped.
        ``dry_run`` lists the matches only. Returns a :class:`PromotionReport`.

        Raises :class:`ValidationError` for an unknown tier, the same tier twice or a bad
        filter or ``older_than``.
        """
        from tnsrag_db._store.consolidate import promote  # the maintenance path only

        predicate, params = filter_sql(filters)
        if older_than is not None:
            predicate = f"{predicate} AND e.created_at < {_cutoff(older_than, params)}"
        with _telemetry.operation("promote", self._corpus) as op:
            report = promote(self, from_tier, to_tier, predicate, params, dry_run=dry_run)
            op.count(report.promoted)
        return report

    def merge_postings(self, *, sweep: bool = True,
                       progress: Callable[[MergeReport], None] | None = None) -> MergeReport:
        """Merge the corpus's BM25 postings from per-entry rows into blocks now; returns what moved.

        Writes insert postings as one row per (term, entry); every ``merge_after_entries``
        written entries a store merges them into blocks of up to 128 per term, about an
        eighth of the space, and takes deleted entries' postings out of the blocks. This
        runs the same merge until nothing is left, in transactions of up to 20,000 entries,
        beside readers and writers (it skips entries a writer holds). ``sweep`` (default)
        also takes the entries whose postings were written before blocks existed.
        ``progress`` gets each transaction's report. Results never change: queries read
        both layouts.

        Raises :class:`SchemaNotReadyError` while the schema still serves a release that
        reads postings only as rows (a rolling upgrade not finished: ``tnsrag db upgrade
        --finish``, see docs/deployment.md, "Rolling upgrades"); nothing moves then.
        """
        report = self.writer.merge(sweep=sweep, progress=progress)
        if report.deferred:
            raise SchemaNotReadyError(
                f"BM25 postings of corpus {self._corpus!r} not merged: schema {self._schema!r} still serves releases "
                "that read postings only as rows (before revision 0011); run `tnsrag db upgrade --finish` once "
                "no process of such a release uses it")
        return report

    def clear(self) -> int:
        """Delete every entry of the corpus (with its kept versions); returns how many rows went."""
        return self.writer.delete("TRUE", {}, outright=True)

    def drop_corpus(self) -> None:
        """Delete the whole corpus: entries, postings, statistics, embeddings, spaces and edges.

        The store stays usable; the next write creates the corpus again. Its spaces' HNSW
        indexes are dropped concurrently once the deletion has committed (see
        :meth:`drop_orphan_hnsw_indexes`). Deleting a
        ``corpora`` row by hand would leave BM25 postings behind (they carry no foreign
        key, to keep bulk writes fast): use this method.
        """
        def drop() -> None:
            with self.session.transaction() as conn:
                # Waits for every write and delete of the corpus in flight (see Corpus.lock);
                # the postings are deleted after the wait, by a statement that sees what
                # those writers committed. No row, nothing to drop: a corpus a writer is
                # creating now comes after the drop. (Deleting on without the lock, a later
                # statement could delete the row that writer committed meanwhile, under the
                # feet of another writer holding its key.)
                if not self._corpus_row.lock(conn, shared=False):
                    return
                # The document numbers first: the trigger on entries would tombstone every
                # merged entry the cascade deletes, in a corpus that is going.
                conn.execute("DELETE FROM bm25_docs WHERE corpus = :c", {"c": self._corpus})
                conn.execute("DELETE FROM bm25_postings WHERE corpus = :c", {"c": self._corpus})
                conn.execute("DELETE FROM corpora WHERE corpus = :c", {"c": self._corpus})

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
        return drop_orphan_hnsw_indexes(self._session, self._schema)


#: The tables a sweep's deletes leave dead rows in (``VACUUM`` with ``sweep(vacuum=True)``).
_SWEPT_TABLES = ("entries", "bm25_postings", "bm25_blocks", "bm25_docs", "bm25_tombstones", "bm25_df", "embeddings",
                 "edges")


def _seconds(value: object, what: str) -> float:
    """``value`` as a positive finite number of seconds, else :class:`ValidationError` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValidationError(f"{what} must be a positive finite number of seconds, got {value!r}")
    return float(value)


def _cutoff(older_than: object, params: dict[str, Any]) -> str:
    """The SQL instant before which ``older_than`` (a timezone-aware datetime or a positive
    timedelta back from the statement's start) puts an entry's first write; binds ``:age``."""
    if isinstance(older_than, datetime):
        if older_than.tzinfo is None or older_than.utcoffset() is None:
            raise ValidationError(f"older_than {older_than.isoformat()} has no time zone")
        params["age"] = older_than
        return "CAST(:age AS timestamptz)"
    if isinstance(older_than, timedelta):
        if older_than <= timedelta(0):
            raise ValidationError(f"older_than must be a positive timedelta, got {older_than!r}")
        params["age"] = older_than
        return f"{NOW} - CAST(:age AS interval)"
    raise ValidationError(f"older_than must be a datetime or a timedelta, got {type(older_than).__name__}")


def connect(url: str | None = None, *, corpus: str = "default", schema: str = DEFAULT_SCHEMA,
            auto_migrate: bool | None = None, text_config: str = "english", pool_size: int = 5,
            max_overflow: int = 10, max_query_terms: int = DEFAULT_MAX_QUERY_TERMS,
            statement_timeout: float | None = None, read_urls: Sequence[str] = (),
            replicas_optional: bool = False, max_replica_lag: float | None = DEFAULT_MAX_LAG,
            replica_wait_timeout: float = DEFAULT_WAIT_TIMEOUT, consistency: str = "eventual",
            analyze_after_rows: int = DEFAULT_ANALYZE_AFTER_ROWS, hooks: Sequence[ConnectionHooks] = (),
            ping_after_idle: float = DEFAULT_PING_AFTER_IDLE,
            merge_after_entries: int = DEFAULT_MERGE_AFTER_ENTRIES, _one_connection: bool = False,
            _vector_types: bool = True) -> Store:
    """Open a :class:`Store` on ``url`` (libpq or SQLAlchemy form) or, with none, the embedded server.

    The embedded server is migrated to head automatically (and the upgrade finished: see
    ``tnsrag db upgrade --finish``). A URL names a shared server whose schema is never
    created implicitly: unless ``auto_migrate=True`` the schema must already be at this
    release's head, or upgraded by a later release that still serves this one, else
    :class:`SchemaNotReadyError`.
    ``max_query_terms`` and ``statement_timeout`` bound the work of each call (see :class:`Store`).

    ``read_urls``: hot standbys for retrieval reads (writes, locks, migrations: ``url``),
    each checked to be one of the primary, with ``replicas_optional``, ``max_replica_lag``,
    ``replica_wait_timeout`` and ``consistency`` as in :mod:`tnsrag_db._db.replicas`.
    ``analyze_after_rows`` and ``merge_after_entries`` as in :class:`Store`. ``pool_size +
    max_overflow`` is the most connections the store opens at once (see
    :class:`~tnsrag_db._db.pool.Pool`). ``hooks`` (:class:`~tnsrag_db._db.hooks.ConnectionHooks`)
    run on every connection of the store's pools, sync, async and replicas alike, after
    the library's own; ``ping_after_idle`` is how many seconds a pooled connection may sit
    idle before its next use pings it (default 1.0).
    """
    embedded = url is None
    target = embedded_url() if embedded else url
    assert target is not None
    # One connection without pool threads for a process that makes one call at a time (the CLI).
    pool = (OneConnection(target, schema=schema, hooks=hooks, vector_types=_vector_types) if _one_connection else
            Pool(target, schema=schema, pool_size=pool_size, max_overflow=max_overflow, hooks=hooks,
                 ping_after_idle=ping_after_idle))
    replicas: ReadReplicas | None = None
    try:
        if read_urls or isinstance(read_urls, str):
            replicas = open_replicas(pool, read_urls, schema=schema, pool_size=pool_size, max_overflow=max_overflow,
                                     optional=replicas_optional, max_lag=max_replica_lag,
                                     wait_timeout=replica_wait_timeout, hooks=hooks, ping_after_idle=ping_after_idle)
        store = Store(pool, corpus=corpus, schema=schema, text_config=text_config, owns_pool=True,
                      max_query_terms=max_query_terms, statement_timeout=statement_timeout,
                      read_replicas=replicas, consistency=consistency, analyze_after_rows=analyze_after_rows,
                      merge_after_entries=merge_after_entries)
        if auto_migrate or (auto_migrate is None and embedded):
            if not is_at_head(pool, schema=schema):  # one SELECT when nothing to do
                from tnsrag_db._db import migrate  # alembic, only when there is something to migrate

                migrate.upgrade(pool, schema=schema)
                if embedded:
                    # The user's own server, upgraded by the release every process of theirs
                    # imports: no older one to wait for (a shared server waits for the
                    # operator's `tnsrag db upgrade --finish`).
                    migrate.finish(pool, schema=schema)
        else:
            ensure_at_head(pool, schema=schema)
    except BaseException as exc:
        pool.close()
        if replicas is not None:
            replicas.close()
        if isinstance(exc, psycopg.Error):
            # The pool raised "could not connect" itself for a connection it could not open
            # (a refused login included): this one was established, and broke under the
            # schema's checks (the server restarted, the backend was terminated).
            raise db_error(exc, f"opening corpus {corpus!r}") from exc
        raise
    return store
