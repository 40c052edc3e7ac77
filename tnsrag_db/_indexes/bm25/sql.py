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

The postings are in two layouts (:class:`_Layout`): per-entry rows, where writers insert,
and blocks, where merges move whole entries' postings (see
:mod:`tnsrag_db._store.bm25.merge`). An entry's postings are all in one of them, so each
layout is ranked on its own, exactly, by the same CTEs (suffixed ``r`` and ``b``), and the
answer is the best rows of both, ties by entry id.
"""

from __future__ import annotations

import re
from textwrap import dedent

from tnsrag_db._db.statement import hidden
from tnsrag_db._store.expiry import gate, unexpired_row
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
    "scores_sql",
    "terms_ctes",
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
#: postings): what a caller's per-posting filter condition tests. In the blocks' scans it
#: stands for the entry of the posting's document number (see :class:`_Layout`).
POSTING_ENTRY = "p.entry_id"


#: :data:`POSTING_ENTRY` as a whole reference in a caller's condition.
_POSTING_ENTRY_RE = re.compile(r"(?<![\w.])" + re.escape(POSTING_ENTRY) + r"(?!\w)")


class _Layout:
    """How one of the two layouts of the postings is scanned (the ranking runs once over
    each and takes the best of both; an entry's postings are all in one of them).

    *rows* (suffix ``r``): ``bm25_postings``, one row per (term, entry), keyed by entry id,
    where writers insert. *blocks* (suffix ``b``): ``bm25_blocks``, a merged entry's
    postings by its document number (``bm25_docs`` maps numbers to entries), up to 128 per
    row as parallel arrays; numbers in ``{p}_ts`` (tombstones: entries deleted or rewritten
    since their merge) are skipped.

    Every scan yields alias ``p`` with the layout's :attr:`key`, ``tf`` and ``doc_len``,
    beside the term row ``t``.
    """

    def __init__(self, suffix: str, key: str) -> None:
        self.suffix = suffix
        self.key = key

    def scan(self, p: str, terms: str) -> str:
        """FROM items: the postings (alias ``p``) of the terms of CTE ``terms`` (alias ``t``)."""
        if self.suffix == "r":
            # Each term's range of the key, read apart (OFFSET 0 keeps the subquery from being
            # flattened into a join): planned as a join, a corpus whose postings were just merged
            # away (the table's statistics say a few rows) got a hash join over the corpus's whole
            # key range, dead index entries included, until the next vacuum.
            return (f"{terms} t CROSS JOIN LATERAL (SELECT q.entry_id, q.tf, q.doc_len FROM bm25_postings q "
                    f"WHERE q.corpus = :{p}_c AND q.lexeme = t.lexeme OFFSET 0) p")
        return (f"{terms} t JOIN bm25_blocks {p}_bk ON {p}_bk.corpus = :{p}_c AND {p}_bk.lexeme = t.lexeme "
                f"CROSS JOIN LATERAL unnest({p}_bk.docnos, {p}_bk.tfs, {p}_bk.dls) AS p(docno, tf, doc_len)")

    def live(self, p: str) -> str:
        """The condition every scanned posting meets (in blocks: not a tombstoned number)."""
        return "TRUE" if self.suffix == "r" else f"p.docno NOT IN (SELECT ts.docno FROM {p}_ts ts)"

    def gate(self, p: str) -> str:
        """Whether no entry of the corpus needs a check (``{p}_gate``, read once per statement)."""
        return f"(SELECT {p}_g.open FROM {p}_gate {p}_g)"

    def checked(self, p: str, a: str) -> str:
        """The condition that the entry of the ranked row ``a`` is live (expired, not valid or
        not recorded at the instant: left out), one row at a time behind the corpus's gate
        (:func:`~tnsrag_db._store.expiry.unexpired_row`); in blocks, the entry of its number."""
        entry = f"{a}.entry_id" if self.suffix == "r" else (
            f"(SELECT {p}_kx.entry_id FROM bm25_docs {p}_kx WHERE {p}_kx.corpus = :{p}_c AND {p}_kx.docno = {a}.docno)")
        return unexpired_row(entry, f":{p}_c", gate=f"{p}_gate")

    def entry(self, p: str) -> str:
        """The entry id of posting ``p``, for a filter's per-posting check."""
        if self.suffix == "r":
            return POSTING_ENTRY
        return f"(SELECT {p}_kd.entry_id FROM bm25_docs {p}_kd WHERE {p}_kd.corpus = :{p}_c AND {p}_kd.docno = p.docno)"

    def ne_sum(self, p: str, a: str) -> str:
        """The non-essential terms' part of the score of ``{a}.{key}`` (probes)."""
        part = _part(p, "t", "p")
        if self.suffix == "r":
            return (f"coalesce((SELECT sum({part} ORDER BY t.lexeme) FROM {p}_t t JOIN bm25_postings p "
                    f"ON p.corpus = :{p}_c AND p.lexeme = t.lexeme AND p.entry_id = {a}.entry_id WHERE t.ne), "
                    "0.0::float8)")
        # The block whose range starts at or below the number, then the number's place in it.
        return (f"coalesce((SELECT sum({part} ORDER BY t.lexeme) FROM {p}_t t "
                f"CROSS JOIN LATERAL (SELECT {p}_bk.docnos, {p}_bk.tfs, {p}_bk.dls FROM bm25_blocks {p}_bk "
                f"WHERE {p}_bk.corpus = :{p}_c AND {p}_bk.lexeme = t.lexeme AND {p}_bk.first_docno <= {a}.docno "
                f"ORDER BY {p}_bk.first_docno DESC LIMIT 1) bk "
                f"CROSS JOIN LATERAL (SELECT bk.tfs[i] AS tf, bk.dls[i] AS doc_len "
                f"FROM array_position(bk.docnos, {a}.docno) AS i WHERE i IS NOT NULL) p WHERE t.ne), 0.0::float8)")

    def top(self, order: str, lim: str) -> str:
        """The ORDER BY and limit of a layout's best rows by ``order`` (a score): ties by entry
        id in rows; blocks keep every row tied with the last (numbers do not order like ids:
        the final ordering by entry id chooses among them)."""
        if self.suffix == "r":
            return f"ORDER BY {order} DESC, entry_id LIMIT {lim}"
        return f"ORDER BY {order} DESC FETCH FIRST {lim} ROWS WITH TIES"


_ROWS = _Layout("r", "entry_id")
_BLOCKS = _Layout("b", "docno")
_LAYOUTS = (_ROWS, _BLOCKS)


#: Phase A's bound reads the best live partial scores among its ``WIDEN * k + WIDEN_SLACK``
#: best (``k``: the limit): enough, unless many of the best entries are not live.
WIDEN, WIDEN_SLACK = 2, 20


def _best_live(p: str, layout: _Layout, name: str, source: str, score: str, lim: str, *,
               keyed: bool = False, known: str = "", candidates: bool = False) -> str:
    """CTEs ending in ``name``: the ``lim`` best rows (``key``, ``score``) of ``source`` (a CTE
    or a FROM item with those columns) by ``score``, of live entries only, ordered as
    :meth:`_Layout.top` orders them, or with ``keyed`` by score then key in both layouts
    (``lim`` rows, no ties kept). ``known``: a boolean column of ``source``, true on rows
    known to be live (not checked again).

    The rows are checked (:meth:`_Layout.checked`) in score order, after the ranking, and
    the check stops at the ``lim``-th live row: a corpus with entries that are not live pays
    one primary-key probe per row it passes over (about one per returned row), not a read
    of every excluded id of the corpus, and the rows are those an exclusion before the
    ranking would give. Behind the corpus's open gate (no entry needs a check) no row is
    probed and a limited ranking (rows, or ``keyed``) keeps its bounded sort; behind a shut
    one it sorts every row, since it cannot know how many it will pass over (blocks, which
    keep every row tied with the last, are sorted in full anyway).

    With ``candidates`` (``keyed``) only the :data:`WIDEN` best rows are checked, behind a
    shut gate too (a bounded sort, ``{name}c``, read in its order: PostgreSQL 17 and later
    know a materialized CTE's order): ``name`` may then hold fewer than ``lim`` rows when
    many of them are not live, which phase A's bound allows for."""
    key, check = layout.key, layout.checked(p, "y")
    if known:
        check = f"(y.{known} OR {check})"
    columns = f"x.{key}, x.{score}" + (f", x.{known}" if known else "")
    if candidates:
        return _render("""\
            {name}c AS MATERIALIZED (
              -- The candidates: the best rows before any check.
              SELECT {columns} FROM {source} x
              ORDER BY x.{score} DESC, x.{key} LIMIT CASE WHEN {gate} THEN {lim} ELSE {wide} END
            ), {name} AS MATERIALIZED (
              SELECT y.{key}, y.{score} FROM {name}c y
              WHERE {check}
              ORDER BY y.{score} DESC, y.{key} LIMIT {lim}
            )""", name=name, key=key, score=score, source=source, columns=columns, gate=layout.gate(p),
                       lim=lim, wide=str(WIDEN * int(lim) + WIDEN_SLACK), p=p, check=check)
    if keyed or layout.suffix == "r":
        # A limit behind an open gate, none behind a shut one (NULL).
        order_x = f"ORDER BY x.{score} DESC, x.{key} LIMIT CASE WHEN {layout.gate(p)} THEN {lim} END"
        top_y = f"ORDER BY y.{score} DESC, y.{key} LIMIT {lim}"
    else:
        order_x, top_y = f"ORDER BY x.{score} DESC OFFSET 0", layout.top(f"y.{score}", lim)
    # The limit, or OFFSET 0, keeps the check out of the subquery: it runs above the sort, in its order.
    return _render("""\
        {name} AS (
          SELECT y.{key}, y.{score}
          FROM (SELECT {columns} FROM {source} x {order_x}) y
          WHERE {check}
          {top_y}
        )""", name=name, key=key, score=score, source=source, columns=columns, p=p, check=check,
                   order_x=order_x, top_y=top_y)


def _keep(p: str, layout: _Layout, scanned: str, predicate: str, probe: str = "") -> str:
    """A condition restricting the postings ``p`` of ``layout`` to the filtered entries:
    primary-key probes (of the entries, or with ``probe``, the filter pairs' own condition on
    :data:`POSTING_ENTRY`, of the pairs) when the ``scanned`` postings (an SQL expression) are
    at most ``:{p}_fsmall`` (the index's option ``filter_probe_max``), else membership in
    the filtered entries read once (a hashed subplan: ``{p}_fe``, or their numbers ``{p}_fd``)."""
    if predicate == "TRUE":
        return "TRUE"
    if layout is _ROWS:
        few = probe or (f"EXISTS (SELECT 1 FROM entries {p}_e WHERE {p}_e.corpus = :{p}_c "
                        f"AND {p}_e.id = p.entry_id AND {predicate})")
        many = f"p.entry_id IN (SELECT fe.id FROM {p}_fe fe)"
    else:
        few = _POSTING_ENTRY_RE.sub(layout.entry(p), probe) if probe else (
            f"EXISTS (SELECT 1 FROM bm25_docs {p}_kd JOIN entries {p}_e ON {p}_e.corpus = :{p}_c "
            f"AND {p}_e.id = {p}_kd.entry_id WHERE {p}_kd.corpus = :{p}_c AND {p}_kd.docno = p.docno AND {predicate})")
        many = f"p.docno IN (SELECT fd.docno FROM {p}_fd fd)"
    return f"CASE WHEN {scanned} <= CAST(:{p}_fsmall AS float8) THEN {few} ELSE {many} END"


def _layout_ctes(p: str, predicate: str, ids: str) -> str:
    """The CTEs both layouts' scans read: ``{p}_ts`` (the tombstoned numbers), ``{p}_gate``
    (whether no entry needs a check, and the instant: :func:`_best_live`) and, with a
    filter, ``{p}_fd`` (the filtered entries' numbers; read only when a scan asks)."""
    ctes = (f"{p}_ts AS MATERIALIZED (\n"
            f"  -- Numbers of merged entries deleted or rewritten since: their postings do not count.\n"
            f"  SELECT t.docno FROM bm25_tombstones t WHERE t.corpus = :{p}_c\n"
            f"), {p}_gate AS MATERIALIZED (\n"
            f"  -- Whether no entry needs a check (one probe of an empty index range in a corpus\n"
            f"  -- without expiry, validity or history), and the instant, read once.\n"
            f"  {gate(f':{p}_c')}\n)")
    if predicate != "TRUE":
        ctes += (f", {p}_fd AS MATERIALIZED (\n"
                 f"  SELECT d.docno FROM {p}_fe fe JOIN bm25_docs d ON d.corpus = :{p}_c AND d.entry_id = fe.id\n)")
    return ctes


def _merged(p: str, source: str) -> str:
    """A SELECT of ``(entry_id, score)`` of the rows (``docno``, ``score``) of CTE ``source``
    (one primary-key probe of ``bm25_docs`` each)."""
    return (f"SELECT kd.entry_id, r.score FROM {source} r CROSS JOIN LATERAL (SELECT d.entry_id FROM bm25_docs d "
            f"WHERE d.corpus = :{p}_c AND d.docno = r.docno LIMIT 1) kd")


def _best(p: str, source_r: str, source_b: str, lim: str) -> str:
    """A SELECT of the ``lim`` best ``(entry_id, score)`` of both layouts' results, ties by id."""
    return (f"SELECT u.entry_id, u.score FROM (SELECT entry_id, score FROM {source_r} UNION ALL "
            f"{_merged(p, source_b)}) u ORDER BY u.score DESC, u.entry_id LIMIT {lim}")


def _pruned_ctes(p: str, layout: _Layout, predicate: str, probe: str, limit: int) -> str:
    """The scoring CTEs of one layout, each name suffixed by the layout's: the plain scoring
    ``{p}_full`` and the pruned one (phase A to ``{p}_use``), ending in ``{p}_res``: the
    layout's best rows (``key``, ``score``)."""
    s, key = layout.suffix, layout.key
    floor = f"CAST(:{p}_min AS float8)"
    tol = f"CAST(:{p}_tol AS float8)"
    lim = _limit(limit)
    return _render("""\
        {full}, {p}_pa{s} AS MATERIALIZED (
          -- Pruned scoring from here on (it runs only when some term is non-essential).
          -- Phase A: the partial (essential-term) score of every entry holding an essential term.
          SELECT p.{key}, sum({part_t} ORDER BY t.lexeme) AS ps
          FROM {scan_t}
          WHERE NOT t.ne AND {live} AND {keep_a}
          GROUP BY p.{key}
        ), {best_pa}, {p}_c1{s} AS MATERIALIZED (
          -- The k best partial scores of live entries, scored in full. Their k-th best full
          -- score th1 bounds phase A's k-th best from below, so an entry with
          -- ps + bne < max(th1, min_score) cannot be in the top k (fewer than k: no bound).
          SELECT a.{key}, a.ps + {ne_a} AS score FROM {p}_l1{s} a
        ), {p}_cut{s} AS MATERIALIZED (
          -- The partial score an entry needs to possibly reach the top k (minus slack).
          SELECT greatest(coalesce((SELECT c.score FROM {p}_c1{s} c ORDER BY c.score DESC LIMIT 1 OFFSET {lim} - 1),
                                   '-Infinity'::float8), {floor})
                 - b.bne - {tol} * (1.0::float8 + b.bne) AS cut
          FROM {p}_b b WHERE b.n_ne > 0
        ), {p}_c2c{s} AS MATERIALIZED (
          -- The other entries that may still reach the top k: only these are scored in full.
          SELECT a.{key}, a.ps FROM {p}_pa{s} a
          WHERE a.ps >= (SELECT cut FROM {p}_cut{s}) AND a.{key} NOT IN (SELECT {key} FROM {p}_c1{s})
        ), {p}_probe{s} AS MATERIALIZED (
          -- Few candidates: primary-key probes; many: one pass over the non-essential postings.
          SELECT (SELECT count(*) FROM {p}_c2c{s}) * b.n_ne * CAST(:{p}_pc AS float8) <= b.ne_df AS probe
          FROM {p}_b b
        ), {p}_c2{s} AS (
          -- The candidates' full scores, by whichever way {p}_probe chose.
          SELECT a.{key}, a.ps + {ne_a} AS score FROM {p}_c2c{s} a
          WHERE (SELECT probe FROM {p}_probe{s})
          UNION ALL
          -- One pass: each candidate's row and its non-essential postings, summed per entry
          -- with no join. A posting is a candidate's by membership in a hashed subplan (IS
          -- TRUE keeps the IN from becoming a join): a join with the candidates, whose count
          -- the planner cannot know, became a nested loop that read every non-essential
          -- posting once per candidate.
          SELECT u.{key}, max(u.ps) + coalesce(sum(u.part ORDER BY u.lexeme) FILTER (WHERE u.lexeme IS NOT NULL),
                                               0.0::float8) AS score
          FROM (
            SELECT a.{key}, a.ps, CAST(NULL AS text) AS lexeme, CAST(NULL AS float8) AS part FROM {p}_c2c{s} a
            UNION ALL
            SELECT p.{key}, NULL, t.lexeme, {part_t}
            FROM {scan_t}
            WHERE t.ne AND (p.{key} IN (SELECT x.{key} FROM {p}_c2c{s} x)) IS TRUE
          ) u
          WHERE NOT (SELECT probe FROM {p}_probe{s})
          GROUP BY u.{key}
        ), {best_ra}, {p}_use{s} AS MATERIALIZED (
          -- Phase A's top k is the answer when some term is non-essential and no entry outside
          -- phase A can enter the top k (its score is <= bne). AND evaluates left to right:
          -- without a non-essential term none of the pruned CTEs runs.
          SELECT b.n_ne > 0 AND greatest(
                   CASE WHEN (SELECT count(*) FROM {p}_ra{s}) >= :{p}_lim
                        THEN (SELECT min(r.score) FROM {p}_ra{s} r) ELSE '-Infinity'::float8 END,
                   {floor}) > b.bne + {tol} * (1.0::float8 + b.bne) AS pruned
          FROM {p}_b b
        ), {p}_res{s} AS (
          SELECT r.{key}, r.score FROM {p}_ra{s} r WHERE (SELECT pruned FROM {p}_use{s})
          UNION ALL
          SELECT f.{key}, f.score FROM {p}_full{s} f WHERE NOT (SELECT pruned FROM {p}_use{s})
        )""", p=p, s=s, key=key, floor=floor, tol=tol, lim=lim,
        part_t=_part(p, "t", "p"), ne_a=layout.ne_sum(p, "a"), scan_t=layout.scan(p, f"{p}_t"),
        live=layout.live(p),
        # Phase A's best live partial scores, then its top k: the k best live of both candidate sets.
        best_pa=_best_live(p, layout, f"{p}_l1{s}", f"{p}_pa{s}", "ps", lim, keyed=True, candidates=True),
        best_ra=_best_live(p, layout, f"{p}_ra{s}", f"(SELECT f.{key}, f.score, f.known FROM (SELECT {key}, score, "
                           f"TRUE AS known FROM {p}_c1{s} UNION ALL SELECT {key}, score, FALSE FROM {p}_c2{s}) f "
                           f"WHERE f.score >= {floor})", "score", lim, known="known"),
        full=_full_cte(p, layout, predicate, f"(SELECT all_df FROM {p}_b)", probe, limit),
        keep_a=_keep(p, layout, f"(SELECT ess_df FROM {p}_b)", predicate, probe))


def ranking_sql(p: str, predicate: str = "TRUE", *, limit: int, ids: str = "", probe: str = "",
                shared_terms: bool = False) -> str:
    """The ranking SELECT of ``(entry_id, score)``, best first (ties by entry id), at most
    ``:{p}_lim`` rows, each scoring at least ``:{p}_min``, restricted to the entries
    (alias ``{p}_e``) matching ``predicate``. One complete SELECT with its own ``WITH``
    clause, so it embeds as a CTE or a subquery. Parameters: see :func:`ranking_params`.
    ``ids`` and ``probe``: the same filter from the filter pairs alone
    (:func:`~tnsrag_db._store.filters.pairs_alone`, the probe on :data:`POSTING_ENTRY`), when
    it has them: then no entry row is read to filter.

    Each layout of the postings (:class:`_Layout`) is ranked on its own, exactly (an entry's
    postings are all in one); the answer is the best of both results."""
    return _render("""\
        WITH {fe}{terms}{p}_t AS MATERIALIZED (
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
        ), {layout}, {rows}, {blocks}
        {best}""", p=p, fe=_filtered_entries(p, predicate, ids), terms=_own_terms(p, shared_terms),
        layout=_layout_ctes(p, predicate, ids),
        rows=_pruned_ctes(p, _ROWS, predicate, probe, limit), blocks=_pruned_ctes(p, _BLOCKS, predicate, probe, limit),
        best=_best(p, f"{p}_resr", f"{p}_resb", _limit(limit)))


def _full_cte(p: str, layout: _Layout, predicate: str, all_df: str, probe: str, limit: int) -> str:
    """The CTEs ending in ``{p}_full`` + the layout's suffix: the plain scoring of one layout
    (``all_df``: an SQL expression of the number of postings it reads, for the choice of
    filter method), its best rows of live entries."""
    name = f"{p}_full{layout.suffix}"
    return _render("""\
        {name}s AS (
          -- The plain scoring: every posting of every query term, summed per entry. Filters
          -- restrict the postings before the aggregation (only matching entries are summed).
          SELECT s.{key}, s.score
          FROM (
            SELECT p.{key}, sum({part} ORDER BY t.lexeme) AS score
            FROM {scan}
            WHERE {live} AND {keep}
            GROUP BY p.{key}
          ) s
          WHERE s.score >= CAST(:{p}_min AS float8)
        ), {best}""", name=name, p=p, key=layout.key, part=_part(p, "t", "p"), scan=layout.scan(p, f"{p}_w"),
                   live=layout.live(p), keep=_keep(p, layout, all_df, predicate, probe),
                   best=_best_live(p, layout, name, f"{name}s", "score", _limit(limit)))


def plain_ranking_sql(p: str, predicate: str = "TRUE", *, limit: int, ids: str = "", probe: str = "",
                      shared_terms: bool = False) -> str:
    """:func:`ranking_sql` without the pruned scoring, when it does not apply: the same rows,
    or, when some query term is frequent (pruning might pay), a single row ``(NULL, NULL)``
    instead, and nothing scored. A short statement, quick to plan, for the common case of
    specific query terms; the caller runs :func:`ranking_sql` after a ``NULL`` row."""
    all_df = f"(SELECT all_df FROM {p}_g)"
    return _render("""\
        WITH {fe}{terms}{p}_g AS MATERIALIZED (
          -- Whether pruning might pay (some term is frequent and is not the only term): decided
          -- from the df just read. all_df: the postings the plain scoring reads.
          SELECT count(*) > 1 AND coalesce(max(w.df), 0.0::float8) >= CAST(:{p}_nedf AS float8) AS prune,
                 coalesce(sum(w.df), 0.0::float8) AS all_df
          FROM {p}_w w
        ), {layout}, {full_r}, {full_b}, {p}_best AS (
        {best}
        )
        SELECT u.entry_id, u.score
        FROM (
          SELECT f.entry_id, f.score FROM {p}_best f WHERE NOT (SELECT prune FROM {p}_g)
          UNION ALL
          SELECT NULL, NULL FROM {p}_g g WHERE g.prune
        ) u
        ORDER BY u.score DESC NULLS FIRST, u.entry_id""", p=p, fe=_filtered_entries(p, predicate, ids),
                   terms=_own_terms(p, shared_terms), layout=_layout_ctes(p, predicate, ids),
                   full_r=_full_cte(p, _ROWS, predicate, all_df, probe, limit),
                   full_b=_full_cte(p, _BLOCKS, predicate, all_df, probe, limit),
                   best=_indent(_best(p, f"{p}_fullr", f"{p}_fullb", _limit(limit)), 2))


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
        SELECT x.id AS entry_id, e.doc_len AS dl, st.n, st.tl, w.lexeme, w.df, coalesce(bp.tf, bb.tf, 0) AS tf
        FROM unnest(CAST(:{p}_ids AS text[])) AS x(id)
        JOIN entries e ON e.corpus = :{p}_c AND e.id = x.id
        LEFT JOIN bm25_docs kd ON kd.corpus = :{p}_c AND kd.entry_id = x.id
        CROSS JOIN {p}_st st CROSS JOIN {p}_w w
        LEFT JOIN bm25_postings bp ON bp.corpus = :{p}_c AND bp.lexeme = w.lexeme AND bp.entry_id = x.id
        LEFT JOIN LATERAL ({block_tf}) bb ON TRUE""", p=p, terms=_term_ctes(p, known_terms_only=False),
        block_tf=_block_tf(f":{p}_c", "w.lexeme", "kd.docno"))


def terms_ctes(p: str) -> str:
    """The query-term CTEs of a ranking (``{p}_q``, ``{p}_st``, ``{p}_w``), for a statement
    that defines them once for a ranking and a scoring built with ``shared_terms``."""
    return _term_ctes(p, known_terms_only=True)


def _own_terms(p: str, shared: bool) -> str:
    """The term CTEs (and a comma) a statement defines itself, or nothing when ``shared``
    (the enclosing statement defines :func:`terms_ctes` with the same prefix)."""
    return "" if shared else _term_ctes(p, known_terms_only=True) + ", "


def scores_sql(p: str, source: str, *, shared_terms: bool = False) -> str:
    """A SELECT of ``(entry_id, score)``: the BM25 score of each entry of ``source`` (a CTE
    name or parenthesised subquery with an ``entry_id`` column, entries of the corpus), 0
    for an entry holding no query term. The same statistics and the same sum as
    :func:`ranking_sql` (each term's :func:`_part`, in lexeme order), so an entry scores bit
    for bit what a ranking gives it. Per query term one scan of the postings' primary key
    for all the entries at once (the id array), and for merged entries their blocks. Binds
    what :func:`ranking_sql` binds for the terms and the formula (``:{p}_c``,
    ``:{p}_chunks``, ``:{p}_extras``, ``:{p}_k1p1``, ``:{p}_kb0``, ``:{p}_kb1``). With
    ``shared_terms`` the terms are the enclosing statement's (:func:`terms_ctes`)."""
    return _render("""\
        WITH {terms}{p}_sx AS MATERIALIZED (
          SELECT DISTINCT s.entry_id FROM {source} s
        )
        SELECT x.entry_id, coalesce(s.score, 0.0::float8) AS score
        FROM {p}_sx x LEFT JOIN (
          SELECT u.entry_id, sum(u.part ORDER BY u.lexeme) AS score
          FROM (
            -- Rows: the term's postings of the entries, one primary-key scan per term.
            SELECT p.entry_id, w.lexeme, {part} AS part
            FROM {p}_w w JOIN bm25_postings p ON p.corpus = :{p}_c AND p.lexeme = w.lexeme
              AND p.entry_id = ANY(ARRAY(SELECT y.entry_id FROM {p}_sx y))
            UNION ALL
            -- Merged entries: the block of each term holding the entry's number.
            SELECT kd.entry_id, w.lexeme, {part} AS part
            FROM {p}_sx y JOIN bm25_docs kd ON kd.corpus = :{p}_c AND kd.entry_id = y.entry_id
            CROSS JOIN {p}_w w CROSS JOIN LATERAL ({block}) p
          ) u
          GROUP BY u.entry_id
        ) s ON s.entry_id = x.entry_id""", p=p, source=source, terms=_own_terms(p, shared_terms),
                   part=_part(p, "w", "p"), block=_block_posting(f":{p}_c", "w.lexeme", "kd.docno"))


def _block_posting(corpus: str, lexeme: str, docno: str) -> str:
    """A SELECT of ``tf, doc_len`` of the merged entry numbered ``docno`` in the block of
    ``lexeme`` holding it (no row when it lacks the term or is not merged)."""
    return (f"SELECT bk.tfs[i] AS tf, bk.dls[i] AS doc_len FROM (SELECT b.docnos, b.tfs, b.dls FROM bm25_blocks b "
            f"WHERE b.corpus = {corpus} AND b.lexeme = {lexeme} AND b.first_docno <= {docno} "
            f"ORDER BY b.first_docno DESC LIMIT 1) bk CROSS JOIN LATERAL array_position(bk.docnos, {docno}) AS i "
            "WHERE i IS NOT NULL")


def _block_tf(corpus: str, lexeme: str, docno: str) -> str:
    """A SELECT of ``tf``: the term frequency of ``lexeme`` in the merged entry numbered
    ``docno`` (no row, or NULL, when it lacks the term or is not merged)."""
    return (f"SELECT b.tfs[array_position(b.docnos, {docno})] AS tf FROM bm25_blocks b "
            f"WHERE b.corpus = {corpus} AND b.lexeme = {lexeme} AND b.first_docno <= {docno} "
            "ORDER BY b.first_docno DESC LIMIT 1")


def sorted_query_terms_sql(p: str) -> str:
    """The terms of :func:`query_terms_sql`, sorted."""
    return f"SELECT q.lexeme FROM (\n{_indent(query_terms_sql(p), 2)}\n) q\nORDER BY q.lexeme"


# Term statistics for pseudo-relevance feedback and tests (bind :c, the corpus).

#: Per entry of ``:ids`` that exists: ``entry_id``, ``lexeme``, ``tf`` (one row with NULL
#: lexeme for an entry without terms).
DOCUMENT_TERMS_SQL = dedent(f"""\
    SELECT e.id AS entry_id, l.lexeme, coalesce(p.tf, bb.tf) AS tf
    FROM entries e
    LEFT JOIN bm25_docs kd ON kd.corpus = :c AND kd.entry_id = e.id
    LEFT JOIN LATERAL unnest(e.lexemes) AS l(lexeme) ON TRUE
    LEFT JOIN LATERAL (
      -- The entry's own lexemes lead to its postings, one primary-key probe each (LIMIT 1
      -- keeps it so whatever the planner estimates: without statistics, on fresh tables,
      -- it scanned a large document's postings once per lexeme, a quadratic join).
      SELECT bp.tf FROM bm25_postings bp
      WHERE bp.corpus = :c AND bp.lexeme = l.lexeme AND bp.entry_id = e.id LIMIT 1
    ) p ON TRUE
    -- A merged entry's: the block of each lexeme holding its number.
    LEFT JOIN LATERAL ({_block_tf(":c", "l.lexeme", "kd.docno")}) bb ON TRUE
    WHERE e.corpus = :c AND e.id = ANY(:ids)""")

#: ``n`` (entries) and ``tl`` (total length in terms), summed over the counter shards.
CORPUS_STATISTICS_SQL = dedent("""\
    SELECT coalesce(sum(n_docs), 0) AS n, coalesce(sum(total_len), 0) AS tl
    FROM bm25_stats WHERE corpus = :c""")

#: ``term``, ``df`` for each term of ``:terms``, summed over the counter shards.
DOCUMENT_FREQUENCY_SQL = dedent("""\
    SELECT t.term, (SELECT coalesce(sum(d.df), 0) FROM bm25_df d WHERE d.corpus = :c AND d.lexeme = t.term) AS df
    FROM unnest(CAST(:terms AS text[])) AS t(term)""")
