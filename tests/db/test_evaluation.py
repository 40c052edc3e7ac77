"""Evaluation over a real store: strategies run and judged, ``tnsrag eval`` end to end, Cranfield."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db import evaluation
from tnsrag_db._errors import EvaluationDataError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext
from tnsrag_db.embeddings import HashingEmbedding
from tnsrag_db.evaluation import Query, ndcg_at, recall_at, reciprocal_rank_at

# A tiny synthetic collection: six documents, four queries, graded judgements.
DOCS = {
    "wing": "Lift and drag of a swept wing at transonic speeds.",
    "shock": "Shock waves and the boundary layer: interaction at supersonic speed.",
    "heat": "Heat transfer to a blunt body in hypersonic flow.",
    "panel": "Flutter of thin panels in supersonic flow.",
    "nozzle": "Flow in a convergent nozzle and its discharge.",
    "other": "A note on the history of the laboratory.",
}
QUERIES_TSV = ("q1\tshock waves boundary layer\n"
               "q2\theat transfer hypersonic\n"
               "q3\tpanel flutter supersonic\n"
               "q4\tlaboratory budget\n")
QRELS_TXT = ("q1 0 shock 2\nq1 0 wing 1\nq1 0 panel 0\n"
             "q2 0 heat 1\n"
             "q3 0 panel 2\nq3 0 shock 1\n"
             "q4 0 other 0\n")  # q4: judged, nothing relevant -> skipped


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"id": k, "content": v}) + "\n" for k, v in DOCS.items()))
    (tmp_path / "queries.tsv").write_text(QUERIES_TSV)
    (tmp_path / "qrels.txt").write_text(QRELS_TXT)
    return tmp_path / "docs.jsonl", tmp_path / "queries.tsv", tmp_path / "qrels.txt"


def test_evaluate_strategies_judges_what_the_strategies_return(store: Store, tmp_path: Path) -> None:
    _, queries_path, qrels_path = _files(tmp_path)
    vectors = VectorMemoryStore(store, HashingEmbedding())
    vectors.add_all([MemoryEntry(k, v) for k, v in DOCS.items()])
    strategies = {"keyword": KeywordRAGStrategy(BM25Index(store)), "vector": VectorRAGStrategy(vectors)}
    queries, qrels = evaluation.load_queries(queries_path), evaluation.load_qrels(qrels_path)
    assert evaluation.check_corpus(store, qrels, queries) == 4
    report = evaluation.evaluate_strategies(strategies, queries, qrels, baseline="keyword", depth=3,
                                            resamples=300, permutations=300)
    assert report.queries == 3 and report.skipped == ("q4",) and report.depth == 3
    for name, strategy in strategies.items():
        result = report.result(name)
        assert result.median_ms is not None and result.median_ms > 0
        for q in queries[:3]:
            ranked = [d.metadata["entryId"] for d in strategy.retrieve(q.text, RAGContext(3))]
            grades = qrels[q.id]
            assert result.per_query["nDCG@10"][q.id] == pytest.approx(ndcg_at(ranked, grades))
            assert result.per_query["recall@100"][q.id] == pytest.approx(recall_at(ranked, grades, 100))
            assert result.per_query["MRR@10"][q.id] == pytest.approx(reciprocal_rank_at(ranked, grades))
    # BM25 finds the relevant documents of these queries first.
    assert report.result("keyword").metric("MRR@10").mean == pytest.approx(1.0)


def test_a_corpus_without_the_judged_documents_is_an_error(store: Store, tmp_path: Path) -> None:
    store.add_all([MemoryEntry("unrelated", "text")])
    with pytest.raises(EvaluationDataError, match="none of the 4 documents judged relevant"):
        evaluation.check_corpus(store, evaluation.load_qrels(_files(tmp_path)[2]), [Query("q1", "x"), Query("q2", "x"),
                                                                                     Query("q3", "x")])


# -- the command --------------------------------------------------------------------------------

def _cli(db_url: URL, *args: str) -> tuple[int, str, str]:
    from tnsrag_db._cli import main_group

    result = CliRunner().invoke(main_group, [*args, "--url", db_url.render_as_string(hide_password=False)])
    return result.exit_code, result.stdout, result.stderr


def test_eval_command(db_url: URL, tmp_path: Path, make_store: Callable[..., Store]) -> None:
    docs, queries, qrels = _files(tmp_path)
    corpus = make_store().corpus  # deleted after the test
    code, out, err = _cli(db_url, "ingest", str(docs), "--corpus", corpus, "--json")
    assert code == 0, out + err
    code, out, err = _cli(db_url, "eval", "--corpus", corpus, "--qrels", str(qrels), "--queries", str(queries),
                          "--strategy", "vector", "--resamples", "500", "--json")
    assert code == 0, out + err
    data = json.loads(out)
    # The baseline is evaluated too when it is not listed.
    assert data["baseline"] == "keyword" and [r["strategy"] for r in data["results"]] == ["keyword", "vector"]
    assert data["queries"] == 3 and data["skipped"] == ["q4"] and data["resamples"] == 500
    vector = data["results"][1]["metrics"][0]
    assert vector["metric"] == "nDCG@10" and 0 < vector["p_value"] <= 1
    assert vector["ci_low"] <= vector["mean"] <= vector["ci_high"]
    plot = tmp_path / "out.png"
    code, out, err = _cli(db_url, "eval", "--corpus", corpus, "--qrels", str(qrels), "--queries", str(queries),
                          "--resamples", "200", "--plot", str(plot))
    assert code == 0, out + err
    assert "nDCG@10" in out and "hybrid" in out and "baseline" in out and f"plot: {plot}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_command_bad_input(db_url: URL, tmp_path: Path, make_store: Callable[..., Store]) -> None:
    docs, queries, qrels = _files(tmp_path)
    corpus = make_store().corpus
    make_store(f"{corpus}_empty")
    assert _cli(db_url, "ingest", str(docs), "--corpus", corpus, "--json")[0] == 0
    base = ["eval", "--corpus", corpus, "--resamples", "100"]

    def error(*args: str) -> str:
        code, out, err = _cli(db_url, *base, *args)
        assert code == 1, out + err
        assert out == "" and len(err.strip().splitlines()) == 1, err
        return err.strip()

    assert error("--qrels", str(tmp_path / "nope.txt"), "--queries", str(queries)) == (
        f"error: {tmp_path / 'nope.txt'}: no such file")
    bad_qrels = tmp_path / "bad_qrels.txt"
    bad_qrels.write_text("q1 0 shock 2\nq1 0 wing\n")
    assert error("--qrels", str(bad_qrels), "--queries", str(queries)).startswith(f"error: {bad_qrels}:2: expected 4")
    extra = tmp_path / "extra.tsv"
    extra.write_text(QUERIES_TSV + "q9\tunjudged query\n")
    assert error("--qrels", str(qrels), "--queries", str(extra)).startswith(
        f"error: {extra}:5: query 'q9' has no judgements")
    code, out, err = _cli(db_url, *base, "--qrels", str(qrels), "--queries", str(extra), "--skip-unjudged",
                          "--strategy", "keyword", "--json")
    assert code == 0 and json.loads(out)["queries"] == 3, out + err
    assert "none of the" in error("--qrels", str(qrels), "--queries", str(queries), "--corpus", f"{corpus}_empty")
    code, _, err = _cli(db_url, *base, "--qrels", str(qrels), "--queries", str(queries), "--strategy", "bogus")
    assert code == 2 and "bogus" in err


# -- Cranfield (when the collection is next to the repository) ----------------------------------

#: Next to the repository (as in CI), or where TNSRAG_CRANFIELD_DIR says (a git worktree elsewhere).
CRANFIELD = Path(os.environ.get("TNSRAG_CRANFIELD_DIR")
                 or Path(__file__).resolve().parents[2].parent / "shared" / "data" / "cranfield")


@pytest.mark.slow
@pytest.mark.skipif(not (CRANFIELD / "cranqrel.trec.txt").exists(),
                    reason="the Cranfield collection is not at ../shared/data/cranfield (the synthetic tests above "
                           "cover the feature)")
def test_bm25_on_cranfield(store: Store) -> None:
    from bench.cranfield import load_documents, load_judgements, load_queries

    store.add_all(load_documents(CRANFIELD))
    with store.session.autocommit() as conn:  # 1,400 rows are below the library's own ANALYZE threshold
        conn.execute("ANALYZE entries, bm25_postings")
    report = evaluation.evaluate_strategies({"keyword": KeywordRAGStrategy(BM25Index(store))},
                                            load_queries(CRANFIELD), load_judgements(CRANFIELD),
                                            resamples=1000, permutations=1000)
    keyword = report.result("keyword")
    assert report.queries == 225
    assert keyword.metric("nDCG@10").mean >= 0.38  # issue 10's target for BM25
    assert keyword.metric("recall@100").mean >= 0.74
    assert keyword.metric("nDCG@10").ci_low < keyword.metric("nDCG@10").mean < keyword.metric("nDCG@10").ci_high


def test_readme_evaluation_example_runs(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    from tests._docs import find_example

    page, example = find_example("from tnsrag_db.evaluation import")
    namespace: dict[str, object] = {"store": store}
    exec(compile(example, str(page), "exec"), namespace)
    assert namespace["ndcg"].mean == pytest.approx(1.0)  # type: ignore[attr-defined]
    assert "keyword" in capsys.readouterr().out
