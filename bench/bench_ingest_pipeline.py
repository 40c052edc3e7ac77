"""Ingest pipeline benchmark: the embedding function alone against end-to-end ingest, same texts, same run.

Usage::

    python -m bench.bench_ingest_pipeline [--url URL] [--n 800] [--batch 256] [--cost 20] [--repeats 3]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. The embedding is a synthetic CPU-bound model: each text's hash
features go through ``--cost`` milliseconds' worth of float32 matrix products (numpy,
which releases the GIL as ONNX Runtime does), so its own rate is a fixed docs/s
comparable to a small sentence model on these cores. Texts are the seeded generator of
``bench/_corpus.py``. Each repeat measures, on a fresh corpus ``bench_ingest_<n>``:

* ``embed only``: ``embed_batch`` over all texts in batches of ``--batch``;
* ``add_all``: :meth:`VectorMemoryStore.add_all` (embed everything, then one write);
* ``ingest``: :meth:`VectorMemoryStore.ingest` (batches commit one at a time, the next
  batch embeds while the previous one is written);
* ``two-phase``: what ``tnsrag ingest`` runs: ``ingest(vectors=False)`` (every entry
  written, keyword-searchable) then ``ingest`` again (the vectors), timed end to end;
  it also prints the median seconds until every entry was written.

It prints docs/s medians over the repeats and the ratios against ``embed only``
(the issue's target for ``ingest``: >= 0.9).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db.embeddings import HashingEmbedding
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect
from tnsrag_db._types import MemoryEntry


class SyntheticModel:
    """384-d embedding costing about ``cost_ms`` of matrix products per text (GIL released)."""

    name = "bench-synthetic-384"

    def __init__(self, cost_ms: float) -> None:
        rng = np.random.default_rng(7)
        self._hash = HashingEmbedding(384)
        self._w = rng.standard_normal((384, 384)).astype(np.float32) / 20
        self._rounds = 1
        self._calibrate(cost_ms)

    def _calibrate(self, cost_ms: float) -> None:
        x = np.ones((64, 384), dtype=np.float32)
        started = time.perf_counter()
        for _ in range(50):
            x = np.tanh(x @ self._w)
        per_round_per_text = (time.perf_counter() - started) / 50 / 64
        self._rounds = max(1, round(cost_ms / 1000 / per_round_per_text))

    def __call__(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        x = np.vstack([self._hash(t) for t in texts]).astype(np.float32)
        for _ in range(self._rounds):
            x = np.tanh(x @ self._w)
        x /= np.linalg.norm(x, axis=1, keepdims=True) + 1e-9
        return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--n", type=int, default=800)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--cost", type=float, default=20.0, help="milliseconds of model work per text")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = SyntheticModel(args.cost)
    docs = [MemoryEntry(d.id, d.content) for d in generate_corpus(args.n).entries]
    texts = [d.content for d in docs]
    rates: dict[str, list[float]] = {"embed only": [], "add_all": [], "ingest": [], "two-phase": []}
    searchable: list[float] = []
    with database_url(args.url) as url, connect(url, corpus=f"bench_ingest_{args.n}",
                                                auto_migrate=True) as store:
        for _ in range(args.repeats):
            started = time.perf_counter()
            for i in range(0, len(texts), args.batch):
                model.embed_batch(texts[i:i + args.batch])
            rates["embed only"].append(len(texts) / (time.perf_counter() - started))
            for name in ("add_all", "ingest", "two-phase"):
                store.drop_corpus()
                vectors = VectorMemoryStore(store, model, index_threshold=None)
                started = time.perf_counter()
                if name == "add_all":
                    vectors.add_all(docs, batch_size=args.batch)
                elif name == "two-phase":
                    vectors.ingest(docs, batch_size=args.batch, vectors=False)
                    searchable.append(time.perf_counter() - started)
                    vectors.ingest(docs, batch_size=args.batch)
                else:
                    vectors.ingest(docs, batch_size=args.batch)
                rates[name].append(len(texts) / (time.perf_counter() - started))
        store.drop_corpus()
    base = statistics.median(rates["embed only"])
    print(f"{args.n} texts, batch {args.batch}, synthetic model ~{args.cost} ms/text, {args.repeats} repeats")
    print(f"{'path':<12} {'docs/s (median)':>16} {'ratio to embed only':>20}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:<12} {median:>16.1f} {median / base:>20.2f}")
    print(f"two-phase: every entry written (keyword-searchable) after {statistics.median(searchable):.2f} s")


if __name__ == "__main__":
    main()
