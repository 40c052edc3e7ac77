"""The benchmarks the issues' targets are measured with still run against the library as it is
(a change of the library's API once left ``bench_keyword`` failing before its first query)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_keyword_runs_at_a_small_size(db_url: URL) -> None:
    url = db_url.render_as_string(hide_password=False)
    run = subprocess.run([sys.executable, "-m", "bench.bench_keyword", "--url", url, "--n", "2000", "--queries", "12"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "KeywordRAGStrategy.retrieve" in run.stdout and "ingested at" in run.stdout, run.stdout[-2000:]
