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

Bad input raises :class:`~tnsrag_db.errors.EvaluationDataError` naming the file and
line at fault.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tnsrag_db.errors import ConfigurationError, EvaluationDataError, ValidationError
from tnsrag_db.strategies.base import RAGStrategy
from tnsrag_db.types import RAGContext

if TYPE_CHECKING:
    from tnsrag_db.store.store import Store

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

#: ``{query id: {document id: grade}}``; grades ≤ 0 are judged not relevant.
Qrels = Mapping[str, Mapping[str, int]]
#: Per-query metric values, in query order.
Values = Sequence[float] | npt.NDArray[np.float64]


# -- metrics (pure functions of one ranking) --------------------------------------------------

def _unique(ranked: Sequence[str]) -> list[str]:
    """The ranking without repeats (a repeated document counts at its first rank only)."""
    return list(dict.fromkeys(ranked))


def ndcg_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k: DCG of the top ``k`` with linear gains (the grade, ≤ 0 counts 0) and a
    ``log2(rank + 1)`` discount, over the DCG of the ideal ordering of all judged grades.

    0.0 when no document is relevant. Raises :class:`ValueError` for ``k < 1``.
    """
    _check_k(k)
    top = _unique(ranked)[:k]
    dcg = sum(max(grades.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(top))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 100) -> float:
    """Share of the relevant documents (grade > 0) found in the top ``k``; 0.0 when none is relevant."""
    _check_k(k)
    relevant = {d for d, g in grades.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_unique(ranked)[:k])) / len(relevant)


def reciprocal_rank_at(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """1 / rank of the first relevant document (grade > 0) in the top ``k``; 0.0 when there is none."""
    _check_k(k)
    for i, d in enumerate(_unique(ranked)[:k], start=1):
        if grades.get(d, 0) > 0:
            return 1.0 / i
    return 0.0


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"cutoff k must be >= 1, got {k}")


@dataclass(frozen=True, slots=True)
class Metric:
    """A per-query metric: its ``kind`` (``ndcg``, ``recall`` or ``mrr``) and cutoff ``k``;
    called with a ranking and the query's grades it returns the value, ``name`` is its
    report name. Raises :class:`ValueError` for another kind or ``k < 1``."""

    kind: str
    k: int

    @property
    def name(self) -> str:
        """``nDCG@10``, ``recall@100`` or ``MRR@10``."""
        return {"ndcg": "nDCG", "recall": "recall", "mrr": "MRR"}[self.kind] + f"@{self.k}"

    def __call__(self, ranked: Sequence[str], grades: Mapping[str, int]) -> float:
        function = {"ndcg": ndcg_at, "recall": recall_at, "mrr": reciprocal_rank_at}[self.kind]
        return function(ranked, grades, self.k)

    def __post_init__(self) -> None:
        if self.kind not in ("ndcg", "recall", "mrr"):
            raise ValueError(f"metric kind must be 'ndcg', 'recall' or 'mrr', got {self.kind!r}")
        _check_k(self.k)


#: nDCG@10, recall@100 and MRR@10.
DEFAULT_METRICS = (Metric("ndcg", 10), Metric("recall", 100), Metric("mrr", 10))


# -- statistics -------------------------------------------------------------------------------

def _values(values: Values) -> npt.NDArray[np.float64]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError("need a non-empty sequence of per-query values")
    return array


def bootstrap_interval(values: Values, *, confidence: float = 0.95, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling queries with
    replacement ``resamples`` times, seeded with ``seed``).

    Raises :class:`ValueError` for empty ``values``, ``confidence`` outside (0, 1) or
    ``resamples < 1``.
    """
    array = _values(values)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    # In blocks, so memory stays bounded for large query sets.
    block = max(1, 2_000_000 // array.size)
    for start in range(0, resamples, block):
        n = min(block, resamples - start)
        means[start:start + n] = array[rng.integers(0, array.size, size=(n, array.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def paired_randomisation_test(values: Values, baseline: Values, *, permutations: int = 10_000,
                              seed: int = 0) -> float:
    """Two-sided p-value of the paired randomisation (permutation) test of the mean
    difference ``values - baseline``: each permutation swaps the two systems' scores of a
    query with probability ½ (a random sign flip of its difference).

    The p-value is ``(1 + #{|permuted mean| ≥ |observed mean|}) / (1 + permutations)``,
    so it is never 0. Raises :class:`ValueError` for sequences of different lengths, empty
    ones or ``permutations < 1``.
    """
    a, b = _values(values), _values(baseline)
    if a.shape != b.shape:
        raise ValueError(f"paired test needs equal lengths, got {a.size} and {b.size}")
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    diff = a - b
    observed = abs(diff.mean())
    # Differences this close to the observed one count as ties (float sums differ in order).
    tolerance = 1e-12 * max(1.0, observed)
    rng = np.random.default_rng(seed)
    hits = 0
    block = max(1, 2_000_000 // diff.size)
    for start in range(0, permutations, block):
        n = min(block, permutations - start)
        signs = rng.integers(0, 2, size=(n, diff.size), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(np.abs((signs * diff).mean(axis=1)) >= observed - tolerance))
    return (1 + hits) / (1 + permutations)


# -- results ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MetricSummary:
    """One metric of one strategy over the judged queries.

    ``mean`` with its bootstrap interval ``ci_low``..``ci_high``; against the baseline
    (``None`` for the baseline itself or without one): ``delta`` (mean difference), its
    bootstrap interval and the paired randomisation test's two-sided ``p_value``.
    """

    metric: str
    mean: float
    ci_low: float
    ci_high: float
    delta: float | None = None
    delta_ci_low: float | None = None
    delta_ci_high: float | None = None
    p_value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return {"metric": self.metric, "mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "delta": self.delta, "delta_ci_low": self.delta_ci_low, "delta_ci_high": self.delta_ci_high,
                "p_value": self.p_value}


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """One strategy's evaluation: metric summaries (in metric order), the per-query values
    ``{metric: {query id: value}}`` and the median retrieval time in milliseconds (``None``
    when the rankings were given, not run)."""

    strategy: str
    metrics: tuple[MetricSummary, ...]
    per_query: Mapping[str, Mapping[str, float]]
    median_ms: float | None = None

    def metric(self, name: str) -> MetricSummary:
        """The summary of metric ``name`` (such as ``"nDCG@10"``); :class:`KeyError` if absent."""
        for summary in self.metrics:
            if summary.metric == name:
                return summary
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {"strategy": self.strategy, "median_ms": self.median_ms,
                "metrics": [m.to_dict() for m in self.metrics],
                "per_query": {m: dict(v) for m, v in self.per_query.items()}}


@dataclass(frozen=True, slots=True)
class EvaluationReport:
    """The evaluation of several strategies on the same judged queries.

    ``queries`` is how many were evaluated; ``skipped`` lists the query ids left out
    because no judged document is relevant (every grade ≤ 0). ``confidence``,
    ``resamples``, ``permutations`` and ``seed`` are the statistics' settings;
    ``depth`` how many results each query retrieved (``None`` when rankings were given).
    """

    results: tuple[StrategyResult, ...]
    baseline: str | None
    queries: int
    skipped: tuple[str, ...]
    confidence: float
    resamples: int
    permutations: int
    seed: int
    depth: int | None = None

    def result(self, strategy: str) -> StrategyResult:
        """The result of ``strategy``; :class:`KeyError` if it was not evaluated."""
        for result in self.results:
            if result.strategy == strategy:
                return result
        raise KeyError(strategy)

    def to_dict(self, *, per_query: bool = True) -> dict[str, Any]:
        """The report as a JSON-ready dict (without the per-query values if ``per_query`` is false)."""
        results = []
        for r in self.results:
            item = r.to_dict()
            if not per_query:
                del item["per_query"]
            results.append(item)
        return {"baseline": self.baseline, "queries": self.queries, "skipped": list(self.skipped),
                "confidence": self.confidence, "resamples": self.resamples, "permutations": self.permutations,
                "seed": self.seed, "depth": self.depth, "results": results}

    def table(self) -> str:
        """The report as a plain-text table: per strategy and metric the mean, its interval
        and, against the baseline, the difference and its p-value."""
        names = [m.metric for m in self.results[0].metrics] if self.results else []
        width = max([len("strategy"), *(len(r.strategy) for r in self.results)])
        pct = f"{self.confidence * 100:g}%"
        header = f"{'strategy':<{width}}" + "".join(f"  {n + ' [' + pct + ' CI]':<27}" for n in names)
        if self.baseline is not None:
            header += "".join(f"  {'Δ' + n.split('@')[0] + ' (p)':<20}" for n in names)
        header += "  median ms"
        lines = [header]
        for r in self.results:
            line = f"{r.strategy:<{width}}"
            for m in r.metrics:
                line += f"  {f'{m.mean:.4f} [{m.ci_low:.4f}, {m.ci_high:.4f}]':<27}"
            if self.baseline is not None:
                for m in r.metrics:
                    cell = "baseline" if m.delta is None else f"{m.delta:+.4f} ({_p(m.p_value)})"
                    line += f"  {cell:<20}"
            line += f"  {r.median_ms:9.2f}" if r.median_ms is not None else f"  {'-':>9}"
            lines.append(line)
        return "\n".join(lines)


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"p={p:.4f}" if p >= 0.0001 else f"p={p:.1e}"


# -- evaluation -------------------------------------------------------------------------------

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


# -- inputs -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Query:
    """A query: its ``id``, ``text`` and where it was read (``path`` and 1-based ``line``,
    ``None`` when built in code)."""

    id: str
    text: str
    path: str | None = None
    line: int | None = None

    @property
    def where(self) -> str:
        """``path:line``, or ``query <id>`` for a query built in code."""
        return f"{self.path}:{self.line}" if self.path is not None else f"query {self.id!r}"


def _read_lines(path: str | Path) -> list[str]:
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise EvaluationDataError(f"{p}: no such file", path=str(p)) from None
    except IsADirectoryError:
        raise EvaluationDataError(f"{p}: is a directory, not a file", path=str(p)) from None
    except UnicodeDecodeError as exc:
        raise EvaluationDataError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(p)) from None
    except OSError as exc:
        raise EvaluationDataError(f"{p}: cannot read ({exc.strerror})", path=str(p)) from None


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read TREC qrels: ``query-id iteration doc-id grade`` per line (blank lines and
    lines starting with ``#`` are skipped).

    Raises :class:`EvaluationDataError` naming ``path:line`` for a line without exactly
    four fields, a grade that is not an integer or a document judged twice for one query
    with different grades, and for a file without any judgement.
    """
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate(_read_lines(path), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 4:
            raise EvaluationDataError(
                f"{path}:{n}: expected 4 fields 'query-id iteration doc-id grade', got {len(parts)}: {line.strip()!r}",
                path=str(path), line=n)
        qid, _, doc, grade_text = parts
        try:
            grade = int(grade_text)
        except ValueError:
            raise EvaluationDataError(f"{path}:{n}: grade {grade_text!r} is not an integer",
                                      path=str(path), line=n) from None
        grades = qrels.setdefault(qid, {})
        if doc in grades and grades[doc] != grade:
            raise EvaluationDataError(f"{path}:{n}: document {doc!r} judged again for query {qid!r} "
                                      f"with another grade ({grades[doc]} before, {grade} here)",
                                      path=str(path), line=n)
        grades[doc] = grade
    if not qrels:
        raise EvaluationDataError(f"{path}: no judgements", path=str(path))
    return qrels


_ID_KEYS = ("id", "_id", "query_id", "qid")
_TEXT_KEYS = ("text", "query")


def load_queries(path: str | Path) -> list[Query]:
    """Read queries as TSV (``query-id<TAB>text``) or JSONL (an object per line with an
    id under ``id``, ``_id``, ``query_id`` or ``qid`` and the text under ``text`` or
    ``query``); JSONL when the first non-blank line starts with ``{``. Blank lines are
    skipped.

    Raises :class:`EvaluationDataError` naming ``path:line`` for a line that does not
    parse, a missing or blank id or text, a repeated id, and for a file without queries.
    """
    lines = _read_lines(path)
    first = next((line.lstrip() for line in lines if line.strip()), "")
    jsonl = first.startswith("{")
    queries: list[Query] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        if jsonl:
            qid, text = _jsonl_query(line, str(path), n)
        else:
            qid, sep, text = line.partition("\t")
            if not sep:
                raise EvaluationDataError(f"{where}: expected 'query-id<TAB>text' (no tab found)",
                                          path=str(path), line=n)
            qid, text = qid.strip(), " ".join(text.split())
        if not qid:
            raise EvaluationDataError(f"{where}: blank query id", path=str(path), line=n)
        if not text:
            raise EvaluationDataError(f"{where}: query {qid!r} has no text", path=str(path), line=n)
        if qid in seen:
            raise EvaluationDataError(f"{where}: query id {qid!r} repeated (first at line {seen[qid]})",
                                      path=str(path), line=n)
        seen[qid] = n
        queries.append(Query(qid, text, str(path), n))
    if not queries:
        raise EvaluationDataError(f"{path}: no queries", path=str(path))
    return queries


def _jsonl_query(line: str, path: str, n: int) -> tuple[str, str]:
    where = f"{path}:{n}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EvaluationDataError(f"{where}: invalid JSON ({exc.msg})", path=path, line=n) from None
    if not isinstance(obj, dict):
        raise EvaluationDataError(f"{where}: expected a JSON object", path=path, line=n)
    qid = next((obj[k] for k in _ID_KEYS if k in obj), None)
    text = next((obj[k] for k in _TEXT_KEYS if k in obj), None)
    if qid is None or isinstance(qid, bool) or not isinstance(qid, (str, int)):
        raise EvaluationDataError(f"{where}: no query id (a string or integer under {', '.join(_ID_KEYS)})",
                                  path=path, line=n)
    if not isinstance(text, str):
        raise EvaluationDataError(f"{where}: no query text (a string under {' or '.join(_TEXT_KEYS)})",
                                  path=path, line=n)
    return str(qid).strip(), " ".join(text.split())


def check_judged(queries: Sequence[Query], qrels: Qrels) -> None:
    """Raise :class:`EvaluationDataError` at the first query without any judgement in ``qrels``
    (query ids numbered differently from the qrels are the usual cause), saying how many lack one."""
    missing = [q for q in queries if q.id not in qrels]
    if missing:
        first = missing[0]
        raise EvaluationDataError(
            f"{first.where}: query {first.id!r} has no judgements in the qrels "
            f"({len(missing)} of {len(queries)} queries have none; do the query ids match the qrels'?)",
            path=first.path, line=first.line)


def check_corpus(store: Store, qrels: Qrels, queries: Sequence[Query]) -> int:
    """How many of the documents judged relevant for ``queries`` are entries of ``store``'s
    corpus; raises :class:`EvaluationDataError` when none is (the wrong corpus, or
    document ids that differ from the entry ids)."""
    wanted = sorted({d for q in queries for d, g in qrels.get(q.id, {}).items() if g > 0})
    found = 0
    for start in range(0, len(wanted), 1000):
        found += len(store.get_many(wanted[start:start + 1000]))
    if wanted and not found:
        raise EvaluationDataError(
            f"none of the {len(wanted)} documents judged relevant is an entry of corpus {store.corpus!r} "
            f"(e.g. {wanted[0]!r}); ingest the collection with its document ids as entry ids")
    return found


# -- plot -------------------------------------------------------------------------------------

def require_plotting() -> None:
    """Raise :class:`ConfigurationError` naming the ``plot`` extra when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(f"plotting needs matplotlib: pip install 'tnsrag-db[plot]' ({exc})") from None


def plot_report(report: EvaluationReport, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``report`` as a grouped bar chart (one group per metric, one bar per strategy)
    with the bootstrap intervals as error bars, and save it as PNG at ``path``.

    Needs matplotlib: raises :class:`ConfigurationError` naming the ``plot`` extra when
    it is not installed.
    """
    require_plotting()
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out = Path(path)
    names = [m.metric for m in report.results[0].metrics] if report.results else []
    count = max(len(report.results), 1)
    width = 0.8 / count
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(names) * count / 2 + 3), 4.5), dpi=100)
    try:
        for i, result in enumerate(report.results):
            means = [m.mean for m in result.metrics]
            errors = [[m.mean - m.ci_low for m in result.metrics], [m.ci_high - m.mean for m in result.metrics]]
            xs = [j + (i - (count - 1) / 2) * width for j in range(len(names))]
            ax.bar(xs, means, width, yerr=errors, capsize=3, label=result.strategy)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylim(0.0, 1.0)
        ax.set_ylabel(f"mean over {report.queries} queries ({report.confidence * 100:g}% bootstrap CI)")
        ax.set_title(title or "Retrieval quality")
        ax.legend(loc="upper left", fontsize="small")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out
