"""Deletes and rewrites on a corpus that is new to the planner's statistics, against the same after an ANALYZE.

Usage::

    python -m bench.bench_stale_writes --entries 6000 --batch 2000

Starts an embedded server of its own unless ``--url`` names one (a fresh server: dead
rows of earlier runs change what stale statistics make the planner choose), with
automatic statistics refreshes and merges out of reach; autovacuum is off on the write
path's tables. For each mode a new corpus gets
``--entries`` generated entries; ``stale`` analyses the tables before that write (their
statistics predate the corpus: it is estimated at about one row), ``fresh`` after it.
Then ``delete_many`` of ``--batch`` ids and a rewrite (``add_all``) of ``--batch`` other
entries with changed texts are timed. Prints one line per mode (seconds, same run).
"""

from __future__ import annotations

import argparse
import time
import uuid

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db import connect
from tnsrag_db._types import MemoryEntry

TABLES = ("entries", "bm25_postings", "bm25_df", "embeddings", "edges", "bm25_docs", "bm25_blocks",
          "bm25_tombstones")


def _analyze(store: object) -> None:
    with store.pool.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(f"ANALYZE {', '.join(TABLES)}")


def run(url: str, mode: str, entries: int, batch: int) -> tuple[float, float]:
    """Seconds of a delete of ``batch`` entries and of a rewrite of ``batch`` others."""
    store = connect(url, auto_migrate=True, corpus=f"stale_{mode}_{uuid.uuid4().hex[:6]}", merge_after_entries=10**9,
                    analyze_after_rows=10**9)
    try:
        with store.pool.begin() as conn:
            for table in TABLES:
                conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        written = generate_corpus(entries, dim=16).entries
        if mode == "stale":  # the statistics know only the seed corpus
            _analyze(store)
        store.add_all(written)
        if mode == "fresh":
            _analyze(store)
        gone = [e.id for e in written[:batch]]
        start = time.perf_counter()
        assert store.delete_many(gone) == batch
        deleted = time.perf_counter() - start
        changed = [MemoryEntry(e.id, e.content + " rewritten anew", tier=e.tier, metadata=e.metadata)
                   for e in written[batch:2 * batch]]
        start = time.perf_counter()
        counts = store.add_all(changed)
        rewritten = time.perf_counter() - start
        assert counts.updated == batch, counts
        return deleted, rewritten
    finally:
        store.drop_corpus()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--url", default=None, help="URL of a server (default: an embedded one)")
    args = parser.parse_args()
    with database_url(args.url) as url:
        seed = connect(url, auto_migrate=True, corpus=f"stale_seed_{uuid.uuid4().hex[:6]}", analyze_after_rows=10**9)
        seed.add_all([MemoryEntry(f"s{i}", f"a few seed words {i}") for i in range(200)])
        print(f"{args.entries} entries, {args.batch} deleted, {args.batch} rewritten (seconds)")
        for mode in ("stale", "fresh"):
            deleted, rewritten = run(url, mode, args.entries, args.batch)
            print(f"{mode:6} delete_many {deleted:8.2f}   rewrite {rewritten:8.2f}", flush=True)
        seed.drop_corpus()
        seed.close()


if __name__ == "__main__":
    main()
