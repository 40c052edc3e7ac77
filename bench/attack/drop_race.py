"""drop_corpus() racing writer processes (upserts that keep or change terms, deletes).

Each round: W writer processes loop on one corpus while the main process drops it
D times; afterwards the corpus's BM25 bookkeeping is recomputed from its entries and
the same ids are written once more (they failed with UniqueViolation pk_bm25_postings
when a drop left orphans).
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import time

from bench.attack._support import SCHEMA, arguments, engine_for, inconsistencies, migrated_database, print_table
from tnsrag_db import MemoryEntry
from tnsrag_db._store.store import Store

IDS = [f"d{i}" for i in range(30)]


def _writer(url: str, corpus: str, n: int, ready: "mp.Queue[int]", stop: "mp.synchronize.Event",  # type: ignore[name-defined]
            results: "mp.Queue[tuple[str, int]]") -> None:
    pool = engine_for(url, 2)
    store = Store(pool, corpus=corpus, schema=SCHEMA)
    store.count()  # connected
    ready.put(n)
    counts: collections.Counter[str] = collections.Counter()
    round_ = 0
    while not stop.is_set():
        round_ += 1
        try:
            if round_ % 6 == 0:
                store.delete_where({"entryId": IDS[round_ % len(IDS)]})
            else:
                words = ["alpha", "beta", f"w{n}", "gamma" if round_ % 3 else "delta"]
                text = " ".join(words if round_ % 2 else words[::-1])
                store.add_all([MemoryEntry(i, f"{text} {i}") for i in IDS])
            counts["ok"] += 1
        except Exception as exc:  # counted, reported
            counts[type(exc).__name__] += 1
    for key, value in counts.items():
        results.put((key, value))
    results.put(("done", 0))
    pool.close()


def main() -> None:
    args = arguments(__doc__ or "", 30.0)
    writers, rounds = 2, 3
    with migrated_database(args.url) as url:
        pool = engine_for(url)
        totals: collections.Counter[str] = collections.Counter()
        drops: collections.Counter[str] = collections.Counter()
        lost: collections.Counter[str] = collections.Counter()
        rewrite_failures = 0
        ctx = mp.get_context("spawn")
        per_round = args.seconds / rounds
        for r in range(rounds):
            corpus = f"drop_race_{r}"
            store = Store(pool, corpus=corpus, schema=SCHEMA)
            queue: mp.Queue[tuple[str, int]] = ctx.Queue()
            ready: mp.Queue[int] = ctx.Queue()
            stop = ctx.Event()
            procs = [ctx.Process(target=_writer, args=(url, corpus, n, ready, stop, queue)) for n in range(writers)]
            for p in procs:
                p.start()
            for _ in procs:
                ready.get(timeout=300)  # every writer connected
            stop_at = time.monotonic() + per_round
            while time.monotonic() < stop_at:
                try:
                    store.drop_corpus()
                    drops["ok"] += 1
                except Exception as exc:
                    drops[type(exc).__name__] += 1
                time.sleep(0.1)
            stop.set()
            done = 0
            while done < writers:  # each writer sends its counts, then ("done", 0)
                key, value = queue.get(timeout=300)
                if key == "done":
                    done += 1
                else:
                    totals[key] += value
            for p in procs:
                p.join(120)
            lost.update(inconsistencies(store))
            try:
                store.add_all([MemoryEntry(i, f"again {i}") for i in IDS])
            except Exception:
                rewrite_failures += 1
            lost.update({f"after rewrite: {k}": v for k, v in inconsistencies(store).items()})
            store.drop_corpus()
        pool.close()
    rows: list[tuple[str, object]] = [("rounds x writer processes", f"{rounds} x {writers}")]
    rows += [(f"drops {k}", v) for k, v in sorted(drops.items())]
    rows += [(f"writes {k}", v) for k, v in sorted(totals.items())]
    rows += [("rewrites of the same ids failed", rewrite_failures)]
    rows += [(k, v) for k, v in sorted(lost.items())]
    held = rewrite_failures == 0 and not any(lost.values()) and set(drops) == {"ok"} and set(totals) == {"ok"}
    rows.append(("verdict", "held" if held else "BROKEN"))
    print_table("drop_corpus beside writers", rows)


if __name__ == "__main__":
    main()
