"""tnsrag_db.evaluation without a database: metrics, statistics, inputs, reports and the plot."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from tnsrag_db import evaluation
from tnsrag_db._errors import ConfigurationError, EvaluationDataError, ValidationError
from tnsrag_db.evaluation import (
    DEFAULT_METRICS,
    Metric,
    Query,
    bootstrap_interval,
    evaluate_runs,
    load_qrels,
    load_queries,
    ndcg_at,
    paired_randomisation_test,
    recall_at,
    reciprocal_rank_at,
)

# -- metrics, by hand ---------------------------------------------------------------------------

GRADES = {"a": 3, "b": 2, "c": 1, "z": 0}


def test_ndcg_by_hand() -> None:
    # DCG = 2/log2(2) + 0 + 3/log2(4) = 2 + 1.5 = 3.5 ; IDCG = 3 + 2/log2(3) + 1/log2(4)
    idcg = 3 + 2 / math.log2(3) + 0.5
    assert ndcg_at(["b", "x", "a"], GRADES) == pytest.approx(3.5 / idcg)
    assert ndcg_at(["a", "b", "c"], GRADES) == pytest.approx(1.0)
    assert ndcg_at(["z", "x"], GRADES) == 0.0
    assert ndcg_at([], GRADES) == 0.0
    # the cutoff: only the first k count, the ideal is cut at k too
    assert ndcg_at(["x", "a"], GRADES, k=1) == 0.0
    assert ndcg_at(["b", "a"], GRADES, k=1) == pytest.approx(2 / 3)
    # a repeated document counts once, at its first rank
    assert ndcg_at(["a", "a", "b"], GRADES) == pytest.approx(ndcg_at(["a", "b"], GRADES))
    # nothing relevant: 0, not a division by zero
    assert ndcg_at(["a"], {"a": 0, "b": -1}) == 0.0


def test_recall_and_reciprocal_rank_by_hand() -> None:
    assert recall_at(["a", "x", "c", "z"], GRADES) == pytest.approx(2 / 3)
    assert recall_at(["a", "x", "c"], GRADES, k=2) == pytest.approx(1 / 3)
    assert recall_at(["a"], {"a": 0}) == 0.0
    assert reciprocal_rank_at(["z", "x", "c"], GRADES) == pytest.approx(1 / 3)
    assert reciprocal_rank_at(["z", "x", "c"], GRADES, k=2) == 0.0
    assert reciprocal_rank_at(["c", "c"], GRADES) == 1.0
    assert reciprocal_rank_at([], GRADES) == 0.0
    with pytest.raises(ValueError):
        ndcg_at(["a"], GRADES, k=0)
    with pytest.raises(ValueError):
        Metric("map", 10)


def test_metric_names() -> None:
    assert [m.name for m in DEFAULT_METRICS] == ["nDCG@10", "recall@100", "MRR@10"]


# -- metrics against trec_eval ----------------------------------------------------------------

def _random_collection(seed: int) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    rnd = random.Random(seed)
    docs = [f"d{i}" for i in range(300)]
    qrels: dict[str, dict[str, int]] = {}
    runs: dict[str, list[str]] = {}
    for q in range(40):
        judged = rnd.sample(docs, rnd.randint(1, 60))
        qrels[f"q{q}"] = {d: rnd.choice([0, 0, 1, 1, 2, 3]) for d in judged}
        if not any(qrels[f"q{q}"].values()):
            qrels[f"q{q}"][judged[0]] = 1
        pool = judged + rnd.sample(docs, 80)
        rnd.shuffle(pool)
        runs[f"q{q}"] = list(dict.fromkeys(pool))[:rnd.randint(0, 130)]
    return qrels, runs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_metrics_equal_trec_eval(seed: int) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, runs = _random_collection(seed)
    # trec_eval orders by score: give strictly decreasing scores in our rank order.
    run = {q: {d: float(1000 - i) for i, d in enumerate(r)} for q, r in runs.items()}
    ten = {q: {d: s for d, s in r.items() if s > 1000 - 10} for q, r in run.items()}  # recip_rank has no cutoff
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(ten)
    for q, ranked in runs.items():
        if not ranked:  # trec_eval leaves out queries without results; ours score 0
            continue
        assert ndcg_at(ranked, qrels[q], 10) == pytest.approx(full[q]["ndcg_cut_10"], abs=1e-4)
        assert recall_at(ranked, qrels[q], 100) == pytest.approx(full[q]["recall_100"], abs=1e-4)
        if q in mrr:
            assert reciprocal_rank_at(ranked, qrels[q], 10) == pytest.approx(mrr[q]["recip_rank"], abs=1e-4)


# -- statistics -------------------------------------------------------------------------------

def test_bootstrap_interval_is_seeded_and_sensible() -> None:
    rng = np.random.default_rng(7)
    values = rng.random(200)
    low, high = bootstrap_interval(values, seed=3)
    assert (low, high) == bootstrap_interval(values, seed=3)
    assert low < values.mean() < high
    # about 1.96 standard errors either side for a mean of 200 uniform values
    se = values.std(ddof=1) / math.sqrt(values.size)
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.1)
    assert bootstrap_interval([0.5] * 30) == (0.5, 0.5)
    wider = bootstrap_interval(values, confidence=0.99)
    assert wider[0] < low and wider[1] > high
    for bad in ({"confidence": 1.0}, {"resamples": 0}):
        with pytest.raises(ValueError):
            bootstrap_interval(values, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        bootstrap_interval([])


def test_bootstrap_interval_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    values = np.random.default_rng(11).exponential(size=150)
    ours = bootstrap_interval(values, resamples=20_000, seed=1)
    theirs = stats.bootstrap((values,), np.mean, n_resamples=5_000, method="percentile",
                             random_state=np.random.default_rng(2)).confidence_interval
    assert ours[0] == pytest.approx(theirs.low, abs=0.015) and ours[1] == pytest.approx(theirs.high, abs=0.015)


def _exact_p(a: list[float], b: list[float]) -> float:
    diff = np.array(a) - np.array(b)
    observed = abs(diff.mean())
    flips = [abs((np.array(signs) * diff).mean()) >= observed - 1e-12
             for signs in itertools.product((1, -1), repeat=diff.size)]
    return sum(flips) / len(flips)


def test_randomisation_test_matches_exact_enumeration() -> None:
    rng = random.Random(5)
    for shift in (0.0, 0.15, 0.4):
        a = [rng.random() for _ in range(12)]
        b = [x - shift + rng.gauss(0, 0.2) for x in a]
        exact = _exact_p(a, b)  # all 4,096 sign patterns
        p = paired_randomisation_test(a, b, permutations=20_000, seed=1)
        # Monte Carlo error of a proportion: a generous 4 standard errors (plus the +1)
        assert abs(p - exact) <= 4 * math.sqrt(exact * (1 - exact) / 20_000) + 2e-4, (shift, p, exact)


def test_randomisation_test_edge_cases() -> None:
    assert paired_randomisation_test([0.3, 0.5, 0.7], [0.3, 0.5, 0.7]) == 1.0
    p = paired_randomisation_test([1.0] * 40, [0.0] * 40, permutations=999)
    assert p == pytest.approx(1 / 1000)  # never 0
    assert paired_randomisation_test([0.2, 0.9], [0.1, 0.3], seed=4) == paired_randomisation_test(
        [0.2, 0.9], [0.1, 0.3], seed=4)
    with pytest.raises(ValueError):
        paired_randomisation_test([0.1, 0.2], [0.1])
    with pytest.raises(ValueError):
        paired_randomisation_test([0.1], [0.1], permutations=0)


# -- reports ------------------------------------------------------------------------------------

QRELS = {"1": {"a": 2, "b": 1, "x": 0}, "2": {"c": 1}, "3": {"d": 1, "e": 1}, "4": {"a": 0}}
RUNS = {
    "good": {"1": ["a", "b"], "2": ["c"], "3": ["d", "e"]},
    "poor": {"1": ["x", "b", "a"], "2": ["q"], "3": []},
}


def test_evaluate_runs_report() -> None:
    report = evaluate_runs(RUNS, QRELS, baseline="poor", resamples=500, permutations=500)
    assert report.queries == 3 and report.skipped == ("4",)  # query 4 has no relevant document
    good, poor = report.result("good"), report.result("poor")
    assert good.metric("nDCG@10").mean == pytest.approx(1.0)
    expected_poor = (ndcg_at(["x", "b", "a"], QRELS["1"]) + 0 + 0) / 3
    assert poor.metric("nDCG@10").mean == pytest.approx(expected_poor)
    assert poor.metric("recall@100").mean == pytest.approx((1 + 0 + 0) / 3)
    assert poor.metric("MRR@10").mean == pytest.approx((1 / 2) / 3)
    assert poor.metric("nDCG@10").p_value is None and poor.metric("nDCG@10").delta is None
    summary = good.metric("nDCG@10")
    assert summary.delta == pytest.approx(1.0 - expected_poor)
    assert summary.p_value is not None and 0 < summary.p_value <= 1
    assert summary.delta_ci_low is not None and summary.delta_ci_low <= summary.delta <= summary.delta_ci_high
    assert good.per_query["nDCG@10"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert good.median_ms is None
    with pytest.raises(KeyError):
        good.metric("MAP")
    with pytest.raises(KeyError):
        report.result("nope")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["baseline"] == "poor" and [r["strategy"] for r in data["results"]] == ["good", "poor"]
    assert data["results"][0]["metrics"][0]["metric"] == "nDCG@10"
    assert "per_query" not in report.to_dict(per_query=False)["results"][0]
    table = report.table()
    assert "good" in table and "baseline" in table and "nDCG@10" in table
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.queries = 5  # type: ignore[misc]


def test_evaluate_runs_rejects_bad_arguments() -> None:
    with pytest.raises(ValidationError, match="baseline 'other'"):
        evaluate_runs(RUNS, QRELS, baseline="other")
    with pytest.raises(ValidationError, match="no run"):
        evaluate_runs({}, QRELS)
    with pytest.raises(ValidationError, match="relevant"):
        evaluate_runs(RUNS, {"1": {"a": 0}})


# -- inputs ---------------------------------------------------------------------------------

def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_qrels(tmp_path: Path) -> None:
    path = _write(tmp_path, "qrels.txt", "# comment\n1 0 a 2\n1 0 b 0\n\n2 Q0 c 1\n1 0 a 2\n")
    assert load_qrels(path) == {"1": {"a": 2, "b": 0}, "2": {"c": 1}}


@pytest.mark.parametrize(("text", "line", "message"), [
    ("1 0 a 1\n1 0 b\n", 2, "expected 4 fields"),
    ("1 0 a 1\n\n1 0 b x\n", 3, "grade 'x' is not an integer"),
    ("1 0 a 1\n1 0 a 2\n", 2, "judged again"),
])
def test_malformed_qrels_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = _write(tmp_path, "qrels.txt", text)
    with pytest.raises(EvaluationDataError, match=message) as info:
        load_qrels(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert info.value.path == str(path) and info.value.line == line


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(EvaluationDataError, match="no such file"):
        load_qrels(tmp_path / "missing.txt")
    with pytest.raises(EvaluationDataError, match="is a directory"):
        load_queries(tmp_path)
    with pytest.raises(EvaluationDataError, match="no judgements"):
        load_qrels(_write(tmp_path, "empty.txt", "\n# nothing\n"))
    (tmp_path / "latin1.tsv").write_bytes(b"1\tcaf\xe9\n")
    with pytest.raises(EvaluationDataError, match="not UTF-8"):
        load_queries(tmp_path / "latin1.tsv")


def test_load_queries_tsv_and_jsonl(tmp_path: Path) -> None:
    tsv = load_queries(_write(tmp_path, "q.tsv", "1\tshock  waves\n\n2\tboundary layer\n"))
    assert [(q.id, q.text, q.line) for q in tsv] == [("1", "shock waves", 1), ("2", "boundary layer", 3)]
    jsonl = load_queries(_write(tmp_path, "q.jsonl", '{"_id": "7", "text": "heat"}\n{"id": 8, "query": "flow"}\n'))
    assert [(q.id, q.text) for q in jsonl] == [("7", "heat"), ("8", "flow")]
    assert jsonl[1].where == f"{tmp_path / 'q.jsonl'}:2"
    assert Query("x", "t").where == "query 'x'"


@pytest.mark.parametrize(("name", "text", "line", "message"), [
    ("q.tsv", "1\tok\n2 no tab\n", 2, "no tab"),
    ("q.tsv", "1\tok\n\t text\n", 2, "blank query id"),
    ("q.tsv", "1\tok\n2\t  \n", 2, "has no text"),
    ("q.tsv", "1\tok\n1\tagain\n", 2, "repeated"),
    ("q.jsonl", '{"id": "1", "text": "ok"}\n{"id": "2", "text": \n', 2, "invalid JSON"),
    ("q.jsonl", '{"id": "1", "text": "ok"}\n["a"]\n', 2, "expected a JSON object"),
    ("q.jsonl", '{"id": "1", "text": "ok"}\n{"text": "no id"}\n', 2, "no query id"),
    ("q.jsonl", '{"id": "1", "text": "ok"}\n{"id": "2", "text": 5}\n', 2, "no query text"),
])
def test_malformed_queries_name_file_and_line(tmp_path: Path, name: str, text: str, line: int, message: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(EvaluationDataError, match=message) as info:
        load_queries(path)
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_queries_without_judgements_are_named(tmp_path: Path) -> None:
    queries = load_queries(_write(tmp_path, "q.tsv", "1\ta\n2\tb\n3\tc\n"))
    with pytest.raises(EvaluationDataError, match="query '2' has no judgements") as info:
        evaluation.check_judged(queries, {"1": {"a": 1}})
    assert str(info.value).startswith(f"{tmp_path / 'q.tsv'}:2: ") and "2 of 3 queries" in str(info.value)
    evaluation.check_judged(queries[:1], {"1": {"a": 1}})


# -- the plot -----------------------------------------------------------------------------------

def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    report = evaluate_runs(RUNS, QRELS, baseline="poor", resamples=200, permutations=200)
    out = evaluation.plot_report(report, tmp_path / "chart.png", title="test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as image:
        image.verify()
    with Image.open(out) as image:
        assert image.format == "PNG" and image.size[0] >= 600 and image.size[1] >= 400


def test_plot_without_matplotlib_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    report = evaluate_runs(RUNS, QRELS, resamples=100, permutations=100)
    with pytest.raises(ConfigurationError, match=r"tnsrag-db\[plot\]"):
        evaluation.plot_report(report, tmp_path / "chart.png")
    assert not (tmp_path / "chart.png").exists()
