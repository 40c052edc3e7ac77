"""``tnsrag eval``: retrieval quality of strategies on a judged query set."""

from __future__ import annotations

from pathlib import Path

import click

from tnsrag_db import evaluation
from tnsrag_db._cli._common import STRATEGY_ALIASES, Suggesting, db_options, emit, handle_errors
from tnsrag_db._cli._schema import open_existing
from tnsrag_db._errors import EvaluationDataError
from tnsrag_db._indexes.vector.spaces import query_embedding
from tnsrag_db._strategies.registry import EMBEDDING_STRATEGIES, STRATEGY_NAMES, build_strategy
from tnsrag_db.embeddings import HashingEmbedding

__all__ = ["eval_command"]

_DEFAULT_STRATEGIES = ("keyword", "vector", "hybrid")


@click.command("eval")
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus holding the judged documents.")
@click.option("--qrels", "qrels_path", required=True, type=click.Path(path_type=Path),
              help="Judgements in TREC format: query-id iteration doc-id grade per line.")
@click.option("--queries", "queries_path", required=True, type=click.Path(path_type=Path),
              help="Queries as TSV (query-id<TAB>text) or JSONL ({\"id\": ..., \"text\": ...} per line).")
@click.option("--strategy", "strategies", multiple=True, type=Suggesting(STRATEGY_NAMES, STRATEGY_ALIASES),
              help=f"Strategy to evaluate (repeatable; default: {', '.join(_DEFAULT_STRATEGIES)}).")
@click.option("--baseline", default="keyword", show_default=True, type=Suggesting(STRATEGY_NAMES, STRATEGY_ALIASES),
              help="Strategy the others are compared with (evaluated too when not listed).")
@click.option("--top-k", "top_k", default=100, show_default=True, type=click.IntRange(min=1),
              help="Results retrieved per query (recall@100 counts only what was retrieved).")
@click.option("--resamples", default=10_000, show_default=True, type=click.IntRange(min=100),
              help="Bootstrap resamples and randomisation-test permutations.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the bootstrap and the test.")
@click.option("--skip-unjudged", is_flag=True,
              help="Leave out queries without judgements instead of failing on the first one.")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw a bar chart with the intervals to this PNG file (needs tnsrag-db[plot]).")
@click.option("--embedding", default=None, metavar="NAME|DIR",
              help="Embedding space the strategies that embed search (default: the corpus's newest complete space).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (with per-query values).")
@handle_errors
def eval_command(url: str | None, schema: str, corpus: str, qrels_path: Path, queries_path: Path,
                 strategies: tuple[str, ...], baseline: str, top_k: int, resamples: int, seed: int,
                 skip_unjudged: bool, plot_path: Path | None, embedding: str | None, as_json: bool) -> None:
    """Evaluate strategies on judged queries: nDCG@10, recall@100 and MRR@10 with 95 %
    bootstrap intervals over queries, and a paired randomisation test (p-value) of each
    strategy against the baseline.

    The judged doc-ids are the corpus's entry ids (ingest the collection first, e.g. a
    JSONL file with an "id" per document). Queries whose judgements are all 0 are
    skipped; a query without any judgement is an error (see --skip-unjudged).

    Example: tnsrag eval --corpus cranfield --qrels qrels.txt --queries queries.tsv --strategy keyword --strategy hybrid --plot quality.png
    """
    qrels = evaluation.load_qrels(qrels_path)
    queries = evaluation.load_queries(queries_path)
    if skip_unjudged:
        queries = [q for q in queries if q.id in qrels]
        if not queries:
            raise EvaluationDataError(f"{queries_path}: no query has judgements in {qrels_path}",
                                      path=str(queries_path))
    if plot_path is not None:
        evaluation.require_plotting()  # fail before the retrieval, not after it
    names = list(dict.fromkeys(strategies or _DEFAULT_STRATEGIES))
    if baseline not in names:
        names.insert(0, baseline)
    with open_existing(url, schema, corpus) as store:  # reads only: never creates a schema
        evaluation.check_corpus(store, qrels, queries)
        # As `tnsrag query`: queries are embedded by the provider of the space searched.
        embedder = query_embedding(store, embedding) if EMBEDDING_STRATEGIES & set(names) else HashingEmbedding()
        built = {name: build_strategy(name, store, embedding=embedder) for name in names}
        report = evaluation.evaluate_strategies(built, queries, qrels, baseline=baseline, depth=top_k,
                                                resamples=resamples, permutations=resamples, seed=seed)
    if plot_path is not None:
        evaluation.plot_report(report, plot_path, title=f"corpus {corpus!r}")
    skipped = f", {len(report.skipped)} skipped (no relevant document)" if report.skipped else ""
    emit(report.to_dict(), as_json,
         f"corpus {corpus!r}: {report.queries} queries{skipped}; baseline {baseline}\n{report.table()}"
         + (f"\nplot: {plot_path}" if plot_path is not None else ""))
