"""The read side of true Okapi BM25 over one corpus: :class:`BM25Index`.

The write side lives in the store (:mod:`tnsrag_db._store.bm25`, run by
:class:`~tnsrag_db._store.store.Store`'s writes): every write keeps
``bm25_postings(corpus, lexeme, entry_id, tf, doc_len)``, ``entries.doc_len`` and the
sharded counters ``bm25_stats(corpus, shard, n_docs, total_len)`` and
``bm25_df(corpus, lexeme, shard, df)`` in the entry's own transaction, and merges move the
postings into blocks (:mod:`tnsrag_db._store.bm25.merge`). One statement per
search (:mod:`tnsrag_db._indexes.bm25.sql`):

1. analyses the query exactly like a document (identifiers rewritten by
   :func:`~tnsrag_db._store.bm25.analysis.analyze` in Python, lexemes from ``to_tsvector``
   with the corpus's text search configuration, plus the whole-identifier terms),
   deduplicated;
2. sums N, the total length and each term's document frequency over their shard
   rows (at most 16 rows each, however frequent the term), so all statistics
   come from the statement's single snapshot and always agree with the committed
   entries, even under concurrent writers;
3. scores ``idf · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`` with
   ``idf = ln(1 + (N − df + 0.5)/(df + 0.5))``, all in float8
   (:mod:`tnsrag_db._indexes.bm25.scoring` is the same formula in Python);
4. applies metadata filters (joined on ``entries``) and ``min_score`` (inclusive)
   before the limit; ties are broken by entry id.

Frequent terms are pruned without changing any result (MaxScore), and only when some
query term is frequent: see :mod:`tnsrag_db._indexes.bm25.sql`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from tnsrag_db._db.as_of import with_instant
from tnsrag_db._db.statement import Plan, Rows, Statement
from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._indexes.bm25 import scoring, sql
from tnsrag_db._indexes.bm25.scoring import DEFAULT_B, DEFAULT_K1, check_bm25_parameters
from tnsrag_db._store.bm25.analysis import analyze_query
from tnsrag_db._store.filters import filter_sql, pairs_alone
from tnsrag_db._store.store import Store
from tnsrag_db._types import MAX_CANDIDATES, MemoryEntry
from tnsrag_db._validate import check_int, check_number, check_prefix, check_query_text

if TYPE_CHECKING:  # the explanations load in ~0.05 s: a keyword query does not need them

    from tnsrag_db._counts import IngestCounts
    from tnsrag_db.explain import BM25Explanation

__all__ = ["BM25Index"]

#: The columns of :meth:`BM25Index.documents_statement`'s rows.
DOCUMENT_COLUMNS = ("score", "entry_id", "content", "tier", "source", "metadata")

#: Default ``prune_min_df``: a query term is pruned (scored only for entries that already
#: hold a rarer query term) only when at least this many entries contain it.
DEFAULT_PRUNE_MIN_DF = 1000
#: Default ``prune_ratio``: pruned terms' summed score bounds stay at most this share of
#: the other terms'.
DEFAULT_PRUNE_RATIO = 0.5
#: Default ``probe_cost``: a primary-key probe costs about this many postings read in sequence.
DEFAULT_PROBE_COST = 20.0
#: Default ``filter_probe_max``: with a filter, up to this many scanned postings check it
#: by primary-key probes of their entries; more read the filtered entries once.
DEFAULT_FILTER_PROBE_MAX = 2000.0


# The rendered statements depend only on the prefix and the filter predicate (values are
# bound): render each once.
@lru_cache(maxsize=256)
def _ranking_sql(p: str, predicate: str, limit: int, ids: str, probe: str, shared: bool = False) -> str:
    return sql.ranking_sql(p, predicate, limit=limit, ids=ids, probe=probe, shared_terms=shared)


@lru_cache(maxsize=256)
def _plain_ranking_sql(p: str, predicate: str, limit: int, ids: str, probe: str, shared: bool = False) -> str:
    return sql.plain_ranking_sql(p, predicate, limit=limit, ids=ids, probe=probe, shared_terms=shared)


@lru_cache(maxsize=256)
def _documents_of_ranking_sql(p: str, ranking: str) -> str:
    # LEFT JOIN: a plain statement's row of NULLs stays (ranked entries always exist:
    # the same snapshot ranked them).
    return f"WITH {p}_rk AS (\n{ranking}\n)\n" + sql.documents_sql(
        p, f"{p}_rk", "r.score", "r.score DESC NULLS FIRST, r.entry_id", join="LEFT JOIN")


class BM25Index:
    """A BM25 view over one corpus of a :class:`Store` (``k1`` default 1.2, ``b`` default 0.75).

    Writes go through the store (postings and statistics are maintained by every
    store write); this class adds scoring and the term statistics used by
    pseudo-relevance feedback. Raises :class:`ConfigurationError` when ``store`` is
    not a Store, ``k1`` is negative or not finite, or ``b`` is outside [0, 1].

    Keyword-only tuning options of the pruned scoring (:mod:`tnsrag_db._indexes.bm25.sql`);
    they choose how a ranking is computed, never which rows or scores it returns:

    - ``prune_min_df`` (int ≥ 1, default 1,000): a query term counts as frequent, and may
      be pruned, when at least this many entries hold it; below it every posting is scored;
    - ``prune_ratio`` (number ≥ 0, default 0.5): pruned terms' summed score bounds stay at
      most this share of the other terms';
    - ``probe_cost`` (number ≥ 0, default 20): what one primary-key probe of the postings
      costs, in postings read in sequence (probes or one pass for the pruned terms);
    - ``filter_probe_max`` (number ≥ 0, default 2,000): with a filter, up to this many
      scanned postings check it by primary-key probes; more read the filtered entries once.

    A bad option raises :class:`ConfigurationError` naming it.
    """

    def __init__(self, store: Store, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B,
                 prune_min_df: int = DEFAULT_PRUNE_MIN_DF, prune_ratio: float = DEFAULT_PRUNE_RATIO,
                 probe_cost: float = DEFAULT_PROBE_COST, filter_probe_max: float = DEFAULT_FILTER_PROBE_MAX) -> None:
        if not isinstance(store, Store):
            raise ConfigurationError(f"BM25Index needs a Store, got {type(store).__name__}")
        self._store = store
        self._k1, self._b = check_bm25_parameters(k1, b)
        self._prune_min_df = check_int(prune_min_df, "prune_min_df", minimum=1, error=ConfigurationError)
        self._prune_ratio = check_number(prune_ratio, "prune_ratio", minimum=0.0, error=ConfigurationError)
        self._probe_cost = check_number(probe_cost, "probe_cost", minimum=0.0, error=ConfigurationError)
        self._filter_probe_max = check_number(filter_probe_max, "filter_probe_max", minimum=0.0,
                                              error=ConfigurationError)

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

    @property
    def prune_min_df(self) -> int:
        """The fewest entries holding a query term for it to count as frequent (default 1,000)."""
        return self._prune_min_df

    @property
    def prune_ratio(self) -> float:
        """The largest share of the other terms' bounds the pruned terms' bounds may sum to (default 0.5)."""
        return self._prune_ratio

    @property
    def probe_cost(self) -> float:
        """A primary-key probe's cost in postings read in sequence (default 20)."""
        return self._probe_cost

    @property
    def filter_probe_max(self) -> float:
        """The most scanned postings a filter is checked on by primary-key probes (default 2,000)."""
        return self._filter_probe_max

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

    def _formula_params(self, p: str) -> dict[str, float]:
        k1, b = self._k1, self._b
        return {f"{p}_k1p1": k1 + 1.0, f"{p}_kb0": k1 * (1.0 - b), f"{p}_kb1": k1 * b}

    def candidates_sql(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                       min_score: float = 0.0, prefix: str = "k") -> tuple[str, dict[str, Any]]:
        """A SELECT of ``(entry_id, score)``, best first (ties by entry id), at most ``k`` rows.

        The statement analyses ``query`` itself (no extra round trip), applies
        ``filters`` (exact metadata match) and ``min_score`` (inclusive) before the
        limit, and carries the corpus key everywhere. It is one complete SELECT with
        its own ``WITH`` clause, so it can be embedded as a CTE
        (``WITH kw AS (<sql>) ...``) or a subquery. Every bound parameter and CTE
        name starts with ``prefix`` (a short ``[a-z][a-z0-9_]*`` code constant); the
        corpus is bound as ``:<prefix>_c``; one parameter is shared by every statement of
        the library, ``:tnsrag_as_of``, the instant it answers at (bound to the ``as_of`` of
        the block it is built in, see :func:`tnsrag_db.as_of`; None: now). Frequent terms are pruned as
        :mod:`tnsrag_db._indexes.bm25.sql` describes: the rows and scores are those of
        scoring every posting.

        Raises :class:`ValidationError` for a non-string query, ``k < 1`` or a
        non-finite ``min_score``; :class:`ConfigurationError` for a bad ``prefix``;
        :class:`InvalidFilterError` for a bad filter.
        """
        pairs = bool(filters) and self._store.run(self._store.filter_pairs_plan())
        statement = self.ranking_statement(query, k, filters=filters, min_score=min_score, prefix=prefix, pairs=pairs)
        return with_instant(statement.sql, dict(statement.params))

    def ranking_statement(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                          min_score: float = 0.0, prefix: str = "k", plain: bool = False,
                          shared_terms: bool = False, pairs: bool = False) -> Statement:
        """:meth:`candidates_sql` as a :class:`~tnsrag_db._db.statement.Statement` (columns
        ``entry_id``, ``score``), built without I/O.

        ``pairs``: whether ``filters`` go through the filter pairs, the answer of the store's
        ``filter_pairs_plan()``, which the calling plan runs first (tenancy on); False:
        ``metadata @>``.

        With ``shared_terms`` the statement does not define its query-term CTEs: the
        statement it is embedded in defines them once (:meth:`terms_ctes`, same prefix),
        for it and for :meth:`scores_sql` with ``shared_terms``.

        With ``plain`` the statement is the short one of the common case (no query term
        frequent enough for pruning to pay): the same rows when it applies, else one row
        ``(NULL, NULL)`` and nothing scored, after which the caller runs the statement
        without ``plain`` (as :meth:`search` does). Both score exactly alike (the pruned
        statement takes the plain scoring whenever no term is non-essential). Errors as
        :meth:`candidates_sql`.
        """
        text = check_query_text(query)
        p = check_prefix(prefix, error=ConfigurationError)
        limit = check_int(k, "k", minimum=1, maximum=MAX_CANDIDATES)
        floor = check_number(min_score, "min_score")
        # The filter pairs only where tenancy is on (the caller's plan asked the store); else metadata @>.
        corpus_param = f"{p}_c" if filters and pairs else None
        predicate, fparams = filter_sql(filters, alias=f"{p}_e", prefix=f"{p}_f", corpus_param=corpus_param)
        # Metadata keys only: the filtered ids, and the per-posting check, from the pairs alone.
        ids, probe = pairs_alone(filters, prefix=f"{p}_f", corpus_param=corpus_param, probe=sql.POSTING_ENTRY)
        params: dict[str, Any] = {
            **self._analysis_params(text, p), **fparams, **self._formula_params(p),
            f"{p}_min": floor, f"{p}_lim": limit, f"{p}_nedf": float(self._prune_min_df),
            f"{p}_fsmall": self._filter_probe_max,
        }
        if plain:
            return Statement(_plain_ranking_sql(p, predicate, limit, ids, probe, shared_terms), params,
                             ("entry_id", "score"))
        params.update({f"{p}_ner": self._prune_ratio, f"{p}_tol": sql.BOUND_TOLERANCE, f"{p}_pc": self._probe_cost})
        return Statement(_ranking_sql(p, predicate, limit, ids, probe, shared_terms), params, ("entry_id", "score"))

    def terms_ctes(self, prefix: str) -> str:
        """The query-term CTEs (``<prefix>_q``, ``<prefix>_st``, ``<prefix>_w``) that statements
        built with ``shared_terms`` and the same prefix read; their parameters are those
        statements' own."""
        return sql.terms_ctes(check_prefix(prefix, error=ConfigurationError))

    def scores_sql(self, query: str, source: str, *, prefix: str = "ks",
                   shared_terms: bool = False) -> tuple[str, dict[str, Any]]:
        """A SELECT of ``(entry_id, score)``: the BM25 score of ``query`` for each entry of the
        CTE ``source`` (a code constant naming a CTE with an ``entry_id`` column, defined by
        the statement this one is embedded in), exactly as :meth:`ranking_statement` scores
        it; 0 for an entry holding no query term. Names and parameters start with
        ``prefix``; with ``shared_terms`` the query's terms are the enclosing statement's
        (:meth:`terms_ctes`). Errors as :meth:`candidates_sql`."""
        text = check_query_text(query)
        p = check_prefix(prefix, error=ConfigurationError)
        return (sql.scores_sql(p, source, shared_terms=shared_terms),
                {**self._analysis_params(text, p), **self._formula_params(p)})

    def documents_statement(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                            min_score: float = 0.0, prefix: str = "k", plain: bool = False,
                            pairs: bool = False) -> Statement:
        """The ranking of :meth:`ranking_statement` with each entry's row: columns ``score``,
        ``entry_id``, ``content``, ``tier``, ``source``, ``metadata``, best first (ties by
        entry id), as :func:`~tnsrag_db._store.reads.document_from_row` reads them; with
        ``plain``, one row of NULLs when the plain scoring does not apply (see
        :meth:`ranking_statement`; ``pairs`` as there). Errors as :meth:`candidates_sql`."""
        ranking = self.ranking_statement(query, k, filters=filters, min_score=min_score, prefix=prefix, plain=plain,
                                         pairs=pairs)
        return Statement(_documents_of_ranking_sql(prefix, ranking.sql), ranking.params, DOCUMENT_COLUMNS)

    def documents_plan(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                       min_score: float = 0.0) -> Plan[Rows]:
        """The rows of :meth:`documents_statement` as a :data:`~tnsrag_db._db.statement.Plan`:
        the plain statement first, the pruned one only when some query term is frequent."""
        pairs = bool(filters) and (yield from self._store.filter_pairs_plan())
        rows = yield self.documents_statement(query, k, filters=filters, min_score=min_score, plain=True, pairs=pairs)
        if rows and rows[0].entry_id is None:
            rows = yield self.documents_statement(query, k, filters=filters, min_score=min_score, pairs=pairs)
        return rows

    def documents_sql(self, source: str, *, columns: str, order_by: str, prefix: str,
                      left_join: bool = False) -> str:
        """``SELECT <columns>, <entry columns> FROM <source> r JOIN entries ...``: the entry rows
        (alias ``e``, :data:`~tnsrag_db._store.reads.ENTRY_COLUMNS`) of the rows ``r`` of the
        CTE ``source`` (with an ``entry_id`` column), ordered by ``order_by``; the corpus is
        bound as ``:<prefix>_c`` by the caller (or by a ranking statement of this index built
        with ``prefix`` in the same statement). ``source``, ``columns`` and
        ``order_by`` are code constants. ``left_join`` keeps rows of ``source`` without an
        entry (a plain statement's row of NULLs), with NULL entry columns."""
        return sql.documents_sql(check_prefix(prefix, error=ConfigurationError), source, columns, order_by,
                                 join="LEFT JOIN" if left_join else "JOIN")

    def _search_plan(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
                     min_score: float = 0.0) -> Plan[list[tuple[str, float]]]:
        """:meth:`search` as an I/O-free :data:`~tnsrag_db._db.statement.Plan`: the plain
        statement first, the pruned one only when some query term is frequent."""
        pairs = bool(filters) and (yield from self._store.filter_pairs_plan())
        rows = yield self.ranking_statement(query, k, filters=filters, min_score=min_score, plain=True, pairs=pairs)
        if rows and rows[0].entry_id is None:
            rows = yield self.ranking_statement(query, k, filters=filters, min_score=min_score, pairs=pairs)
        return [(r.entry_id, float(r.score)) for r in rows]

    def search(self, query: str, k: int, *, filters: Mapping[str, str] | None = None,
               min_score: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` best ``(entry_id, score)`` pairs for ``query``, best first, ties by id.

        Only entries sharing at least one term with the query are returned (BM25
        scores are > 0); ``filters`` and inclusive ``min_score`` apply before the
        limit. Errors as :meth:`candidates_sql`; :class:`DatabaseError` from the database.
        """
        return self._store.run(self._search_plan(query, k, filters=filters, min_score=min_score))

    # -- explanations -------------------------------------------------------------------
    def term_figures_sql(self, query: str, entry_ids: Sequence[str], *,
                         prefix: str = "kx") -> tuple[str, dict[str, Any]]:
        """A SELECT of every (entry, analysed query term) pair of ``entry_ids``: ``entry_id``,
        ``dl`` (document length), ``n`` and ``tl`` (corpus size and total length),
        ``lexeme``, ``df`` and ``tf`` (0 when the entry lacks the term), read from the same
        statistics as :meth:`candidates_sql`; :func:`explain_rows` turns them into
        figures by :mod:`~tnsrag_db._indexes.bm25.scoring`, the very summands of the scores."""
        check_query_text(query)
        p = check_prefix(prefix, error=ConfigurationError)
        params: dict[str, Any] = {**self._analysis_params(query, p), f"{p}_ids": list(entry_ids),
                                  **self._formula_params(p)}
        return sql.figures_sql(p), params

    def explain_rows(self, rows: Rows, scores: Mapping[str, float]) -> dict[str, BM25Explanation]:
        """The :class:`BM25Explanation` of each entry of ``scores`` from the rows of
        :meth:`term_figures_sql` (entries without rows are left out)."""
        from tnsrag_db.explain import BM25Explanation, BM25TermScore

        by_entry: dict[str, list[Any]] = {}
        for row in rows:
            by_entry.setdefault(row.entry_id, []).append(row)
        k1, b = self._k1, self._b
        out: dict[str, BM25Explanation] = {}
        for entry_id, terms in by_entry.items():
            first = terms[0]
            n, tl, dl = float(first.n), float(first.tl), int(first.dl or 0)
            kbl = scoring.length_factor(n, tl, k1, b)
            figures = []
            for t in sorted(terms, key=lambda t: str(t.lexeme)):
                tf, df = int(t.tf), float(t.df)
                idf = scoring.idf(n, df)
                part = scoring.contribution(scoring.term_weight(idf, k1), kbl, tf, dl, k1, b) if tf > 0 else 0.0
                figures.append(BM25TermScore(str(t.lexeme), tf, int(df), idf, part))
            out[entry_id] = BM25Explanation(float(scores[entry_id]), dl, int(n), tl / n if n > 0 else 0.0,
                                            k1, b, tuple(figures))
        return out

    def explain_scores(self, execute: Callable[[Statement], Rows], query: str,
                       scores: Mapping[str, float]) -> dict[str, BM25Explanation]:
        """The :class:`BM25Explanation` of each entry of ``scores`` (entry id to its BM25 score for
        ``query``), read with ``execute`` (a statement executor, one statement; run it in the
        snapshot that ranked, so the figures agree with the scores). Entries that no longer
        exist are left out."""
        if not scores:
            return {}
        sql_text, params = self.term_figures_sql(query, list(scores))
        return self.explain_rows(list(execute(Statement(sql_text, params))), scores)

    # -- term statistics (for pseudo-relevance feedback and tests) -------------------------
    def query_terms(self, query: str) -> list[str]:
        """The distinct analysed terms of ``query`` (as documents are analysed), sorted."""
        check_query_text(query)
        rows = self._store.read(sql.sorted_query_terms_sql("k"), self._analysis_params(query, "k"))
        return [r.lexeme for r in rows]

    def document_terms(self, entry_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """Term counts ``{entry_id: {term: tf}}`` of the given entries that exist (an
        existing entry without terms maps to an empty dict)."""
        ids = list(dict.fromkeys(entry_ids))
        out: dict[str, dict[str, int]] = {}
        if not ids:
            return out
        for row in self._store.read(sql.DOCUMENT_TERMS_SQL, {"c": self._store.corpus, "ids": ids}):
            counts = out.setdefault(row.entry_id, {})
            if row.lexeme is not None and row.tf is not None:
                counts[row.lexeme] = int(row.tf)
        return out

    def corpus_statistics(self) -> tuple[int, float]:
        """``(number of entries, average document length in terms)``; ``(0, 0.0)`` when empty."""
        row = self._store.read(sql.CORPUS_STATISTICS_SQL, {"c": self._store.corpus})[0]
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
        rows = self._store.read(sql.DOCUMENT_FREQUENCY_SQL, {"c": self._store.corpus, "terms": wanted})
        return {r.term: int(r.df) for r in rows}
