"""The BM25 statements, built without I/O: dedented templates of named CTEs.

Every CTE name and bound parameter starts with a prefix ``p`` (a short code constant,
checked by :func:`~tnsrag_db._validate.check_prefix`), so several statements embed in
one (hybrid search runs the BM25 and the vector stream as CTEs of one statement). The
corpus is bound as ``:{p}_c``; a term's part of a score is the one expression
:func:`_part` writes, the factorisation :mod:`tnsrag_db._indexes.bm25.scoring` computes
in Python.

The ranking statement chooses between two exact ways of scoring, once, from the
document frequencies it has just read (``{p}_g``):

* *plain*: every posting of every query term, summed per entry; the whole cost when no
  query term is frequent (the common case for rare or specific terms);
* *pruned* (MaxScore): when some term is held by at least ``:{p}_nedf`` entries (the
  index's option ``prune_min_df``), the most frequent terms (their summed bounds at most
  ``:{p}_ner`` of the others', option ``prune_ratio``; at least one term kept) are
  *non-essential*: phase A scores only the entries
  holding an essential term, adding the non-essential terms' part by primary-key probes
  of the postings (or one pass over them when the candidates are many: ``:{p}_pc``,
  option ``probe_cost``, weighs a probe against a posting read), and skips
  entries that provably cannot reach the k-th score. Every entry outside phase A scores
  at most ``bne``, the non-essential terms' summed bound; when the k-th score of phase A
  (or ``min_score``) exceeds it, phase A's top k is the exact answer, else the plain
  scoring runs after all.

The branch not taken is behind a condition the database evaluates once (``WHERE
(SELECT ...)``, a gating one-time filter), so it costs planning only.
"""

from __future__ import annotations

from textwrap import dedent

from tnsrag_db._db.statement import hidden
from tnsrag_db._store.reads import ENTRY_COLUMNS

__all__ = [
    "BOUND_TOLERANCE",
    "POSTING_ENTRY",
    "CORPUS_STATISTICS_SQL",
    "DOCUMENT_FREQUENCY_SQL",
    "DOCUMENT_TERMS_SQL",
    "documents_sql",
    "figures_sql",
    "query_terms_sql",
    "ranking_sql",
    "sorted_query_terms_sql",
]

#: Relative slack on score bounds: covers float8 rounding of sums, far below 1e-9 of a score.
BOUND_TOLERANCE = 1e-9


def _limit(limit: int) -> str:
    """The ranking's limit as an integer literal: a hidden limit would leave the planner
    guessing a tenth of the candidates (hundreds of rows) and, for the entry rows, choose
    a hash join over the whole corpus instead of primary-key lookups; a visible bound value
    would make the custom plans cheaper than the generic one, which would then never be
    kept. Each limit is a statement text of its own, so its generic plan knows it."""
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be a positive int, got {limit!r}")
    return str(limit)


def _part(p: str, t: str, post: str) -> str:
    """One term's part of a score, ``wt·tf / (tf + k1·(1−b) + kbl·dl)``: ``t`` has the term's
    ``wt`` and ``kbl`` (a row of ``{p}_w``), ``post`` a posting's ``tf`` and ``doc_len``.

    The parts are summed in lexeme order (``sum(... ORDER BY p.lexeme)``): float addition
    is not associative, and the order in which a plan meets an entry's terms is the plan's,
    so without it the same query could score an entry a last bit apart on two connections
    (one with a custom plan, one with the generic plan)."""
    return f"{t}.wt * {post}.tf / ({post}.tf + CAST(:{p}_kb0 AS float8) + {t}.kbl * {post}.doc_len)"


def query_terms_sql(p: str) -> str:
    """A SELECT of the distinct analysed terms (column ``lexeme``) of the bound query.

    Binds ``:{p}_c`` (corpus), ``:{p}_chunks`` and ``:{p}_extras`` (text[]). Mirrors the
    write side's term extraction: a corpus that does not exist yet has no configuration
    and yields no terms (it has no postings either).
    """
    return dedent(f"""\
        SELECT t.lexeme FROM corpora {p}_cfg
        CROSS JOIN unnest({hidden(f"CAST(:{p}_chunks AS text[])")}) AS {p}_ch(chunk)
        CROSS JOIN LATERAL unnest(to_tsvector(CAST({p}_cfg.text_config AS regconfig), {p}_ch.chunk)) AS t
        WHERE {p}_cfg.corpus = :{p}_c
        UNION
        SELECT x FROM unnest({hidden(f"CAST(:{p}_extras AS text[])")}) AS x""")


def _term_ctes(p: str, *, known_terms_only: bool) -> str:
    """The CTEs ``{p}_q`` (query terms), ``{p}_st`` (N, total length) and ``{p}_w`` (per term:
    ``df``, ``wt``, ``kbl``; with ``known_terms_only``, terms no entry holds are left out)."""
    return _render("""\
        {p}_q AS (
          -- The query's terms, analysed exactly like a document's.
        {terms}
        ), {p}_st AS (
          -- N and the total length: at most 16 counter shards, read in this statement's
          -- snapshot, so the statistics agree with the postings even under concurrent writers.
          SELECT coalesce(sum(n_docs), 0)::float8 AS n, coalesce(sum(total_len), 0)::float8 AS tl
          FROM bm25_stats WHERE corpus = :{p}_c
        ), {p}_w AS MATERIALIZED (
          -- One row per query term: df (summed over its shards), the weight wt = idf·(k1+1) and
          -- the length factor kbl = k1·b/avgdl. MATERIALIZED: inlined, the planner would re-sum
          -- df for every posting it scores.
          SELECT q.lexeme, d.df,
                 ln(1.0::float8 + (st.n - d.df + 0.5::float8) / (d.df + 0.5::float8))
                   * CAST(:{p}_k1p1 AS float8) AS wt,
                 CASE WHEN st.tl > 0 THEN CAST(:{p}_kb1 AS float8) * st.n / st.tl ELSE 0.0::float8 END AS kbl
          FROM {p}_q q CROSS JOIN {p}_st st
          CROSS JOIN LATERAL (
            SELECT coalesce(sum(dp.df), 0)::float8 AS df
            FROM bm25_df dp WHERE dp.corpus = :{p}_c AND dp.lexeme = q.lexeme
          ) d
          {known}
        )""", p=p, terms=_indent(query_terms_sql(p), 2), known="WHERE d.df > 0" if known_terms_only else "")


def _render(template: str, **parts: str) -> str:
    """``template`` dedented, then its ``{name}`` fields filled (parts may span lines)."""
    return dedent(template).format(**parts)


def _indent(sql: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in sql.splitlines())


#: The entry id of the posting a filter check is made for (alias ``p`` of every scan's
#: ``bm25_postings``): what a caller's per-posting filter condition tests.
POSTING_ENTRY = "p.entry_id"


def _keep(p: str, alias: str, scanned: str, predicate: str, probe: str = "") -> str:
    """A condition restricting rows of ``alias`` (with ``entry_id``) to the filtered entries:
    primary-key probes (of the entries, or with ``probe``, the filter pairs' own condition on
    :data:`POSTING_ENTRY`, of the pairs) when the ``scanned`` postings (an SQL expression) are
    at most ``:{p}_fsmall`` (the index's option ``filter_probe_max``), else membership in
    ``{p}_fe``, the filtered entries read once (a hashed subplan)."""
    if predicate == "TRUE":
        return "TRUE"
    few = probe or (f"EXISTS (SELECT 1 FROM entries {p}_e WHERE {p}_e.corpus = :{p}_c "
                    f"AND {p}_e.id = {alias}.entry_id AND {predicate})")
    return (f"CASE WHEN {scanned} <= CAST(:{p}_fsmall AS float8) THEN {few} "
            f"ELSE {alias}.entry_id IN (SELECT fe.id FROM {p}_fe fe) END")


def _ne_sum(p: str, a: str) -> str:
    """The non-essential terms' part of the score of entry ``a`` (primary-key probes)."""
    return (f"coalesce((SELECT sum({_part(p, 't', 'p')} ORDER BY p.lexeme) FROM {p}_t t JOIN bm25_postings p "
            f"ON p.corpus = :{p}_c AND p.lexeme = t.lexeme AND p.entry_id = {a}.entry_id WHERE t.ne), 0.0::float8)")


def ranking_sql(p: str, predicate: str = "TRUE", *, limit: int, ids: str = "", probe: str = "") -> str:
    """The ranking SELECT of ``(entry_id, score)``, best first (ties by entry id), at most
    ``:{p}_lim`` rows, each scoring at least ``:{p}_min``, restricted to the entries
    (alias ``{p}_e``) matching ``predicate``. One complete SELECT with its own ``WITH``
    clause, so it embeds as a CTE or a subquery. Parameters: see :func:`ranking_params`.
    ``ids`` and ``probe``: the same filter from the filter pairs alone
    (:func:`~tnsrag_db._store.filters.pairs_alone`, the probe on :data:`POSTING_ENTRY`), when
    it has them: then no entry row is read to filter."""
    floor = f"CAST(:{p}_min AS float8)"
    tol = f"CAST(:{p}_tol AS float8)"
    fe = _filtered_entries(p, predicate, ids)
    return _render("""\
        WITH {fe}{terms}, {p}_t AS MATERIALIZED (
          -- Non-essential terms: the most frequent ones (at least PRUNE_MIN_DF entries each),
          -- while their summed bounds wt stay below a share of the remaining terms' (at least
          -- one term stays essential). None when no term is frequent: then the plain scoring runs.
          SELECT x.lexeme, x.df, x.wt, x.kbl,
                 (x.rk < x.nt AND x.df >= CAST(:{p}_nedf AS float8)
                  AND x.cum <= CAST(:{p}_ner AS float8) * (x.tot - x.cum)) AS ne
          FROM (
            SELECT w.*, row_number() OVER (ORDER BY w.df DESC, w.lexeme) AS rk, count(*) OVER () AS nt,
                   sum(w.wt) OVER (ORDER BY w.df DESC, w.lexeme ROWS UNBOUNDED PRECEDING) AS cum,
                   sum(w.wt) OVER () AS tot
            FROM {p}_w w
          ) x
        ), {p}_b AS MATERIALIZED (
          -- bne: every entry holding only non-essential terms scores at most bne. The df sums
          -- size the scans (probes or one pass; all_df: the postings a plain scoring reads).
          SELECT coalesce(sum(t.wt) FILTER (WHERE t.ne), 0.0::float8) AS bne,
                 coalesce(sum(t.df), 0.0::float8) AS all_df,
                 coalesce(sum(t.df) FILTER (WHERE t.ne), 0.0::float8) AS ne_df,
                 coalesce(sum(t.df) FILTER (WHERE NOT t.ne), 0.0::float8) AS ess_df,
                 count(*) FILTER (WHERE t.ne) AS n_ne
          FROM {p}_t t
        ), {full}, {p}_pa AS MATERIALIZED (
          -- Pruned scoring from here on (it runs only when some term is non-essential).
          -- Phase A: the partial (essential-term) score of every entry holding an essential term.
          SELECT p.entry_id, sum({part_t} ORDER BY p.lexeme) AS ps
          FROM {p}_t t JOIN bm25_postings p ON p.corpus = :{p}_c AND p.lexeme = t.lexeme
          WHERE NOT t.ne AND {keep_a}
          GROUP BY p.entry_id
        ), {p}_c1 AS MATERIALIZED (
          -- The k best partial scores, scored in full. Their k-th best full score th1 bounds
          -- phase A's k-th best from below, so an entry with ps + bne < max(th1, min_score)
          -- cannot be in the top k.
          SELECT a.entry_id, a.ps + {ne_a} AS score
          FROM (SELECT x.entry_id, x.ps FROM {p}_pa x ORDER BY x.ps DESC, x.entry_id LIMIT {lim}) a
        ), {p}_cut AS MATERIALIZED (
          -- The partial score an entry needs to possibly reach the top k (minus slack).
          SELECT greatest(coalesce((SELECT c.score FROM {p}_c1 c ORDER BY c.score DESC LIMIT 1 OFFSET {lim} - 1),
                                   '-Infinity'::float8), {floor})
                 - b.bne - {tol} * (1.0::float8 + b.bne) AS cut
          FROM {p}_b b WHERE b.n_ne > 0
        ), {p}_c2c AS MATERIALIZED (
          -- The other entries that may still reach the top k: only these are scored in full.
          SELECT a.entry_id, a.ps FROM {p}_pa a
          WHERE a.ps >= (SELECT cut FROM {p}_cut) AND a.entry_id NOT IN (SELECT entry_id FROM {p}_c1)
        ), {p}_probe AS MATERIALIZED (
          -- Few candidates: primary-key probes; many: one pass over the non-essential postings.
          SELECT (SELECT count(*) FROM {p}_c2c) * b.n_ne * CAST(:{p}_pc AS float8) <= b.ne_df AS probe
          FROM {p}_b b
        ), {p}_c2 AS (
          -- The candidates' full scores, by whichever way {p}_probe chose.
          SELECT a.entry_id, a.ps + {ne_a} AS score FROM {p}_c2c a
          WHERE (SELECT probe FROM {p}_probe)
          UNION ALL
          SELECT a.entry_id, a.ps + coalesce(j.s, 0.0::float8) FROM {p}_c2c a
          LEFT JOIN (
            SELECT p.entry_id, sum({part_t} ORDER BY p.lexeme) AS s
            FROM {p}_t t JOIN bm25_postings p ON p.corpus = :{p}_c AND p.lexeme = t.lexeme
            JOIN {p}_c2c x ON x.entry_id = p.entry_id
            WHERE t.ne GROUP BY p.entry_id
          ) j ON j.entry_id = a.entry_id
          WHERE NOT (SELECT probe FROM {p}_probe)
        ), {p}_ra AS MATERIALIZED (
          -- Phase A's top k.
          SELECT f.entry_id, f.score
          FROM (SELECT entry_id, score FROM {p}_c1 UNION ALL SELECT entry_id, score FROM {p}_c2) f
          WHERE f.score >= {floor}
          ORDER BY f.score DESC, f.entry_id
          LIMIT {lim}
        ), {p}_use AS MATERIALIZED (
          -- Phase A's top k is the answer when some term is non-essential and no entry outside
          -- phase A can enter the top k (its score is <= bne). AND evaluates left to right:
          -- without a non-essential term none of the pruned CTEs runs.
          SELECT b.n_ne > 0 AND greatest(
                   CASE WHEN (SELECT count(*) FROM {p}_ra) >= :{p}_lim
                        THEN (SELECT min(r.score) FROM {p}_ra r) ELSE '-Infinity'::float8 END,
                   {floor}) > b.bne + {tol} * (1.0::float8 + b.bne) AS pruned
          FROM {p}_b b
        )
        SELECT u.entry_id, u.score
        FROM (
          SELECT r.entry_id, r.score FROM {p}_ra r WHERE (SELECT pruned FROM {p}_use)
          UNION ALL
          SELECT f.entry_id, f.score FROM {p}_full f WHERE NOT (SELECT pruned FROM {p}_use)
        ) u
        ORDER BY u.score DESC, u.entry_id
        LIMIT {lim}""", p=p, fe=fe, terms=_term_ctes(p, known_terms_only=True), floor=floor, tol=tol, lim=_limit(limit),
        part_w=_part(p, "w", "p"), part_t=_part(p, "t", "p"), ne_a=_ne_sum(p, "a"),
        full=_full_cte(p, predicate, f"(SELECT all_df FROM {p}_b)", probe, limit),
        keep_a=_keep(p, "p", f"(SELECT ess_df FROM {p}_b)", predicate, probe))


def _full_cte(p: str, predicate: str, all_df: str, probe: str, limit: int) -> str:
    """The CTE ``{p}_full``: the plain scoring (``all_df``: an SQL expression of the number
    of postings it reads, for the choice of filter method)."""
    return _render("""\
        {p}_full AS (
          -- The plain scoring: every posting of every query term, summed per entry. Filters
          -- restrict the postings before the aggregation (only matching entries are summed).
          SELECT s.entry_id, s.score
          FROM (
            SELECT p.entry_id, sum({part} ORDER BY p.lexeme) AS score
            FROM {p}_w w JOIN bm25_postings p ON p.corpus = :{p}_c AND p.lexeme = w.lexeme
            WHERE {keep}
            GROUP BY p.entry_id
          ) s
          WHERE s.score >= CAST(:{p}_min AS float8)
          ORDER BY s.score DESC, s.entry_id
          LIMIT {lim}
        )""", p=p, part=_part(p, "w", "p"), keep=_keep(p, "p", all_df, predicate, probe), lim=_limit(limit))


def plain_ranking_sql(p: str, predicate: str = "TRUE", *, limit: int, ids: str = "", probe: str = "") -> str:
    """:func:`ranking_sql` without the pruned scoring, when it does not apply: the same rows,
    or, when some query term is frequent (pruning might pay), a single row ``(NULL, NULL)``
    instead, and nothing scored. A short statement, quick to plan, for the common case of
    specific query terms; the caller runs :func:`ranking_sql` after a ``NULL`` row."""
    return _render("""\
        WITH {fe}{terms}, {p}_g AS MATERIALIZED (
          -- Whether pruning might pay (some term is frequent and is not the only term): decided
          -- from the df just read. all_df: the postings the plain scoring reads.
          SELECT count(*) > 1 AND coalesce(max(w.df), 0.0::float8) >= CAST(:{p}_nedf AS float8) AS prune,
                 coalesce(sum(w.df), 0.0::float8) AS all_df
          FROM {p}_w w
        ), {full}
        SELECT u.entry_id, u.score
        FROM (
          SELECT f.entry_id, f.score FROM {p}_full f WHERE NOT (SELECT prune FROM {p}_g)
          UNION ALL
          SELECT NULL, NULL FROM {p}_g g WHERE g.prune
        ) u
        ORDER BY u.score DESC NULLS FIRST, u.entry_id""", p=p, fe=_filtered_entries(p, predicate, ids),
                   terms=_term_ctes(p, known_terms_only=True),
                   full=_full_cte(p, predicate, f"(SELECT all_df FROM {p}_g)", probe, limit))


def _filtered_entries(p: str, predicate: str, ids: str = "") -> str:
    """The CTE ``{p}_fe`` (and a comma) when a filter is given, else nothing (``ids``: the
    filtered ids from the filter pairs alone, instead of the entries)."""
    if predicate == "TRUE":
        return ""
    body = ids or f"SELECT {p}_e.id FROM entries {p}_e WHERE {p}_e.corpus = :{p}_c AND {predicate}"
    return dedent(f"""\
        {p}_fe AS MATERIALIZED (
          -- The filtered entries, read once, and only when a filter is given and the
          -- postings to check are many (see the CASE of each scan).
          {body}
        ), """)


def documents_sql(p: str, source: str, columns: str, order_by: str, *, join: str = "JOIN") -> str:
    """``SELECT {columns}, <entry columns> FROM {source} r ... ORDER BY {order_by}``: the entry
    rows (:data:`~tnsrag_db._store.reads.ENTRY_COLUMNS`, alias ``e``) of the ranked rows
    ``r`` of ``source`` (a CTE name with an ``entry_id`` column), each fetched by primary key
    in a LATERAL subquery; ``join="LEFT JOIN"`` keeps ranked rows without an entry (NULLs)."""
    left = join.startswith("LEFT")
    return dedent(f"""\
        SELECT {columns}, {ENTRY_COLUMNS}
        FROM {source} r
        {"LEFT JOIN LATERAL" if left else "CROSS JOIN LATERAL"} (
          -- One primary-key probe per ranked row, whatever the planner estimates of the
          -- corpus's size (see indexes/vector/sql.py: _DOCUMENTS).
          SELECT * FROM entries e WHERE e.corpus = :{p}_c AND e.id = r.entry_id LIMIT 1
        ) e{" ON TRUE" if left else ""}
        ORDER BY {order_by}""")


def figures_sql(p: str) -> str:
    """A SELECT of every (entry of ``:{p}_ids``, analysed query term) pair: ``entry_id``,
    ``dl`` (document length), ``n`` and ``tl`` (corpus size and total length), ``lexeme``,
    ``df`` and ``tf`` (0 when the entry lacks the term), for explanations."""
    return _render("""\
        WITH {terms}
        SELECT x.id AS entry_id, e.doc_len AS dl, st.n, st.tl, w.lexeme, w.df, coalesce(bp.tf, 0) AS tf
        FROM unnest(CAST(:{p}_ids AS text[])) AS x(id)
        JOIN entries e ON e.corpus = :{p}_c AND e.id = x.id
        CROSS JOIN {p}_st st CROSS JOIN {p}_w w
        LEFT JOIN bm25_postings bp ON bp.corpus = :{p}_c AND bp.lexeme = w.lexeme AND bp.entry_id = x.id""", p=p, terms=_term_ctes(p, known_terms_only=False))


def sorted_query_terms_sql(p: str) -> str:
    """The terms of :func:`query_terms_sql`, sorted."""
    return f"SELECT q.lexeme FROM (\n{_indent(query_terms_sql(p), 2)}\n) q\nORDER BY q.lexeme"


# Term statistics for pseudo-relevance feedback and tests (bind :c, the corpus).

#: Per entry of ``:ids`` that exists: ``entry_id``, ``lexeme``, ``tf`` (one row with NULL
#: lexeme for an entry without terms).
DOCUMENT_TERMS_SQL = dedent("""\
    SELECT e.id AS entry_id, l.lexeme, p.tf
    FROM entries e
    LEFT JOIN LATERAL unnest(e.lexemes) AS l(lexeme) ON TRUE
    LEFT JOIN LATERAL (
      -- The entry's own lexemes lead to its postings, one primary-key probe each (LIMIT 1
      -- keeps it so whatever the planner estimates: without statistics, on fresh tables,
      -- it scanned a large document's postings once per lexeme, a quadratic join).
      SELECT bp.tf FROM bm25_postings bp
      WHERE bp.corpus = e.corpus AND bp.lexeme = l.lexeme AND bp.entry_id = e.id LIMIT 1
    ) p ON TRUE
    WHERE e.corpus = :c AND e.id = ANY(:ids)""")

#: ``n`` (entries) and ``tl`` (total length in terms), summed over the counter shards.
CORPUS_STATISTICS_SQL = dedent("""\
    SELECT coalesce(sum(n_docs), 0) AS n, coalesce(sum(total_len), 0) AS tl
    FROM bm25_stats WHERE corpus = :c""")

#: ``term``, ``df`` for each term of ``:terms``, summed over the counter shards.
DOCUMENT_FREQUENCY_SQL = dedent("""\
    SELECT t.term, (SELECT coalesce(sum(d.df), 0) FROM bm25_df d WHERE d.corpus = :c AND d.lexeme = t.term) AS df
    FROM unnest(CAST(:terms AS text[])) AS t(term)""")
