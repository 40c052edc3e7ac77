"""Graph edges as the store writes them: :class:`Edge`, its rules, and the one edge write.

Nodes are entries; an edge ``src -> dst`` carries a ``relation`` (default ``"related"``),
a finite ``weight`` (default 1.0; heavier edges are followed first when traversal caps a
node's fan-out), an optional ``source`` naming where the edge came from, and an optional
validity: ``valid_from`` (inclusive) and ``valid_until`` (exclusive), timezone-aware
instants bounding the interval in which the edge holds (None: unbounded; revision 0017).
A walk follows an edge only at the instants it is valid
(:func:`tnsrag_db._store.validity.edge_valid`). An edge is keyed by ``(src, relation,
dst)``: writing it again replaces its weight, source and validity.

Rules, checked before anything is written (:class:`ValidationError`):

- ``src``, ``dst`` and ``relation`` are non-blank strings without NUL characters;
  ``source`` is None or such a string;
- ``weight`` is a finite number (not a bool);
- ``valid_from`` and ``valid_until`` are None or timezone-aware datetimes, the first
  before the second;
- self-loops (``src == dst``) are rejected: traversal never gains anything from one (a
  node is never re-scored through a cycle) and they are almost always an import mistake.

:func:`write_edges` is the one edge write, inside a caller's write transaction: the
graph's (:class:`~tnsrag_db._indexes.graph.GraphStore`) and a consolidation's links
(:mod:`tnsrag_db._store.consolidate`) both go through it. Both ends must name existing
entries of the corpus (an alias, the id of an entry merged into another, stands for that
entry): an edge to a missing entry raises :class:`DanglingReferenceError` naming the
missing ids, and the caller's transaction is rolled back. Deleting an entry deletes its
edges (``ON DELETE CASCADE``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.pool import Connection
from tnsrag_db._errors import DanglingReferenceError, ValidationError
from tnsrag_db._store.sql import planner_nodes_off
from tnsrag_db._store.staging import EDGE_STAGE_DDL
from tnsrag_db._types import is_unicode_text, name_form
from tnsrag_db._validate import is_number

__all__ = ["DEFAULT_RELATION", "MAX_EDGE_KEY_BYTES", "Edge", "validate_edges", "write_edges"]

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
    """A directed edge ``src -> dst`` of type ``relation`` with a finite ``weight``, optional
    ``source``, and an optional validity ``[valid_from, valid_until)`` (timezone-aware).

    Validated at construction: :class:`ValidationError` for a blank or non-string
    id/relation/source, a self-loop, a non-finite or non-numeric weight, or a bound that is
    no timezone-aware datetime or an empty interval (``valid_until`` not after ``valid_from``).
    """

    src: str
    dst: str
    relation: str = DEFAULT_RELATION
    weight: float = 1.0
    source: str | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, index: int | None = None) -> None:
        """Check every field; ``index`` (a batch position) is named in the error."""
        where = f" (edge {index})" if index is not None else ""
        object.__setattr__(self, "src", name_form(_check_name(self.src, "edge src", index)))
        object.__setattr__(self, "dst", name_form(_check_name(self.dst, "edge dst", index)))
        _check_name(self.relation, "edge relation", index)
        if self.source is not None:
            _check_name(self.source, "edge source", index)
        if self.src == self.dst:
            raise ValidationError(f"self-loop on {self.src!r} is not allowed{where}")
        size = sum(len(part.encode("utf-8")) for part in (self.src, self.relation, self.dst))
        if size > MAX_EDGE_KEY_BYTES:
            raise ValidationError(f"edge {self.src[:40]!r} -> {self.dst[:40]!r}: src, relation and dst are {size} "
                                  f"UTF-8 bytes together, more than {MAX_EDGE_KEY_BYTES} (an index key){where}")
        w = self.weight
        if not is_number(w):
            raise ValidationError(f"edge {self.src!r} -> {self.dst!r}: weight must be a number, got {w!r}")
        if not math.isfinite(w):
            raise ValidationError(f"edge {self.src!r} -> {self.dst!r}: weight must be finite, got {w!r}")
        object.__setattr__(self, "weight", float(w))
        for name in ("valid_from", "valid_until"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, datetime):
                raise ValidationError(f"edge {self.src!r} -> {self.dst!r}: {name} must be a datetime, "
                                      f"got {type(value).__name__}{where}")
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise ValidationError(f"edge {self.src!r} -> {self.dst!r}: {name} {value.isoformat()} has no time "
                                      f"zone{where}")
        if self.valid_from is not None and self.valid_until is not None and self.valid_from >= self.valid_until:
            raise ValidationError(f"edge {self.src!r} -> {self.dst!r}: valid_from {self.valid_from.isoformat()} is "
                                  f"not before valid_until {self.valid_until.isoformat()}{where}")


def validate_edges(edges: Iterable[Edge]) -> list[Edge]:
    """``edges`` as a list, each checked (:class:`ValidationError` naming the position of
    the first bad one, or of an item that is no :class:`Edge`)."""
    batch = list(edges)
    for index, edge in enumerate(batch):
        if not isinstance(edge, Edge):
            raise ValidationError(f"batch item {index} is a {type(edge).__name__}, not an Edge")
        edge.validate(index)
    return batch


# -- the statements of write_edges (every value bound; ``:c`` is the corpus) ---------------

#: Empties the session's stage table before a batch is copied in.
CLEAR_STAGE_SQL = "DELETE FROM tnsrag_stage_edges"
#: The COPY that fills the stage table.
COPY_STAGE_SQL = ("COPY tnsrag_stage_edges (ord, src, dst, relation, weight, source, valid_from, valid_until) "
                  "FROM STDIN")
#: How many distinct ``(src, relation, dst)`` keys the stage holds.
STAGED_KEYS_SQL = "SELECT count(*) FROM (SELECT DISTINCT src, relation, dst FROM tnsrag_stage_edges) d"

# Last occurrence of a duplicated (src, relation, dst) in one batch wins; ON CONFLICT
# cannot touch the same row twice in one statement. ``xmax = 0`` tells a fresh row
# from an updated one. A write states the whole edge: weight, source and validity.
UPSERT_SQL = (
    "INSERT INTO edges AS g (corpus, src, dst, relation, weight, source, valid_from, valid_until) "
    "SELECT :c, s.src, s.dst, s.relation, s.weight, s.source, s.valid_from, s.valid_until FROM ("
    "  SELECT DISTINCT ON (src, relation, dst) src, dst, relation, weight, source, valid_from, valid_until "
    "  FROM tnsrag_stage_edges ORDER BY src, relation, dst, ord DESC) s "
    "ORDER BY s.src, s.relation, s.dst "
    "ON CONFLICT (corpus, src, relation, dst) DO UPDATE SET weight = excluded.weight, source = excluded.source, "
    "valid_from = excluded.valid_from, valid_until = excluded.valid_until "
    "WHERE (g.weight, g.source, g.valid_from, g.valid_until) "
    "IS DISTINCT FROM (excluded.weight, excluded.source, excluded.valid_from, excluded.valid_until) "
    "RETURNING (g.xmax = 0) AS inserted"
)

# Locks the entries at both ends (FOR KEY SHARE, in id order, as writers and deleters
# take their entry locks, so none can deadlock) and lists the ends that do not exist.
# A locked end cannot be deleted before this transaction ends, so the insert's foreign
# keys then hold.
LOCK_ENDS_SQL = (
    "WITH ends AS (SELECT src AS id FROM tnsrag_stage_edges UNION SELECT dst FROM tnsrag_stage_edges), "
    # One primary-key lookup per end, in id order (a join could be planned as a scan of
    # the whole corpus when its statistics are stale). The lookup asks for its row in id
    # order, by an id range of one value (not an equality, which would make the order
    # trivially met): run with sorts off (see SORTS_OFF), only the primary key (corpus, id)
    # gives that order without a sort, so it is the plan whatever the statistics and the
    # indexes' sizes say. Planned by cost, a corpus newer than the last ANALYZE (estimated
    # at one row) after a deleted one (the primary key then larger than the (corpus, ts)
    # index) was read through (corpus, ts), filtering the whole corpus once per end.
    "locked AS (SELECT k.id FROM (SELECT id FROM ends ORDER BY id) o CROSS JOIN LATERAL "
    "  (SELECT e.id FROM entries e WHERE e.corpus = :c AND e.id >= o.id AND e.id <= o.id "
    "   ORDER BY e.id FOR KEY SHARE OF e) k) "
    # An anti-join (NOT EXISTS), not NOT IN: NOT IN over a subquery too large for one hash
    # table is evaluated row by row, quadratic in the number of ends.
    "SELECT x.id FROM ends x WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.id = x.id) ORDER BY x.id"
)
#: The settings :data:`LOCK_ENDS_SQL` runs with (``set_config(name, :v, true)``, in the
#: write's transaction, then back on): no plan that needs a sort, so no other index.
SORTS_OFF = ("enable_sort", "enable_incremental_sort")

# Staged ends that are no entry but an alias (revision 0016: the id of an entry merged into
# another) become that entry (``:missing``: the ends LOCK_ENDS_SQL did not find).
RESOLVE_SRC_ALIASES_SQL = (
    "UPDATE tnsrag_stage_edges s SET src = a.entry_id FROM entry_aliases a "
    "WHERE a.corpus = :c AND a.alias = s.src AND s.src = ANY(CAST(:missing AS text[]))"
)
RESOLVE_DST_ALIASES_SQL = (
    "UPDATE tnsrag_stage_edges s SET dst = a.entry_id FROM entry_aliases a "
    "WHERE a.corpus = :c AND a.alias = s.dst AND s.dst = ANY(CAST(:missing AS text[]))"
)
#: A staged edge whose ends became one entry.
STAGED_SELF_LOOP_SQL = "SELECT src, dst FROM tnsrag_stage_edges WHERE src = dst ORDER BY ord LIMIT 1"


def write_edges(conn: Connection, corpus: str, batch: Sequence[Edge], *,
                progress: Callable[[int], None] | None = None) -> IngestCounts:
    """Upsert the already-validated edges ``batch`` into ``corpus`` inside the caller's
    transaction ``conn`` (COPY into a staging table, the ends locked, then one INSERT);
    ``progress`` is called with the number of edges staged so far. When the batch repeats
    ``(src, relation, dst)``, the last occurrence wins. Returns how many edges were
    inserted, updated (weight, source or validity changed) or already identical.

    Raises :class:`DanglingReferenceError` (the caller's transaction must then be rolled
    back) when an end is not an entry of the corpus, and :class:`ValidationError` when
    both ends are one entry once aliases are resolved.
    """
    if not batch:
        return IngestCounts()
    conn.execute(EDGE_STAGE_DDL)  # declared in tnsrag_db._store.staging
    conn.execute(CLEAR_STAGE_SQL)
    raw = conn.driver
    assert raw is not None
    with raw.cursor() as cur:
        with cur.copy(COPY_STAGE_SQL) as copy:
            for i, e in enumerate(batch):
                copy.write_row((i, e.src, e.dst, e.relation, e.weight, e.source, e.valid_from, e.valid_until))
                if progress is not None and (i + 1) % 10_000 == 0:
                    progress(i + 1)
    if progress is not None:
        progress(len(batch))
    c = {"c": corpus}
    with planner_nodes_off(conn, *SORTS_OFF):
        missing = list(conn.execute(LOCK_ENDS_SQL, c).scalars())
    if missing:
        # Ends that are aliases (ids of entries merged into another) stand for the entry
        # they were merged into; read only when an end is not an entry.
        params = {**c, "missing": missing}
        resolved = sum(int(conn.execute(statement, params).rowcount or 0)
                       for statement in (RESOLVE_SRC_ALIASES_SQL, RESOLVE_DST_ALIASES_SQL))
        if resolved:
            loop = conn.execute(STAGED_SELF_LOOP_SQL).first()
            if loop is not None:
                raise ValidationError(f"edge {loop.src!r} -> {loop.dst!r}: both ends are the same entry once "
                                      "aliases are resolved (a self-loop); nothing was written")
            with planner_nodes_off(conn, *SORTS_OFF):
                missing = list(conn.execute(LOCK_ENDS_SQL, c).scalars())
    if missing:
        raise _dangling(missing)
    flags = list(conn.execute(UPSERT_SQL, c).scalars())
    inserted = sum(1 for f in flags if f)
    distinct = conn.execute(STAGED_KEYS_SQL).scalar_one()
    return IngestCounts(inserted=inserted, updated=len(flags) - inserted, unchanged=int(distinct) - len(flags))


def _dangling(missing: Sequence[str]) -> DanglingReferenceError:
    shown = ", ".join(repr(m) for m in missing[:_MAX_NAMED_MISSING])
    more = f" and {len(missing) - _MAX_NAMED_MISSING} more" if len(missing) > _MAX_NAMED_MISSING else ""
    noun = "entry" if len(missing) == 1 else "entries"
    return DanglingReferenceError(f"edges reference {len(missing)} missing {noun}: {shown}{more}")
