"""The results of an evaluation: per metric, per strategy, and the report with its table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EvaluationReport", "MetricSummary", "StrategyResult"]


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
