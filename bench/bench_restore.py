"""Restore benchmark: export then restore a corpus, against a direct write of the same entries, same run.

Usage::

    python -m bench.bench_restore [--url URL] [--n 2000] [--edges 3] [--cost 5] [--repeats 3]

Without ``--url`` (or ``TNSRAG_DATABASE_URL``) an embedded server in a temporary
directory is used. Entries are the seeded texts of ``bench/_corpus.py`` with what an
export carries: metadata, a parent (ten entries per "file", the first one the parent),
a timestamp, and ``--edges`` edges per entry. The embedding is the synthetic CPU-bound
model of ``bench_ingest_pipeline`` (``--cost`` milliseconds of matrix products per text,
384-d), standing in for a real model. Each repeat measures, on fresh corpora:

* ``add_all, vectors given``: :meth:`VectorMemoryStore.add_all` with the entries' vectors
  precomputed, then :meth:`GraphStore.add_edges` (the write alone: the baseline);
* ``add_all, embedding``: the same, the model embedding every text;
* ``restore, export``: :func:`export_corpus` of the first corpus, then
  :func:`restore_corpus` of the file (no vectors: every text embedded again);
* ``restore, export --vectors``: the same with ``vectors=True`` (the vectors written as
  they are; nothing embedded).

It prints seconds (medians over the repeats) and the ratio to ``add_all, vectors given``;
for the restore rows also the restore alone (without the export).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from bench._common import database_url
from bench._corpus import generate_corpus
from bench.bench_ingest_pipeline import SyntheticModel
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._types import MemoryEntry
from tnsrag_db.admin import export_corpus, restore_corpus

ROWS = ("add_all, vectors given", "add_all, embedding", "restore, export", "restore, export --vectors")


def _corpus(n: int, edges_per_entry: int) -> tuple[list[MemoryEntry], list[Edge]]:
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    entries = []
    for i, d in enumerate(generate_corpus(n).entries):
        doc = f"doc{i // 10:05d}.md"
        entries.append(MemoryEntry(f"{doc}#{i % 10}", d.content, d.tier, source=doc,
                                   parent_id=f"{doc}#0" if i % 10 else None,
                                   timestamp=t0 + timedelta(minutes=i), metadata={**d.metadata, "path": doc}))
    rng = random.Random(11)
    edges = [Edge(e.id, entries[j].id, "cites", 1.0) for i, e in enumerate(entries)
             for j in rng.sample(range(n), edges_per_entry) if j != i]
    return entries, edges


def _direct(store: Store, model: SyntheticModel, entries: list[MemoryEntry], edges: list[Edge],
            vectors: np.ndarray | None) -> float:
    started = time.perf_counter()
    VectorMemoryStore(store, model, index_threshold=None).add_all(entries, embeddings=vectors)
    GraphStore(store).add_edges(edges)
    return time.perf_counter() - started


def _restore(source: Store, target: Store, model: SyntheticModel, folder: Path,
             with_vectors: bool) -> tuple[float, float]:
    """Seconds of the export and of the restore."""
    dump = folder / f"{target.corpus}.jsonl"
    started = time.perf_counter()
    with dump.open("w", encoding="utf-8") as fh:
        export_corpus(source, fh, vectors=with_vectors)
    exported = time.perf_counter()
    restore_corpus(target, dump, embedding=None if with_vectors else model)
    return exported - started, time.perf_counter() - exported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TNSRAG_DATABASE_URL"))
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--edges", type=int, default=3, help="edges per entry")
    parser.add_argument("--cost", type=float, default=5.0, help="milliseconds of model work per text")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = SyntheticModel(args.cost)
    entries, edges = _corpus(args.n, args.edges)
    vectors = model.embed_batch([e.content for e in entries])
    seconds: dict[str, list[float]] = {row: [] for row in ROWS}
    restore_only: dict[str, list[float]] = {row: [] for row in ROWS[2:]}
    with database_url(args.url) as url, tempfile.TemporaryDirectory(prefix="tnsrag-bench-restore-") as tmp, \
            connect(url, corpus="bench_restore_src", auto_migrate=True) as store:
        for repeat in range(args.repeats):
            views = {row: store.with_corpus(f"bench_restore_{repeat}_{i}") for i, row in enumerate(ROWS)}
            source = views[ROWS[0]]
            seconds[ROWS[0]].append(_direct(source, model, entries, edges, vectors))
            seconds[ROWS[1]].append(_direct(views[ROWS[1]], model, entries, edges, None))
            for row in ROWS[2:]:
                export_s, restore_s = _restore(source, views[row], model, Path(tmp), row.endswith("--vectors"))
                seconds[row].append(export_s + restore_s)
                restore_only[row].append(restore_s)
            for view in views.values():
                view.drop_corpus()
    base = statistics.median(seconds[ROWS[0]])
    print(f"{args.n} entries, {len(edges)} edges, synthetic model ~{args.cost} ms/text, {args.repeats} repeats")
    print(f"{'path':<28} {'seconds (median)':>16} {'ratio':>6} {'of which restore':>17} {'ratio':>6}")
    for row in ROWS:
        median = statistics.median(seconds[row])
        line = f"{row:<28} {median:>16.2f} {median / base:>6.2f}"
        if row in restore_only:
            part = statistics.median(restore_only[row])
            line += f" {part:>17.2f} {part / base:>6.2f}"
        print(line)
    print("ratios: to 'add_all, vectors given'; restore rows: export + restore_corpus, then the restore alone")


if __name__ == "__main__":
    main()
