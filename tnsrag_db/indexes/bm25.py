"""True Okapi BM25 over a corpus, computed in one SQL statement per query.

The write side lives in :class:`~tnsrag_db.store.store.Store`: every write keeps
``bm25_postings(corpus, lexeme, entry_id, tf, doc_len)``, ``entries.doc_len`` and the
sharded counters ``bm25_stats(corpus, shard, n_docs, total_len)`` in the entry's own
transaction. This module is the read side. One statement per search:

1. analyses the query exactly like a document (identifiers rewritten by
   :func:`~tnsrag_db.store.analysis.analyze` in Python, lexemes from ``to_tsvector``
   with the corpus's text search configuration, plus the whole-identifier terms),
   deduplicated;
2. sums N and the total length over the shard rows, counts each term's document
   frequency from the postings primary key (an index-only scan), so all statistics
   come from the statement's single snapshot and always agree with the committed
   entries, even under concurrent writers;
3. scores ``idf · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`` with
   ``idf = ln(1 + (N − df + 0.5)/(df + 0.5))``, all in float8;
4. applies metadata filters (joined on ``entries``) and ``min_score`` (inclusive)
   before the limit; ties are broken by entry id.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from tnsrag_db.errors import ConfigurationError, ValidationError
from tnsrag_db.store.analysis import analyze
from tnsrag_db.store.filters import filter_sql
from tnsrag_db.store.store import IngestCounts, Store
from tnsrag_db.types import MemoryEntry

__all__ = ["DEFAULT_B", "DEFAULT_K1", "BM25Index"]

#: Default term-frequency saturation.
DEFAULT_K1 = 1.2
#: Default document-length normalisation.
DEFAULT_B = 0.75

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
        for name, value in (("k1", k1), ("b", b)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigurationError(f"{name} must be a finite number, got {value!r}")
        if k1 < 0:
            raise ConfigurationError(f"k1 must be >= 0, got {k1!r}")
        if not 0.0 <= b <= 1.0:
            raise ConfigurationError(f"b must be between 0 and 1, got {b!r}")
        self._store = store
        self._k1 = float(k1)
        self._b = float(b)

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
        analysed = analyze(query)
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
        corpus is bound as ``:<prefix>_c``.

        Raises :class:`ValidationError` for a non-string query, ``k < 1`` or a
        non-finite ``min_score``; :class:`InvalidFilterError` for a bad filter.
        """
        if not isinstance(query, str):
            raise ValidationError(f"query must be a string, got {type(query).__name__}")
        if "\x00" in query:
            raise ValidationError("query contains a NUL character")
        p = _check_prefix(prefix)
        k = _check_k(k)
        floor = _check_min_score(min_score)
        predicate, fparams = filter_sql(filters, alias=f"{p}_e", prefix=f"{p}_f")
        k1, b = self._k1, self._b
        params: dict[str, Any] = {
            **self._analysis_params(query, p), **fparams,
            f"{p}_k1": k1, f"{p}_k1p1": k1 + 1.0, f"{p}_kb0": k1 * (1.0 - b), f"{p}_kb1": k1 * b,
            f"{p}_min": floor, f"{p}_lim": k,
        }
        c = f":{p}_c"
        if predicate == "TRUE":
            final = (f"SELECT s.entry_id, s.score FROM {p}_s s WHERE s.score >= CAST(:{p}_min AS float8) "
                     f"ORDER BY s.score DESC, s.entry_id LIMIT :{p}_lim")
        else:
            final = (f"SELECT s.entry_id, s.score FROM {p}_s s JOIN entries {p}_e "
                     f"ON {p}_e.corpus = {c} AND {p}_e.id = s.entry_id "
                     f"WHERE s.score >= CAST(:{p}_min AS float8) AND {predicate} "
                     f"ORDER BY s.score DESC, s.entry_id LIMIT :{p}_lim")
        # Float8 everywhere: a bare numeric constant times an int column is NUMERIC
        # arithmetic, several times slower. ``kb1 / avgdl`` = k1·b·N/total_len.
        sql = (
            f"WITH {p}_q AS ({_query_terms_sql(p)}), "
            f"{p}_st AS (SELECT coalesce(sum(n_docs), 0)::float8 AS n, coalesce(sum(total_len), 0)::float8 AS tl "
            f"  FROM bm25_stats WHERE corpus = {c}), "
            # MATERIALIZED: one row per query term, so df is counted once per term
            # (inlined, the planner re-runs the count for every posting it scores).
            f"{p}_w AS MATERIALIZED (SELECT q.lexeme, "
            f"  ln(1.0::float8 + (st.n - d.df + 0.5::float8) / (d.df + 0.5::float8)) "
            f"    * CAST(:{p}_k1p1 AS float8) AS wt, "
            f"  CASE WHEN st.tl > 0 THEN CAST(:{p}_kb1 AS float8) * st.n / st.tl ELSE 0.0::float8 END AS kbl "
            f"  FROM {p}_q q CROSS JOIN {p}_st st CROSS JOIN LATERAL (SELECT count(*)::float8 AS df "
            f"    FROM bm25_postings dp WHERE dp.corpus = {c} AND dp.lexeme = q.lexeme) d WHERE d.df > 0), "
            f"{p}_s AS (SELECT p.entry_id, sum(w.wt * p.tf / (p.tf + CAST(:{p}_kb0 AS float8) + w.kbl * p.doc_len)) "
            f"  AS score FROM {p}_w w JOIN bm25_postings p ON p.corpus = {c} AND p.lexeme = w.lexeme "
            f"  GROUP BY p.entry_id) "
            f"{final}"
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

    # -- term statistics (for pseudo-relevance feedback and tests) -------------------------
    def query_terms(self, query: str) -> list[str]:
        """The distinct analysed terms of ``query`` (as documents are analysed), sorted."""
        if not isinstance(query, str) or "\x00" in query:
            raise ValidationError("query must be a string without NUL characters")
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
                    "SELECT entry_id, lexeme, tf FROM bm25_postings WHERE corpus = :c AND entry_id = ANY(:ids)"), c):
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
                "SELECT t.term, (SELECT count(*) FROM bm25_postings p WHERE p.corpus = :c AND p.lexeme = t.term) "
                "AS df FROM unnest(CAST(:terms AS text[])) AS t(term)"),
                {"c": self._store.corpus, "terms": wanted}).all()
        return {r.term: int(r.df) for r in rows}
