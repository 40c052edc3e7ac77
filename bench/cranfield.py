"""Retrieval quality on the Cranfield collection, through :mod:`tnsrag_db.evaluation`.

Data: ``<repo>/../shared/data/cranfield`` (or ``--data``): 1,400 aeronautics abstracts,
225 queries and judgements (TREC qrels). As the data's README warns, the judgements
number the queries 1–225 by their *position* in ``cran.qry.xml``, not by ``<num>``.
Each document is stored as its title and text.

Per strategy: nDCG@10, recall@100 and MRR@10 with 95 % bootstrap intervals over queries,
and against ``keyword`` the difference and a paired randomisation test's p-value
(:func:`tnsrag_db.evaluation.evaluate_strategies`). Rows:

* ``keyword``: ``KeywordRAGStrategy(BM25Index(store))`` — Okapi BM25, k1 1.2, b 0.75;
* ``vector (hash)`` / ``hybrid (hash)``: over the 128-d hash fallback;
* ``vector (model)`` / ``hybrid (model)``: over ``tnsrag_db.embeddings.default_model()``
  when the ``[embed]`` extra is installed (otherwise a note says so).

Usage::

    python -m bench.cranfield [--url URL] [--data DIR] [--corpus NAME] [--reuse] [--json] [--plot out.png]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) the embedded server of
``tnsrag_db.connect()`` is used, with the dedicated corpus ``bench_cranfield_core``
(replaced unless ``--reuse`` finds it complete).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from tnsrag_db import evaluation
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import EmbeddingFunction, HashingEmbedding
from tnsrag_db.evaluation import Query

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


def load_queries(data: Path) -> list[Query]:
    """The queries, ids ``1..225`` by position in the file (the judgements' numbering, not ``<num>``)."""
    path = data / "cran.qry.xml"
    raw = path.read_text(encoding="utf-8")
    return [Query(str(i), _field(b, "title"), str(path)) for i, b in enumerate(_TOP_RE.findall(raw), start=1)]


def load_judgements(data: Path) -> dict[str, dict[str, int]]:
    """``{query id: {docno: grade}}`` from the TREC qrels file."""
    return evaluation.load_qrels(data / "cranqrel.trec.txt")


def shipped_model() -> tuple[EmbeddingFunction | None, str]:
    """The shipped embedding model, or None and why it is not available."""
    try:
        from tnsrag_db.embeddings import default_model  # type: ignore[attr-defined, unused-ignore]
    except ImportError:
        return None, "this version has no tnsrag_db.embeddings.default_model()"
    try:
        model: EmbeddingFunction = default_model()
    except ConfigurationError as exc:  # ProviderConfigurationError: the [embed] extra is missing
        return None, str(exc)
    return model, ""


def strategies(store: Store, documents: list[MemoryEntry]) -> dict[str, RAGStrategy]:
    """The rows: keyword, vector and hybrid over the hash fallback and, when installed, the shipped model."""
    keywords = BM25Index(store)
    rows: dict[str, RAGStrategy] = {"keyword": KeywordRAGStrategy(keywords)}
    embeddings: list[tuple[str, EmbeddingFunction]] = [("hash", HashingEmbedding())]
    model, why = shipped_model()
    if model is not None:
        embeddings.append(("model", model))
    else:
        print(f"note: no rows for the shipped model: {why}")
    for label, embedding in embeddings:
        vectors = VectorMemoryStore(store, embedding)
        vectors.add_all(documents)  # embeds only what lacks a vector in this space
        rows[f"vector ({label})"] = VectorRAGStrategy(vectors)
        rows[f"hybrid ({label})"] = HybridRAGStrategy(keywords, vectors)
    return rows


def ingest(store: Store, documents: list[MemoryEntry], reuse: bool) -> None:
    """Load the documents into the corpus (unless ``reuse`` finds them all), then refresh statistics."""
    if reuse and store.count() == len(documents):
        return
    store.clear()  # deletes entries with their postings, embeddings and statistics
    store.add_all(documents)
    with store.session.autocommit() as conn:
        conn.execute("VACUUM ANALYZE bm25_postings")


def run(store: Store, args: argparse.Namespace) -> evaluation.EvaluationReport:
    """Load the collection, evaluate every row and print the report."""
    data = Path(args.data)
    documents, queries, qrels = load_documents(data), load_queries(data), load_judgements(data)
    ingest(store, documents, args.reuse)
    rows = strategies(store, documents)
    report = evaluation.evaluate_strategies(rows, queries, qrels, baseline="keyword", resamples=args.resamples,
                                            permutations=args.resamples)
    if args.json:
        print(json.dumps(report.to_dict(per_query=False), indent=2))
    else:
        print(f"Cranfield: {len(documents)} documents, {len(queries)} queries, {report.queries} judged "
              f"(corpus {store.corpus!r}); intervals: {report.confidence:.0%} bootstrap over queries, "
              f"p: paired randomisation test against keyword")
        print(report.table())
    if args.plot:
        evaluation.plot_report(report, args.plot, title="Cranfield")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"),
                        help="database URL (default: TNSRAG_DATABASE_URL, else the embedded server)")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="directory holding the Cranfield files")
    parser.add_argument("--corpus", default=CORPUS, help=f"corpus name (default {CORPUS})")
    parser.add_argument("--reuse", action="store_true", help="reuse the corpus when it holds every document")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples and test permutations")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--plot", default=None, help="also draw the report as a PNG bar chart here")
    args = parser.parse_args()
    with connect(args.url, corpus=args.corpus, auto_migrate=True if args.url else None) as store:
        run(store, args)


if __name__ == "__main__":
    main()
