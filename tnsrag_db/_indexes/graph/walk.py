"""The statements of a bounded graph walk, built without I/O (:class:`~tnsrag_db._db.statement.Statement`).

:func:`walk_statement` is the whole walk of ``GraphRAGStrategy`` in one recursive
statement (its semantics, and the bound on the work, are described in
:mod:`tnsrag_db._strategies.graph`); :func:`hops_statement` reads the edges a winning
path took, for explanations. :class:`~tnsrag_db._indexes.graph.GraphStore` hands them
out with its corpus bound; their text is in :mod:`tnsrag_db._indexes.graph.sql`.

The walk carries ONE row per level: the visited set as parallel arrays (id, best
score) and the level's frontier (entries first reached or improved on that level,
with their scores and paths). Keeping a whole level in one row is what makes the
global de-duplication and the budget exact: a recursive term may not aggregate over
the working table, but a LATERAL subquery over one row's arrays may.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tnsrag_db._db.statement import Statement
from tnsrag_db._indexes.graph.sql import FENCE, HOPS_SQL, WALK_SQL
from tnsrag_db._store.expiry import live
from tnsrag_db._store.filters import filter_sql
from tnsrag_db._store.validity import edge_valid, edges_bounded

__all__ = ["DEFAULT_EDGE_BUDGET_FACTOR", "WALK_COLUMNS", "hops_statement", "walk_statement"]

#: By default a level may read about this many times the visited budget in edge rows.
DEFAULT_EDGE_BUDGET_FACTOR = 2

#: The columns a walk row carries besides the caller's entry columns.
WALK_COLUMNS = ("graph_score", "graph_depth", "graph_path")


def walk_statement(corpus: str, seed_ids: Sequence[str], seed_scores: Sequence[float], *, columns: str,
                   column_names: Sequence[str], fence: Collection[str] | None, max_depth: int, decay: float,
                   budget: int, max_fan_out: int, filters: Mapping[str, str] | None, min_score: float,
                   k: int, min_depth: int = 0, edge_budget_factor: int = DEFAULT_EDGE_BUDGET_FACTOR) -> Statement:
    """The walk from ``seed_ids`` (scores > 0, checked by the caller) in ``corpus``.

    ``columns`` is the entry columns to return (a code constant over alias ``e``, named
    ``column_names``); each row also carries ``graph_score``, ``graph_depth`` and
    ``graph_path`` (a JSON array of ids, seed first), best first (ties by id), at most
    ``k``; only entries at least ``min_depth`` hops from their seed are returned (0: the
    seeds too; 1: only what the edges reached). ``fence`` (None for none) confines seeds, walked and returned entries to those
    sources. A level follows at most ``min(max_fan_out, max(1, ceil(edge_budget_factor ×
    budget / frontier size)))`` edges per frontier node (checked by the caller). Raises :class:`InvalidFilterError` for a bad filter.
    """
    predicate, fparams = filter_sql(filters, alias="e", prefix="f")
    fenced = fence is not None
    sql = WALK_SQL.format(
        seed_fence=FENCE if fenced else "",
        walk_join=f"JOIN entries n ON n.corpus = :c AND n.id = e.dst {FENCE}" if fenced else "",
        edges_bounded=edges_bounded(":c"),
        edge_valid=edge_valid("ed"),  # only the edges valid at the read's instant are followed
        columns=columns,
        filter=f"{predicate} AND {live('e')}",  # expired entries are walked through, never returned
    )
    params: dict[str, Any] = {
        "c": corpus,
        "seed_ids": list(seed_ids),
        "seed_scores": list(seed_scores),
        "budget": budget,
        "max_depth": max_depth,
        "decay": decay,
        "max_fan": max_fan_out,
        "edge_budget": edge_budget_factor * budget,
        "min_score": min_score,
        "min_depth": min_depth,
        "k": k,
        **fparams,
    }
    if fence is not None:
        params["fence"] = sorted(fence)
    return Statement(sql, params, (*column_names, *WALK_COLUMNS))


def hops_statement(corpus: str, pairs: Sequence[tuple[str, str]]) -> Statement:
    """For each ``(src, dst)`` of ``pairs`` that has an edge, the heaviest one (ties by
    relation): rows ``src, dst, relation, weight``."""
    return Statement(HOPS_SQL, {"c": corpus, "srcs": [a for a, _ in pairs], "dsts": [b for _, b in pairs]},
                     ("src", "dst", "relation", "weight"))
