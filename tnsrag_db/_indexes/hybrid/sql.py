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

__all__ = ["DEFER_SQL", "FUSED_SQL", "fused_sql", "ranked_cte", "ranked_stream", "stream_cte", "weight_sql"]

# The fused ranking. {streams}: the streams' CTEs and ``ranked``; {go} and {stop}: TRUE and
# FALSE, or whether the BM25 stream did not / did defer to its pruned statement ({defer}).
FUSED_SQL = dedent("""\
    WITH {streams},
    {defer}fused AS (
      -- Reciprocal Rank Fusion: each stream adds weight / (k + rank); best: the best single
      -- rank, the first tie-breaker.
      SELECT entry_id, sum(w / (CAST(:h_k AS float8) + rank)) AS score, min(rank) AS best
      FROM ranked GROUP BY entry_id
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


def fused_sql(streams: str, *, deferrable: bool, limit: int, documents: str) -> str:
    """:data:`FUSED_SQL` filled: ``streams`` (the streams' CTEs and ``ranked``), the top
    ``limit`` (an int, written as a literal like the BM25 stream's limit: one statement
    text per limit, whose generic plan knows it) and ``documents`` (the entry rows of
    ``h_top``). With ``deferrable``, the BM25 stream ``hk_r`` is its index's plain
    statement, and one row of NULLs replaces the result when it deferred."""
    return FUSED_SQL.format(
        streams=streams,
        go="NOT (SELECT d.deferred FROM h_defer d)" if deferrable else "TRUE",
        stop="(SELECT d.deferred FROM h_defer d)" if deferrable else "FALSE",
        defer=DEFER_SQL if deferrable else "",
        limit=str(int(limit)),
        documents=documents)
