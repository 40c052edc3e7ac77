"""kill -9 of writer processes at random moments, and every backend terminated mid-write.

W writer processes upsert batches of their own ids (content carries a sequence number)
and append each acknowledged batch to a log (fsynced) only after ``add_all`` returned.
The main process SIGKILLs a random writer every one to three seconds (restarting
it), and now and then terminates every backend of the database (what clients see of a
server restart). Writers merge their BM25 postings into blocks every 64 entries, so kills
land in merges as well. Afterwards: every acknowledged write must be there (stored
sequence >= acknowledged one), and the BM25 bookkeeping must equal a recomputation from
the entries.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import tempfile
import time
from pathlib import Path

import psycopg

from bench.attack._support import SCHEMA, arguments, engine_for, inconsistencies, migrated_database, print_table
from tnsrag_db import MemoryEntry
from tnsrag_db._errors import TnsragError
from tnsrag_db._store.store import Store

CORPUS = "kill_writers"


def _writer(url: str, n: int, log: str) -> None:
    # Merges into BM25 blocks every few batches, so that kills land in merges too.
    store = Store(engine_for(url, 2), corpus=CORPUS, schema=SCHEMA, merge_after_entries=64)
    rng = random.Random(os.getpid())
    seq = int(time.time() * 1000)  # increases across restarts of this writer
    with open(log, "a") as out:
        while True:
            seq += 1
            ids = [f"w{n}_{i}" for i in rng.sample(range(200), 20)]
            try:
                store.add_all([MemoryEntry(i, f"seq {seq} text of {i} word{seq % 7}") for i in ids])
            except TnsragError:
                continue  # not acknowledged (a terminated backend, say)
            out.write(json.dumps([seq, ids]) + "\n")
            out.flush()
            os.fsync(out.fileno())


def main() -> None:
    args = arguments(__doc__ or "", 30.0)
    writers = 3
    kills = terminations = 0
    with migrated_database(args.url) as url, tempfile.TemporaryDirectory() as tmp:
        logs = [str(Path(tmp) / f"w{n}.log") for n in range(writers)]
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_writer, args=(url, n, logs[n])) for n in range(writers)]
        for p in procs:
            p.start()
        rng = random.Random(7)
        deadline = time.monotonic() + args.seconds
        admin = url.replace("postgresql+psycopg://", "postgresql://")
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(1.0, 3.0))  # a spawned writer needs ~1 s to connect
            victim = rng.randrange(writers)
            if procs[victim].pid is not None:
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].join(10)
                kills += 1
            procs[victim] = ctx.Process(target=_writer, args=(url, victim, logs[victim]))
            procs[victim].start()
            if rng.random() < 0.15:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = current_database() AND pid <> pg_backend_pid()")
                terminations += 1
        for p in procs:
            if p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
            p.join(10)
        acknowledged: dict[str, int] = {}
        batches = 0
        for log in logs:
            if not Path(log).exists():
                continue
            for line in Path(log).read_text().splitlines():
                try:
                    seq, ids = json.loads(line)
                except ValueError:
                    continue  # a line cut by the kill was never acknowledged
                batches += 1
                for i in ids:
                    acknowledged[i] = max(acknowledged.get(i, 0), seq)
        pool = engine_for(url)
        store = Store(pool, corpus=CORPUS, schema=SCHEMA)
        stored = {e.id: int(e.content.split()[1]) for e in store.iter_entries()}
        lost = [i for i, seq in acknowledged.items() if stored.get(i, -1) < seq]
        checks = inconsistencies(store)
        pool.close()
    rows: list[tuple[str, object]] = [
        ("writer processes", writers), ("SIGKILLs of writers", kills),
        ("all-backend terminations", terminations), ("acknowledged batches", batches),
        ("acknowledged ids", len(acknowledged)), ("acknowledged writes lost", len(lost)),
        *checks.items(),
        ("verdict", "held" if not lost and not any(checks.values()) else "BROKEN"),
    ]
    print_table("kill -9 of writers", rows)


if __name__ == "__main__":
    main()
