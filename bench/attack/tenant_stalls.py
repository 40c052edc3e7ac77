"""Tenant A tries to stall tenant B: every lock A can take, and how long each of B's operations waits.

Two tenant roles under row-level security; B's corpus has entries, vectors and merged
postings. A then takes, one at a time, and holds for ``--seconds``:

* the corpus write lock and the merge lock of B's corpus under the keys earlier releases
  used (hashes of the schema and corpus names, which any role can compute);
* the same locks under the salted keys (revision 0013), as if A had read them in
  ``pg_locks`` while B wrote (the owner reads them here: A cannot);
* ``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`` on each table a tenant may update.

While A holds one, B writes an entry, searches by keywords and by vectors, and merges
its postings, all four at once, each on its own connection. Each (lock, operation) pair
prints how long B waited and how it ended: done, or the error (with the roles it names).
B's role gets ``lock_timeout`` ``--bound`` seconds from ``tenancy.grant`` (0: none, the
behaviour before the bound). Run it on a release without the bound or the salted keys
(its ``tnsrag_db`` first on ``PYTHONPATH``) for the figures before.
"""

from __future__ import annotations

import argparse
import inspect
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
from psycopg import sql

from bench.attack._support import SCHEMA, libpq, migrated_database, print_table, tenant_pair
from tnsrag_db import BM25Index, HashingEmbedding, MemoryEntry, VectorMemoryStore, connect, tenancy

PASSWORD = "attack-stall"
#: The tables a tenant may update (so lock in ACCESS EXCLUSIVE mode), where the schema has them.
TABLES = ("corpora", "entries", "embedding_spaces", "embeddings", "bm25_postings", "bm25_stats", "bm25_df", "edges",
          "bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state")
OPERATIONS = ("write", "keyword search", "vector search", "merge")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None, help="server URL (default: a temporary embedded server)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long A holds each lock")
    parser.add_argument("--bound", type=float, default=2.0, help="B's lock_timeout in seconds (0: none)")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    rows: list[tuple[str, object]] = []
    with migrated_database(args.url) as url:
        owner, admin, pool, role_a, role_b, a, b, url_a, url_b = tenant_pair(url, "stall", PASSWORD)
        bounded = "lock_timeout" in inspect.signature(tenancy.grant).parameters
        for role, corpus in ((role_a, a), (role_b, b)):
            if bounded:
                tenancy.grant(pool, schema=SCHEMA, role=role, corpus=corpus,
                              lock_timeout=args.bound)
            else:
                tenancy.grant(pool, schema=SCHEMA, role=role, corpus=corpus)
        embed = HashingEmbedding(16)
        try:
            with connect(url_b, corpus=b) as store:
                VectorMemoryStore(store, embed, index_threshold=None).add_all(
                    [MemoryEntry(f"b{i}", f"beta refund rule {i} for damaged parcels") for i in range(40)])
                store.merge_postings()
            with connect(url_a, corpus=a) as store:
                store.add(MemoryEntry("a0", "alpha note"))
            with psycopg.connect(admin) as conn:
                salted = conn.execute(
                    sql.SQL("SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
                            "AND table_name = 'corpora' AND column_name = 'lock_salt')"), (SCHEMA,)).fetchone()
                has_salt = bool(salted and salted[0])

                def salted_key(name: str) -> int:
                    row = conn.execute(sql.SQL("SELECT hashtextextended(%s || ':' || lock_salt::text, 0) FROM {}.corpora "
                                               "WHERE corpus = %s").format(sql.Identifier(SCHEMA)), (name, b)).fetchone()
                    assert row is not None
                    return int(row[0])

                corpus_name, merge_name = f"tnsrag_db.corpus:{SCHEMA}:{b}", f"tnsrag_db.bm25-merge:{SCHEMA}:{b}"
                stalls: list[tuple[str, str, tuple[object, ...]]] = [
                    ("corpus key, computed", "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (corpus_name,)),
                    ("merge key, computed", "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (merge_name,)),
                ]
                if has_salt:
                    stalls += [("corpus key, salted (leaked)", "SELECT pg_advisory_lock(%s)", (salted_key(corpus_name),)),
                               ("merge key, salted (leaked)", "SELECT pg_advisory_lock(%s)", (salted_key(merge_name),))]
                present = [t for t in TABLES if conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                                             (f"{SCHEMA}.{t}",)).fetchone() == (True,)]
            stalls += [(f"LOCK TABLE {t}", f"LOCK TABLE {SCHEMA}.{t} IN ACCESS EXCLUSIVE MODE", ()) for t in present]

            def operation(kind: str) -> Callable[[], object]:
                def run() -> object:
                    with connect(url_b, corpus=b) as store:
                        if kind == "write":
                            return store.add(MemoryEntry(f"late-{uuid.uuid4().hex[:8]}", "beta late refund note"))
                        if kind == "keyword search":
                            return BM25Index(store).search("damaged parcels refund", 5)
                        if kind == "vector search":
                            return VectorMemoryStore(store, embed, index_threshold=None).search("damaged parcels", 5)
                        return store.merge_postings()
                return run

            measured: list[tuple[str, str, float]] = []
            for label, statement, params in stalls:
                with psycopg.connect(libpq(url_a)) as conn:
                    conn.execute(statement, params or None)
                    results: dict[str, tuple[float, str]] = {}

                    def timed(kind: str) -> None:
                        t0 = time.perf_counter()
                        try:
                            operation(kind)()
                            outcome = "done"
                        except Exception as exc:  # reported
                            holders = getattr(exc, "holders", None)
                            outcome = type(exc).__name__ + (f" naming {', '.join(holders)}" if holders else "")
                        results[kind] = (time.perf_counter() - t0, outcome)

                    threads = [threading.Thread(target=timed, args=(kind,), daemon=True) for kind in OPERATIONS]
                    for thread in threads:
                        thread.start()
                    time.sleep(args.seconds)
                    conn.rollback()
                    conn.execute("SELECT pg_advisory_unlock_all()")
                    for thread in threads:
                        thread.join(120)
                for kind in OPERATIONS:
                    seconds, outcome = results.get(kind, (float("inf"), "still running"))
                    measured.append((label, kind, seconds))
                    rows.append((f"{label} / {kind}",
                                 f"{seconds:5.2f} s {outcome}".replace(role_a, "A").replace(role_b, "B")))
            stalled = [m for m in measured if m[2] >= 0.9 * args.seconds]
            rows.append(("pairs that waited the whole hold", f"{len(stalled)} of {len(measured)}"))
            rows.append(("longest wait of B (s)", f"{max(m[2] for m in measured):.2f} (hold {args.seconds:g} s, bound "
                                                   f"{args.bound:g} s{'' if bounded else ': not supported'})"))
        finally:
            pool.close()
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                             ([role_a, role_b],))
                for role in (role_a, role_b):
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    print_table("tenant stalls: B's wait per (lock A holds, operation)", rows)


if __name__ == "__main__":
    main()
