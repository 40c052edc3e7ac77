"""A report as a bar chart with its bootstrap intervals (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._plugins import reraise_interrupt
from tnsrag_db.evaluation.report import EvaluationReport

__all__ = ["plot_report", "require_plotting"]


def require_plotting() -> None:
    """Raise :class:`ConfigurationError` naming the ``plot`` extra when matplotlib is not installed."""
    _pyplot()


def _pyplot() -> Any:
    """matplotlib's ``pyplot``; :class:`ConfigurationError` naming the ``plot`` extra when
    matplotlib is not installed."""
    try:
        import matplotlib.pyplot as plt  # the plot extra: imported only to draw
    except ImportError as exc:
        reraise_interrupt(exc)
        raise ConfigurationError(f"plotting needs matplotlib: pip install 'tnsrag-db[plot]' ({exc})") from None
    return plt


def plot_report(report: EvaluationReport, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``report`` as a grouped bar chart (one group per metric, one bar per strategy)
    with the bootstrap intervals as error bars, and save it as PNG at ``path``.

    Needs matplotlib: raises :class:`ConfigurationError` naming the ``plot`` extra when
    it is not installed.
    """
    plt = _pyplot()
    plt.switch_backend("Agg")  # a file: no window, no display needed
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
