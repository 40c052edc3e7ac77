"""Consolidation: duplicates within a tier found in SQL, then merged into one entry or linked.

:meth:`tnsrag_db.Store.consolidate` (``tnsrag db consolidate``) runs in three steps:

1. **Pairs.** Entries of one tier with the same text are found by one aggregate over the
   tier, grouped by the SHA-256 of the text. With a ``threshold``, near duplicates too: for
   each entry of the tier with a vector in the chosen embedding space, its ``neighbors``
   nearest vectors of the space (the space's HNSW index when it has one, else an exact scan
   of the space), kept when they belong to the same tier and their cosine similarity is at
   least the threshold. The entries are taken in id order, :data:`PAIR_BATCH` per statement,
   so a long run reports progress and holds no statement open for long. Expired entries
   are never paired.
2. **Groups.** The pairs' connected components (a union-find over the pairs, in memory:
   its size is the number of pairs, at most ``neighbors`` per entry). In each group the
   entry written first (then the smallest id) is the survivor.
3. **Writes.** ``mode="link"``: an edge of ``relation`` both ways between the two entries
   of every pair (weight: their similarity, 1.0 for the same text; no validity), between
   ends still live, written by the one edge write (:func:`tnsrag_db._store.edges.write_edges`).
   ``mode="merge"``: every group becomes its survivor, written through the store's write
   path (the application's ``merge`` function may rewrite it from the group's entries); the
   others' edges (with their validity) and children move to the survivor, their ids become
   its aliases
   (``entry_aliases``, revision 0016: ``get``, ``get_many`` and the graph resolve them), and
   they are deleted through the store's delete path (postings, vectors and edges with
   them). ``merge`` is called for every group before anything is written, so an exception it
   raises leaves the corpus as it was; the writes then run in transactions of
   :data:`MERGE_BATCH` groups, each locking its groups' entries (in id order, as every
   writer does) and skipping a group an entry of which another writer changed or deleted
   since it was read.

:func:`promote` (:meth:`tnsrag_db.Store.promote`) moves the entries of one tier that meet a
rule over their metadata and age to another, rewriting each through the same locked write.

Only code constants and integers (space ids and dimensions read from the catalog, the
neighbour count) are formatted into SQL; every value is bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.statement import AS_OF_PARAM
from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._store.edges import Edge, write_edges
from tnsrag_db._store.expiry import live
from tnsrag_db._store.reads import ENTRY_FIELDS, row_to_entry
from tnsrag_db._store.write import ValidatedBatch, WriteExtension, WriteReport, delete_matching, write_entries
from tnsrag_db._types import MemoryEntry, MemoryTier
from tnsrag_db._validate import check_int

if TYPE_CHECKING:
    from tnsrag_db._db.pool import Connection
    from tnsrag_db._db.session import Session
    from tnsrag_db._store.corpus import Writer

__all__ = ["DEFAULT_NEIGHBORS", "DEFAULT_RELATION", "MERGE_BATCH", "MODES", "PAIR_BATCH", "ConsolidationGroup",
           "ConsolidatedStore", "ConsolidationProgress", "ConsolidationReport", "EmbeddingWriter", "MergeFunction",
           "PromotionReport", "check_threshold",
           "consolidate", "promote"]

#: The two things consolidation does with a group of duplicates.
MODES = ("merge", "link")
#: The relation of the edges ``mode="link"`` writes (default).
DEFAULT_RELATION = "duplicate_of"
#: How many nearest vectors of each entry are looked at for near duplicates (default).
DEFAULT_NEIGHBORS = 10
#: Entries whose neighbours one statement reads.
PAIR_BATCH = 1_000
#: Groups merged per transaction.
MERGE_BATCH = 200

#: ``merge(entries)``: the entry a group of duplicates becomes, from the group's entries
#: (the survivor first); None leaves the group as it is.
MergeFunction = Callable[[Sequence[MemoryEntry]], "MemoryEntry | None"]
#: ``progress(phase, done, total)``: phase ``"pairs"`` (entries of the tier looked at) or
#: ``"merge"``/``"link"`` (groups written).
ConsolidationProgress = Callable[[str, int, int], None]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class EmbeddingWriter(Protocol):
    """What a consolidation needs of a vector view (a ``VectorMemoryStore``): the name of its
    embedding space, and a write of entries that embeds them with ``extensions`` joining
    its transaction."""

    @property
    def embedding(self) -> _Named: ...

    def add_all(self, entries: Iterable[MemoryEntry], *,
                extensions: Sequence[WriteExtension] = ()) -> IngestCounts: ...


class ConsolidatedStore(Protocol):
    """What a consolidation needs of a :class:`tnsrag_db.Store`."""

    @property
    def corpus(self) -> str: ...

    @property
    def session(self) -> Session: ...

    @property
    def writer(self) -> Writer: ...

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]: ...

    def write(self, entries: Iterable[MemoryEntry], *, extensions: Sequence[WriteExtension] = (),
              progress: Callable[[int], None] | None = None) -> WriteReport: ...


@dataclass(frozen=True, slots=True)
class ConsolidationGroup:
    """Duplicates found together: ``survivor`` (the entry written first, then the smallest
    id; the one a merge keeps), the ``others``, and the lowest similarity of the pairs that
    joined them (1.0: the same text)."""

    survivor: str
    others: tuple[str, ...]
    similarity: float

    def to_dict(self) -> dict[str, Any]:
        """The group as JSON-ready data."""
        return {"survivor": self.survivor, "others": list(self.others), "similarity": round(self.similarity, 6)}


@dataclass(frozen=True, slots=True)
class ConsolidationReport:
    """What :meth:`tnsrag_db.Store.consolidate` found and did.

    ``examined``: entries of the tier looked at; ``pairs``: duplicate pairs found (the same
    text or similar enough); ``groups``: their connected components. ``merged``: entries
    deleted into a survivor (now its aliases); ``linked``: edges written; ``skipped``:
    groups left alone (the merge function returned None, or another writer changed or
    deleted an entry of the group meanwhile). Nothing is written when ``dry_run``.
    """

    tier: str
    mode: str
    threshold: float | None
    dry_run: bool
    examined: int = 0
    pairs: int = 0
    groups: tuple[ConsolidationGroup, ...] = ()
    merged: int = 0
    linked: int = 0
    skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {"tier": self.tier, "mode": self.mode, "threshold": self.threshold, "dry_run": self.dry_run,
                "examined": self.examined, "pairs": self.pairs, "merged": self.merged, "linked": self.linked,
                "skipped": self.skipped, "groups": [g.to_dict() for g in self.groups]}


# -- checks -------------------------------------------------------------------------------
def check_threshold(threshold: object) -> float | None:
    """``threshold`` as a cosine similarity in (0, 1] (None stays None), else :class:`ValidationError`."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold) \
            or not 0 < threshold <= 1:
        raise ValidationError(f"threshold must be a cosine similarity above 0 and at most 1, got {threshold!r}")
    return float(threshold)


def _check_options(tier: object, threshold: object, mode: object, merge: object, neighbors: object,
                   relation: object) -> tuple[str, float | None]:
    try:
        name = MemoryTier.parse(tier).name  # type: ignore[arg-type]
    except (ValueError, TypeError) as exc:
        raise ValidationError(f"tier: {exc}") from None
    threshold = check_threshold(threshold)
    if mode not in MODES:
        raise ValidationError(f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    if merge is not None and not callable(merge):
        raise ValidationError(f"merge must be a callable or None, got {type(merge).__name__}")
    if merge is not None and mode != "merge":
        raise ValidationError("merge= is for mode='merge' only")
    check_int(neighbors, "neighbors", minimum=1, maximum=1000)
    if not isinstance(relation, str) or not relation.strip() or "\x00" in relation:
        raise ValidationError(f"relation must be a non-blank string, got {relation!r}")
    return name, threshold


# -- step 1: pairs ------------------------------------------------------------------------
_LIVE_E = live("e")
#: The parameters of a statement with the conditions above, which answer at an instant:
#: consolidation always looks at the entries as they are now.


def _now(params: dict[str, Any]) -> dict[str, Any]:
    return {**params, AS_OF_PARAM: None}



_LIVE_F = live("f")

#: Groups of entries of one tier with the same text (each group's ids), one pass over the tier.
_IDENTICAL_SQL = f"""\
SELECT array_agg(e.id ORDER BY e.id) AS ids
FROM entries e
WHERE e.corpus = :c AND e.tier = :t AND {_LIVE_E}
GROUP BY sha256(convert_to(e.content, 'UTF8'))
HAVING count(*) > 1"""

#: The tier's live entries after ``:after`` in id order (a page; those without a vector pair with none).
_PAGE_SQL = f"""\
SELECT e.id FROM entries e
WHERE e.corpus = :c AND e.tier = :t AND e.id > :after AND {_LIVE_E}
ORDER BY e.id LIMIT :n"""

#: The tier's live entries (``:ids``) and their nearest vectors' entries of the same tier at
#: or above the threshold. ``{order}`` is the index's typed expression (or the bare column
#: for an exact scan), ``{k}`` the neighbour count plus the entry itself, ``{sid}`` the space.
_NEIGHBOURS_SQL = f"""\
SELECT a.entry_id AS a, n.entry_id AS b, n.score
FROM embeddings a
CROSS JOIN LATERAL (
    SELECT y.entry_id,
           CASE WHEN d = 'NaN'::float8 THEN 0::float8 ELSE greatest(-1::float8, least(1::float8, 1 - d)) END
             AS score
    FROM (
        SELECT x.entry_id, ({{order_x}} <=> {{order_a}}) AS d FROM embeddings x
        WHERE x.corpus = :c AND x.space_id = {{sid}}
        ORDER BY {{order_x}} <=> {{order_a}}
        LIMIT {{k}}
    ) y
) n
JOIN entries f ON f.corpus = :c AND f.id = n.entry_id
WHERE a.corpus = :c AND a.space_id = {{sid}} AND a.entry_id = ANY(CAST(:ids AS text[]))
  AND n.entry_id <> a.entry_id AND n.score >= :threshold AND f.tier = :t AND {_LIVE_F}"""

_SPACES_SQL = ("SELECT s.space_id, s.provider, s.dimension, s.index_name FROM embedding_spaces s "
               "WHERE s.corpus = :c ORDER BY s.created_at, s.space_id")


@dataclass(frozen=True, slots=True)
class _Space:
    space_id: int
    provider: str
    dimension: int
    index_name: str | None


def _choose_space(store: ConsolidatedStore, space: str | None, vectors: EmbeddingWriter | None) -> _Space | None:
    rows = [_Space(int(r.space_id), str(r.provider), int(r.dimension), r.index_name)
            for r in store.read(_SPACES_SQL, {"c": store.corpus})]
    wanted = vectors.embedding.name if vectors is not None else space
    if vectors is not None and space is not None and space != wanted:
        raise ConfigurationError(f"space {space!r} is not the space of vectors= ({wanted!r}); pass one of them")
    if wanted is not None:
        named = [r for r in rows if r.provider == wanted]
        if not named:
            if vectors is not None:
                return None  # no vector written through it yet: no near duplicate to find
            raise ConfigurationError(f"corpus {store.corpus!r} has no embedding space {wanted!r}; it has "
                                     + (", ".join(sorted({repr(r.provider) for r in rows})) or "none"))
        return named[-1]
    if not rows:
        return None
    if len({r.provider for r in rows}) > 1:
        raise ConfigurationError(f"corpus {store.corpus!r} has several embedding spaces "
                                 f"({', '.join(sorted({repr(r.provider) for r in rows}))}); name one with space=")
    return rows[-1]


def _identical(conn: Connection, corpus: str, tier: str) -> list[tuple[str, str, float]]:
    pairs: list[tuple[str, str, float]] = []
    for ids in conn.execute(_IDENTICAL_SQL, _now({"c": corpus, "t": tier})).scalars():
        first = ids[0]
        pairs.extend((first, other, 1.0) for other in ids[1:])
    return pairs


def _near(conn: Connection, corpus: str, tier: str, space: _Space, threshold: float, neighbors: int,
          progress: ConsolidationProgress | None) -> tuple[list[tuple[str, str, float]], int]:
    total = int(conn.execute((f"SELECT count(*) FROM entries e WHERE e.corpus = :c AND e.tier = :t "
                                     f"AND {_LIVE_E}"), _now({"c": corpus, "t": tier})).scalar_one())
    if space.index_name is not None:
        # The index's own expression, so that the planner reads the nearest vectors from it.
        order_x, order_a = f"CAST(x.embedding AS vector({space.dimension}))", \
            f"CAST(a.embedding AS vector({space.dimension}))"
        # The candidate list covers the neighbours asked for (pgvector's default is 40).
        conn.execute(("SELECT set_config('hnsw.ef_search', :ef, true), "
                             "set_config('hnsw.iterative_scan', 'off', true)"),
                     {"ef": str(max(40, neighbors + 1))})
    else:
        order_x, order_a = "x.embedding", "a.embedding"
    statement = (_NEIGHBOURS_SQL.format(order_x=order_x, order_a=order_a, sid=space.space_id,
                                               k=neighbors + 1))
    pairs: list[tuple[str, str, float]] = []
    after, done = "", 0
    while True:
        ids = list(conn.execute(_PAGE_SQL, _now({"c": corpus, "t": tier, "after": after,
                                                          "n": PAIR_BATCH})).scalars())
        if not ids:
            break
        rows = conn.execute(statement, _now({"c": corpus, "t": tier, "ids": ids, "threshold": threshold})).all()
        pairs.extend((str(r.a), str(r.b), float(r.score)) for r in rows)
        after, done = ids[-1], done + len(ids)
        if progress is not None:
            progress("pairs", done, total)
    return pairs, total


# -- step 2: groups -----------------------------------------------------------------------
def _components(pairs: Iterable[tuple[str, str, float]]) -> list[tuple[list[str], float]]:
    """The connected components of ``pairs`` (ids sorted), each with its lowest similarity."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    lowest: dict[tuple[str, str], float] = {}
    for a, b, score in pairs:
        key = (a, b) if a < b else (b, a)
        lowest[key] = max(lowest.get(key, -2.0), score)
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[str, list[str]] = {}
    for x in parent:
        members.setdefault(find(x), []).append(x)
    low: dict[str, float] = {}
    for (a, _b), score in lowest.items():
        root = find(a)
        low[root] = min(low.get(root, 2.0), score)
    return [(sorted(ids), low[root]) for root, ids in sorted(members.items())]


_MEMBERS_SQL = (f"SELECT {', '.join(f'e.{f}' for f in ENTRY_FIELDS)}, e.content_hash, e.created_at "
                f"FROM entries e WHERE e.corpus = :c AND e.id = ANY(CAST(:ids AS text[])) AND {_LIVE_E}")


@dataclass
class _Group:
    """A group as read: its entries in survivor-first order and their change hashes."""

    entries: list[MemoryEntry]
    hashes: dict[str, bytes]
    similarity: float
    result: MemoryEntry | None = None
    others: tuple[str, ...] = field(default=())

    @property
    def survivor(self) -> str:
        return self.result.id if self.result is not None else self.entries[0].id


def _read_groups(store: ConsolidatedStore, components: list[tuple[list[str], float]]) -> list[_Group]:
    groups: list[_Group] = []
    for start in range(0, len(components), MERGE_BATCH):
        chunk = components[start:start + MERGE_BATCH]
        ids = [i for members, _ in chunk for i in members]
        rows = {r.id: r for r in store.read(_MEMBERS_SQL, {"c": store.corpus, "ids": ids})}
        for members, similarity in chunk:
            found = sorted((rows[i] for i in members if i in rows), key=lambda r: (r.created_at, r.id))
            if len(found) < 2:
                continue  # deleted or expired since the pairs were read
            groups.append(_Group([row_to_entry(r) for r in found], {r.id: bytes(r.content_hash) for r in found},
                                 similarity))
    return groups


# -- step 3: writes -----------------------------------------------------------------------
class _Stale(Exception):
    """Groups (their indexes in the batch) an entry of which changed since they were read."""

    def __init__(self, stale: set[int]) -> None:
        super().__init__(f"{len(stale)} group(s) changed meanwhile")
        self.stale = stale


_LOCK_MEMBERS_SQL = ("SELECT e.id, e.content_hash FROM entries e WHERE e.corpus = :c "
                     f"AND e.id = ANY(CAST(:ids AS text[])) AND {_LIVE_E} ORDER BY e.id FOR UPDATE OF e")

# The edges of the merged-away entries, moved to their survivors (``:o``/``:s``: the merged
# ids and their survivors, in pairs): one edge per (src, relation, dst) after the move, the
# heaviest, valid over the smallest interval that covers the validity of every edge it
# stands for (the survivor's own edge of that key included; NULL: unbounded); an edge that
# would join a survivor to itself is dropped (the delete removes it).
_MOVE_EDGES_SQL = """\
INSERT INTO edges AS g (corpus, src, dst, relation, weight, source, created_at, valid_from, valid_until)
SELECT :c, m.src, m.dst, m.relation, max(m.weight), (array_agg(m.source ORDER BY m.weight DESC))[1],
       min(m.created_at),
       CASE WHEN bool_or(m.valid_from IS NULL) THEN NULL ELSE min(m.valid_from) END,
       CASE WHEN bool_or(m.valid_until IS NULL) THEN NULL ELSE max(m.valid_until) END
FROM (
    SELECT coalesce(ms.s, ed.src) AS src, coalesce(md.s, ed.dst) AS dst, ed.relation, ed.weight, ed.source,
           ed.created_at, ed.valid_from, ed.valid_until
    FROM edges ed
    LEFT JOIN unnest(CAST(:o AS text[]), CAST(:s AS text[])) AS ms(o, s) ON ms.o = ed.src
    LEFT JOIN unnest(CAST(:o AS text[]), CAST(:s AS text[])) AS md(o, s) ON md.o = ed.dst
    WHERE ed.corpus = :c AND (ed.src = ANY(CAST(:o AS text[])) OR ed.dst = ANY(CAST(:o AS text[])))
) m
WHERE m.src <> m.dst
GROUP BY m.src, m.relation, m.dst
ORDER BY m.src, m.relation, m.dst
ON CONFLICT (corpus, dst, relation, src) DO UPDATE SET weight = greatest(g.weight, excluded.weight),
    valid_from = CASE WHEN g.valid_from IS NULL OR excluded.valid_from IS NULL THEN NULL
                      ELSE least(g.valid_from, excluded.valid_from) END,
    valid_until = CASE WHEN g.valid_until IS NULL OR excluded.valid_until IS NULL THEN NULL
                       ELSE greatest(g.valid_until, excluded.valid_until) END"""

# The entries whose parent is merged away (not merged away themselves), locked in id order.
_CHILDREN_SQL = (f"SELECT {', '.join(f'e.{f}' for f in ENTRY_FIELDS)} FROM entries e WHERE e.corpus = :c "
                 "AND e.parent_id = ANY(CAST(:o AS text[])) AND e.id <> ALL(CAST(:o AS text[])) "
                 "ORDER BY e.id FOR UPDATE OF e")

# Aliases of the merged-away entries follow them to their survivors, and they become aliases.
_MOVE_ALIASES_SQL = """\
UPDATE entry_aliases a SET entry_id = m.s
FROM unnest(CAST(:o AS text[]), CAST(:s AS text[])) AS m(o, s)
WHERE a.corpus = :c AND a.entry_id = m.o"""
_ADD_ALIASES_SQL = """\
INSERT INTO entry_aliases AS a (corpus, alias, entry_id)
SELECT :c, m.o, m.s FROM unnest(CAST(:o AS text[]), CAST(:s AS text[])) AS m(o, s) ORDER BY m.o
ON CONFLICT (corpus, alias) DO UPDATE SET entry_id = excluded.entry_id, created_at = now()"""


class _MergeWrite(WriteExtension):
    """A batch of groups merged in the survivors' write: the members locked and checked
    before, the others' edges, aliases and rows after."""

    def __init__(self, store: ConsolidatedStore, groups: Sequence[_Group]) -> None:
        self._store = store
        self._groups = groups

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        corpus = self._store.writer.corpus
        corpus.text_config(conn)  # the corpus's write lock first, as every writer takes it
        ids = sorted({e.id for g in self._groups for e in g.entries})
        held = {r.id: bytes(r.content_hash) for r in conn.execute(_LOCK_MEMBERS_SQL,
                                                                 _now({"c": corpus.name, "ids": ids}))}
        stale = {n for n, g in enumerate(self._groups) if any(held.get(i) != h for i, h in g.hashes.items())}
        if stale:
            raise _Stale(stale)

    def after(self, conn: Connection, batch: Sequence[MemoryEntry], report: WriteReport) -> None:
        corpus = self._store.writer.corpus
        pairs = sorted((o, g.survivor) for g in self._groups for o in g.others)
        if not pairs:
            return
        params = {"c": corpus.name, "o": [o for o, _ in pairs], "s": [s for _, s in pairs]}
        conn.execute(_MOVE_EDGES_SQL, params)
        # The children of the merged-away entries (the hierarchy's parent_id) move to their
        # survivors, rewritten through the write path; a survivor whose parent was merged
        # into it loses its parent rather than becoming its own.
        survivor_of = dict(pairs)
        children = [row_to_entry(r) for r in conn.execute(_CHILDREN_SQL, _now(params))]
        if children:
            moved = [replace(e, parent_id=None if survivor_of[e.parent_id] == e.id else survivor_of[e.parent_id])
                     for e in children if e.parent_id is not None]
            write_entries(conn, corpus, ValidatedBatch(moved))
        conn.execute(_MOVE_ALIASES_SQL, params)
        conn.execute(_ADD_ALIASES_SQL, params)
        delete_matching(conn, corpus, "e.id = ANY(CAST(:ids AS text[]))", {"ids": params["o"]})


def _apply_merge(store: ConsolidatedStore, groups: list[_Group], merge: MergeFunction | None) -> int:
    """Call ``merge`` for every group (nothing written yet); returns how many it declined."""
    declined = 0
    for g in groups:
        if merge is None:
            g.result = g.entries[0]
        else:
            result = merge(list(g.entries))
            if result is None:
                declined += 1
                continue
            if not isinstance(result, MemoryEntry):
                raise ValidationError(f"merge returned {type(result).__name__}, not a MemoryEntry or None "
                                      f"(group of {g.entries[0].id!r}); nothing was written")
            ids = [e.id for e in g.entries]
            if result.id not in ids:
                raise ValidationError(f"merge returned an entry with id {result.id!r}, not one of the group's "
                                      f"{ids!r}; nothing was written")
            g.result = result
        g.others = tuple(e.id for e in g.entries if e.id != g.result.id)
    return declined


def _write_merges(store: ConsolidatedStore, vectors: EmbeddingWriter | None, groups: list[_Group],
                  progress: ConsolidationProgress | None) -> tuple[int, int]:
    """Merge ``groups`` (each with its result) in transactions of :data:`MERGE_BATCH`;
    returns (entries merged away, groups skipped as changed meanwhile)."""
    merged = skipped = done = 0
    todo = [g for g in groups if g.result is not None]
    for start in range(0, len(todo), MERGE_BATCH):
        chunk = todo[start:start + MERGE_BATCH]
        while chunk:
            batch = ValidatedBatch(g.result for g in chunk if g.result is not None)
            extension = _MergeWrite(store, chunk)
            try:
                if vectors is not None:
                    vectors.add_all(batch, extensions=[extension])
                else:
                    store.write(batch, extensions=[extension])
            except _Stale as exc:
                skipped += len(exc.stale)
                chunk = [g for n, g in enumerate(chunk) if n not in exc.stale]
                continue
            merged += sum(len(g.others) for g in chunk)
            break
        done += len(todo[start:start + MERGE_BATCH])
        if progress is not None:
            progress("merge", done, len(todo))
    return merged, skipped


# The ends of the pairs' edges that are live entries, locked FOR KEY SHARE in id order (as
# the edge write locks its ends), so that none is deleted before the edges are written.
_LOCK_ENDS_SQL = (f"SELECT e.id FROM entries e WHERE e.corpus = :c AND e.id = ANY(CAST(:ids AS text[])) "
                  f"AND {_LIVE_E} ORDER BY e.id FOR KEY SHARE OF e")


class _LinkWrite(WriteExtension):
    """A batch of pairs linked both ways in one write transaction: the edges between live
    ends, written by the one edge write (:func:`tnsrag_db._store.edges.write_edges`)."""

    def __init__(self, store: ConsolidatedStore, edges: Sequence[tuple[str, str, float]], relation: str) -> None:
        self._store = store
        self._edges = edges
        self._relation = relation
        self.written = 0

    def before(self, conn: Connection, batch: Sequence[MemoryEntry]) -> None:
        corpus = self._store.writer.corpus
        corpus.text_config(conn)  # the corpus's write lock first, as every writer takes it
        ids = sorted({x for a, b, _ in self._edges for x in (a, b)})
        alive = set(conn.execute(_LOCK_ENDS_SQL, _now({"c": corpus.name, "ids": ids})).scalars())
        kept = [(a, b, w) for a, b, w in self._edges if a in alive and b in alive]
        write_edges(conn, corpus.name, [Edge(a, b, self._relation, w) for a, b, w in kept])
        self.written = len(kept)


def _write_links(store: ConsolidatedStore, pairs: list[tuple[str, str, float]], relation: str,
                 progress: ConsolidationProgress | None) -> int:
    best: dict[tuple[str, str], float] = {}
    for a, b, score in pairs:
        key = (a, b) if a < b else (b, a)
        best[key] = max(best.get(key, -2.0), score)
    edges = [(x, y, weight) for (a, b), weight in sorted(best.items()) for x, y in ((a, b), (b, a))]
    written = 0
    for start in range(0, len(edges), 2 * MERGE_BATCH):
        chunk = edges[start:start + 2 * MERGE_BATCH]
        extension = _LinkWrite(store, chunk, relation)
        store.write((), extensions=[extension])
        written += extension.written
        if progress is not None:
            progress("link", (start + len(chunk)) // 2, len(edges) // 2)
    return written


def consolidate(store: ConsolidatedStore, tier: MemoryTier | str, *, threshold: float | None = None, mode: str = "merge",
                merge: MergeFunction | None = None, vectors: EmbeddingWriter | None = None,
                space: str | None = None, neighbors: int = DEFAULT_NEIGHBORS, relation: str = DEFAULT_RELATION,
                dry_run: bool = False, progress: ConsolidationProgress | None = None) -> ConsolidationReport:
    """See :meth:`tnsrag_db.Store.consolidate`."""
    name, threshold = _check_options(tier, threshold, mode, merge, neighbors, relation)
    chosen = _choose_space(store, space, vectors) if threshold is not None else None
    with store.session.transaction() as conn:
        pairs = _identical(conn, store.corpus, name)
        examined = 0
        if chosen is not None and threshold is not None:
            near, examined = _near(conn, store.corpus, name, chosen, threshold, neighbors, progress)
            pairs.extend(near)
        else:
            examined = int(conn.execute((f"SELECT count(*) FROM entries e WHERE e.corpus = :c "
                                                 f"AND e.tier = :t AND {_LIVE_E}"),
                                        _now({"c": store.corpus, "t": name})).scalar_one())
    components = _components(pairs)
    report = ConsolidationReport(tier=name, mode=mode, threshold=threshold, dry_run=dry_run, examined=examined,
                                 pairs=len({(a, b) if a < b else (b, a) for a, b, _ in pairs}))
    groups = _read_groups(store, components)
    found = tuple(ConsolidationGroup(g.entries[0].id, tuple(e.id for e in g.entries[1:]), g.similarity)
                  for g in groups)
    report = replace(report, groups=found)
    if dry_run or not groups:
        return report
    if mode == "link":
        live_ids = {e.id for g in groups for e in g.entries}
        kept = [p for p in pairs if p[0] in live_ids and p[1] in live_ids]
        return replace(report, linked=_write_links(store, kept, relation, progress))
    declined = _apply_merge(store, groups, merge)
    merged, skipped = _write_merges(store, vectors, groups, progress)
    # The survivors as the merge function chose them.
    found = tuple(ConsolidationGroup(g.survivor, g.others or tuple(e.id for e in g.entries[1:]), g.similarity)
                  for g in groups)
    return replace(report, groups=found, merged=merged, skipped=declined + skipped)


# -- promotion ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PromotionReport:
    """What :meth:`tnsrag_db.Store.promote` did: ``matched`` entries of ``from_tier`` met the
    rule, ``promoted`` moved to ``to_tier`` (``skipped``: changed or deleted by another writer
    between the read and the move). Nothing moves when ``dry_run`` (``ids``: the matches, in
    id order)."""

    from_tier: str
    to_tier: str
    dry_run: bool
    matched: int = 0
    promoted: int = 0
    skipped: int = 0
    ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {"from_tier": self.from_tier, "to_tier": self.to_tier, "dry_run": self.dry_run,
                "matched": self.matched, "promoted": self.promoted, "skipped": self.skipped, "ids": list(self.ids)}


_PROMOTE_PAGE_SQL = (f"SELECT {', '.join(f'e.{f}' for f in ENTRY_FIELDS)}, e.content_hash, e.created_at "
                     "FROM entries e WHERE e.corpus = :c AND e.tier = :t AND e.id > :after AND {predicate} "
                     f"AND {_LIVE_E} ORDER BY e.id LIMIT :n")


def promote(store: ConsolidatedStore, from_tier: MemoryTier | str, to_tier: MemoryTier | str, predicate: str,
            params: dict[str, Any], *, dry_run: bool = False,
            progress: ConsolidationProgress | None = None) -> PromotionReport:
    """See :meth:`tnsrag_db.Store.promote` (``predicate``: the rule as SQL over ``e``, values in ``params``)."""
    names = []
    for what, tier in (("from_tier", from_tier), ("to_tier", to_tier)):
        try:
            names.append(MemoryTier.parse(tier).name)
        except (ValueError, TypeError) as exc:
            raise ValidationError(f"{what}: {exc}") from None
    source, target = names
    if source == target:
        raise ValidationError(f"from_tier and to_tier are both {source!r}")
    statement = _PROMOTE_PAGE_SQL.format(predicate=predicate)
    matched: list[str] = []
    promoted = skipped = 0
    after = ""
    while True:
        rows = store.read(statement, {"c": store.corpus, "t": source, "after": after, "n": MERGE_BATCH, **params})
        if not rows:
            break
        after = rows[-1].id
        matched.extend(r.id for r in rows)
        if not dry_run:
            groups = []
            for r in rows:
                entry = row_to_entry(r)
                groups.append(_Group([entry], {r.id: bytes(r.content_hash)}, 1.0,
                                     result=replace(entry, tier=MemoryTier[target])))
            _, stale = _write_merges(store, None, groups, None)
            promoted += len(groups) - stale
            skipped += stale
        if progress is not None:
            progress("promote", len(matched), len(matched))
    return PromotionReport(source, target, dry_run, matched=len(matched), promoted=promoted, skipped=skipped,
                           ids=tuple(matched))
