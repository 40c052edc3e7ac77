"""Retrieval quality on the Cranfield collection: nDCG@10 and recall@100 per strategy.

Data: ``<repo>/../shared/data/cranfield`` (or ``--data``): 1,400 aeronautics abstracts,
225 queries and graded judgements. As the data's README warns, the judgements number
the queries 1–225 by their *position* in ``cran.qry.xml``, not by ``<num>``. Each
document is stored as its title and text; grades ≤ 0 are not relevant; queries with no
relevant document are skipped.

Rows (each a factory in :data:`STRATEGIES`, so more can be added, e.g. multi-query with
RM3; a factory raising :class:`Unavailable` is skipped with a printed note):

* ``keyword``: ``KeywordRAGStrategy(BM25Index(store))`` — Okapi BM25, k1 1.2, b 0.75;
* ``vector (hash 128-d)``: ``VectorRAGStrategy(VectorMemoryStore(store, HashingEmbedding()))``;
* ``hybrid``: ``HybridRAGStrategy(keywords, vectors)`` — RRF (k 60) of both.

Usage::

    python -m bench.cranfield [--url URL] [--data DIR] [--corpus NAME] [--reuse]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) the embedded server of
``tnsrag_db.connect()`` is used, with the dedicated corpus ``bench_cranfield_core``
(replaced unless ``--reuse`` finds it complete).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from tnsrag_db.indexes.bm25 import BM25Index
from tnsrag_db.store.store import Store, connect
from tnsrag_db.strategies.base import RAGStrategy
from tnsrag_db.strategies.keyword import KeywordRAGStrategy
from tnsrag_db.types import MemoryEntry, RAGContext

CORPUS = "bench_cranfield_core"
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"

_DOC_RE = re.compile(r"<doc>(.*?)</doc>", re.S)
_TOP_RE = re.compile(r"<top>(.*?)</top>", re.S)


def _field(block: str, name: str) -> str:
    m = re.search(rf"<{name}>(.*?)</{name}>", block, re.S)
    return " ".join(m.group(1).split()) if m else ""


def load_documents(data: Path) -> list[MemoryEntry]:
    """The abstracts as entries ``<docno>`` with content ``title`` + newline + ``text``."""
    raw = (data / "cran.all.1400.xml").read_text(encoding="utf-8")
    return [MemoryEntry(_field(b, "docno"), f"{_field(b, 'title')}\n{_field(b, 'text')}") for b in _DOC_RE.findall(raw)]


def load_queries(data: Path) -> list[tuple[str, str]]:
    """``(query id, text)``, ids ``1..225`` by position in the file (the judgements' numbering, not ``<num>``)."""
    raw = (data / "cran.qry.xml").read_text(encoding="utf-8")
    return [(str(i), _field(b, "title")) for i, b in enumerate(_TOP_RE.findall(raw), start=1)]


def load_judgements(data: Path) -> dict[str, dict[str, int]]:
    """``{query id: {docno: grade}}`` for grades > 0."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (data / "cranqrel.trec.txt").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 4 and int(parts[3]) > 0:
            qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return qrels


def ndcg_at(ranked: Sequence[str], grades: dict[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains (the grade) and a log2 discount."""
    dcg = sum(grades.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(grades.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], grades: dict[str, int], k: int = 100) -> float:
    """Share of the relevant documents found in the top k."""
    return len(set(ranked[:k]) & set(grades)) / len(grades)


class Unavailable(Exception):
    """A strategy of a row cannot be built in this installation (the row is skipped)."""


@dataclass
class Setup:
    """What factories share: the store with the documents loaded, and views built so far."""

    store: Store
    documents: list[MemoryEntry]
    keywords: BM25Index
    vectors: object | None = None


def _vectors(setup: Setup) -> object:
    if setup.vectors is None:
        try:
            from tnsrag_db.embeddings import HashingEmbedding
            from tnsrag_db.indexes.vector import VectorMemoryStore
        except ImportError as exc:
            raise Unavailable(f"vector store not available ({exc})") from exc
        vectors = VectorMemoryStore(setup.store, HashingEmbedding())
        vectors.add_all(setup.documents)  # embeds only what lacks a vector in this space
        setup.vectors = vectors
    return setup.vectors


def keyword_strategy(setup: Setup) -> RAGStrategy:
    return KeywordRAGStrategy(setup.keywords)


def vector_strategy(setup: Setup) -> RAGStrategy:
    try:
        from tnsrag_db.strategies.vector import VectorRAGStrategy
    except ImportError as exc:
        raise Unavailable(f"VectorRAGStrategy not available ({exc})") from exc
    return VectorRAGStrategy(_vectors(setup))  # type: ignore[arg-type]


def hybrid_strategy(setup: Setup) -> RAGStrategy:
    try:
        from tnsrag_db.strategies.hybrid import HybridRAGStrategy
    except ImportError as exc:
        raise Unavailable(f"HybridRAGStrategy not available ({exc})") from exc
    return HybridRAGStrategy(setup.keywords, _vectors(setup))  # type: ignore[arg-type]


#: Row name → factory. Add rows here (for example multi-query with RM3 over ``keyword``).
STRATEGIES: dict[str, Callable[[Setup], RAGStrategy]] = {
    "keyword": keyword_strategy,
    "vector (hash 128-d)": vector_strategy,
    "hybrid": hybrid_strategy,
}


def evaluate(strategy: RAGStrategy, queries: list[tuple[str, str]],
             qrels: dict[str, dict[str, int]]) -> tuple[float, float, float, int]:
    """Mean nDCG@10, mean recall@100, median latency (ms) and the number of judged queries."""
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
    return statistics.fmean(ndcgs), statistics.fmean(recalls), statistics.median(times), len(ndcgs)


def ingest(store: Store, documents: list[MemoryEntry], reuse: bool) -> None:
    if reuse and store.count() == len(documents):
        return
    store.clear()  # deletes entries with their postings, embeddings and statistics
    store.add_all(documents)
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(sa.text("VACUUM ANALYZE bm25_postings"))


def run(store: Store, args: argparse.Namespace) -> None:
    data = Path(args.data)
    documents, queries, qrels = load_documents(data), load_queries(data), load_judgements(data)
    ingest(store, documents, args.reuse)
    setup = Setup(store, documents, BM25Index(store))
    judged = sum(1 for qid, _ in queries if qrels.get(qid))
    print(f"Cranfield: {len(documents)} documents, {len(queries)} queries, {judged} with judgements "
          f"(corpus {store.corpus!r})")
    print(f"{'strategy':<22} {'nDCG@10':>8} {'recall@100':>10} {'median ms':>10}")
    for name, factory in STRATEGIES.items():
        try:
            strategy = factory(setup)
        except Unavailable as exc:
            print(f"{name:<22} skipped: {exc}")
            continue
        try:
            ndcg, recall, ms, _ = evaluate(strategy, queries, qrels)
        except Exception as exc:  # a row under development must not hide the others
            print(f"{name:<22} failed: {type(exc).__name__}: {exc}")
            continue
        print(f"{name:<22} {ndcg:8.4f} {recall:10.4f} {ms:10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"),
                        help="database URL (default: TNSRAG_DATABASE_URL, else the embedded server)")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="directory holding the Cranfield files")
    parser.add_argument("--corpus", default=CORPUS, help=f"corpus name (default {CORPUS})")
    parser.add_argument("--reuse", action="store_true", help="reuse the corpus when it holds every document")
    args = parser.parse_args()
    with connect(args.url, corpus=args.corpus, auto_migrate=True if args.url else None) as store:
        run(store, args)


if __name__ == "__main__":
    main()
