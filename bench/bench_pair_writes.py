"""Write cost of the filter pairs' triggers (tenancy, revision 0007): Store.add_all with them and without.

Usage::

    python -m bench.bench_pair_writes --url postgresql://postgres@host/postgres --batch 2000 --rounds 6

Starts an embedded server unless ``--url`` names one (a superuser URL: the script creates
a database and drops it afterwards). The triggers are attached by ``tenancy.enable`` and
stay with row-level security off again (``tenancy.disable``); each round then writes a
batch of new entries (the insert trigger) and rewrites half of them with changed
metadata (the update trigger), once with the triggers enabled and once disabled, in
alternating order. Prints the medians per mode and their ratio (same run).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import psycopg
from psycopg import sql

from bench._common import database_url
from tests.fix_db import sa_url
from tnsrag_db import tenancy
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry

SCHEMA = "tnsrag"
TRIGGERS = ("tnsrag_filter_pairs_insert", "tnsrag_filter_pairs_update", "tnsrag_filter_pairs_delete")


def _batch(tag: str, n: int, band: str = "b") -> list[MemoryEntry]:
    return [MemoryEntry(f"{tag}-{i}", f"refund policy {i} for damaged parcel number {i % 97} and more words",
                        metadata={"group": f"g{i % 100}", "band": f"{band}{i % 11}", "team": "acme"})
            for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="superuser URL of a server (default: an embedded one)")
    parser.add_argument("--batch", type=int, default=2000, help="entries written per round and mode")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with database_url(args.url) as server:
        base = sa_url(server)
        admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
        name = f"bench_pairs_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            _run(base.set(database=name), args)
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _run(url: object, args: argparse.Namespace) -> None:
    pool = Pool(url, schema=SCHEMA)  # type: ignore[arg-type]
    try:
        migrate.upgrade(pool, schema=SCHEMA)
        tenancy.enable(pool, schema=SCHEMA)
        tenancy.disable(pool, schema=SCHEMA)  # row-level security off, the triggers stay
        store = Store(pool, corpus="bench_pairs", schema=SCHEMA)
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds + 1):  # round 0 warms up
            for mode in (("without", "with") if r % 2 == 0 else ("with", "without")):
                with pool.begin() as conn:
                    for trigger in TRIGGERS:  # names: constants
                        conn.execute(f"ALTER TABLE {SCHEMA}.entries "
                                             f"{'ENABLE' if mode == 'with' else 'DISABLE'} TRIGGER {trigger}")
                tag = f"{mode}{r}"
                t0 = time.perf_counter()
                store.add_all(_batch(tag, args.batch))
                t1 = time.perf_counter()
                store.add_all(_batch(tag, args.batch // 2, band="c"))  # metadata changed: updates
                t2 = time.perf_counter()
                if r:
                    times.setdefault(("insert", mode), []).append(t1 - t0)
                    times.setdefault(("update", mode), []).append(t2 - t1)
        print(f"Store.add_all, {args.batch} new entries and {args.batch // 2} with changed metadata per round, "
              f"{args.rounds} rounds (medians, s)")
        print(f"{'write':<8} {'without':>9} {'with':>9} {'with/without':>13}")
        for kind in ("insert", "update"):
            off, on = statistics.median(times[(kind, "without")]), statistics.median(times[(kind, "with")])
            print(f"{kind:<8} {off:>9.3f} {on:>9.3f} {on / off:>13.2f}")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
