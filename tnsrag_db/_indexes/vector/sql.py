"""The vector index's read SQL: the ranking statement and what is built on it, without I/O.

:func:`ranking_sql` returns one SELECT of ``(entry_id, score)``, best first (ties by entry
id), that chooses its own path at run time through one-time filters on InitPlans (see
:mod:`tnsrag_db._indexes.vector.index`): exact scan, HNSW strict-order iterative scan, or
for a filtered query the exact scan of few matches. Every name it introduces (CTEs,
aliases, parameters) starts with the caller's prefix, so other statements can embed it
as a CTE body. Only code constants and integers are formatted into the templates (the
prefix is a checked identifier, the filter predicate comes from
:func:`~tnsrag_db._store.filters.filter_sql` with its values bound); values are bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from tnsrag_db._store.expiry import gate as gate_row, live, not_expired, unexpired_row
from tnsrag_db._store.filters import filter_sql, pairs_alone
from tnsrag_db._store.reads import ENTRY_COLUMNS
from tnsrag_db._types import validate_filters

__all__ = ["DOCUMENT_COLUMNS", "EMPTY_RANKING", "HNSW_EF_CONSTRUCTION", "HNSW_M", "MAX_EF", "MAX_SCAN_TUPLES",
           "STORED_VECTORS", "Ranking", "cosines_sql", "documents_sql", "ranking_sql"]

#: HNSW build parameters (defaults of the view's ``hnsw_m`` and ``hnsw_ef_construction``).
#: ``ef_construction`` is twice pgvector's default: with 64, graphs of clustered embeddings
#: left whole clusters unreachable (recall@10 of 0 for some queries at any ef_search); 128
#: removed them for ≈ 1.5x the build time.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128

#: The columns of :func:`documents_sql`'s rows, in order.
DOCUMENT_COLUMNS = ("entry_id", "content", "tier", "source", "metadata", "score")

#: The ranking of a space that does not exist yet: no rows.
EMPTY_RANKING = "SELECT NULL::text AS entry_id, NULL::float8 AS score WHERE false"

#: The vectors one space holds for some entries (binds ``:c``, ``:s``, ``:ids``): one probe of
#: the primary key per id.
STORED_VECTORS = """\
SELECT x.entry_id, CAST(x.embedding AS real[]) AS embedding FROM embeddings x
WHERE x.corpus = :c AND x.space_id = :s AND x.entry_id = ANY(:ids)"""

#: Default ``hnsw.max_scan_tuples`` of the iterative scans (the view's ``max_scan_tuples``):
#: the bound on one query's graph visits.
MAX_SCAN_TUPLES = 20_000
#: A filtered HNSW scan looks for its k matches among the nearest ``(3 k + 20) * N / (t + 1)``
#: vectors (N the corpus's entries, t the exact threshold, so that more than t matches means
#: a share above (t + 1) / N): a filter independent of the vectors has 3 k + 20 matches
#: there on average, and fewer than k with a probability below 1e-4 (Poisson).
BUDGET_PER_MATCH = (3, 20)
#: pgvector's largest ``hnsw.ef_search``.
MAX_EF = 1000
#: The bounds of that budget (vectors read by the HNSW scan before it gives up). The scan's
#: candidate list covers the budget, so the budget stops at the largest list: past it the
#: rows of an iterative scan are a graph walk's, no longer the nearest in order.
MIN_BUDGET, MAX_BUDGET = 200, MAX_EF


@dataclass(frozen=True, slots=True)
class Ranking:
    """A validated top-``k`` query against one space (``index_name``: its HNSW index, or None)."""

    corpus: str
    space_id: int
    dimension: int
    index_name: str | None
    vector: npt.NDArray[np.float32]
    k: int
    filters: Mapping[str, str] | None
    min_score: float
    prefix: str
    #: ``hnsw.ef_search`` of the HNSW scan.
    ef_search: int
    #: Matching entries up to which a filtered query scans exactly.
    exact_threshold: int
    #: Metadata filters through the filter pairs (the store's ``filter_pairs_plan()``: tenancy on).
    pairs: bool = False
    #: ``hnsw.max_scan_tuples`` of the HNSW scan.
    max_scan_tuples: int = MAX_SCAN_TUPLES


def score(distance: str) -> str:
    """Cosine similarity of a ``<=>`` distance: pgvector's NaN (a zero vector on either side)
    maps to 0, float rounding is clamped into [-1, 1]."""
    return (f"CASE WHEN ({distance}) = 'NaN'::float8 THEN 0::float8 "
            f"ELSE greatest(-1::float8, least(1::float8, 1 - ({distance}))) END")


# The rows a scan ranks. Filtered: driven by the filter, each matching entry (found
# through the entries indexes) fetching its vector by primary key; the LATERAL with
# OFFSET 0 keeps that shape (no hash join over the whole space).
_FILTERED_BASE = """\
FROM entries {p}_e
CROSS JOIN LATERAL (
    SELECT {p}_y.entry_id, {p}_y.embedding FROM embeddings {p}_y
    WHERE {p}_y.corpus = :{p}_c AND {p}_y.space_id = {sid} AND {p}_y.entry_id = {p}_e.id
    OFFSET 0
) {p}_x
WHERE {p}_e.corpus = :{p}_c AND {predicate} AND {live_e}"""

_UNFILTERED_BASE = """\
FROM embeddings {p}_x
WHERE {p}_x.corpus = :{p}_c AND {p}_x.space_id = {sid}"""

# A zero query vector scores 0 against everything: ties, broken by entry id.
_ZERO_QUERY = """\
SELECT {p}_x.entry_id, 0::float8 AS score
{base} AND 0::float8 >= :{p}_min
ORDER BY {p}_x.entry_id
LIMIT {limit}"""

# The exact top k. It uses the untyped column, which no HNSW index matches, so the
# planner cannot turn it into an approximate scan.
_EXACT = """\
SELECT {p}_x.entry_id, {score} AS score
{base}
ORDER BY score DESC, {p}_x.entry_id
LIMIT {limit}"""

# An unfiltered scan's rows, ranked first, then checked in their order until k are live
# (tnsrag_db._store.expiry): a limit of k behind the gate open (no entry needs a check),
# none behind it shut; the check above the ranking stops at the k-th live row.
_CHECKED = """\
SELECT {p}_z.entry_id, {p}_z.score FROM (
{ranked}
) {p}_z
WHERE {xr_z}
ORDER BY {order}
LIMIT {k}"""

# A space without its HNSW index: the exact top k, then min_score.
_UNINDEXED = """\
SELECT entry_id, score FROM (
{exact}
) {p}_r
WHERE score >= :{p}_min
ORDER BY score DESC, entry_id"""

# The query vector as an InitPlan that first applies the scan's settings: it runs once,
# before the index scan starts, so the settings hold for it (is_local: for the rest of
# the caller's transaction, or of this statement in autocommit) without a separate SET.
_QUERY_VECTOR = """\
(SELECT CASE WHEN set_config('hnsw.ef_search', {ef}, true) IS NULL
    OR set_config('hnsw.iterative_scan', '{order}', true) IS NULL
    OR set_config('hnsw.max_scan_tuples', '{max_scan}', true) IS NULL
    THEN NULL ELSE CAST(:{p}_q AS vector({dim})) END)"""

# {p}_m: the matching ids, up to threshold + 1: counted to choose the path, and the input
# of the exact scan when there are few (one pass over the entries, not two).
_MATCHES = """\
{p}_m AS MATERIALIZED (
    SELECT {p}_e.id FROM entries {p}_e
    WHERE {p}_e.corpus = :{p}_c AND {predicate}
    LIMIT {limit}
)"""

# {p}_m from the filter pairs alone, when every key is a metadata key and tenancy is on:
# the ids without a read of the entry rows.
_MATCHES_FROM_PAIRS = """\
{p}_m AS MATERIALIZED (
    {ids}
    LIMIT {limit}
)"""

# {p}_n for a filter on one btree column (tier or source): counted from the (corpus,
# column) index alone (an index-only scan once the table is vacuumed); the ids of {p}_m
# are then read only when the exact branch runs, since a CTE is evaluated on first use.
_COUNT_BY_INDEX = """\
{p}_n AS MATERIALIZED (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM entries {p}_e WHERE {p}_e.corpus = :{p}_c AND {predicate} LIMIT {limit}
    ) {p}_k
)"""

# {p}_n for any other filter: the ids {p}_m read anyway.
_COUNT_MATCHES = """\
{p}_n AS MATERIALIZED (SELECT count(*) AS n FROM {p}_m)"""

# {p}_h: the HNSW top k. The scan drives; a filter is a per-row subquery on the entry's
# primary key, which PostgreSQL cannot turn into a join, so the only plan is the ordered
# index scan (iterative, strict order) checked row by row until k rows pass. The index
# matches the typed expression. {gate} skips it when few entries match.
_HNSW = """\
{p}_h AS MATERIALIZED (
    SELECT {p}_x.entry_id, ({p}_x.embedding::vector({dim}) <=> {qv}) AS d
    FROM embeddings {p}_x
    WHERE {p}_x.corpus = :{p}_c AND {p}_x.space_id = {sid} AND {xr_x}{gate}
    ORDER BY {p}_x.embedding::vector({dim}) <=> {qv}
    LIMIT {k}
)"""

# {p}_h of a filtered query: the first k matches among the first {p}_b.r rows of the
# unfiltered scan (the nearest vectors, in order), each checked by a per-row subquery on the
# entry's primary key (PostgreSQL cannot turn it into a join, so the ordered index scan
# stays the plan and stops at the k-th match). The budget is the number of nearest vectors
# among which a filter as frequent as the counted matches (more than the exact threshold)
# has its first k matches with near certainty; a filter whose matches near the query are
# rarer than that (one that follows the clusters of the vectors) ends the scan short, and
# the exact scan answers: matches found far away by a graph walk through non-matching
# neighbours are not the nearest ones.
_HNSW_FILTERED = """\
{p}_b AS MATERIALIZED (
    SELECT least({max_budget}::bigint, greatest({min_budget}::bigint,
        ceil({per_match} * coalesce((SELECT sum(s.n_docs) FROM bm25_stats s WHERE s.corpus = :{p}_c), 0)
             / {t1})::bigint)) AS r
),
{p}_h AS MATERIALIZED (
    SELECT {p}_x.entry_id, {p}_x.d FROM (
        SELECT {p}_x.corpus, {p}_x.entry_id, ({p}_x.embedding::vector({dim}) <=> {qv}) AS d
        FROM embeddings {p}_x
        WHERE {p}_x.corpus = :{p}_c AND {p}_x.space_id = {sid} AND {xr_x}{gate}
        ORDER BY {p}_x.embedding::vector({dim}) <=> {qv}
        LIMIT (SELECT r FROM {p}_b)
    ) {p}_x
    WHERE TRUE{check}
    LIMIT {k}
)"""

_ROW_CHECK = """
      AND coalesce((SELECT {predicate} FROM entries {p}_e
                    WHERE {p}_e.corpus = :{p}_c AND {p}_e.id = {p}_x.entry_id), false)"""

# The same check from the filter pairs alone (primary-key probes of the pairs), still a
# scalar subquery so that the planner keeps it a per-row check of the ordered scan.
_PAIRS_CHECK = """
      AND (SELECT {probe})"""

# HNSW never returns zero vectors (unindexable under cosine), which score 0: when the
# k-th HNSW row does not score above 0 and min_score admits 0, the exact scan decides.
_ENOUGH = "(SELECT count(*) FROM {p}_h WHERE d < 1 OR :{p}_min > 0) >= {k}"

# Few matches: one scan of the (corpus, entry_id) index for the id array (PostgreSQL 17+
# walks the leaf pages for it instead of descending once per id). The btree sorts and
# deduplicates the array itself, so it is built unsorted: an ORDER BY here sorted it twice.
_SMALL = """\
SELECT {p}_y.entry_id, {score} AS score
FROM embeddings {p}_y
WHERE {p}_y.corpus = :{p}_c AND {p}_y.space_id = {sid}
  AND {p}_y.entry_id = ANY(ARRAY(SELECT id FROM {p}_m)) AND {xp_y}
  AND (SELECT n FROM {p}_n) <= {t}
ORDER BY score DESC, {p}_y.entry_id
LIMIT {k}"""

# The exact top k of every match, when the filtered HNSW scan ended short: the matching ids
# as one array, their vectors through the primary key (one walk of its leaf pages, not a
# probe per match).
_ALL_MATCHES = """\
SELECT {p}_y.entry_id, {score} AS score
FROM embeddings {p}_y
WHERE {p}_y.corpus = :{p}_c AND {p}_y.space_id = {sid}
  AND {p}_y.entry_id = ANY(ARRAY({ids})) AND {xp_y}
ORDER BY score DESC, {p}_y.entry_id
LIMIT {k}"""

_MATCH_IDS = "SELECT {p}_e.id FROM entries {p}_e WHERE {p}_e.corpus = :{p}_c AND {predicate}"

# Exactly one branch yields rows: the HNSW rows (enough of them), the full exact scan
# (HNSW fell short), or the small exact scan (few matches).
_HNSW_RANKING = """\
WITH {ctes}
SELECT entry_id, score FROM (
    SELECT entry_id, {hnsw_score} AS score FROM {p}_h WHERE {ok}
    UNION ALL
    SELECT entry_id, score FROM (
{exact}
    ) {p}_xx WHERE NOT ({ok}){gate}{small}
) {p}_u
WHERE score >= :{p}_min
ORDER BY score DESC, entry_id"""

_SMALL_BRANCH = """
    UNION ALL
    SELECT entry_id, score FROM (
{small}
    ) {p}_s"""

# The path the ranking takes, from its own CTEs: matches counted (NULL unfiltered) and
# whether HNSW returned enough rows.
_PATH = """\
WITH {ctes}
SELECT {counted} AS n, {ok} AS ok"""

# The ranking joined with the entry rows, in the same statement: one primary-key probe per
# ranked row (a LATERAL with LIMIT 1, which the planner cannot turn into a join of its
# choosing), whatever it estimates of the corpus's size. A generic plan estimates a corpus
# at the average corpus's size: in a database of many corpora it took a large corpus for a
# few rows and read all of them, once per ranked row.
_DOCUMENTS = """\
WITH {p}_r AS (
{ranking}
)
SELECT {columns}, {p}_r.score
FROM {p}_r CROSS JOIN LATERAL (
    SELECT * FROM entries e WHERE e.corpus = :{p}_c AND e.id = {p}_r.entry_id LIMIT 1
) e
ORDER BY {p}_r.score DESC, e.id"""


def _iterative_order(filtered: bool) -> str:
    """``hnsw.iterative_scan`` of the HNSW branch. A filtered scan checks each row against
    the filter and goes on until ``k`` rows pass: strict order, so that the rows come in
    distance order however many batches the scan needs. An unfiltered scan answers from its first batch
    of ``ef_search`` candidates (``ef_search`` ≥ ``k`` up to 1,000), which pgvector returns
    sorted either way; relaxed order keeps the scan going past it (``k`` above
    ``ef_search``, or dead rows among the candidates) and costs about half the
    strict-order scan for the same buffers (docs/performance.md); the outer ``ORDER BY``
    sorts by score in both."""
    return "strict_order" if filtered else "relaxed_order"


def ranking_sql(r: Ranking, *, path: bool = False) -> tuple[str, dict[str, Any]]:
    """The ranking statement of ``r`` and its parameters. With ``path`` (an indexed space,
    a non-zero query vector), the statement that reports the path instead (``n``, ``ok``)."""
    p = r.prefix
    # With the pairs, rows chosen by the filter look them up once; the HNSW row check, once per row.
    pairs = f"{p}_c" if r.pairs else None
    predicate, params = filter_sql(r.filters, alias=f"{p}_e", prefix=f"{p}_f", corpus_param=pairs)
    row_predicate = filter_sql(r.filters, alias=f"{p}_e", prefix=f"{p}_f", corpus_param=pairs,
                               per_row=True)[0] if r.pairs else predicate
    # Metadata keys only: the matching ids, and the HNSW row check, from the pairs alone.
    ids, probe = pairs_alone(r.filters, prefix=f"{p}_f", corpus_param=pairs, probe=f"{p}_x.entry_id")
    params.update({f"{p}_c": r.corpus, f"{p}_min": r.min_score})
    zero = not np.count_nonzero(r.vector)
    if not zero:
        params[f"{p}_q"] = r.vector
    keys = validate_filters(r.filters)
    by_index = len(keys) == 1 and set(keys) <= {"tier", "source"}
    # The text depends only on the statement's shape (values are bound): rendered once per shape.
    sql = _render(p, r.space_id, r.dimension, r.k, predicate, row_predicate, by_index, zero,
                  r.index_name is not None, r.ef_search, r.exact_threshold, path, ids, probe, r.max_scan_tuples)
    return sql, params


@lru_cache(maxsize=512)
def _render(p: str, sid: int, dim: int, k: int, predicate: str, row_predicate: str, by_index: bool, zero: bool,
            indexed: bool, ef: int, t: int, path: bool, ids: str = "", probe: str = "",
            max_scan: int = MAX_SCAN_TUPLES) -> str:
    filtered = predicate != "TRUE"
    # Entries that are not live are left out of every scan (tnsrag_db._store.expiry): row by
    # row where the HNSW scan stops after a few rows and above the ranking of an unfiltered
    # exact scan, on the entry row where the filter reads it, by their ids where the matches
    # of a filter are scanned without their rows.
    names = {"p": p, "sid": sid, "dim": dim, "k": k, "predicate": predicate, "live_e": live(f"{p}_e"),
             "xp_y": not_expired(f"{p}_y.entry_id", f":{p}_c"),
             "xr_x": unexpired_row(f"{p}_x.entry_id", f":{p}_c", gate=f"{p}_gx")}
    # The gate of the row checks and the instant, read once (a CTE each path's statement starts with).
    gate_cte = f"{p}_gx AS MATERIALIZED (\n    {gate_row(f':{p}_c')}\n)"
    base = (_FILTERED_BASE if filtered else _UNFILTERED_BASE).format(**names)
    # A filtered scan reads each entry row (live_e); an unfiltered one ranks, then checks.
    limit = str(k) if filtered else f"CASE WHEN (SELECT xq.open FROM {p}_gx xq) THEN {k} END"

    def checked(ranked: str, order: str) -> str:
        return ranked if filtered else _CHECKED.format(
            ranked=_indent(ranked, 1), order=order, xr_z=unexpired_row(f"{p}_z.entry_id", f":{p}_c", gate=f"{p}_gx"),
            **names)

    if zero:
        return f"WITH {gate_cte}\n" + checked(_ZERO_QUERY.format(base=base, limit=limit, **names), f"{p}_z.entry_id")
    exact = checked(_EXACT.format(base=base, limit=limit, score=score(f"{p}_x.embedding <=> CAST(:{p}_q AS vector)"),
                                  **names), f"{p}_z.score DESC, {p}_z.entry_id")
    if not indexed:
        return f"WITH {gate_cte}\n" + _UNINDEXED.format(exact=_indent(exact, 1), **names)
    # A filtered scan's candidate list covers its budget (up to pgvector's 1,000): the
    # first r rows of the scan are then the nearest r vectors, not a graph walk's guess.
    ef_sql = (f"greatest({ef}, least({MAX_EF}, (SELECT r FROM {p}_b)))::text" if filtered else f"'{ef}'")
    qv = _QUERY_VECTOR.format(ef=ef_sql, order=_iterative_order(filtered), max_scan=max_scan, **names)
    ctes: list[str] = [gate_cte]
    gate = small = ""
    if filtered:
        ctes.append(_MATCHES_FROM_PAIRS.format(ids=ids, limit=t + 1, **names) if ids
                    else _MATCHES.format(limit=t + 1, **names))
        ctes.append((_COUNT_BY_INDEX if by_index else _COUNT_MATCHES).format(limit=t + 1, **names))
        gate = f" AND (SELECT n FROM {p}_n) > {t}"
        small = _SMALL.format(score=score(f"{p}_y.embedding <=> CAST(:{p}_q AS vector)"), t=t, **names)
    check = (_PAIRS_CHECK.format(probe=probe) if probe else _ROW_CHECK.format(**{**names, "predicate": row_predicate})) \
        if filtered else ""
    if filtered:
        per_match = f"{BUDGET_PER_MATCH[0] * k + BUDGET_PER_MATCH[1]}::float8"
        ctes.append(_HNSW_FILTERED.format(qv=qv, check=check, gate=gate, per_match=per_match, t1=t + 1,
                                          min_budget=max(MIN_BUDGET, k), max_budget=max(MAX_BUDGET, k), **names))
    else:
        ctes.append(_HNSW.format(qv=qv, gate=gate, **names))
    ok = _ENOUGH.format(**names)
    if path:
        counted = f"(SELECT n FROM {p}_n)" if filtered else "NULL::bigint"
        return _PATH.format(ctes=", ".join(ctes), counted=counted, ok=ok)
    small_branch = _SMALL_BRANCH.format(small=_indent(small, 2), **names) if small else ""
    if filtered:
        exact = _ALL_MATCHES.format(score=score(f"{p}_y.embedding <=> CAST(:{p}_q AS vector)"),
                                    ids=ids or _MATCH_IDS.format(**names), **names)
    return _HNSW_RANKING.format(ctes=", ".join(ctes), hnsw_score=score("d"), ok=ok, exact=_indent(exact, 2),
                                gate=gate, small=small_branch, **names)


# The cosine of the query with the stored vector of each entry of a CTE (one array of ids,
# their vectors through the primary key, as _ALL_MATCHES reads them).
_COSINES = """\
SELECT {p}_y.entry_id, {score} AS score
FROM embeddings {p}_y
WHERE {p}_y.corpus = :{p}_c AND {p}_y.space_id = {sid}
  AND {p}_y.entry_id = ANY(ARRAY(SELECT {p}_s.entry_id FROM {source} {p}_s))"""


def cosines_sql(corpus: str, space_id: int, vector: npt.NDArray[np.float32], source: str,
                prefix: str) -> tuple[str, dict[str, Any]]:
    """A SELECT of ``(entry_id, score)``: the cosine of ``vector`` with the stored vector of
    each entry of the CTE ``source`` (column ``entry_id``) in space ``space_id``, the
    expression a ranking scores with (entries without a vector there are left out)."""
    p = prefix
    text = _COSINES.format(p=p, sid=int(space_id), source=source,
                           score=score(f"{p}_y.embedding <=> CAST(:{p}_q AS vector)"))
    return text, {f"{p}_c": corpus, f"{p}_q": vector}


@lru_cache(maxsize=512)
def documents_sql(ranking: str, prefix: str, columns: str = "") -> str:
    """``ranking`` (prefix ``prefix``) joined with its entries: ``columns`` (entry columns on
    alias ``e``; default the columns of :data:`DOCUMENT_COLUMNS`) and ``score``, best first."""
    return _DOCUMENTS.format(p=prefix, ranking=_indent(ranking, 1), columns=columns or ENTRY_COLUMNS)


def _indent(sql: str, levels: int) -> str:
    pad = "    " * levels
    return "\n".join(pad + line for line in sql.splitlines())
