"""``tnsrag query --explain``: text and JSON, for every strategy."""

from __future__ import annotations

import json
import math
import uuid

from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._cli import main_group
from tnsrag_db._strategies.registry import STRATEGY_NAMES


def test_query_explain_json_and_text(db_url: URL) -> None:
    url = db_url.render_as_string(hide_password=False)
    args = ["--url", url, "--corpus", f"cli_{uuid.uuid4().hex[:8]}"]
    runner = CliRunner()
    done = runner.invoke(main_group, ["ingest", "--sample", *args, "--json"])
    assert done.exit_code == 0, done.output
    for name in STRATEGY_NAMES:
        plain = runner.invoke(main_group, ["query", "agent memory TAN-5326", "--strategy", name, "--top-k", "3",
                                           *args, "--json"])
        res = runner.invoke(main_group, ["query", "agent memory TAN-5326", "--strategy", name, "--top-k", "3",
                                         *args, "--json", "--explain"])
        assert res.exit_code == 0, (name, res.output)
        out = json.loads(res.output)
        assert out["strategy"] == name and out["plans"]
        # --explain only adds keys: a script reading --json keeps working with --explain added.
        shown = json.loads(plain.output)
        assert set(shown) <= set(out), (name, set(shown) - set(out))
        for before, after in zip(shown["results"], out["results"]):
            assert set(before) <= set(after) and before["id"] == after["id"] == after["metadata"]["entryId"]
        assert [(r["entryId"], r["score"]) for r in out["results"]] == \
            [(r["metadata"]["entryId"], r["score"]) for r in json.loads(plain.stdout)["results"]] or name == "temporal"
        for r in out["results"]:
            assert r["explanation"]["score"] == r["score"]
    keyword = json.loads(runner.invoke(main_group, ["query", "TAN-5326", "--strategy", "keyword", *args, "--json",
                                                    "--explain"]).output)
    top = keyword["results"][0]
    assert top["entryId"] == "episodic-2024-05" and top["explanation"]["kind"] == "bm25"
    assert math.isclose(sum(t["contribution"] for t in top["explanation"]["terms"]), top["score"], rel_tol=1e-12)
    assert {"tan-5326", "tan", "5326"} <= {t["term"] for t in top["explanation"]["terms"]}
    text = runner.invoke(main_group, ["query", "agent memory", "--strategy", "hybrid", *args, "--explain"])
    assert text.exit_code == 0, text.output
    assert "plan keyword: bm25" in text.output and "plan vector: exact" in text.output
    assert "zscore fusion " in text.output and "keyword: rank 1" in text.output and "cosine " in text.output


def test_explain_json_keeps_the_filter_notes(db_url: URL) -> None:
    url = db_url.render_as_string(hide_password=False)
    args = ["--url", url, "--corpus", f"cli_{uuid.uuid4().hex[:8]}"]
    runner = CliRunner()
    assert runner.invoke(main_group, ["ingest", "--sample", *args, "--embedding", "hash"]).exit_code == 0
    plain = runner.invoke(main_group, ["query", "memory", "--strategy", "keyword", "--filter", "tier=semantic",
                                       *args, "--json"])
    explained = runner.invoke(main_group, ["query", "memory", "--strategy", "keyword", "--filter", "tier=semantic",
                                           *args, "--json", "--explain"])
    assert plain.exit_code == explained.exit_code == 0, explained.output
    notes = json.loads(plain.stdout)["notes"]
    assert notes and json.loads(explained.stdout)["notes"] == notes
    assert json.loads(explained.stdout)["results"] == []
