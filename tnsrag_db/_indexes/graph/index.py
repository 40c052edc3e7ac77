"""Typed, weighted, directed edges between the entries of one corpus: ``GraphStore``.

:class:`Edge` and its rules, and the edge write every writer of edges shares, are in
:mod:`tnsrag_db._store.edges` (a consolidation's links are written through it too);
:class:`GraphStore` writes batches through it, deletes edges, lists a node's edges valid
at the read's instant, and hands out the statements of a walk (:mod:`.walk`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.pool import Connection
from tnsrag_db._db.statement import Statement, one
from tnsrag_db._errors import ValidationError
from tnsrag_db._indexes.graph import sql
from tnsrag_db._indexes.graph.walk import DEFAULT_EDGE_BUDGET_FACTOR, hops_statement, walk_statement
from tnsrag_db._store.edges import DEFAULT_RELATION, Edge, validate_edges, write_edges
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import ValidatedBatch, WriteExtension, WriteReport
from tnsrag_db._types import MemoryEntry
from tnsrag_db._validate import is_int

__all__ = ["DEFAULT_RELATION", "Edge", "GraphStore"]


class GraphStore:
    """The edges of one corpus, over a :class:`~tnsrag_db._store.store.Store` (sharing its connections).

    Constructing one does no I/O. Every method runs in its own transaction, except
    :meth:`write_edges`, which writes inside a caller's.
    """

    def __init__(self, store: Store) -> None:
        if not isinstance(store, Store):
            raise ValidationError(f"GraphStore needs a Store, got {type(store).__name__}")
        self._store = store

    @property
    def store(self) -> Store:
        """The entry store (and corpus) these edges belong to."""
        return self._store

    @property
    def corpus(self) -> str:
        """The corpus every query is confined to."""
        return self._store.corpus

    def __repr__(self) -> str:
        return f"GraphStore(corpus={self.corpus!r})"

    # -- writes -----------------------------------------------------------------------
    def add_edge(self, src: str, dst: str, relation: str = DEFAULT_RELATION, weight: float = 1.0,
                 source: str | None = None, *, valid_from: datetime | None = None,
                 valid_until: datetime | None = None) -> IngestCounts:
        """Insert or update one edge (keyed by ``src, relation, dst``; its weight, source and
        validity are replaced); returns its classification. ``valid_from`` (inclusive) and
        ``valid_until`` (exclusive), timezone-aware, bound the interval in which the edge is
        walked (None: unbounded).

        Raises :class:`ValidationError` for a bad argument (an empty interval, a bound
        without a time zone) before anything is written, and
        :class:`DanglingReferenceError` when ``src`` or ``dst`` is not an entry of the corpus.
        An end that is an alias (the id of an entry merged into another, see
        :meth:`Store.consolidate`) stands for the entry it was merged into.
        """
        return self.add_edges([Edge(src, dst, relation, weight, source, valid_from, valid_until)])

    def add_edges(self, edges: Iterable[Edge], *, progress: Callable[[int], None] | None = None) -> IngestCounts:
        """Upsert a batch of edges in one transaction (COPY into a staging table, then one INSERT).

        Every edge is validated first; one bad edge or one missing entry rejects the
        whole batch and nothing is written. When the batch repeats ``(src, relation,
        dst)``, the last occurrence wins. ``progress`` is called with the number of
        edges staged so far. Returns how many edges were inserted, updated (weight or
        source changed) or already identical.
        """
        batch = validate_edges(edges)
        if not batch:
            return IngestCounts()
        edge_write = _EdgeWrite(self, batch, progress)
        self._store.write((), extensions=[edge_write])
        return edge_write.counts

    def add_with_edges(self, entries: Iterable[MemoryEntry], edges: Iterable[Edge]) -> tuple[WriteReport, IngestCounts]:
        """Write entries and edges in one transaction, so edges may point at entries of the same call.

        Entries and edges are all validated before anything is written; any error
        (including :class:`DanglingReferenceError`) rolls back both. Returns the
        entries' :class:`WriteReport` and the edges' counts.
        """
        entry_batch = ValidatedBatch(entries)
        edge_write = _EdgeWrite(self, validate_edges(edges))
        # Entries are locked in id order, then the edges' other ends in id order: with
        # ends outside the batch, this can meet a concurrent delete that takes the same
        # rows in one pass. PostgreSQL then aborts one side, and the write runs that side
        # again (the edges with it: they join the entries' transaction).
        report = self._store.write(entry_batch, extensions=[edge_write])
        return report, edge_write.counts

    def write_edges(self, conn: Connection, batch: Sequence[Edge], *,
                    progress: Callable[[int], None] | None = None) -> IngestCounts:
        """Upsert already-validated edges inside the caller's transaction ``conn``
        (:func:`tnsrag_db._store.edges.write_edges`).

        Raises :class:`DanglingReferenceError` (the caller's transaction must then be
        rolled back) when an end is not an entry of the corpus.
        """
        return write_edges(conn, self.corpus, batch, progress=progress)

    def remove_edge(self, src: str, dst: str, relation: str = DEFAULT_RELATION) -> bool:
        """Delete the edge ``src -(relation)-> dst``; True when it existed.

        A write like every other (:meth:`~tnsrag_db._db.session.Session.write_transaction`):
        run again when PostgreSQL aborted it to break a deadlock, and with read replicas
        it advances the read-your-writes token."""
        def delete(conn: Connection) -> int:
            return int(conn.execute(sql.DELETE_EDGE_SQL,
                                    {"c": self.corpus, "s": src, "r": relation, "d": dst}).rowcount)

        return bool(self._store.session.write_transaction(delete))

    # -- reads ------------------------------------------------------------------------
    def neighbours(self, entry_id: str, *, relation: str | None = None, limit: int | None = None) -> list[Edge]:
        """Outgoing edges of ``entry_id`` valid at the read's instant (now, or the ``as_of``
        of the block, :func:`tnsrag_db.as_of`), heaviest first (ties by ``dst``, then
        ``relation``); of the entry it was merged into when ``entry_id`` is an alias (see
        :meth:`Store.consolidate`).

        ``relation`` keeps only that relation; ``limit`` (≥ 1) caps the count.
        Raises :class:`ValidationError` for a bad ``limit``.
        """
        if limit is not None and (not is_int(limit) or limit < 1):
            raise ValidationError(f"limit must be a positive int or None, got {limit!r}")
        rows = self._store.run(one(Statement(sql.NEIGHBOURS_SQL, {"c": self.corpus, "s": entry_id, "r": relation,
                                                                  "n": limit},
                                             sql.EDGE_COLUMNS)))
        if not rows:
            # An alias (the id of an entry merged into another): the edges of that entry.
            target = self._store.run(one(Statement(sql.ALIAS_TARGET_SQL, {"c": self.corpus, "s": entry_id},
                                                   ("entry_id",))))
            if target:
                return self.neighbours(target[0].entry_id, relation=relation, limit=limit)
        return [Edge(r.src, r.dst, r.relation, r.weight, r.source, r.valid_from, r.valid_until) for r in rows]

    def count(self) -> int:
        """Number of edges in the corpus (whatever their validity)."""
        return int(self._store.run(one(Statement(sql.COUNT_SQL, {"c": self.corpus}, ("n",))))[0][0])

    def has_edges(self) -> bool:
        """Whether the corpus has any edge, whatever its validity (one index probe)."""
        return bool(self._store.run(one(self.has_edges_statement()))[0][0])

    # -- statements (no I/O; run them with Store.run) ------------------------------------
    def has_edges_statement(self) -> Statement:
        """One row, one boolean column ``has_edges``: whether the corpus has any edge."""
        return Statement(sql.HAS_EDGES_SQL, {"c": self.corpus}, ("has_edges",))

    def walk_statement(self, seeds: Mapping[str, float], *, columns: str, column_names: Sequence[str],
                       fence: Collection[str] | None, max_depth: int, decay: float, budget: int, max_fan_out: int,
                       filters: Mapping[str, str] | None, min_score: float, k: int,
                       min_depth: int = 0, edge_budget_factor: int = DEFAULT_EDGE_BUDGET_FACTOR) -> Statement:
        """The bounded walk from ``seeds`` (entry id to a score > 0) over this corpus's edges:
        see :func:`tnsrag_db._indexes.graph.walk.walk_statement`."""
        return walk_statement(self.corpus, list(seeds), list(seeds.values()), columns=columns,
                              column_names=column_names, fence=fence, max_depth=max_depth, decay=decay,
                              budget=budget, max_fan_out=max_fan_out, filters=filters, min_score=min_score, k=k,
                              min_depth=min_depth, edge_budget_factor=edge_budget_factor)

    def hops_statement(self, pairs: Sequence[tuple[str, str]]) -> Statement:
        """The heaviest edge of each ``(src, dst)`` pair that has one: rows ``src, dst, relation, weight``."""
        return hops_statement(self.corpus, pairs)


class _EdgeWrite(WriteExtension):
    """Validated edges written after the entries of the same transaction (:meth:`GraphStore.write_edges`)."""

    def __init__(self, graph: GraphStore, edges: Sequence[Edge],
                 progress: Callable[[int], None] | None = None) -> None:
        self._graph = graph
        self._edges = edges
        self._progress = progress
        self.counts = IngestCounts()

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        self.counts = self._graph.write_edges(conn, self._edges, progress=self._progress)
