"""The postings-layout study (bench/bench_postings.py) on a small corpus: every way it
scores over blocks (plain, block-max, MaxScore; with writers' rows still in the delta and
after the merge) returns the reference's rows and scores, and the merge empties the delta."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.engine import URL


@pytest.mark.slow
def test_block_layouts_answer_like_the_reference(pg_server_url: URL, tmp_path: Path) -> None:
    from bench import bench_postings

    out = tmp_path / "postings.json"
    url = pg_server_url.render_as_string(hide_password=False)
    assert bench_postings.main(["--url", url, "--sizes", "3000", "--queries", "15", "--out", str(out)]) == 0
    report = json.loads(out.read_text())[0]
    exact = {k: v for k, v in report["identical"].items() if not k.startswith("A library")}
    assert set(exact) >= {"B plain", "B block-max", "B MaxScore", "B block-max +delta", "B block-max merged",
                          "B MaxScore +delta", "B MaxScore merged"}
    assert all(exact.values()), exact
    # The library sums a pruned entry's essential and non-essential parts apart: same rows,
    # scores equal to the last bits.
    assert all(report["same_ids"].values()), report["same_ids"]
    assert report["merge"]["delta_left"] == 0
    assert report["concurrent"]["B delta"]["deadlocks"] == 0
