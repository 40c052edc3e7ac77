"""Listing and describing corpora: which exist, what each holds, their embedding spaces and sizes.

Whether a corpus exists and which do are also plans (:func:`require_corpus_plan`,
:func:`corpus_names_plan`, :func:`corpus_exists_plan`), so a command's other reads (a
query's, say) answer them on the same connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tnsrag_db._db.statement import Plan, Statement, one
from tnsrag_db._errors import ConfigurationError, CorpusNotFoundError
from tnsrag_db._indexes.graph.sql import HAS_EDGES_SQL
from tnsrag_db._types import MemoryTier
from tnsrag_db._validate import is_int
from tnsrag_db.admin.reports import CorpusInfo, CorpusStats, SpaceInfo

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["corpus_exists", "corpus_has_edges_plan", "corpus_exists_plan", "corpus_names", "corpus_names_plan", "corpus_stats",
           "list_corpora", "require_corpus", "require_corpus_plan"]

#: The tiers in the order reports list them.
_TIERS = tuple(tier.name for tier in MemoryTier)


def _rows(store: Store, sql: str, params: Mapping[str, Any] | None = None) -> list[Any]:
    return list(store.run(one(Statement(sql, dict(params or {})))))


def corpus_names_plan() -> Plan[list[str]]:
    """The corpora of the schema, sorted (one statement)."""
    rows = yield Statement("SELECT corpus FROM corpora ORDER BY corpus", {}, ("corpus",))
    return [str(r.corpus) for r in rows]


def corpus_exists_plan(corpus: str) -> Plan[bool]:
    """Whether ``corpus`` exists (one statement)."""
    rows = yield Statement("SELECT 1 AS found FROM corpora WHERE corpus = :c", {"c": corpus}, ("found",))
    return bool(rows)


def require_corpus_plan(corpus: str) -> Plan[None]:
    """Raise :class:`CorpusNotFoundError` naming the existing corpora unless ``corpus``
    exists (one statement when it does, two when not). Reads only."""
    if not (yield from corpus_exists_plan(corpus)):
        raise _not_found(corpus, (yield from corpus_names_plan()))


def corpus_has_edges_plan(corpus: str) -> Plan[bool]:
    """Whether ``corpus`` has any edge (one index probe; the statement of
    :meth:`GraphStore.has_edges <tnsrag_db._indexes.graph.GraphStore.has_edges>`)."""
    rows = yield Statement(HAS_EDGES_SQL, {"c": corpus}, ("has_edges",))
    return bool(rows[0].has_edges)


def corpus_names(store: Store) -> list[str]:
    """The corpora of the store's schema, sorted."""
    return store.run(corpus_names_plan())


def corpus_exists(store: Store) -> bool:
    """Whether the store's corpus exists (a corpus comes into being with its first write)."""
    return store.run(corpus_exists_plan(store.corpus))


def _not_found(corpus: str, existing: Sequence[str]) -> CorpusNotFoundError:
    here = ", ".join(existing) if existing else "none yet"
    return CorpusNotFoundError(f"corpus {corpus!r} does not exist; corpora here: {here}",
                               corpus=corpus, existing=tuple(existing))


def require_corpus(store: Store) -> None:
    """Raise :class:`CorpusNotFoundError` naming the existing corpora unless the store's corpus exists.

    Reads only: nothing is created.
    """
    store.run(require_corpus_plan(store.corpus))


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
    # The postings are per-entry rows or merged blocks (with their numbers): each table is
    # shared out by the corpora's postings.
    for table in ("bm25_postings", "bm25_blocks", "bm25_docs", "bm25_tombstones"):
        counted[table] = postings
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
            name, counted["entries"].get(name, 0), {t: tiers[name][t] for t in _TIERS if t in tiers.get(name, {})},
            tuple(own), counted["edges"].get(name, 0), int(share) + sum(s.index_bytes for s in own), r.created_at))
    return out


def corpus_stats(store: Store, *, max_sources: int = 20) -> CorpusStats:
    """What the store's corpus holds (see :class:`CorpusStats`); ``max_sources`` (≥ 1,
    default 20) bounds the per-source counts listed.

    Raises :class:`CorpusNotFoundError` naming the existing corpora when the corpus does
    not exist, :class:`ConfigurationError` for a bad ``max_sources``, :class:`DatabaseError`
    when the database fails. Reads only.
    """
    if not is_int(max_sources) or max_sources < 1:
        raise ConfigurationError(f"max_sources must be an int >= 1, got {max_sources!r}")
    c = {"c": store.corpus}
    head = _rows(store, "SELECT text_config, created_at, expiry FROM corpora WHERE corpus = :c", c)
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
    # Only expiring entries are read (the partial index of revision 0014).
    expiry = _rows(store, "SELECT count(*) FILTER (WHERE expires_at <= statement_timestamp()) AS expired, "
                          "count(*) FILTER (WHERE expires_at > statement_timestamp()) AS expiring, "
                          "min(expires_at) FILTER (WHERE expires_at > statement_timestamp()) AS next "
                          "FROM entries WHERE corpus = :c AND expires_at IS NOT NULL", c)[0]
    docs = int(bm25.docs)
    return CorpusStats(
        corpus=store.corpus, entries=sum(by_tier.values()), by_tier={t: by_tier[t] for t in _TIERS if t in by_tier},
        by_source=[(r.source, int(r.n)) for r in sources], sources=int(sources[0].distinct_sources) if sources else 0,
        spaces=tuple(_spaces(store, store.corpus).get(store.corpus, [])), bm25_documents=docs,
        bm25_average_length=round(int(bm25.len) / docs, 3) if docs else 0.0, bm25_terms=int(terms),
        edges=sum(relations.values()), edges_by_relation=relations, text_config=head[0].text_config,
        created_at=head[0].created_at, last_write=last, expired=int(expiry.expired), expiring=int(expiry.expiring),
        next_expiry=expiry.next, default_expiry=head[0].expiry or None)
