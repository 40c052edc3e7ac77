"""Retrieval evaluation: standard test-collection inputs, IR metrics, confidence intervals
and significance tests.

Inputs are the usual ones of IR test collections:

* **qrels** in TREC format, one judgement per line: ``query-id iteration doc-id grade``
  (whitespace separated; ``iteration`` is ignored; grades ≤ 0 are not relevant) —
  :func:`load_qrels`;
* **queries** as TSV (``query-id<TAB>text``) or JSONL (one object per line with ``id``,
  ``_id`` or ``query_id`` and ``text`` or ``query``) — :func:`load_queries`;
* **documents** from an ingested corpus: a judged ``doc-id`` is an entry id, which
  every strategy's results carry as ``metadata["entryId"]``.

Per query, :func:`ndcg_at`, :func:`recall_at` and :func:`reciprocal_rank_at` give nDCG@10
(linear gains, log2 discount, the ideal ranking from every judged document — as
``trec_eval``'s ``ndcg_cut``), recall@100 and MRR@10. :func:`evaluate_runs` averages them
over the judged queries, with a percentile bootstrap interval over queries
(:func:`bootstrap_interval`) and a paired randomisation test against a baseline run
(:func:`paired_randomisation_test`, two-sided, random sign flips of the per-query
differences). Both are seeded, so a report is reproducible. :func:`evaluate_strategies`
runs strategies over a store and evaluates their rankings.

Results are frozen dataclasses with ``to_dict()`` (JSON-ready);
:func:`plot_report` draws them as a bar chart with the intervals (needs the ``plot``
extra: ``pip install 'tnsrag-db[plot]'``).

Bad input raises :class:`~tnsrag_db._errors.EvaluationDataError` naming the file and
line at fault.

The modules: :mod:`.metrics` (per-query metrics), :mod:`.resampling` (bootstrap
intervals and the randomisation test), :mod:`.inputs` (qrels and queries),
:mod:`.report` (the result types), :mod:`.runs` (evaluating rankings and strategies) and
:mod:`.plot`.
"""

from __future__ import annotations

from tnsrag_db.evaluation.inputs import Qrels, Query, check_corpus, check_judged, load_qrels, load_queries
from tnsrag_db.evaluation.metrics import DEFAULT_METRICS, Metric, ndcg_at, recall_at, reciprocal_rank_at
from tnsrag_db.evaluation.plot import plot_report, require_plotting
from tnsrag_db.evaluation.report import EvaluationReport, MetricSummary, StrategyResult
from tnsrag_db.evaluation.resampling import Values, bootstrap_interval, paired_randomisation_test
from tnsrag_db.evaluation.runs import evaluate_runs, evaluate_strategies, run_strategy

__all__ = [
    "DEFAULT_METRICS",
    "EvaluationReport",
    "Metric",
    "MetricSummary",
    "Qrels",
    "Query",
    "StrategyResult",
    "Values",
    "bootstrap_interval",
    "check_corpus",
    "check_judged",
    "evaluate_runs",
    "evaluate_strategies",
    "load_qrels",
    "load_queries",
    "ndcg_at",
    "paired_randomisation_test",
    "plot_report",
    "recall_at",
    "require_plotting",
    "reciprocal_rank_at",
    "run_strategy",
]
