"""The text of the fused BM25 + vector statement (no I/O).

:data:`FUSED_SQL` fuses the streams' rankings with Reciprocal Rank Fusion inside the
database; its ``{...}`` fields are code constants: the streams' CTEs (each stream a
ranking statement of its index, embedded as ``hk_r`` or ``hv_r``, and ``ranked``, built
by :func:`ranked_cte`), the deferral gate (:data:`DEFER_SQL`), the limit (a validated
int) and the entry rows (the BM25 index's documents SELECT over ``h_top``). Every value
is bound: ``:h_k`` (the RRF constant), ``:h_min`` (the fused score's floor), ``:h_c``
(the corpus) and the streams' own parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from textwrap import dedent
from typing import Any

__all__ = ["DEFER_SQL", "FUSED_SQL", "NORMALIZATIONS", "SCORED_SQL", "candidates_sql", "fused_sql", "ranked_cte",
           "ranked_stream", "scored_ctes", "stream_cte", "weight_sql"]

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

#: Normalised score fusion over complete information: each stream adds weight × its
#: normalised score of the candidate, in stream order (one float8 sum, the order fixed).
SCORE_FUSION_SQL = """\
  SELECT a.entry_id, sum(a.w * {norm} ORDER BY a.stream) AS score, min(a.rank) AS best
  FROM h_all a LEFT JOIN h_ref f ON f.stream = a.stream
  GROUP BY a.entry_id"""

#: How a stream's score ``a.score`` is normalised against its reference figures ``f`` (its
#: first ``h_d`` rows: ``hi`` the best score, ``lo`` the lowest, ``mu`` the mean, ``sd`` the
#: population standard deviation), as :func:`tnsrag_db._strategies.fusion.normalize`:
#: ``zscore`` the z-score plus 3 (0 at three deviations below the mean), ``minmax`` the
#: place between the lowest (0) and the best (1); never below 0, so a fused score is at
#: least 0 like every other strategy's. With no spread, 1 at or above the best, else 0; a
#: stream without reference rows adds 0, and so does a candidate without a vector (its
#: score is NULL, which ``greatest`` ignores).
NORMALIZATIONS = {
    "zscore": ("CASE WHEN f.sd > 0 THEN greatest((a.score - f.mu) / f.sd + 3.0::float8, 0.0::float8) "
               "WHEN a.score >= f.hi THEN 1.0::float8 ELSE 0.0::float8 END"),
    "minmax": ("CASE WHEN f.hi > f.lo THEN greatest((a.score - f.lo) / (f.hi - f.lo), 0.0::float8) "
               "WHEN a.score >= f.hi THEN 1.0::float8 ELSE 0.0::float8 END"),
}

#: The scored candidates with their reference figures (the rows explanations and
#: benchmarks read): per candidate and stream run, the weight, the score and the rank in
#: the stream's own list (NULL: the stream did not propose it, its score was computed).
SCORED_SQL = dedent("""\
    WITH {streams}
    SELECT a.entry_id, a.stream, a.w, a.score, a.rank, f.hi, f.lo, f.mu, f.sd
    FROM h_all a LEFT JOIN h_ref f ON f.stream = a.stream
    ORDER BY a.entry_id, a.stream""")

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


def scored_ctes(extras: Sequence[str], streams: Sequence[tuple[int, str]]) -> str:
    """The CTEs of complete information after ``ranked``: ``h_cand`` (every candidate either
    stream proposed), ``h_miss`` (per stream, the candidates it did not propose),
    ``h_extra`` (their scores in that stream: ``extras``, one SELECT of ``stream, entry_id,
    score`` per stream run, reading ``h_miss``), ``h_all`` (per candidate and stream in
    ``streams``, ``(stream, weight SQL)``: the stream's score and its rank in the stream's
    own list) and ``h_ref`` (each stream's reference figures: its first ``:h_d`` rows)."""
    run = " UNION ALL ".join(f"SELECT {n} AS stream, {w} AS w" for n, w in streams)
    return dedent("""\
        h_cand AS MATERIALIZED (
          -- Every candidate either stream proposed.
          SELECT DISTINCT entry_id FROM ranked
        ), h_run AS (
          {run}
        ), h_miss AS MATERIALIZED (
          -- Per stream, the candidates it did not propose: scored by it below.
          SELECT s.stream, c.entry_id FROM h_cand c CROSS JOIN h_run s
          WHERE NOT EXISTS (SELECT 1 FROM ranked r WHERE r.stream = s.stream AND r.entry_id = c.entry_id)
        ), h_extra AS MATERIALIZED (
          {extras}
        ), h_all AS (
          -- Every candidate scored by every stream: the stream's own row, else the computed score.
          SELECT c.entry_id, s.stream, s.w, coalesce(r.score, x.score) AS score, r.rank
          FROM h_cand c CROSS JOIN h_run s
          LEFT JOIN ranked r ON r.stream = s.stream AND r.entry_id = c.entry_id
          LEFT JOIN h_extra x ON x.stream = s.stream AND x.entry_id = c.entry_id
        ), h_ref AS MATERIALIZED (
          -- Each stream's reference figures: its first h_d rows (bound), the same whatever max_results.
          SELECT stream, max(score) AS hi, min(score) AS lo, avg(score) AS mu, stddev_pop(score) AS sd
          FROM ranked WHERE rank <= :h_d GROUP BY stream
        )""").format(run=run, extras="\n  UNION ALL\n  ".join(extras))


def candidates_sql(streams: str) -> str:
    """:data:`SCORED_SQL` filled with ``streams`` (the streams' CTEs, ``ranked`` and
    :func:`scored_ctes`)."""
    return SCORED_SQL.format(streams=streams)


def fused_sql(streams: str, *, deferrable: bool, limit: int, documents: str, normalization: str | None = None) -> str:
    """:data:`FUSED_SQL` filled: ``streams`` (the streams' CTEs and ``ranked``), the top
    ``limit`` (an int, written as a literal like the BM25 stream's limit: one statement
    text per limit, whose generic plan knows it) and ``documents`` (the entry rows of
    ``h_top``). With ``deferrable``, the BM25 stream ``hk_r`` is its index's plain
    statement, and one row of NULLs replaces the result when it deferred. ``normalization``
    (a key of :data:`NORMALIZATIONS`) fuses normalised scores of complete information
    (``streams`` then ends with :func:`scored_ctes`); None fuses by RRF."""
    fused = RRF_SQL if normalization is None else SCORE_FUSION_SQL.format(norm=NORMALIZATIONS[normalization])
    return FUSED_SQL.format(
        streams=streams,
        fused=fused,
        go="NOT (SELECT d.deferred FROM h_defer d)" if deferrable else "TRUE",
        stop="(SELECT d.deferred FROM h_defer d)" if deferrable else "FALSE",
        defer=DEFER_SQL if deferrable else "",
        limit=str(int(limit)),
        documents=documents)
