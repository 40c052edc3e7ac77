"""True Okapi BM25 over a corpus, computed in one SQL statement per query.

The write side lives in :class:`~tnsrag_db.store.store.Store`: every write keeps
``bm25_postings(corpus, lexeme, entry_id, tf, doc_len)``, ``entries.doc_len`` and the
sharded counters ``bm25_stats(corpus, shard, n_docs, total_len)`` and
``bm25_df(corpus, lexeme, shard, df)`` in the entry's own transaction. This module is the read side. One statement per search:

1. analyses the query exactly like a document (identifiers rewritten by
   :func:`~tnsrag_db.store.analysis.analyze` in Python, lexemes from ``to_tsvector``
   with the corpus's text search configuration, plus the whole-identifier terms),
   deduplicated;
2. sums N, the total length and each term's document frequency over their shard
   rows (at most 16 rows each, however frequent the term), so all statistics
   come from the statement's single snapshot and always agree with the committed
   entries, even under concurrent writers;
3. scores ``idf · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`` with
   ``idf = ln(1 + (N − df + 0.5)/(df + 0.5))``, all in float8;
4. applies metadata filters (joined on ``entries``) and ``min_score`` (inclusive)
   before the limit; ties are broken by entry id.

Frequent terms are pruned without changing any result (MaxScore). A term adds less
than ``ub = idf·(k1+1)`` to any score. The most frequent query terms (at least
:data:`PRUNE_MIN_DF` entries each, their summed ``ub`` at most :data:`PRUNE_RATIO` of
the other terms', at least one term kept) are *non-essential*: phase A scores only
the entries holding an essential term, adding the non-essential terms' part by
primary-key probes of the postings (or one pass over them when the candidates are
many), and skips entries that provably cannot reach the k-th score. Every entry
outside phase A scores at most ``bne``, the non-essential terms' summed ``ub``; when
the k-th score of phase A (or ``min_score``) exceeds it, phase A's top k is the exact
answer. Otherwise the full scoring runs, behind a condition the database evaluates
once (it costs nothing when not needed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db.errors import ConfigurationError, ValidationError
from tnsrag_db.store.analysis import analyze_query
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.store.store import IngestCounts, Store
from tnsrag_db.strategies.explain import BM25Explanation, BM25TermScore
from tnsrag_db.types import MAX_CANDIDATES, MemoryEntry, is_unicode_text

__all__ = ["DEFAULT_B", "DEFAULT_K1", "BM25Index"]

#: Default term-frequency saturation.
DEFAULT_K1 = 1.2
#: Default document-length normalisation.
DEFAULT_B = 0.75

#: A query term is pruned (scored only for entries that already hold a rarer query
#: term) only when at least this many entries contain it.
PRUNE_MIN_DF = 1000
#: Pruned terms' summed score bounds stay at most this share of the other terms'.
PRUNE_RATIO = 0.5
#: A primary-key probe costs about this many postings read in sequence.
PROBE_COST = 20.0
#: With a filter, up to this many scanned postings check it by primary-key probes of
#: their entries; more read the filtered entries once.
FILTER_PROBE_MAX = 2000.0
# Relative slack on score bounds: covers float8 rounding of sums, far below 1e-9 of a score.
_BOUND_TOLERANCE = 1e-9

_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix or not prefix[0].isalpha() or not set(prefix) <= _PREFIX_CHARS \
            or len(prefix) > 20:
        raise ConfigurationError(f"prefix must be a short lower-case identifier ([a-z][a-z0-9_]*), got {prefix!r}")
    return prefix


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValidationError(f"k must be an int, got {k!r}")
    if k < 1:
        raise ValidationError(f"k must be >= 1, got {k}")
    if k > MAX_CANDIDATES:
        raise ValidationError(f"k must be at most {MAX_CANDIDATES}, got {k}")
    return k


def _check_min_score(min_score: object) -> float:
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not math.isfinite(min_score):
        raise ValidationError(f"min_score must be a finite number, got {min_score!r}")
    return float(min_score)


def _query_terms_sql(p: str) -> str:
    """SELECT of the distinct analysed terms (column ``lexeme``) of the bound query.

    Binds ``:{p}_c`` (corpus), ``:{p}_chunks`` and ``:{p}_extras`` (text[]). Mirrors
    ``STAGED_TERMS_SQL`` of the write side: a corpus that does not exist yet has no
    configuration and yields no terms (it has no postings either).
    """
    return (
        f"SELECT t.lexeme FROM corpora {p}_cfg "
        f"CROSS JOIN unnest(CAST(:{p}_chunks AS text[])) AS {p}_ch(chunk) "
        f"CROSS JOIN LATERAL unnest(to_tsvector(CAST({p}_cfg.text_config AS regconfig), {p}_ch.chunk)) AS t "
        f"WHERE {p}_cfg.corpus = :{p}_c "
        f"UNION SELECT x FROM unnest(CAST(:{p}_extras AS text[])) AS x"
    )


def _stats_sql(p: str) -> str:
    """SELECT of the corpus statistics: N (``n``) and the total length (``tl``), float8."""
    return (f"SELECT coalesce(sum(n_docs), 0)::float8 AS n, coalesce(sum(total_len), 0)::float8 AS tl "
            f"  FROM bm25_stats WHERE corpus = :{p}_c")


def _df_sql(p: str, term: str) -> str:
    """SELECT of ``df``, the document frequency of ``term`` (an SQL expression), float8."""
    return (f"SELECT coalesce(sum(dp.df), 0)::float8 AS df "
            f"    FROM bm25_df dp WHERE dp.corpus = :{p}_c AND dp.lexeme = {term}")


def _idf_sql(n: str, df: str) -> str:
    """``idf = ln(1 + (N − df + 0.5) / (df + 0.5))`` of float8 expressions ``n`` and ``df``."""
    return f"ln(1.0::float8 + ({n} - {df} + 0.5::float8) / ({df} + 0.5::float8))"


def _weight_sql(p: str, n: str, df: str) -> str:
    """A term's weight ``wt = idf · (k1 + 1)``."""
    return f"{_idf_sql(n, df)}     * CAST(:{p}_k1p1 AS float8)"


def _kbl_sql(p: str, n: str, tl: str) -> str:
    """``kbl = k1·b / avgdl`` (0 for an empty corpus), the per-term-of-length factor."""
    return f"CASE WHEN {tl} > 0 THEN CAST(:{p}_kb1 AS float8) * {n} / {tl} ELSE 0.0::float8 END"


def _contribution_sql(p: str, t: str, post: str) -> str:
    """One term's BM25 contribution ``wt·tf / (tf + k1·(1−b) + kbl·dl)``: ``t`` has ``wt`` and
    ``kbl``, ``post`` ``tf`` and ``doc_len``. The one formula every score is built from."""
    return f"{t}.wt * {post}.tf / ({post}.tf + CAST(:{p}_kb0 AS float8) + {t}.kbl * {post}.doc_len)"


def check_bm25_parameters(k1: object, b: object) -> tuple[float, float]:
    """Return ``(k1, b)`` as floats: both finite, ``k1 >= 0``, ``0 <= b <= 1``; :class:`ConfigurationError` otherwise."""
    for name, value in (("k1", k1), ("b", b)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigurationError(f"{name} must be a finite number, got {value!r}")
    assert isinstance(k1, (int, float)) and isinstance(b, (int, float))
    if k1 < 0:
        raise ConfigurationError(f"k1 must be >= 0, got {k1!r}")
    if not 0.0 <= b <= 1.0:
        raise ConfigurationError(f"b must be between 0 and 1, got {b!r}")
    return float(k1), float(b)


class BM25Index:
    """A BM25 view over one corpus of a :class:`Store` (``k1`` default 1.2, ``b`` default 0.75).

    Writes go through the store (postings and statistics are maintained by every
    store write); this class adds scoring and the term statistics used by
    pseudo-relevance feedback. Raises :class:`ConfigurationError` when ``store`` is
    not a Store, ``k1`` is negative or not finite, or ``b`` is outside [0, 1].
    """

    def __init__(self, store: Store, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"BM25Index needs a Store, got {type(store).__name__}")
        self._store = store
        self._k1, self._b = check_bm25_parameters(k1, b)

    @property
    def store(self) -> Store:
        """The store (and corpus) this index reads."""
        return self._store

    @property
    def k1(self) -> float:
        """Term-frequency saturation (default 1.2)."""
        return self._k1

    @property
    def b(self) -> float:
        """Document-length normalisation in [0, 1] (default 0.75)."""
        return self._b

    def __repr__(self) -> str:
        return f"BM25Index(corpus={self._store.corpus!r}, k1={self._k1!r}, b={self._b!r})"

    # -- writes (delegated: the store maintains postings and statistics) ----------------
    def add(self, entry: MemoryEntry) -> IngestCounts:
        """Insert or update one entry through the store; returns its classification."""
        return self._store.add(entry)

    def add_all(self, entries: Iterable[MemoryEntry], *,
                progress: Callable[[int], None] | None = None) -> IngestCounts:
        """Write a batch in one transaction through the store (see :meth:`Store.add_all`)."""
        return self._store.add_all(entries, progress=progress)

    # -- SQL --------------------------------------------------------------------------
    def _analysis_params(self, query: str, p: str) -> dict[str, Any]:
        analysed = analyze_query(query, self._store.max_query_terms)
        return {f"{p}_c": self._store.corpus, f"{p}_chunks": analysed.chunks, f"{p}_extras": analysed.extra_terms}

    def candidates_sql(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                       min_score: float = 0.0, prefix: str = "k") -> tuple[str, dict[str, Any]]:
        """A SELECT of ``(entry_id, score)``, best first (ties by entry id), at most ``k`` rows.

        The statement analyses ``query`` itself (no extra round trip), applies
        ``filters`` (exact metadata match) and ``min_score`` (inclusive) before the
        limit, and carries the corpus key everywhere. It is one complete SELECT with
        its own ``WITH`` clause, so it can be embedded as a CTE
        (``WITH kw AS (<sql>) ...``) or a subquery. Every bound parameter and CTE
        name starts with ``prefix`` (a short ``[a-z][a-z0-9_]*`` code constant); the
        corpus is bound as ``:<prefix>_c``. Frequent terms are pruned as the module
        docstring describes: the rows and scores are those of scoring every posting.

        Raises :class:`ValidationError` for a non-string query, ``k < 1`` or a
        non-finite ``min_score``; :class:`InvalidFilterError` for a bad filter.
        """
        if not isinstance(query, str):
            raise ValidationError(f"query must be a string, got {type(query).__name__}")
        if "\x00" in query:
            raise ValidationError("query contains a NUL character")
        if not is_unicode_text(query):
            raise ValidationError("query contains a lone surrogate (not Unicode text)")
        p = _check_prefix(prefix)
        k = _check_k(k)
        floor = _check_min_score(min_score)
        predicate, fparams = filter_sql(filters, alias=f"{p}_e", prefix=f"{p}_f")
        k1, b = self._k1, self._b
        params: dict[str, Any] = {
            **self._analysis_params(query, p), **fparams,
            f"{p}_k1": k1, f"{p}_k1p1": k1 + 1.0, f"{p}_kb0": k1 * (1.0 - b), f"{p}_kb1": k1 * b,
            f"{p}_min": floor, f"{p}_lim": k,
            f"{p}_nedf": float(PRUNE_MIN_DF), f"{p}_ner": PRUNE_RATIO, f"{p}_tol": _BOUND_TOLERANCE,
            f"{p}_pc": PROBE_COST, f"{p}_fsmall": FILTER_PROBE_MAX,
        }
        c = f":{p}_c"
        filtered = predicate != "TRUE"
        floor_sql = f"CAST(:{p}_min AS float8)"

        def contribution(t: str, post: str) -> str:
            return _contribution_sql(p, t, post)

        def keep(alias: str, scanned: str) -> str:
            """A WHERE condition restricting rows of ``alias`` (with ``entry_id``) to the filtered
            entries: primary-key probes when the ``scanned`` postings (a column of ``{p}_b``) are
            few, else membership in the filtered entries, read once (a hashed subplan)."""
            if not filtered:
                return "TRUE"
            return (f"CASE WHEN (SELECT {scanned} FROM {p}_b) <= CAST(:{p}_fsmall AS float8) "
                    f"THEN EXISTS (SELECT 1 FROM entries {p}_e WHERE {p}_e.corpus = {c} "
                    f"AND {p}_e.id = {alias}.entry_id AND {predicate}) "
                    f"ELSE {alias}.entry_id IN (SELECT fe.id FROM {p}_fe fe) END")

        def ne_sum(a: str) -> str:
            """The non-essential terms' part of the score of entry ``a`` (primary-key probes)."""
            return (f"coalesce((SELECT sum({contribution('t', 'p')}) FROM {p}_t t JOIN bm25_postings p "
                    f"ON p.corpus = {c} AND p.lexeme = t.lexeme AND p.entry_id = {a}.entry_id WHERE t.ne), "
                    f"0.0::float8)")

        # -- the full scoring (every posting of every query term) -------------------------
        # Filters join the postings before the aggregation: only matching entries are summed.
        fwhere = keep("p", "all_df")
        full = (f"SELECT s.entry_id, s.score FROM (SELECT p.entry_id, sum({contribution('w', 'p')}) AS score "
                f"FROM {p}_t w JOIN bm25_postings p ON p.corpus = {c} AND p.lexeme = w.lexeme "
                f"WHERE {fwhere} "
                f"GROUP BY p.entry_id) s "
                f"WHERE s.score >= {floor_sql} ORDER BY s.score DESC, s.entry_id LIMIT :{p}_lim")
        # -- phase A: entries holding an essential term, fully scored ---------------------
        awhere = keep("p", "ess_df")
        sql = (
            f"WITH {p}_q AS ({_query_terms_sql(p)}), "
            # The filtered entries, read once (and only when a filter is given).
            + (f"{p}_fe AS MATERIALIZED (SELECT {p}_e.id FROM entries {p}_e WHERE {p}_e.corpus = {c} "
               f"AND {predicate}), " if filtered else "") +
            f"{p}_st AS ({_stats_sql(p)}), "
            # MATERIALIZED: one row per query term, so df is summed once per term
            # (inlined, the planner re-runs the count for every posting it scores).
            f"{p}_w AS MATERIALIZED (SELECT q.lexeme, d.df, "
            f"  {_weight_sql(p, 'st.n', 'd.df')} AS wt, "
            f"  {_kbl_sql(p, 'st.n', 'st.tl')} AS kbl "
            f"  FROM {p}_q q CROSS JOIN {p}_st st CROSS JOIN LATERAL ({_df_sql(p, 'q.lexeme')}) d WHERE d.df > 0), "
            # Non-essential terms: the most frequent ones, while their summed upper
            # bounds stay below a share of the remaining terms' (at least one term stays essential).
            f"{p}_t AS MATERIALIZED (SELECT x.lexeme, x.df, x.wt, x.kbl, "
            f"  (x.rk < x.nt AND x.df >= CAST(:{p}_nedf AS float8) "
            f"   AND x.cum <= CAST(:{p}_ner AS float8) * (x.tot - x.cum)) AS ne "
            f"  FROM (SELECT w.*, row_number() OVER (ORDER BY w.df DESC, w.lexeme) AS rk, count(*) OVER () AS nt, "
            f"    sum(w.wt) OVER (ORDER BY w.df DESC, w.lexeme ROWS UNBOUNDED PRECEDING) AS cum, "
            f"    sum(w.wt) OVER () AS tot FROM {p}_w w) x), "
            # bne: every entry holding only non-essential terms scores at most bne.
            f"{p}_b AS MATERIALIZED (SELECT coalesce(sum(t.wt) FILTER (WHERE t.ne), 0.0::float8) AS bne, "
            f"  coalesce(sum(t.df) FILTER (WHERE t.ne), 0.0::float8) AS ne_df, "
            f"  coalesce(sum(t.df) FILTER (WHERE NOT t.ne), 0.0::float8) AS ess_df, "
            f"  coalesce(sum(t.df), 0.0::float8) AS all_df, count(*) FILTER (WHERE t.ne) AS n_ne FROM {p}_t t), "
            # Phase A: the partial (essential-term) score of every entry holding an essential term.
            f"{p}_pa AS MATERIALIZED (SELECT p.entry_id, sum({contribution('t', 'p')}) AS ps "
            f"  FROM {p}_t t JOIN bm25_postings p ON p.corpus = {c} AND p.lexeme = t.lexeme "
            f"  WHERE NOT t.ne AND {awhere} GROUP BY p.entry_id), "
            # c1: the k best partial scores, scored in full. Their k-th best full score
            # th1 bounds the k-th best score of phase A from below, so an entry with
            # ps + bne < max(th1, min_score) cannot be in the top k: only the others (c2c)
            # are scored in full.
            f"{p}_c1 AS MATERIALIZED (SELECT a.entry_id, a.ps + {ne_sum('a')} AS score FROM (SELECT x.entry_id, x.ps "
            f"  FROM {p}_pa x ORDER BY x.ps DESC, x.entry_id LIMIT :{p}_lim) a), "
            f"{p}_cut AS MATERIALIZED (SELECT greatest(coalesce((SELECT c.score FROM {p}_c1 c ORDER BY c.score DESC "
            f"  LIMIT 1 OFFSET :{p}_lim - 1), '-Infinity'::float8), {floor_sql}) - b.bne "
            f"  - CAST(:{p}_tol AS float8) * (1.0::float8 + b.bne) AS cut FROM {p}_b b WHERE b.n_ne > 0), "
            f"{p}_c2c AS MATERIALIZED (SELECT a.entry_id, a.ps FROM {p}_pa a WHERE a.ps >= (SELECT cut FROM {p}_cut) "
            f"  AND a.entry_id NOT IN (SELECT entry_id FROM {p}_c1)), "
            # Few candidates: primary-key probes; many: one pass over the non-essential
            # postings, hash-joined to the candidates.
            f"{p}_probe AS MATERIALIZED (SELECT (SELECT count(*) FROM {p}_c2c) * b.n_ne * CAST(:{p}_pc AS float8) "
            f"  <= b.ne_df AS probe FROM {p}_b b), "
            f"{p}_c2 AS (SELECT a.entry_id, a.ps + {ne_sum('a')} AS score FROM {p}_c2c a "
            f"  WHERE (SELECT probe FROM {p}_probe) "
            f"  UNION ALL SELECT a.entry_id, a.ps + coalesce(j.s, 0.0::float8) FROM {p}_c2c a LEFT JOIN ("
            f"    SELECT p.entry_id, sum({contribution('t', 'p')}) AS s FROM {p}_t t JOIN bm25_postings p "
            f"    ON p.corpus = {c} AND p.lexeme = t.lexeme JOIN {p}_c2c x ON x.entry_id = p.entry_id "
            f"    WHERE t.ne GROUP BY p.entry_id) j ON j.entry_id = a.entry_id "
            f"  WHERE NOT (SELECT probe FROM {p}_probe)), "
            f"{p}_ra AS MATERIALIZED (SELECT f.entry_id, f.score FROM (SELECT entry_id, score FROM {p}_c1 "
            f"  UNION ALL SELECT entry_id, score FROM {p}_c2) f WHERE f.score >= {floor_sql} "
            f"  ORDER BY f.score DESC, f.entry_id LIMIT :{p}_lim), "
            # ok: no entry outside phase A can enter the top k (its score is <= bne).
            f"{p}_ok AS MATERIALIZED (SELECT b.n_ne = 0 OR greatest(CASE WHEN (SELECT count(*) FROM {p}_ra) "
            f"  >= :{p}_lim THEN (SELECT min(r.score) FROM {p}_ra r) ELSE '-Infinity'::float8 END, {floor_sql}) "
            f"  > b.bne + CAST(:{p}_tol AS float8) * (1.0::float8 + b.bne) AS ok FROM {p}_b b) "
            f"SELECT u.entry_id, u.score FROM ("
            f"  SELECT r.entry_id, r.score FROM {p}_ra r WHERE (SELECT ok FROM {p}_ok) "
            f"  UNION ALL SELECT f.entry_id, f.score FROM ({full}) f WHERE NOT (SELECT ok FROM {p}_ok)) u "
            f"ORDER BY u.score DESC, u.entry_id LIMIT :{p}_lim"
        )
        return sql, params

    def search(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
               min_score: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` best ``(entry_id, score)`` pairs for ``query``, best first, ties by id.

        Only entries sharing at least one term with the query are returned (BM25
        scores are > 0); ``filters`` and inclusive ``min_score`` apply before the
        limit. Errors as :meth:`candidates_sql`; :class:`DatabaseError` from the database.
        """
        sql, params = self.candidates_sql(query, k, filters=filters, min_score=min_score)
        with self._store.transaction() as conn:
            rows = conn.execute(sa.text(sql), params).all()
        return [(r.entry_id, float(r.score)) for r in rows]

    # -- explanations -------------------------------------------------------------------
    def term_figures_sql(self, query: str, entry_ids: Sequence[str], *,
                         prefix: str = "kx") -> tuple[str, dict[str, Any]]:
        """A SELECT of every (entry, analysed query term) pair of ``entry_ids``: ``entry_id``,
        ``dl`` (document length), ``n`` and ``tl`` (corpus size and total length),
        ``lexeme``, ``df``, ``idf``, ``tf`` (0 when the entry lacks the term) and
        ``contribution``, computed by the same SQL expressions as the scores of
        :meth:`candidates_sql` (so per term they are the very summands of the score)."""
        if not isinstance(query, str) or "\x00" in query:
            raise ValidationError("query must be a string without NUL characters")
        p = _check_prefix(prefix)
        k1, b = self._k1, self._b
        params: dict[str, Any] = {**self._analysis_params(query, p), f"{p}_ids": list(entry_ids),
                                  f"{p}_k1p1": k1 + 1.0, f"{p}_kb0": k1 * (1.0 - b), f"{p}_kb1": k1 * b}
        sql = (
            f"WITH {p}_q AS ({_query_terms_sql(p)}), {p}_st AS ({_stats_sql(p)}), "
            f"{p}_w AS MATERIALIZED (SELECT q.lexeme, d.df, {_idf_sql('st.n', 'd.df')} AS idf, "
            f"  {_weight_sql(p, 'st.n', 'd.df')} AS wt, {_kbl_sql(p, 'st.n', 'st.tl')} AS kbl "
            f"  FROM {p}_q q CROSS JOIN {p}_st st CROSS JOIN LATERAL ({_df_sql(p, 'q.lexeme')}) d) "
            f"SELECT x.id AS entry_id, e.doc_len AS dl, st.n, st.tl, w.lexeme, w.df, w.idf, "
            f"  coalesce(bp.tf, 0) AS tf, CASE WHEN bp.tf IS NULL THEN 0.0::float8 "
            f"  ELSE {_contribution_sql(p, 'w', 'bp')} END AS contribution "
            f"FROM unnest(CAST(:{p}_ids AS text[])) AS x(id) "
            f"JOIN entries e ON e.corpus = :{p}_c AND e.id = x.id CROSS JOIN {p}_st st CROSS JOIN {p}_w w "
            f"LEFT JOIN bm25_postings bp ON bp.corpus = :{p}_c AND bp.lexeme = w.lexeme AND bp.entry_id = x.id"
        )
        return sql, params

    def explain_scores(self, conn: Connection, query: str, scores: Mapping[str, float]) -> dict[str, BM25Explanation]:
        """The :class:`BM25Explanation` of each entry of ``scores`` (entry id to its BM25 score for
        ``query``), read on ``conn`` (one statement; run it in the transaction that ranked, so
        the figures come from the same snapshot). Entries that no longer exist are left out."""
        if not scores:
            return {}
        sql, params = self.term_figures_sql(query, list(scores))
        rows: dict[str, list[Any]] = {}
        for row in conn.execute(sa.text(sql), params):
            rows.setdefault(row.entry_id, []).append(row)
        out: dict[str, BM25Explanation] = {}
        for entry_id, terms in rows.items():
            first = terms[0]
            n, tl = float(first.n), float(first.tl)
            out[entry_id] = BM25Explanation(
                float(scores[entry_id]), int(first.dl or 0), int(n), tl / n if n > 0 else 0.0, self._k1, self._b,
                tuple(BM25TermScore(str(t.lexeme), int(t.tf), int(t.df), float(t.idf), float(t.contribution))
                      for t in sorted(terms, key=lambda t: str(t.lexeme))))
        return out

    # -- term statistics (for pseudo-relevance feedback and tests) -------------------------
    def query_terms(self, query: str) -> list[str]:
        """The distinct analysed terms of ``query`` (as documents are analysed), sorted."""
        if not isinstance(query, str) or "\x00" in query or not is_unicode_text(query):
            raise ValidationError("query must be Unicode text without NUL characters")
        params = self._analysis_params(query, "k")
        with self._store.transaction() as conn:
            terms = conn.execute(sa.text(f"SELECT lexeme FROM ({_query_terms_sql('k')}) q ORDER BY lexeme"),
                                 params).scalars().all()
        return list(terms)

    def document_terms(self, entry_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """Term counts ``{entry_id: {term: tf}}`` of the given entries that exist (an
        existing entry without terms maps to an empty dict)."""
        ids = list(dict.fromkeys(entry_ids))
        out: dict[str, dict[str, int]] = {}
        if not ids:
            return out
        c = {"c": self._store.corpus, "ids": ids}
        with self._store.transaction() as conn:
            for eid in conn.execute(sa.text("SELECT id FROM entries WHERE corpus = :c AND id = ANY(:ids)"),
                                    c).scalars():
                out[eid] = {}
            for row in conn.execute(sa.text(
                    "SELECT p.entry_id, p.lexeme, p.tf FROM entries e CROSS JOIN unnest(e.lexemes) AS l(lexeme) "
                    "JOIN bm25_postings p ON p.corpus = e.corpus AND p.lexeme = l.lexeme AND p.entry_id = e.id "
                    "WHERE e.corpus = :c AND e.id = ANY(:ids)"), c):
                out.setdefault(row.entry_id, {})[row.lexeme] = int(row.tf)
        return out

    def corpus_statistics(self) -> tuple[int, float]:
        """``(number of entries, average document length in terms)``; ``(0, 0.0)`` when empty."""
        with self._store.transaction() as conn:
            row = conn.execute(sa.text(
                "SELECT coalesce(sum(n_docs), 0) AS n, coalesce(sum(total_len), 0) AS tl "
                "FROM bm25_stats WHERE corpus = :c"), {"c": self._store.corpus}).one()
        n, tl = int(row.n), int(row.tl)
        return n, (tl / n if n > 0 else 0.0)

    def document_frequency(self, terms: Iterable[str]) -> dict[str, int]:
        """The number of entries containing each term (analysed form, as from
        :meth:`query_terms` or :meth:`document_terms`); 0 for unknown terms."""
        wanted = list(dict.fromkeys(terms))
        for term in wanted:
            if not isinstance(term, str):
                raise ValidationError(f"terms must be strings, got {term!r}")
        if not wanted:
            return {}
        with self._store.transaction() as conn:
            rows = conn.execute(sa.text(
                "SELECT t.term, (SELECT coalesce(sum(p.df), 0) FROM bm25_df p WHERE p.corpus = :c AND p.lexeme = t.term) "
                "AS df FROM unnest(CAST(:terms AS text[])) AS t(term)"),
                {"c": self._store.corpus, "terms": wanted}).all()
        return {r.term: int(r.df) for r in rows}
