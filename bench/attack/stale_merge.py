"""A merge on statistics that never saw its corpus, timed (target: 30,000 entries in 15 s).

The common case of a first large ingest: a database already holds a merged corpus, its
``bm25_postings`` was last analysed while the merges had emptied it (as autovacuum leaves
it) and ``entries`` before the new corpus existed. A new corpus of ``--n`` entries is then
written without its automatic merge, and merged on those statistics (the planner takes
the new corpus for one row in every table); ``--rounds`` times, a new corpus each. Autovacuum is switched off on the merge's
tables for the run, so the statistics stay those (it would refresh them within a minute
or so, at a moment of its own).

Then the same with ``restore_corpus`` of an export of the new corpus into a third corpus,
on the same statistics: with the store's default refresh (a large write is analysed before
its automatic merge) and with the refresh off (``analyze_after_rows`` above the write:
the merge plans on the old statistics, as it does for a write below 10 % of ``entries``).
Each row: seconds of the whole call and of its merges, entries merged, and whether the
corpus's BM25 bookkeeping equals a recomputation from its entries afterwards.

    python -m bench.attack.stale_merge [--url URL] [--n 30000] [--beside 10000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from bench._corpus import generate_corpus
from bench.attack._support import SCHEMA, engine_for, inconsistencies, migrated_database, print_table
from tnsrag_db._store import corpus as corpus_module
from tnsrag_db._store.bm25.merge import MergeReport
from tnsrag_db._store.corpus import DEFAULT_ANALYZE_AFTER_ROWS, DEFAULT_MERGE_AFTER_ENTRIES
from tnsrag_db._store.store import Store
from tnsrag_db.admin import export_corpus, restore_corpus
from tnsrag_db.embeddings._hashing import HashingEmbedding

#: The tables a merge reads and writes: autovacuum off, analysed by the script only.
TABLES = ("entries", "bm25_postings", "bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state")
TARGET_SECONDS = 15.0


@contextmanager
def timed_merges() -> Iterator[list[tuple[float, int]]]:
    """Seconds and entries of every ``Writer.merge`` in the block (automatic ones included)."""
    merges: list[tuple[float, int]] = []
    merge = corpus_module.Writer.merge

    def timed(self: corpus_module.Writer, **options: Any) -> MergeReport:
        started = time.perf_counter()
        report = merge(self, **options)
        merges.append((time.perf_counter() - started, report.entries))
        return report

    corpus_module.Writer.merge = timed  # type: ignore[method-assign]
    try:
        yield merges
    finally:
        corpus_module.Writer.merge = merge  # type: ignore[method-assign]


def _sql(url: str, *statements: str) -> None:
    from sqlalchemy.engine import make_url

    with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}")
        for statement in statements:
            conn.execute(statement.encode())


def _row(store: Store, label: str, seconds: float, merges: list[tuple[float, int]]) -> tuple[str, object]:
    bad = {k: v for k, v in inconsistencies(store).items() if v}
    merged = sum(n for _, n in merges)
    verdict = f"{seconds:7.1f} s, merges {sum(s for s, _ in merges):6.1f} s ({merged} entries)"
    return label, verdict + (f", INCONSISTENT {bad}" if bad else ", consistent")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="server URL (default: a temporary embedded server)")
    parser.add_argument("--n", type=int, default=30_000, help="entries of the new corpus")
    parser.add_argument("--beside", type=int, default=10_000, help="entries of the merged corpus beside it")
    parser.add_argument("--rounds", type=int, default=2, help="new corpora written and merged, one after the other")
    args = parser.parse_args()
    rows: list[tuple[str, object]] = []
    with migrated_database(args.url) as url, tempfile.TemporaryDirectory(prefix="tnsrag-stale-") as tmp:
        _sql(url, *(f"ALTER TABLE {t} SET (autovacuum_enabled = off)" for t in TABLES))
        pool = engine_for(url)

        def store(corpus: str, *, merge_after_entries: int = DEFAULT_MERGE_AFTER_ENTRIES,
                  analyze_after_rows: int = DEFAULT_ANALYZE_AFTER_ROWS) -> Store:
            return Store(pool, corpus=corpus, schema=SCHEMA, merge_after_entries=merge_after_entries,
                         analyze_after_rows=analyze_after_rows)

        old = store("merged", merge_after_entries=10**9, analyze_after_rows=10**9)
        old.add_all(generate_corpus(args.beside, dim=8, id_prefix="old").entries)
        old.merge_postings()
        dump = Path(tmp) / "new.jsonl"
        target_met = True
        for round_ in range(args.rounds):
            _sql(url, f"ANALYZE {', '.join(TABLES)}")  # every delta empty, the new corpus absent
            new = store(f"new{round_}", merge_after_entries=10**9, analyze_after_rows=10**9)
            started = time.perf_counter()
            new.add_all(generate_corpus(args.n, dim=8, seed=7 + round_, id_prefix="new").entries)
            rows.append((f"corpus {round_ + 1}: write {args.n} entries (no merge)", f"{time.perf_counter() - started:7.1f} s"))
            if round_ == 0:
                with dump.open("w", encoding="utf-8") as out:
                    export_corpus(new, out)
            with timed_merges() as merges:
                started = time.perf_counter()
                new.merge_postings(sweep=False)
                seconds = time.perf_counter() - started
            rows.append(_row(new, f"corpus {round_ + 1}: merge of {args.n} on stale statistics", seconds, merges))
            target_met = target_met and seconds < TARGET_SECONDS

        for label, corpus, analyze_after in (
                ("restore_corpus, refresh before the merge", "restored", DEFAULT_ANALYZE_AFTER_ROWS),
                ("restore_corpus, no refresh (stale)", "restored_stale", 10**9)):
            _sql(url, f"ANALYZE {', '.join(TABLES)}")  # statistics without this corpus, every delta empty
            target = store(corpus, analyze_after_rows=analyze_after)
            with timed_merges() as merges:
                started = time.perf_counter()
                restore_corpus(target, dump, embedding=HashingEmbedding(32))
                seconds = time.perf_counter() - started
            rows.append(_row(target, label, seconds, merges))
        pool.close()
    print_table(f"Merge on stale statistics (new corpus of {args.n} beside a merged one of {args.beside})", rows)
    print(f"\ntarget: every merge of {args.n} under {TARGET_SECONDS:.0f} s: {'met' if target_met else 'MISSED'}")


if __name__ == "__main__":
    main()
