"""Typed, weighted, directed edges between the entries of one corpus: ``GraphStore``.

Nodes are entries; an edge ``src -> dst`` carries a ``relation`` (default
``"related"``), a finite ``weight`` (default 1.0; heavier edges are followed first
when traversal caps a node's fan-out) and an optional ``source`` naming where the
edge came from. An edge is keyed by ``(src, relation, dst)``: writing it again
updates its weight and source.

Rules, checked before anything is written (:class:`ValidationError`):

- ``src``, ``dst`` and ``relation`` are non-blank strings without NUL characters;
  ``source`` is None or such a string;
- ``weight`` is a finite number (not a bool);
- self-loops (``src == dst``) are rejected: traversal never gains anything from
  one (a node is never re-scored through a cycle) and they are almost always an
  import mistake.

Both ends must name existing entries of the corpus: an edge to a missing entry
raises :class:`DanglingReferenceError` naming the missing ids, and nothing of the
batch is written. Deleting an entry deletes its edges (``ON DELETE CASCADE``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.statement import Statement, one
from tnsrag_db._errors import DanglingReferenceError, ValidationError
from tnsrag_db._indexes.graph import sql
from tnsrag_db._indexes.graph.walk import DEFAULT_EDGE_BUDGET_FACTOR, hops_statement, walk_statement
from tnsrag_db._store.sql import planner_nodes_off
from tnsrag_db._store.staging import EDGE_STAGE_DDL
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import ValidatedBatch, WriteExtension, WriteReport
from tnsrag_db._types import MemoryEntry, is_unicode_text, name_form
from tnsrag_db._validate import is_int, is_number

__all__ = ["DEFAULT_RELATION", "Edge", "GraphStore"]

#: The relation of an edge when none is given.
DEFAULT_RELATION = "related"

_MAX_ID = 512
#: Most UTF-8 bytes of src, relation and dst together: the edge's primary key (with the
#: corpus, up to 800 bytes) must fit a btree entry (about 2,700 bytes).
MAX_EDGE_KEY_BYTES = 1800
_MAX_NAMED_MISSING = 20


def _check_name(value: object, what: str, index: int | None) -> str:
    where = f" (edge {index})" if index is not None else ""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string{where}, got {type(value).__name__}")
    if not value.strip():
        raise ValidationError(f"{what} must not be blank{where}")
    if "\x00" in value:
        raise ValidationError(f"{what} contains a NUL character{where}")
    if not is_unicode_text(value):
        raise ValidationError(f"{what} contains a lone surrogate (not Unicode text){where}")
    if len(value) > _MAX_ID:
        raise ValidationError(f"{what} is longer than {_MAX_ID} characters{where}")
    return value


@dataclass(frozen=True, slots=True)
class Edge:
    """A directed edge ``src -> dst`` of type ``relation`` with a finite ``weight`` and optional ``source``.

    Validated at construction: :class:`ValidationError` for a blank or non-string
    id/relation/source, a self-loop, or a non-finite or non-numeric weight.
    """

    src: str
    dst: str
    relation: str = DEFAULT_RELATION
    weight: float = 1.0
    source: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, index: int | None = None) -> None:
        """Check every field; ``index`` (a batch position) is named in the error."""
        object.__setattr__(self, "src", name_form(_check_name(self.src, "edge src", index)))
        object.__setattr__(self, "dst", name_form(_check_name(self.dst, "edge dst", index)))
        _check_name(self.relation, "edge relation", index)
        if self.source is not None:
            _check_name(self.source, "edge source", index)
        if self.src == self.dst:
            raise ValidationError(f"self-loop on {self.src!r} is not allowed"
                                  + (f" (edge {index})" if index is not None else ""))
        size = sum(len(part.encode("utf-8")) for part in (self.src, self.relation, self.dst))
        if size > MAX_EDGE_KEY_BYTES:
            raise ValidationError(f"edge {self.src[:40]!r} -> {self.dst[:40]!r}: src, relation and dst are {size} "
                                  f"UTF-8 bytes together, more than {MAX_EDGE_KEY_BYTES} (an index key)"
                                  + (f" (edge {index})" if index is not None else ""))
        w = self.weight
        if not is_number(w):
            raise ValidationError(f"edge {self.src!r} -> {self.dst!r}: weight must be a number, got {w!r}")
        if not math.isfinite(w):
            raise ValidationError(f"edge {self.src!r} -> {self.dst!r}: weight must be finite, got {w!r}")
        object.__setattr__(self, "weight", float(w))


def _validate_edges(edges: Iterable[Edge]) -> list[Edge]:
    batch = list(edges)
    for index, edge in enumerate(batch):
        if not isinstance(edge, Edge):
            raise ValidationError(f"batch item {index} is a {type(edge).__name__}, not an Edge")
        edge.validate(index)
    return batch


class GraphStore:
    """The edges of one corpus, over a :class:`~tnsrag_db._store.store.Store` (sharing its engine).

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
                 source: str | None = None) -> IngestCounts:
        """Insert or update one edge (keyed by ``src, relation, dst``); returns its classification.

        Raises :class:`ValidationError` for a bad argument and
        :class:`DanglingReferenceError` when ``src`` or ``dst`` is not an entry of the corpus.
        An end that is an alias (the id of an entry merged into another, see
        :meth:`Store.consolidate`) stands for the entry it was merged into.
        """
        return self.add_edges([Edge(src, dst, relation, weight, source)])

    def add_edges(self, edges: Iterable[Edge], *, progress: Callable[[int], None] | None = None) -> IngestCounts:
        """Upsert a batch of edges in one transaction (COPY into a staging table, then one INSERT).

        Every edge is validated first; one bad edge or one missing entry rejects the
        whole batch and nothing is written. When the batch repeats ``(src, relation,
        dst)``, the last occurrence wins. ``progress`` is called with the number of
        edges staged so far. Returns how many edges were inserted, updated (weight or
        source changed) or already identical.
        """
        batch = _validate_edges(edges)
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
        edge_write = _EdgeWrite(self, _validate_edges(edges))
        # Entries are locked in id order, then the edges' other ends in id order: with
        # ends outside the batch, this can meet a concurrent delete that takes the same
        # rows in one pass. PostgreSQL then aborts one side, and the write runs that side
        # again (the edges with it: they join the entries' transaction).
        report = self._store.write(entry_batch, extensions=[edge_write])
        return report, edge_write.counts

    def write_edges(self, conn: Connection, batch: Sequence[Edge], *,
                    progress: Callable[[int], None] | None = None) -> IngestCounts:
        """Upsert already-validated edges inside the caller's transaction ``conn``.

        Raises :class:`DanglingReferenceError` (the caller's transaction must then be
        rolled back) when an end is not an entry of the corpus.
        """
        if not batch:
            return IngestCounts()
        conn.execute(sa.text(EDGE_STAGE_DDL))  # declared in tnsrag_db._store.staging
        conn.execute(sa.text(sql.CLEAR_STAGE_SQL))
        raw = conn.connection.driver_connection
        assert raw is not None
        with raw.cursor() as cur:
            with cur.copy(sql.COPY_STAGE_SQL) as copy:
                for i, e in enumerate(batch):
                    copy.write_row((i, e.src, e.dst, e.relation, e.weight, e.source))
                    if progress is not None and (i + 1) % 10_000 == 0:
                        progress(i + 1)
        if progress is not None:
            progress(len(batch))
        c = {"c": self.corpus}
        with planner_nodes_off(conn, *sql.SORTS_OFF):
            missing = list(conn.execute(sa.text(sql.LOCK_ENDS_SQL), c).scalars())
        if missing:
            # Ends that are aliases (ids of entries merged into another) stand for the entry
            # they were merged into; read only when an end is not an entry.
            params = {**c, "missing": missing}
            resolved = sum(int(conn.execute(sa.text(statement), params).rowcount or 0)
                           for statement in (sql.RESOLVE_SRC_ALIASES_SQL, sql.RESOLVE_DST_ALIASES_SQL))
            if resolved:
                loop = conn.execute(sa.text(sql.STAGED_SELF_LOOP_SQL)).first()
                if loop is not None:
                    raise ValidationError(f"edge {loop.src!r} -> {loop.dst!r}: both ends are the same entry once "
                                          "aliases are resolved (a self-loop); nothing was written")
                with planner_nodes_off(conn, *sql.SORTS_OFF):
                    missing = list(conn.execute(sa.text(sql.LOCK_ENDS_SQL), c).scalars())
        if missing:
            raise _dangling(missing)
        flags = list(conn.execute(sa.text(sql.UPSERT_SQL), c).scalars())
        inserted = sum(1 for f in flags if f)
        distinct = conn.execute(sa.text(sql.STAGED_KEYS_SQL)).scalar_one()
        return IngestCounts(inserted=inserted, updated=len(flags) - inserted, unchanged=int(distinct) - len(flags))

    def remove_edge(self, src: str, dst: str, relation: str = DEFAULT_RELATION) -> bool:
        """Delete the edge ``src -(relation)-> dst``; True when it existed.

        A write like every other (:meth:`~tnsrag_db._db.session.Session.write_transaction`):
        run again when PostgreSQL aborted it to break a deadlock, and with read replicas
        it advances the read-your-writes token."""
        def delete(conn: Connection) -> int:
            return int(conn.execute(sa.text(sql.DELETE_EDGE_SQL),
                                    {"c": self.corpus, "s": src, "r": relation, "d": dst}).rowcount)

        return bool(self._store.session.write_transaction(delete))

    # -- reads ------------------------------------------------------------------------
    def neighbours(self, entry_id: str, *, relation: str | None = None, limit: int | None = None) -> list[Edge]:
        """Outgoing edges of ``entry_id``, heaviest first (ties by ``dst``, then ``relation``); of
        the entry it was merged into when ``entry_id`` is an alias (see :meth:`Store.consolidate`).

        ``relation`` keeps only that relation; ``limit`` (≥ 1) caps the count.
        Raises :class:`ValidationError` for a bad ``limit``.
        """
        if limit is not None and (not is_int(limit) or limit < 1):
            raise ValidationError(f"limit must be a positive int or None, got {limit!r}")
        rows = self._store.run(one(Statement(sql.NEIGHBOURS_SQL, {"c": self.corpus, "s": entry_id, "r": relation,
                                                                  "n": limit},
                                             ("src", "dst", "relation", "weight", "source"))))
        if not rows:
            # An alias (the id of an entry merged into another): the edges of that entry.
            target = self._store.run(one(Statement(sql.ALIAS_TARGET_SQL, {"c": self.corpus, "s": entry_id},
                                                   ("entry_id",))))
            if target:
                return self.neighbours(target[0].entry_id, relation=relation, limit=limit)
        return [Edge(r.src, r.dst, r.relation, r.weight, r.source) for r in rows]

    def count(self) -> int:
        """Number of edges in the corpus."""
        return int(self._store.run(one(Statement(sql.COUNT_SQL, {"c": self.corpus}, ("n",))))[0][0])

    def has_edges(self) -> bool:
        """Whether the corpus has any edge (one index probe)."""
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


def _dangling(missing: Sequence[str]) -> DanglingReferenceError:
    shown = ", ".join(repr(m) for m in missing[:_MAX_NAMED_MISSING])
    more = f" and {len(missing) - _MAX_NAMED_MISSING} more" if len(missing) > _MAX_NAMED_MISSING else ""
    noun = "entry" if len(missing) == 1 else "entries"
    return DanglingReferenceError(f"edges reference {len(missing)} missing {noun}: {shown}{more}")
