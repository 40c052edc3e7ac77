"""The text of the fused BM25 + vector statement (no I/O).

:data:`FUSED_SQL` fuses the streams' rankings inside the database, by a normalised score
fusion of complete information (:func:`scored_ctes`, :data:`SCORE_FUSION_SQL`) or by
Reciprocal Rank Fusion (:data:`RRF_SQL`); its ``{...}`` fields are code constants: the
streams' CTEs (the BM25 stream's query terms ``hk_q``, ``hk_st``, ``hk_w``, each stream a
ranking statement of its index, embedded as ``hk_r`` or ``hv_r``, and ``ranked``, built
by :func:`ranked_cte`), the deferral gate (:data:`DEFER_SQL`), the limit and the
reference depth (validated ints) and the entry rows (the BM25 index's documents SELECT
over ``h_top``). Every value is bound: ``:h_k`` (the RRF constant), ``:h_min`` (the fused
score's floor), ``:h_c`` (the corpus), the weights and the streams' own parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from textwrap import dedent
from typing import Any

__all__ = ["DEFER_SQL", "FUSED_SQL", "NORMALIZATIONS", "SCORED_SQL", "candidates_sql", "fused_score", "fused_sql",
           "ranked_cte", "ranked_stream", "scored_ctes", "stream_cte", "weight_sql"]

# The fused ranking. {streams}: the streams' CTEs, ``ranked`` and, for a normalised score
# fusion, the scored candidates (:func:`scored_ctes`); {fused}: the fused scores (RRF_SQL or
# SCORE_FUSION_SQL); {go} and {stop}: the streams' CTEs and ``ranked``; {go} and {stop}: TRUE and
# FALSE, or whether the BM25 stream did not / did defer to its pruned statement ({defer}).
FUSED_SQL = dedent("""\
    WITH {streams},
    {defer}fused AS (
    {fused}
    ), h_top AS (
      -- The final top max_results, before any entry row is read; with a deferring BM25
      -- stream only its row of NULLs (nothing fused, no vector search).
      SELECT t.entry_id, t.score, t.best FROM (
        SELECT f.entry_id, f.score, f.best FROM fused f
        WHERE {go} AND f.score >= CAST(:h_min AS float8)
        ORDER BY f.score DESC, f.best, f.entry_id
        LIMIT {limit}
      ) t
      UNION ALL
      SELECT NULL, NULL, NULL WHERE {stop}
    )
    {documents}""")

#: Reciprocal Rank Fusion over the streams' own lists: each stream adds weight / (k + rank);
#: best: the best single rank, the first tie-breaker.
RRF_SQL = """\
  SELECT entry_id, sum(w / (CAST(:h_k AS float8) + rank)) AS score, min(rank) AS best
  FROM ranked GROUP BY entry_id"""

#: Normalised score fusion over complete information: ``{score}`` is the weighted sum of
#: the normalised scores of each stream run, added in stream order (:func:`fused_score`).
SCORE_FUSION_SQL = """\
  SELECT a.entry_id, {score} AS score, a.best
  FROM h_all a CROSS JOIN h_ref f"""

#: How stream ``{n}``'s score ``a.s{n}`` is normalised against its reference figures (its
#: first rows: ``f.hi{n}`` the best score, ``f.lo{n}`` the lowest, ``f.mu{n}`` the mean,
#: ``f.sd{n}`` the population standard deviation), as
#: :func:`tnsrag_db._strategies.fusion.normalize`: ``zscore`` the z-score plus 3 (0 at three
#: deviations below the mean), ``minmax`` the place between the lowest (0) and the best (1);
#: never below 0, so a fused score is at least 0 like every other strategy's. With no
#: spread, 1 at or above the best, else 0; a stream without reference rows adds 0, and so
#: does a candidate without a vector (its score is NULL, which ``greatest`` ignores).
NORMALIZATIONS = {
    "zscore": ("CASE WHEN f.sd{n} > 0 THEN greatest((a.s{n} - f.mu{n}) / f.sd{n} + 3.0::float8, 0.0::float8) "
               "WHEN a.s{n} >= f.hi{n} THEN 1.0::float8 ELSE 0.0::float8 END"),
    "minmax": ("CASE WHEN f.hi{n} > f.lo{n} THEN greatest((a.s{n} - f.lo{n}) / (f.hi{n} - f.lo{n}), 0.0::float8) "
               "WHEN a.s{n} >= f.hi{n} THEN 1.0::float8 ELSE 0.0::float8 END"),
}

#: The scored candidates with their reference figures (the rows explanations and
#: benchmarks read): per candidate and stream run, the weight, the score and the rank in
#: the stream's own list (NULL: the stream did not propose it, its score was computed).
SCORED_SQL = dedent("""\
    WITH {streams}
    SELECT a.entry_id, u.stream, u.w, u.score, u.rank, u.hi, u.lo, u.mu, u.sd
    FROM h_all a CROSS JOIN h_ref f
    CROSS JOIN LATERAL (VALUES {values}) AS u(stream, w, score, rank, hi, lo, mu, sd)
    ORDER BY a.entry_id, u.stream""")

DEFER_SQL = dedent("""\
    h_defer AS MATERIALIZED (
      -- The BM25 stream's plain statement returns one row of NULLs when a frequent term
      -- needs its pruned statement instead.
      SELECT EXISTS (SELECT 1 FROM hk_r WHERE hk_r.entry_id IS NULL) AS deferred
    ),
    """)


def weight_sql(weight: float, name: str, params: dict[str, Any]) -> str:
    """A stream's weight in SQL: the literal 1 for the default, else ``:name`` bound (in
    ``params``) as float8."""
    if weight == 1.0:
        return "1.0::float8"
    params[name] = weight
    return f"CAST(:{name} AS float8)"


def stream_cte(name: str, ranking: str) -> str:
    """The CTE ``name`` over a stream's ranking SELECT (rows ``entry_id, score``, best first)."""
    return f"{name} AS (\n{ranking}\n)"


def ranked_stream(stream: int, weight: str, source: str) -> str:
    """One stream's rows of ``ranked``: ``stream`` (1 BM25, 2 vector), entry id, score, the
    ``weight`` (an SQL expression from :func:`weight_sql`) and the 1-based rank in ``source``."""
    return (f"SELECT {stream} AS stream, entry_id, score, {weight} AS w,\n"
            f"         row_number() OVER (ORDER BY score DESC, entry_id) AS rank FROM {source}")


def ranked_cte(streams: Sequence[str]) -> str:
    """The CTE ``ranked``: the rows of :func:`ranked_stream` of each stream run."""
    return ("ranked AS (\n  -- Each stream's candidates with their 1-based rank and the stream's fusion weight.\n  "
            + "\n  UNION ALL\n  ".join(streams) + "\n)")


def scored_ctes(extras: Sequence[tuple[int, str]], depth: int) -> str:
    """The CTEs of complete information after ``ranked``: ``h_pair`` (every candidate either
    stream proposed, with its score ``s1``/``s2`` and rank ``r1``/``r2`` in each stream's own
    list, NULL where it has none), ``h_ref`` (one row: each stream's reference figures over
    its first ``depth`` rows, ``hi1, lo1, mu1, sd1, hi2, ...``), ``h_x<n>`` (per stream run
    ``(n, SELECT of entry_id, score)`` in ``extras``: the scores of the candidates that
    stream did not propose, reading ``h_pair``) and ``h_all`` (every candidate with both
    streams' scores, ranks and its best rank). ``depth`` is written as an integer literal,
    like a limit."""
    refs = ", ".join(f"{fn}(score) FILTER (WHERE stream = {n}) AS {col}{n}" for n in (1, 2)
                     for fn, col in (("max", "hi"), ("min", "lo"), ("avg", "mu"), ("stddev_pop", "sd")))
    ctes = [dedent("""\
        h_pair AS MATERIALIZED (
          -- Every candidate either stream proposed, with its row in each stream's own list.
          SELECT coalesce(k.entry_id, v.entry_id) AS entry_id, k.score AS s1, k.rank AS r1, v.score AS s2, v.rank AS r2
          FROM (SELECT entry_id, score, rank FROM ranked WHERE stream = 1) k
          FULL JOIN (SELECT entry_id, score, rank FROM ranked WHERE stream = 2) v ON v.entry_id = k.entry_id
        ), h_ref AS MATERIALIZED (
          -- Each stream's reference figures: its first {depth} rows, the same whatever max_results.
          SELECT {refs}
          FROM ranked WHERE rank <= {depth}
        )""").format(refs=refs, depth=int(depth))]
    joins = []
    scores = {1: "p.s1", 2: "p.s2"}
    for n, text in extras:
        ctes.append(f"h_x{n} AS MATERIALIZED (\n  -- Stream {n}'s scores of the candidates it did not propose.\n"
                    f"  SELECT x.entry_id, x.score FROM (\n{text}\n  ) x\n)")
        joins.append(f"LEFT JOIN h_x{n} x{n} ON x{n}.entry_id = p.entry_id")
        scores[n] = f"coalesce(p.s{n}, x{n}.score)"
    ctes.append(dedent("""\
        h_all AS (
          -- Every candidate scored by both streams: its own row's score, else the computed one.
          SELECT p.entry_id, {s1} AS s1, p.r1, {s2} AS s2, p.r2, least(p.r1, p.r2) AS best
          FROM h_pair p {joins}
        )""").format(s1=scores[1], s2=scores[2], joins=" ".join(joins)))
    return ", ".join(ctes)


#: A candidate's rows of one stream in :data:`SCORED_SQL` (``{n}`` the stream, ``{w}`` its weight).
_SCORED_VALUES = "({n}, {w}, a.s{n}, a.r{n}, f.hi{n}, f.lo{n}, f.mu{n}, f.sd{n})"


def fused_score(normalization: str, streams: Sequence[tuple[int, str]]) -> str:
    """The fused score of :data:`SCORE_FUSION_SQL`: ``weight * normalised`` of each stream run
    (``(stream, weight SQL)`` in stream order), added left to right."""
    return " + ".join(f"{w} * ({NORMALIZATIONS[normalization].format(n=n)})" for n, w in streams)


def candidates_sql(streams: str, run: Sequence[tuple[int, str]]) -> str:
    """:data:`SCORED_SQL` filled with ``streams`` (the streams' CTEs, ``ranked`` and
    :func:`scored_ctes`), one row per candidate and stream of ``run`` (``(stream, weight SQL)``)."""
    return SCORED_SQL.format(streams=streams, values=", ".join(_SCORED_VALUES.format(n=n, w=w) for n, w in run))


def fused_sql(streams: str, *, deferrable: bool, limit: int, documents: str, score: str | None = None) -> str:
    """:data:`FUSED_SQL` filled: ``streams`` (the streams' CTEs and ``ranked``), the top
    ``limit`` (an int, written as a literal like the BM25 stream's limit: one statement
    text per limit, whose generic plan knows it) and ``documents`` (the entry rows of
    ``h_top``). With ``deferrable``, the BM25 stream ``hk_r`` is its index's plain
    statement, and one row of NULLs replaces the result when it deferred. ``score`` (from
    :func:`fused_score`) fuses normalised scores of complete information (``streams`` then
    ends with :func:`scored_ctes`); None fuses by RRF."""
    fused = RRF_SQL if score is None else SCORE_FUSION_SQL.format(score=score)
    return FUSED_SQL.format(
        streams=streams,
        fused=fused,
        go="NOT (SELECT d.deferred FROM h_defer d)" if deferrable else "TRUE",
        stop="(SELECT d.deferred FROM h_defer d)" if deferrable else "FALSE",
        defer=DEFER_SQL if deferrable else "",
        limit=str(int(limit)),
        documents=documents)
