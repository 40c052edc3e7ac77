"""Evaluating rankings against judgements (:func:`evaluate_runs`) and running strategies
to get them (:func:`run_strategy`, :func:`evaluate_strategies`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from tnsrag_db._errors import ValidationError
from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._types import RAGContext
from tnsrag_db.evaluation.inputs import Qrels, Query, check_judged
from tnsrag_db.evaluation.metrics import DEFAULT_METRICS, Metric
from tnsrag_db.evaluation.report import EvaluationReport, MetricSummary, StrategyResult
from tnsrag_db.evaluation.resampling import bootstrap_interval, paired_randomisation_test

__all__ = ["evaluate_runs", "evaluate_strategies", "run_strategy"]


def evaluate_runs(runs: Mapping[str, Mapping[str, Sequence[str]]], qrels: Qrels, *, baseline: str | None = None,
                  metrics: Sequence[Metric] = DEFAULT_METRICS, confidence: float = 0.95, resamples: int = 10_000,
                  permutations: int = 10_000, seed: int = 0, timings: Mapping[str, float] | None = None,
                  depth: int | None = None) -> EvaluationReport:
    """Evaluate rankings ``{run name: {query id: [doc id, best first]}}`` against ``qrels``.

    Every query of ``qrels`` with a relevant document is evaluated for every run (a
    query a run has no ranking for scores 0); queries whose judgements are all ≤ 0 are
    listed in ``skipped``. Runs keep their order; ``baseline`` (one of the runs) gets
    the paired comparisons. ``timings`` optionally gives each run's median milliseconds.

    Raises :class:`ValidationError` when ``baseline`` is not a run, no query has a
    relevant judgement or there is no run; :class:`ValueError` for bad statistics settings.
    """
    if not runs:
        raise ValidationError("nothing to evaluate: no run given")
    if baseline is not None and baseline not in runs:
        raise ValidationError(f"baseline {baseline!r} is not among the runs: {', '.join(runs)}")
    judged = sorted(q for q, grades in qrels.items() if any(g > 0 for g in grades.values()))
    skipped = tuple(sorted(set(qrels).difference(judged)))
    if not judged:
        raise ValidationError("no query has a relevant judgement (grade > 0)")
    values: dict[str, dict[str, npt.NDArray[np.float64]]] = {}
    for name, ranking in runs.items():
        values[name] = {m.name: np.array([m(ranking.get(q, ()), qrels[q]) for q in judged], dtype=np.float64) for m in metrics}
    results = []
    for name in runs:
        summaries = []
        for m in metrics:
            v = values[name][m.name]
            low, high = bootstrap_interval(v, confidence=confidence, resamples=resamples, seed=seed)
            summary = MetricSummary(m.name, float(v.mean()), low, high)
            if baseline is not None and name != baseline:
                base = values[baseline][m.name]
                d_low, d_high = bootstrap_interval(v - base, confidence=confidence, resamples=resamples, seed=seed)
                p = paired_randomisation_test(v, base, permutations=permutations, seed=seed)
                summary = MetricSummary(m.name, summary.mean, low, high, float((v - base).mean()), d_low, d_high, p)
            summaries.append(summary)
        per_query = {m.name: dict(zip(judged, (float(x) for x in values[name][m.name]), strict=True))
                     for m in metrics}
        results.append(StrategyResult(name, tuple(summaries), per_query,
                                      None if timings is None else timings.get(name)))
    return EvaluationReport(tuple(results), baseline, len(judged), skipped, confidence, resamples, permutations,
                            seed, depth)


def run_strategy(strategy: RAGStrategy, queries: Sequence[Query], *, depth: int = 100,
                 context: RAGContext | None = None) -> tuple[dict[str, list[str]], float]:
    """Retrieve ``depth`` results for each query; returns ``{query id: [entry id, ...]}``
    and the median retrieval time in milliseconds.

    ``context`` supplies filters and ``min_score`` (its ``max_results`` is replaced by
    ``depth``). A result's document id is its ``metadata["entryId"]``; results without
    one cannot be judged and are left out.
    """
    ctx = (context or RAGContext()).with_max_results(depth)
    rankings: dict[str, list[str]] = {}
    times: list[float] = []
    for query in queries:
        started = time.perf_counter()
        documents = strategy.retrieve(query.text, ctx)
        times.append((time.perf_counter() - started) * 1000.0)
        rankings[query.id] = [d.metadata["entryId"] for d in documents if "entryId" in d.metadata]
    return rankings, statistics.median(times) if times else 0.0


def evaluate_strategies(strategies: Mapping[str, RAGStrategy], queries: Sequence[Query], qrels: Qrels, *,
                        baseline: str | None = None, depth: int = 100, context: RAGContext | None = None,
                        metrics: Sequence[Metric] = DEFAULT_METRICS, confidence: float = 0.95,
                        resamples: int = 10_000, permutations: int = 10_000, seed: int = 0) -> EvaluationReport:
    """Run each strategy over ``queries`` (``depth`` results each) and evaluate the
    rankings against ``qrels`` with :func:`evaluate_runs`.

    Only queries with a relevant judgement are retrieved. Raises
    :class:`EvaluationDataError` when a query has no judgement at all (naming its file
    and line when it was loaded from a file), and what :func:`evaluate_runs` raises.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    check_judged(queries, qrels)
    judged = [q for q in queries if any(g > 0 for g in qrels[q.id].values())]
    asked = {q.id for q in queries}
    asked_qrels = {q: g for q, g in qrels.items() if q in asked}  # judgements of other queries do not count
    runs: dict[str, dict[str, list[str]]] = {}
    timings: dict[str, float] = {}
    for name, strategy in strategies.items():
        runs[name], timings[name] = run_strategy(strategy, judged, depth=depth, context=context)
    return evaluate_runs(runs, asked_qrels, baseline=baseline, metrics=metrics, confidence=confidence,
                         resamples=resamples, permutations=permutations, seed=seed, timings=timings, depth=depth)
