"""Retrieval quality on Cranfield: keyword (BM25) vs multi-query with RM3 expansion.

Data: ``../shared/data/cranfield`` next to the repository (or ``--data``): 1,400
aeronautics abstracts, 225 queries, graded judgements. As the data's README warns, the
judgements number queries 1–225 by their *position* in ``cran.qry.xml``, not by
``<num>``. Each document is stored as its title and text; documents judged 0 and
queries without a relevant document do not count as relevant / are skipped.

For every query it runs
- ``keyword``: ``KeywordRAGStrategy(BM25Index(store))`` (Okapi BM25, k1 1.2, b 0.75);
- ``multi_query+rm3``: ``MultiQueryRAGStrategy(keyword, RM3QueryExpander(index), RM3,
  "rm3", max_expansions)`` — RRF (k = 60) of the original query's BM25 ranking and the
  RM3-expanded query's (10 feedback documents, 10 expansion terms);
with ``max_results = 100``, and prints nDCG@10 (linear gains = judgement grade,
log2 discount) and recall@100, means over the judged queries, with the median
latency per query and the ratio to keyword measured in the same run.

Usage::

    python -m bench.cranfield_rm3 [--url URL] [--data DIR]

With no ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The data is loaded into the corpus ``bench_cranfield`` (replaced).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bench._common import database_url
from bench.cranfield import DEFAULT_DATA, load_documents, load_judgements, load_queries
from tnsrag_db import evaluation
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.expansion import QueryExpansion, RM3QueryExpander
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.multi_query import MultiQueryRAGStrategy
from tnsrag_db._types import MemoryEntry

CORPUS = "bench_cranfield"


def ingest(store: Store, docs: list[MemoryEntry], reuse: bool) -> None:
    if reuse and store.count() == len(docs):
        return
    store.drop_corpus()
    store.add_all(docs)
    with store.session.transaction() as conn:  # fresh planner statistics for the scoring statements
        conn.execute("ANALYZE entries")
        conn.execute("ANALYZE bm25_postings")


def run(store: Store, args: argparse.Namespace) -> None:
    data = Path(args.data)
    docs, queries, qrels = load_documents(data), load_queries(data), load_judgements(data)
    ingest(store, docs, args.reuse)
    index = BM25Index(store)
    keyword = KeywordRAGStrategy(index)
    rm3 = MultiQueryRAGStrategy(keyword, RM3QueryExpander(index), QueryExpansion.RM3, "rm3", args.max_expansions)
    report = evaluation.evaluate_strategies({"keyword (BM25)": keyword, "multi_query + RM3": rm3}, queries, qrels,
                                            baseline="keyword (BM25)")
    print(f"Cranfield: {len(docs)} documents, {len(queries)} queries, {report.queries} judged")
    print(report.table())
    base_ms = report.results[0].median_ms or 1.0
    for result in report.results:
        print(f"{result.strategy}: {(result.median_ms or 0.0) / base_ms:.2f}x the keyword time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="directory holding the Cranfield files")
    parser.add_argument("--max-expansions", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="reuse a loaded bench_cranfield corpus")
    args = parser.parse_args()

    with database_url(args.url) as url:
        with connect(url, corpus=CORPUS, auto_migrate=True) as store:
            run(store, args)


if __name__ == "__main__":
    main()
