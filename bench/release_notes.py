"""A known answer on a real folder: where hybrid search ranks keyword search's first hit.

The folder is ``/usr/share/doc/git``'s ``RelNotes`` and ``contrib`` trees, read as
``tnsrag ingest /usr/share/doc/git/RelNotes /usr/share/doc/git/contrib`` reads them
(:class:`~tnsrag_db._loaders.FileLoader` per folder, chunks fitted to the shipped model's
window) into a throwaway corpus, deleted afterwards. For each question, keyword search's
first hit is looked up in the results of hybrid search (every fusion rule) at several
``top_k``, with the median time of hybrid search by each rule (rules in alternation).

Usage::

    python -m bench.release_notes [--url URL] [--question TEXT ...] [--keep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from bench._common import fusion_weights
from bench.cranfield import shipped_model
from tnsrag_db._chunking import chunker_for
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._loaders import FileLoader
from tnsrag_db._store.store import connect
from tnsrag_db._strategies.fusion import FUSION_RULES
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import RAGContext
from tnsrag_db.embeddings import ContextualEmbedding

ROOT = Path("/usr/share/doc/git")
QUESTIONS = ("which release introduced git switch and git restore",)
TOP_K = (3, 5, 10, 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--question", nargs="*", default=list(QUESTIONS))
    parser.add_argument("--keep", action="store_true", help="keep the corpus (bench_release_notes) for a rerun")
    parser.add_argument("--repeat", type=int, default=20, help="timed repetitions per rule")
    parser.add_argument("--weights", nargs="*", default=[], metavar="K:V", type=fusion_weights,
                        help="also the score fusion with these keyword:vector weights")
    parser.add_argument("--context", action="store_true",
                        help="the weighted rows search the contextual space (<model>+context1), filled first")
    args = parser.parse_args()
    model, why = shipped_model()
    if model is None:
        raise SystemExit(f"this benchmark needs the shipped model: {why}")
    with connect(args.url, corpus="bench_release_notes", auto_migrate=True if args.url else None) as store:
        chunker = chunker_for(model)
        entries = [e for folder in ("RelNotes", "contrib")
                   for e in FileLoader(ROOT / folder, chunker=chunker, relative_to="pattern",
                                                  id_prefix=f"{folder}/").load()]
        if store.count() != len(entries):
            store.clear()
            VectorMemoryStore(store, model).add_all(entries)
        weighted_vectors = VectorMemoryStore(store, ContextualEmbedding(model) if args.context else model)
        if args.context:
            weighted_vectors.add_all(entries)  # unchanged entries: only the missing vectors
        try:
            keywords, vectors = BM25Index(store), VectorMemoryStore(store, model)
            print(f"{len(entries)} chunks")
            for question in args.question:
                first = KeywordRAGStrategy(keywords).retrieve(question, RAGContext(1))[0].metadata["entryId"]
                print(f"{question!r}: keyword's first hit {first}")
                rules = {rule: HybridRAGStrategy(keywords, vectors, fusion=rule) for rule in FUSION_RULES}
                rules |= {f"{'context ' if args.context else ''}{w[0]:g}:{w[1]:g}":
                          HybridRAGStrategy(keywords, weighted_vectors, weights=w) for w in args.weights}
                times: dict[str, list[float]] = {rule: [] for rule in rules}
                for _ in range(args.repeat):
                    for rule, hybrid in rules.items():
                        start = time.perf_counter()
                        hybrid.retrieve(question, RAGContext(5))
                        times[rule].append((time.perf_counter() - start) * 1000)
                for rule, hybrid in rules.items():
                    ranks = []
                    for k in TOP_K:
                        ids = [d.metadata["entryId"] for d in hybrid.retrieve(question, RAGContext(k))]
                        ranks.append(f"top_k {k}: {ids.index(first) + 1 if first in ids else '-'}")
                    print(f"  {rule:7} rank at {', '.join(ranks)}; median {statistics.median(times[rule][2:]):.1f} ms "
                          "at top_k 5")
        finally:
            if not args.keep:
                store.clear()


if __name__ == "__main__":
    main()
