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

``--folder PATH`` measures a real ``tnsrag ingest`` of a folder instead, with the
shipped model (the ``embed`` extra), ``--repeats`` times into a fresh corpus: the CLI
runs in a child process while this one runs ``tnsrag query --strategy keyword --json
QUERY`` in a loop (``--query``, default "merge") until it gets results. Per run it
prints: seconds from the start to that first answer, to the first committed batch and
to every entry written (the summary's ``first_searchable_seconds`` and
``searchable_seconds``), to every file read, and in all; then the model alone over the
same chunks (``embed_batch`` of ``--batch`` texts at a time, in this process) and the
ratios of the vector pass and of the whole ingest to it. Children get a temporary
``XDG_DATA_HOME``, so nothing touches the user's data directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import HashingEmbedding


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


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from tnsrag_db._cli import main; main()", *args]


def folder_run(url: str, folder: str, query: str, batch: int, env: dict[str, str]) -> dict[str, float]:
    """One ``tnsrag ingest`` of ``folder`` into a fresh corpus, a keyword query polled
    meanwhile; the timings (seconds from the start) and the model's own rate on its chunks."""
    from tnsrag_db.embeddings import default_model

    corpus = f"bench_folder_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    db = ["--url", url, "--corpus", corpus]
    started = time.perf_counter()
    proc = subprocess.Popen(_cli("ingest", folder, *db, "--batch-size", str(batch), "--json", "-q"),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_answer = float("nan")
    polls = 0
    while proc.poll() is None:
        polls += 1
        res = subprocess.run(_cli("query", query, *db, "--strategy", "keyword", "--json"), env=env,
                             capture_output=True, text=True)
        if res.returncode == 0 and json.loads(res.stdout)["results"]:
            first_answer = time.perf_counter() - started
            break
        time.sleep(0.2)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"tnsrag ingest failed ({proc.returncode}): {err}")
    summary = json.loads(out)
    with connect(url, corpus=corpus) as store:
        texts = [e.content for e in store.iter_entries()]
        model = default_model()
        model.embed_batch(texts[:64])  # warm-up, as the ingest's first batch was
        alone = time.perf_counter()
        for i in range(0, len(texts), batch):
            model.embed_batch(texts[i:i + batch])
        model_rate = len(texts) / (time.perf_counter() - alone)
        store.drop_corpus()
    vector_seconds = summary["seconds"] - summary["searchable_seconds"]
    return {"entries": summary["entries"], "files": summary["files"], "polls": polls, "first answer": first_answer,
            "first batch committed": summary["first_searchable_seconds"], "every file read": summary["read_seconds"],
            "every entry written": summary["searchable_seconds"], "ingest complete": summary["seconds"],
            "model docs/s": model_rate, "vector pass docs/s": summary["entries"] / vector_seconds,
            "whole ingest docs/s": summary["entries"] / summary["seconds"]}


def folder_main(args: argparse.Namespace) -> None:
    runs = []
    with database_url(args.url) as url, tempfile.TemporaryDirectory(prefix="tnsrag-bench-xdg-") as xdg:
        env = {**os.environ, "XDG_DATA_HOME": xdg}
        subprocess.run(_cli("db", "upgrade", "--url", url), env=env, check=True, capture_output=True)
        for _ in range(args.repeats):
            runs.append(folder_run(url, args.folder, args.query, args.batch, env))
            print(json.dumps(runs[-1]), flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"tnsrag ingest {args.folder}: {med['files']:.0f} files, {med['entries']:.0f} entries, "
          f"batch {args.batch}, medians of {len(runs)}")
    for key in ("first answer", "first batch committed", "every file read", "every entry written",
                "ingest complete"):
        print(f"{key:<24} {med[key]:>8.1f} s")
    for key in ("model docs/s", "vector pass docs/s", "whole ingest docs/s"):
        ratio = "" if key == "model docs/s" else f"  {med[key] / med['model docs/s']:.2f}x model"
        print(f"{key:<24} {med[key]:>8.1f}{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--n", type=int, default=800)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--cost", type=float, default=20.0, help="milliseconds of model work per text")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", default=None, help="measure tnsrag ingest of this folder (see above)")
    parser.add_argument("--query", default="merge", help="the keyword query polled with --folder")
    args = parser.parse_args()
    if args.folder is not None:
        folder_main(args)
        return
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
