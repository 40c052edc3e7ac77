"""Bulk loads: merging the BM25 postings into blocks every ``merge_after_entries`` entries
against merging once after the whole load, same rows, same server, same run.

Usage::

    python -m bench.bench_bulk_merge [--url URL] [--n 20000] [--batch 1000] [--repeats 3]
        [--folder DIR]

Without ``--url`` an embedded server in a temporary directory is used. The rows are
``bench/_corpus.py``'s seeded entries (``--n``), or, with ``--folder``, the chunks of a
real tree (``tnsrag ingest``'s loaders, every file repeated until ``--n`` entries). Each
repeat writes the rows into two fresh corpora, in ``add_all`` calls of ``--batch``
entries, the order of the two alternating from one repeat to the next:

* ``every``: the library's default, a merge after every 8,192 written entries, then one
  last merge of what is left;
* ``once``: ``merge_after_entries`` larger than the load, then one merge of everything.

The table shows the medians of the write time, the final merge and the total, and the
ratio of the totals (``once / every``). Keyword search is exact either way; what differs
is where the postings wait meanwhile (rows of ``bm25_postings`` until their merge) and
when the merge work is paid.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Sequence

from bench._common import database_url
from bench._corpus import generate_corpus
from tnsrag_db._store.corpus import DEFAULT_MERGE_AFTER_ENTRIES
from tnsrag_db._store.store import connect
from tnsrag_db._types import MemoryEntry


def folder_entries(folder: str, n: int) -> list[MemoryEntry]:
    """``n`` entries from the chunks of ``folder`` (repeated under new ids when it has fewer)."""
    from tnsrag_db._loaders import FileLoader

    chunks = list(FileLoader(folder).load())
    if not chunks:
        raise SystemExit(f"no entries in {folder}")
    out: list[MemoryEntry] = []
    round_ = 0
    while len(out) < n:
        out.extend(MemoryEntry(f"{round_}/{e.id}", e.content) for e in chunks[: n - len(out)])
        round_ += 1
    return out


def load(url: str, entries: Sequence[MemoryEntry], *, batch: int, merge_after: int) -> tuple[float, float]:
    """Seconds to write ``entries`` into a new corpus, then seconds of the last merge."""
    corpus = f"bulk_{uuid.uuid4().hex[:8]}"
    with connect(url, corpus=corpus, merge_after_entries=merge_after, auto_migrate=True) as store:
        start = time.perf_counter()
        for i in range(0, len(entries), batch):
            store.add_all(entries[i:i + batch])
        written = time.perf_counter()
        store.merge_postings(sweep=False)
        merged = time.perf_counter()
        store.drop_corpus()
    return written - start, merged - written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder")
    args = parser.parse_args(argv)
    entries = folder_entries(args.folder, args.n) if args.folder else [
        MemoryEntry(e.id, e.content) for e in generate_corpus(args.n).entries]
    paths = {"every": DEFAULT_MERGE_AFTER_ENTRIES, "once": len(entries) + 1}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    with database_url(args.url) as url:
        for repeat in range(args.repeats):
            order = list(paths) if repeat % 2 == 0 else list(reversed(paths))
            for name in order:
                times[name].append(load(url, entries, batch=args.batch, merge_after=paths[name]))
    print(f"{len(entries)} entries in batches of {args.batch}, median of {args.repeats}")
    print(f"{'path':6} {'writes s':>9} {'last merge s':>13} {'total s':>8}")
    totals = {}
    for name, rows in times.items():
        write = statistics.median(w for w, _ in rows)
        merge = statistics.median(m for _, m in rows)
        totals[name] = statistics.median(w + m for w, m in rows)
        print(f"{name:6} {write:9.1f} {merge:13.1f} {totals[name]:8.1f}")
    print(f"once / every (total): {totals['once'] / totals['every']:.2f}x")


if __name__ == "__main__":
    main()
