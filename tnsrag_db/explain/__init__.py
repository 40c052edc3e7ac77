"""Explained rankings: how each result's score arose (``strategy.explain(query, context)``).

Every strategy's ``explain`` returns an :class:`Explanation`: the same documents, in the
same order and with the same scores as ``retrieve`` would return at that moment, each
with a typed score explanation whose figures give the score:

* :class:`BM25Explanation`: per query term tf, df, idf and contribution; the
  contributions sum to the score (float rounding aside);
* :class:`CosineExplanation`: the cosine similarity and the embedding space;
* :class:`FusionExplanation`: each stream's rank and RRF share ``weight / (k + rank)``,
  summed in stream order they give the score exactly, each with the stream's own
  explanation;
* :class:`ScoreFusionExplanation`: each stream's score of the result (whether or not the
  stream proposed it), normalised against the stream's reference rows, weighted; summed
  in stream order the shares give the score exactly;
* :class:`GraphExplanation`: the seed's score and one :class:`GraphHop` per edge walked,
  each multiplying by the decay;
* :class:`HierarchyExplanation`: the hit's score times ``decay`` once per level;
* :class:`TemporalExplanation`: the child's score times the freshness multiplier;
* :class:`ReasoningExplanation`: the product of the sibling shares along the path;
* :class:`UnexplainedScore`: a child strategy without ``explain`` (the score as given).

Besides, :attr:`Explanation.plans` lists the search plan of every statement that ranked
(:class:`SearchPlan`: exact scan or HNSW iterative scan, matches counted, fallback
taken). Explaining costs more than retrieving (it runs the retrieval and then the
statements that collect the figures); retrieval itself is unchanged. The base
strategies (keyword, vector, hybrid) run all their statements in one read-only
REPEATABLE READ transaction, so the figures and the ranking come from one snapshot.

These are values only, built by the indexes and the strategies (the layer below both):
:mod:`._scores` (the scores a strategy computes itself: BM25, cosine, reasoning,
unexplained), :mod:`._derived` (scores made from a child's: fusion, graph, hierarchy,
temporal; and the :data:`ScoreExplanation` union), :mod:`._results` (the explained
ranking and its search plans). :func:`tnsrag_db._strategies.explain.explain_with` explains
any strategy.
"""

from __future__ import annotations

from tnsrag_db.explain._derived import (
    FusionExplanation,
    GraphExplanation,
    GraphHop,
    HierarchyExplanation,
    ScoreExplanation,
    ScoreFusionExplanation,
    StreamScore,
    StreamShare,
    TemporalExplanation,
)
from tnsrag_db.explain._results import ExplainableStrategy, ExplainedDocument, Explanation, SearchPlan
from tnsrag_db.explain._scores import (
    BM25Explanation,
    BM25TermScore,
    CosineExplanation,
    ReasoningExplanation,
    ReasoningStep,
    UnexplainedScore,
)

__all__ = [
    "BM25Explanation",
    "BM25TermScore",
    "CosineExplanation",
    "ExplainableStrategy",
    "ExplainedDocument",
    "Explanation",
    "FusionExplanation",
    "GraphExplanation",
    "GraphHop",
    "HierarchyExplanation",
    "ReasoningExplanation",
    "ReasoningStep",
    "ScoreExplanation",
    "ScoreFusionExplanation",
    "SearchPlan",
    "StreamScore",
    "StreamShare",
    "TemporalExplanation",
    "UnexplainedScore",
]
