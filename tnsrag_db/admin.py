"""Looking after corpora: list them, describe one, export and restore one.

The functions take a :class:`~tnsrag_db.store.store.Store`; :func:`list_corpora`
covers every corpus of the store's schema, the others the store's own corpus. The
value types are frozen dataclasses whose ``to_dict()`` returns plain JSON-able dicts
(datetimes as ISO-8601 strings), the shape ``tnsrag ... --json`` prints.

Export format (JSONL, UTF-8, one entry per line, in id order)::

    {"id": "guide.md#1", "content": "...", "tier": "SEMANTIC", "source": "guide.md",
     "parentId": "guide.md#0", "timestamp": "2025-01-02T03:04:05+00:00",
     "metadata": {"topic": "install"},
     "edges": [{"dst": "faq.md#0", "relation": "cites", "weight": 2.0, "source": null}]}

``edges`` are the entry's outgoing edges. ``tnsrag ingest file.jsonl`` (and
:func:`restore_corpus`) read it back exactly: ids, contents, tiers, sources (``null``
stays ``None``), parents, timestamps, metadata and edges. Vectors are not exported:
they are recomputed by the embedding provider in use when the file is read.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

from tnsrag_db.errors import ConfigurationError, CorpusNotFoundError, DatabaseError, TnsragError
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.store.schema import TIERS
from tnsrag_db.store.store import Store
from tnsrag_db.types import MemoryEntry, validate_filters

__all__ = [
    "CorpusInfo",
    "CorpusStats",
    "ExportCounts",
    "RestoreCounts",
    "SpaceInfo",
    "corpus_exists",
    "corpus_names",
    "corpus_stats",
    "empty_filter_notes",
    "entry_record",
    "export_corpus",
    "list_corpora",
    "require_corpus",
    "restore_corpus",
]

#: Distinct values read per metadata key when explaining a filter that matched nothing.
_VALUE_SAMPLE = 10_000
#: Values a filter note names at most.
_NAMED_VALUES = 8


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat()


@dataclass(frozen=True, slots=True)
class SpaceInfo:
    """One embedding space of a corpus: provider and dimension, vectors held, HNSW index state.

    ``index`` is ``"hnsw"`` (built and used), ``"building"`` (a build is running),
    ``"invalid"`` (an interrupted build; the next build replaces it) or ``"none"``
    (searches are exact scans). ``index_bytes`` is the index's size on disk (0 without one).
    """

    space_id: int
    provider: str
    dimension: int
    vectors: int
    index: str
    index_name: str | None
    index_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"space_id": self.space_id, "provider": self.provider, "dimension": self.dimension,
                "vectors": self.vectors, "index": self.index, "index_name": self.index_name,
                "index_bytes": self.index_bytes}


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    """One corpus of a schema, as :func:`list_corpora` lists it.

    ``tiers`` counts entries per tier (tiers without entries are left out);
    ``size_bytes`` is an estimate of the disk space the corpus takes: its share, by
    rows, of each shared table with its indexes and TOAST, plus its own HNSW indexes.
    """

    name: str
    entries: int
    tiers: Mapping[str, int]
    spaces: tuple[SpaceInfo, ...]
    edges: int
    size_bytes: int
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"name": self.name, "entries": self.entries, "tiers": dict(self.tiers),
                "spaces": [s.to_dict() for s in self.spaces], "edges": self.edges, "size_bytes": self.size_bytes,
                "created_at": _iso(self.created_at)}


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """What one corpus holds, as :func:`corpus_stats` reports it.

    * ``by_tier``: entries per tier; ``by_source``: entries per source, most first, at
      most ``max_sources`` of them (``sources`` is how many distinct sources there are;
      entries without a source count under ``None``, shown as ``null`` in JSON);
    * ``spaces``: the embedding spaces with their index state (:class:`SpaceInfo`);
    * ``bm25_documents``, ``bm25_average_length`` (terms per document) and
      ``bm25_terms`` (distinct terms): the BM25 corpus statistics queries score with;
    * ``edges`` and ``edges_by_relation``;
    * ``last_write``: the latest entry insert or update or edge creation (deletes leave
      no trace), None for an empty corpus.
    """

    corpus: str
    entries: int
    by_tier: Mapping[str, int]
    by_source: Sequence[tuple[str | None, int]]
    sources: int
    spaces: tuple[SpaceInfo, ...]
    bm25_documents: int
    bm25_average_length: float
    bm25_terms: int
    edges: int
    edges_by_relation: Mapping[str, int]
    text_config: str
    created_at: datetime
    last_write: datetime | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (``by_source`` as a list of ``{"source", "entries"}``)."""
        return {
            "corpus": self.corpus, "entries": self.entries, "by_tier": dict(self.by_tier),
            "by_source": [{"source": s, "entries": n} for s, n in self.by_source], "sources": self.sources,
            "spaces": [s.to_dict() for s in self.spaces],
            "bm25": {"documents": self.bm25_documents, "average_length": self.bm25_average_length,
                     "terms": self.bm25_terms},
            "edges": self.edges, "edges_by_relation": dict(self.edges_by_relation),
            "text_config": self.text_config, "created_at": _iso(self.created_at),
            "last_write": _iso(self.last_write),
        }


@dataclass(frozen=True, slots=True)
class ExportCounts:
    """What :func:`export_corpus` wrote."""

    entries: int
    edges: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"entries": self.entries, "edges": self.edges}


@dataclass(frozen=True, slots=True)
class RestoreCounts:
    """What :func:`restore_corpus` wrote: entries and edges, each inserted/updated/unchanged."""

    entries: Mapping[str, int] = field(default_factory=dict)
    edges: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"entries": dict(self.entries), "edges": dict(self.edges)}


# -- reading ------------------------------------------------------------------------------

def _rows(store: Store, sql: str, params: Mapping[str, Any] | None = None) -> list[Any]:
    with store.transaction() as conn:
        return list(conn.execute(sa.text(sql), dict(params or {})).all())


def corpus_names(store: Store) -> list[str]:
    """The corpora of the store's schema, sorted."""
    return [r.corpus for r in _rows(store, "SELECT corpus FROM corpora ORDER BY corpus")]


def corpus_exists(store: Store) -> bool:
    """Whether the store's corpus exists (a corpus comes into being with its first write)."""
    return bool(_rows(store, "SELECT 1 FROM corpora WHERE corpus = :c", {"c": store.corpus}))


def _not_found(corpus: str, existing: Sequence[str]) -> CorpusNotFoundError:
    here = ", ".join(existing) if existing else "none yet"
    return CorpusNotFoundError(f"corpus {corpus!r} does not exist; corpora here: {here}",
                               corpus=corpus, existing=tuple(existing))


def require_corpus(store: Store) -> None:
    """Raise :class:`CorpusNotFoundError` naming the existing corpora unless the store's corpus exists.

    Reads only: nothing is created.
    """
    if not corpus_exists(store):
        raise _not_found(store.corpus, corpus_names(store))


_SPACES_SQL = """
SELECT s.corpus, s.space_id, s.provider, s.dimension, s.index_name,
       (SELECT count(*) FROM embeddings x WHERE x.corpus = s.corpus AND x.space_id = s.space_id) AS vectors,
       i.indisvalid AS valid, coalesce(pg_relation_size(c.oid), 0) AS index_bytes,
       EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = c.oid) AS building
FROM embedding_spaces s
LEFT JOIN pg_namespace n ON n.nspname = :schema
LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = 'ix_embeddings_hnsw_' || s.space_id::text
LEFT JOIN pg_index i ON i.indexrelid = c.oid
WHERE {where}
ORDER BY s.corpus, s.space_id
"""


def _spaces(store: Store, corpus: str | None) -> dict[str, list[SpaceInfo]]:
    # Without a corpus: every corpus's spaces on purpose (list_corpora), marked for the
    # single-corpus statement check.
    where = "TRUE /* tnsrag:all-corpora */" if corpus is None else "s.corpus = :c"
    out: dict[str, list[SpaceInfo]] = {}
    for r in _rows(store, _SPACES_SQL.format(where=where), {"schema": store.schema, "c": corpus}):
        if r.valid is None:
            state = "none"
        elif r.building:
            state = "building"
        elif r.valid:
            state = "hnsw"
        else:
            state = "invalid"
        out.setdefault(r.corpus, []).append(SpaceInfo(
            int(r.space_id), r.provider, int(r.dimension), int(r.vectors), state,
            r.index_name if state == "hnsw" else None, int(r.index_bytes)))
    return out


def list_corpora(store: Store) -> list[CorpusInfo]:
    """Every corpus of the store's schema, sorted by name, with entries, tiers, spaces and size.

    Sizes are estimates (see :class:`CorpusInfo`); counting reads every table of the
    schema once, so this costs about a second per million entries. Raises
    :class:`DatabaseError` when the database fails.
    """
    corpora = _rows(store, "SELECT corpus, created_at FROM corpora ORDER BY corpus")
    if not corpora:
        return []
    tiers: dict[str, dict[str, int]] = {}
    for r in _rows(store, "/* tnsrag:all-corpora */ SELECT corpus, tier, count(*) AS n FROM entries GROUP BY corpus, tier"):
        tiers.setdefault(r.corpus, {})[r.tier] = int(r.n)
    # Rows per corpus of each shared table; the postings count is the sum of the document
    # frequencies (exact: every posting adds one to its term's df).
    counted = {
        "entries": {c: sum(t.values()) for c, t in tiers.items()},
        "embeddings": {r.corpus: int(r.n) for r in _rows(store, "/* tnsrag:all-corpora */ SELECT corpus, count(*) AS n FROM embeddings "
                                                                 "GROUP BY corpus")},
        "edges": {r.corpus: int(r.n) for r in _rows(store, "/* tnsrag:all-corpora */ SELECT corpus, count(*) AS n FROM edges GROUP BY corpus")},
    }
    postings: dict[str, int] = {}
    df_rows: dict[str, int] = {}
    for r in _rows(store, "/* tnsrag:all-corpora */ SELECT corpus, coalesce(sum(df), 0) AS postings, count(*) AS n FROM bm25_df "
                          "GROUP BY corpus"):
        postings[r.corpus] = int(r.postings)
        df_rows[r.corpus] = int(r.n)
    counted["bm25_postings"] = postings
    counted["bm25_df"] = df_rows
    spaces = _spaces(store, None)
    hnsw_bytes = sum(s.index_bytes for group in spaces.values() for s in group)
    sizes = {r.relname: int(r.size) for r in _rows(store, (
        "SELECT c.relname, pg_total_relation_size(c.oid) AS size FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :schema AND c.relkind = 'r' "
        "AND c.relname = ANY(:names)"), {"schema": store.schema, "names": list(counted)})}
    # The HNSW indexes are partial indexes of embeddings: counted per corpus, not shared.
    sizes["embeddings"] = max(0, sizes.get("embeddings", 0) - hnsw_bytes)
    totals = {table: sum(per.values()) for table, per in counted.items()}
    out: list[CorpusInfo] = []
    for r in corpora:
        name = r.corpus
        share = sum(sizes.get(t, 0) * per.get(name, 0) / totals[t] for t, per in counted.items() if totals[t])
        own = spaces.get(name, [])
        out.append(CorpusInfo(
            name, counted["entries"].get(name, 0), {t: tiers[name][t] for t in TIERS if t in tiers.get(name, {})},
            tuple(own), counted["edges"].get(name, 0), int(share) + sum(s.index_bytes for s in own), r.created_at))
    return out


def corpus_stats(store: Store, *, max_sources: int = 20) -> CorpusStats:
    """What the store's corpus holds (see :class:`CorpusStats`); ``max_sources`` (≥ 1,
    default 20) bounds the per-source counts listed.

    Raises :class:`CorpusNotFoundError` naming the existing corpora when the corpus does
    not exist, :class:`ConfigurationError` for a bad ``max_sources``, :class:`DatabaseError`
    when the database fails. Reads only.
    """
    if isinstance(max_sources, bool) or not isinstance(max_sources, int) or max_sources < 1:
        raise ConfigurationError(f"max_sources must be an int >= 1, got {max_sources!r}")
    c = {"c": store.corpus}
    head = _rows(store, "SELECT text_config, created_at FROM corpora WHERE corpus = :c", c)
    if not head:
        raise _not_found(store.corpus, corpus_names(store))
    by_tier = {r.tier: int(r.n) for r in _rows(
        store, "SELECT tier, count(*) AS n FROM entries WHERE corpus = :c GROUP BY tier", c)}
    sources = _rows(store, "SELECT source, count(*) AS n, count(*) OVER () AS distinct_sources FROM entries "
                           "WHERE corpus = :c GROUP BY source ORDER BY n DESC, source NULLS LAST LIMIT :k",
                    {**c, "k": max_sources})
    bm25 = _rows(store, "SELECT coalesce(sum(n_docs), 0) AS docs, coalesce(sum(total_len), 0) AS len "
                        "FROM bm25_stats WHERE corpus = :c", c)[0]
    terms = _rows(store, "SELECT count(*) AS n FROM (SELECT lexeme FROM bm25_df WHERE corpus = :c "
                         "GROUP BY lexeme HAVING sum(df) > 0) t", c)[0].n
    relations = {r.relation: int(r.n) for r in _rows(
        store, "SELECT relation, count(*) AS n FROM edges WHERE corpus = :c GROUP BY relation ORDER BY relation", c)}
    last = _rows(store, "SELECT greatest((SELECT max(updated_at) FROM entries WHERE corpus = :c), "
                        "(SELECT max(created_at) FROM edges WHERE corpus = :c)) AS at", c)[0].at
    docs = int(bm25.docs)
    return CorpusStats(
        corpus=store.corpus, entries=sum(by_tier.values()), by_tier={t: by_tier[t] for t in TIERS if t in by_tier},
        by_source=[(r.source, int(r.n)) for r in sources], sources=int(sources[0].distinct_sources) if sources else 0,
        spaces=tuple(_spaces(store, store.corpus).get(store.corpus, [])), bm25_documents=docs,
        bm25_average_length=round(int(bm25.len) / docs, 3) if docs else 0.0, bm25_terms=int(terms),
        edges=sum(relations.values()), edges_by_relation=relations, text_config=head[0].text_config,
        created_at=head[0].created_at, last_write=last)


# -- filters that match nothing ----------------------------------------------------------

_COLUMN_VALUES = {
    "tier": ("tiers", "SELECT DISTINCT tier AS v FROM entries WHERE corpus = :c ORDER BY 1 LIMIT :n"),
    "source": ("sources", "SELECT DISTINCT source AS v FROM entries WHERE corpus = :c AND source IS NOT NULL "
                          "ORDER BY 1 LIMIT :n"),
    "entryId": ("ids", "SELECT id AS v FROM entries WHERE corpus = :c ORDER BY 1 LIMIT :n"),
}


def _nearest(value: str, values: Sequence[str]) -> list[str]:
    """``values`` when few, else those closest to ``value`` (case-insensitively), best first."""
    if len(values) <= _NAMED_VALUES:
        return list(values)
    folded = {v.casefold(): v for v in values}
    close = difflib.get_close_matches(value.casefold(), list(folded), n=_NAMED_VALUES, cutoff=0.5)
    return [folded[v] for v in close] or list(values[:_NAMED_VALUES])


def empty_filter_notes(store: Store, filters: Mapping[str, str] | None) -> list[str]:
    """Why ``filters`` match no entry of the store's corpus: one note per cause, none when
    some entry matches them all.

    A filter that matches nothing on its own is named with the values its key does take
    (the nearest ones when there are many): ``tier=semantic matches no entry; tiers here:
    SEMANTIC, WORKING``; a metadata key no entry carries is named with the keys that
    exist. When every filter matches some entry but none matches all, the note says so.
    Raises :class:`InvalidFilterError` for a malformed filter.
    """
    checked = validate_filters(filters)
    if not checked or store.count(checked) > 0:
        return []
    c = {"c": store.corpus, "n": _VALUE_SAMPLE}
    notes: list[str] = []
    for key, value in checked.items():
        if store.count({key: value}) > 0:
            continue
        shown = f"{key}={value}"
        if key in _COLUMN_VALUES:
            plural, sql = _COLUMN_VALUES[key]
            values = [r.v for r in _rows(store, sql, c)]
        else:
            values = [r.v for r in _rows(store, "SELECT DISTINCT e.metadata ->> :k AS v FROM entries e "
                                                "WHERE e.corpus = :c AND e.metadata ? :k ORDER BY 1 LIMIT :n",
                                         {**c, "k": key})]
            plural = f"values of {key} here"
            if not values:
                keys = [r.k for r in _rows(store, "SELECT DISTINCT jsonb_object_keys(e.metadata) AS k FROM entries e "
                                                  "WHERE e.corpus = :c ORDER BY 1 LIMIT :n", c)]
                extra = ["tier", "entryId", "source"]
                notes.append(f"{shown} matches no entry; no entry has the metadata key {key!r}; keys here: "
                             f"{', '.join(_nearest(key, extra + keys))}")
                continue
        if not values:
            notes.append(f"{shown} matches no entry; the corpus has no {plural.split()[0]}")
            continue
        label = plural if plural.endswith(" here") else f"{plural} here"
        near = _nearest(value, values)
        more = "" if len(near) == len(values) else " ..."
        notes.append(f"{shown} matches no entry; {label}: {', '.join(near)}{more}")
    if not notes:
        joined = ", ".join(f"{k}={v}" for k, v in checked.items())
        notes.append(f"each of the filters {joined} matches some entry, but no entry matches all of them")
    return notes


# -- export and restore ------------------------------------------------------------------

def entry_record(entry: MemoryEntry, edges: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The export record of ``entry`` and its outgoing ``edges`` (dicts with ``dst``,
    ``relation``, ``weight``, ``source``), as a JSON-able dict."""
    return {"id": entry.id, "content": entry.content, "tier": entry.tier.name, "source": entry.source,
            "parentId": entry.parent_id,
            "timestamp": None if entry.timestamp is None else entry.timestamp.isoformat(),
            "metadata": dict(entry.metadata),
            "edges": [{"dst": e["dst"], "relation": e["relation"], "weight": e["weight"], "source": e["source"]}
                      for e in edges]}


def export_corpus(store: Store, out: IO[str], *, batch_size: int = 1000) -> ExportCounts:
    """Write every entry of the store's corpus, with its outgoing edges, to ``out`` as
    JSONL (see the module docstring), in id order.

    Everything is read in one REPEATABLE READ transaction, so the file is one consistent
    snapshot even while other processes write (an HNSW build started meanwhile waits
    for it to finish). Raises :class:`CorpusNotFoundError` when the corpus does not
    exist, :class:`ConfigurationError` for a bad ``batch_size``, :class:`DatabaseError`
    when the database fails.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be an int >= 1, got {batch_size!r}")
    from tnsrag_db.store.store import _row_to_entry

    entries = edges = 0
    try:
        with store.engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
            conn.execute(sa.text("SET TRANSACTION READ ONLY"))
            if conn.execute(sa.text("SELECT 1 FROM corpora WHERE corpus = :c"), {"c": store.corpus}).first() is None:
                raise _not_found(store.corpus, list(conn.execute(
                    sa.text("SELECT corpus FROM corpora ORDER BY corpus")).scalars()))
            last = ""
            while True:
                rows = conn.execute(sa.text(
                    "SELECT id, content, tier, source, parent_id, ts, metadata FROM entries "
                    "WHERE corpus = :c AND id > :last ORDER BY id LIMIT :n"),
                    {"c": store.corpus, "last": last, "n": batch_size}).all()
                if not rows:
                    break
                ids = [r.id for r in rows]
                outgoing: dict[str, list[dict[str, Any]]] = {}
                for e in conn.execute(sa.text(
                        "SELECT src, dst, relation, weight, source FROM edges WHERE corpus = :c AND src = ANY(:ids) "
                        "ORDER BY src, relation, dst"), {"c": store.corpus, "ids": ids}).mappings():
                    outgoing.setdefault(e["src"], []).append(dict(e))
                for r in rows:
                    mine = outgoing.get(r.id, [])
                    out.write(json.dumps(entry_record(_row_to_entry(r), mine), ensure_ascii=False) + "\n")
                    entries += 1
                    edges += len(mine)
                last = ids[-1]
    except TnsragError:
        raise
    except sa.exc.SQLAlchemyError as exc:
        raise DatabaseError(f"database error in corpus {store.corpus!r}: {exc}") from exc
    return ExportCounts(entries, edges)


def restore_corpus(store: Store, path: str | os.PathLike[str], *, embedding: Any = None) -> RestoreCounts:
    """Read an export (or any JSONL file :class:`~tnsrag_db.loaders.FileLoader` reads) into
    the store's corpus: entries with their vectors, then their edges, in one transaction.

    Entries are upserted by id, so restoring into a corpus that holds other entries
    keeps them. ``embedding`` defaults to the process embedding provider. Raises
    :class:`InvalidEntryError` naming the line of a bad record,
    :class:`DanglingReferenceError` when an edge names an entry that is neither in the
    file nor in the corpus (nothing is written then), :class:`DatabaseError`.
    """
    from tnsrag_db.embeddings import get_process_embedding
    from tnsrag_db.indexes.graph import GraphStore
    from tnsrag_db.indexes.vector import VectorMemoryStore
    from tnsrag_db.loaders import FileLoader

    loader = FileLoader(Path(path))
    entries = list(loader.load())
    edges = loader.edges
    graph = GraphStore(store)
    edge_counts: list[Any] = []
    vectors = VectorMemoryStore(store, embedding if embedding is not None else get_process_embedding())

    def write_edges(conn: sa.Connection) -> None:
        edge_counts[:] = [graph.write_edges(conn, edges)]

    counts = vectors.add_all(entries, check=write_edges if edges else None)
    e = edge_counts[0] if edge_counts else None
    return RestoreCounts(
        {"inserted": counts.inserted, "updated": counts.updated, "unchanged": counts.unchanged},
        {"inserted": e.inserted if e else 0, "updated": e.updated if e else 0, "unchanged": e.unchanged if e else 0})
