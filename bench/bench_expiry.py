"""Entry expiry: what the "not expired" condition costs keyword and vector search, and what a
sweep gives back.

Usage::

    python -m bench.bench_expiry [--url URL] [--n 20000] [--dim 128] [--queries 200] [--rounds 3]

Three corpora of the same ``n`` generated entries (:func:`bench._corpus.generate_corpus`,
with vectors, HNSW built, ``VACUUM (ANALYZE)``) in a scratch database: ``none`` (no entry
expires), ``ahead`` (30 % expiring in the future, none expired: a corpus swept in time)
and ``some`` (10 % expired and not swept, 20 % expiring in the future). For each corpus, each
query runs two statements, alternating query by query: this version's ranking (keyword:
:meth:`BM25Index.ranking_statement`, vector: :meth:`VectorMemoryStore.candidates_sql`, top
10) and the same statement rendered without any exclusion (:func:`without_expiry`: no
entry checked, keyword search's best rows by one ORDER BY and limit), both through
``Store.read``. It prints the medians and this version's over the other's.

Then the sweep: ``some`` gets 50 % of its entries expired, the sizes of the library's
tables and of the corpus's HNSW index are taken, ``Store.sweep(vacuum=True)`` runs, the
sizes are taken again, then as many new entries (with vectors) are written as were swept
and the sizes taken a third time: a swept table reuses the freed space instead of growing.
Rows are counted per table (``bm25_blocks``: the postings its blocks hold).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from bench._common import scratch_database
from bench._corpus import generate_corpus
from bench.bench_vector import Lookup
from tnsrag_db._indexes.bm25 import BM25Index, index as bm25_index, sql as bm25_sql
from tnsrag_db._indexes.vector import VectorMemoryStore, sql as vector_sql
from tnsrag_db._store.store import Store, connect

K = 10
PROVIDER = "bench-expiry"
TABLES = ("entries", "bm25_postings", "bm25_blocks", "bm25_docs", "embeddings")


@contextmanager
def without_expiry() -> Iterator[None]:
    """The rankings rendered as before expiry: no check of any entry, keyword search's best
    rows taken by one ORDER BY and limit, the exact vector scan's top k not checked."""
    saved = (bm25_sql._best_live, vector_sql.not_expired, vector_sql.live, vector_sql.unexpired_row,  # noqa: SLF001
             vector_sql.gate_row, vector_sql._CHECKED)  # noqa: SLF001

    def best(p: str, layout: Any, name: str, source: str, score: str, lim: str, *, keyed: bool = False,
             known: str = "", candidates: bool = False) -> str:
        top = f"ORDER BY x.{score} DESC, x.{layout.key} LIMIT {lim}" if keyed else layout.top(f"x.{score}", lim)
        return f"{name} AS (SELECT x.{layout.key}, x.{score} FROM {source} x {top})"

    bm25_sql._best_live = best  # noqa: SLF001 - the bench renders both versions
    vector_sql.not_expired = lambda column, corpus: "TRUE"  # type: ignore[assignment]
    vector_sql.unexpired_row = lambda column, corpus, gate="": "TRUE"  # type: ignore[assignment]
    vector_sql.live = lambda alias: "TRUE"  # type: ignore[assignment]
    vector_sql.gate_row = lambda corpus: "SELECT TRUE AS open"  # type: ignore[assignment]
    vector_sql._CHECKED = "{ranked}"  # noqa: SLF001
    _clear()
    try:
        yield
    finally:
        (bm25_sql._best_live, vector_sql.not_expired, vector_sql.live, vector_sql.unexpired_row,  # noqa: SLF001
         vector_sql.gate_row, vector_sql._CHECKED) = saved  # noqa: SLF001
        _clear()


def _clear() -> None:
    bm25_index._ranking_sql.cache_clear()  # noqa: SLF001 - the bench renders both versions
    bm25_index._plain_ranking_sql.cache_clear()  # noqa: SLF001
    vector_sql._render.cache_clear()  # noqa: SLF001


def load(store: Store, vectors: VectorMemoryStore, entries: list[Any], emb: Any) -> None:
    store.drop_corpus()
    t = time.perf_counter()
    vectors.add_all(entries, embeddings=emb)
    vectors.build_index()
    with store.session.autocommit() as conn:
        conn.execute("VACUUM (ANALYZE) entries, embeddings, bm25_postings")
    print(f"  {store.corpus}: {len(entries)} entries written and indexed in {time.perf_counter() - t:.0f} s",
          flush=True)


def timed(store: Store, statement: tuple[str, dict[str, Any]]) -> float:
    t = time.perf_counter()
    store.read(*statement)
    return time.perf_counter() - t


def compare(store: Store, make: Callable[[int], tuple[str, dict[str, Any]]], n: int, rounds: int, *,
            without: Callable[[], Any] | None = None) -> tuple[float, float]:
    """Median ms of this version's statements and of those without the condition (rendered
    inside ``without()``, default :func:`without_expiry`), alternating."""
    with (without or without_expiry)():
        old = [make(i) for i in range(n)]
    new = [make(i) for i in range(n)]
    for i in range(min(n, 20)):  # warm both plans and the cache
        store.read(*old[i])
        store.read(*new[i])
    t_old: list[float] = []
    t_new: list[float] = []
    for r in range(rounds):
        for i in range(n):
            pair = [(t_new, new[i]), (t_old, old[i])]
            if (i + r) % 2:
                pair.reverse()
            for sink, statement in pair:
                sink.append(timed(store, statement))
    return statistics.median(t_new) * 1000, statistics.median(t_old) * 1000


def sizes(store: Store) -> dict[str, int]:
    rows = store.read("SELECT c.relname, pg_total_relation_size(c.oid) AS size FROM pg_class c "
                      "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relname = ANY(:t)",
                      {"s": store.schema, "t": list(TABLES)})
    out = {r.relname: int(r.size) for r in rows}
    hnsw = store.read("SELECT coalesce(sum(pg_relation_size(c.oid)), 0) AS size FROM pg_class c "
                      "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s "
                      "AND c.relname LIKE 'ix_embeddings_hnsw_%'", {"s": store.schema})
    out["hnsw"] = int(hnsw[0].size)
    return out


def rows(store: Store) -> dict[str, int]:
    out = {}
    for table in TABLES:
        column = "id" if table == "entries" else "corpus"
        out[table] = int(store.read(f"SELECT count({column}) AS n FROM {table} WHERE corpus = :c",
                                    {"c": store.corpus})[0].n)
    out["bm25_blocks"] = int(store.read("SELECT coalesce(sum(n), 0) AS n FROM bm25_blocks WHERE corpus = :c",
                                        {"c": store.corpus})[0].n)  # postings in blocks, not block rows
    return out


def workload(description: str) -> tuple[argparse.Namespace, Any, Any, list[str]]:
    """The command line (``--url --n --dim --queries --rounds``) and the seeded workload it
    asks for: the corpus, its query vectors and short keyword queries of its words (shared
    with ``bench_validity``, so both measure the same queries)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    corpus = generate_corpus(args.n, dim=args.dim, seed=42)
    queries = corpus.query_vectors(args.queries, seed=5)
    rng = random.Random(3)
    words = [w for e in corpus.entries[:2000] for w in e.content.lower().rstrip(".").split()]
    texts = [" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(args.queries)]
    return args, corpus, queries, texts


def main() -> None:
    args, corpus, queries, texts = workload(__doc__.splitlines()[0])
    past, future = datetime(2020, 1, 1, tzinfo=timezone.utc), datetime.now(timezone.utc) + timedelta(days=365)
    some = [replace(e, expires_at=past if i % 10 == 0 else future if i % 10 in (1, 2) else None)
            for i, e in enumerate(corpus.entries)]
    ahead = [replace(e, expires_at=future if i % 10 < 3 else None) for i, e in enumerate(corpus.entries)]
    lookup = Lookup(queries, {})
    with scratch_database(args.url, "bench_expiry") as (url, _):
        stores = {}
        for name, entries in (("none", corpus.entries), ("ahead", ahead), ("some", some)):
            store = connect(url.render_as_string(hide_password=False), corpus=f"expiry_{name}", auto_migrate=True)
            vectors = VectorMemoryStore(store, lookup, name=PROVIDER, index_threshold=None)
            load(store, vectors, entries, corpus.embeddings)
            stores[name] = (store, vectors)
        print(f"\nn={args.n}, dim={args.dim}, {args.queries} queries x {args.rounds} rounds, top {K}; "
              "median ms: with the expiry condition / without / ratio")
        for name, (store, vectors) in stores.items():
            keywords = BM25Index(store)
            kw = compare(store, lambda i: (lambda st: (st.sql, dict(st.params)))(
                keywords.ranking_statement(texts[i], K)), args.queries, args.rounds)
            vec = compare(store, lambda i: vectors.candidates_sql(queries[i], K), args.queries, args.rounds)
            print(f"  {name:5} keyword {kw[0]:.2f} / {kw[1]:.2f} / {kw[0] / kw[1]:.3f}   "
                  f"vector {vec[0]:.2f} / {vec[1]:.2f} / {vec[0] / vec[1]:.3f}", flush=True)
        store, vectors = stores["some"]
        for other in ("none", "ahead"):  # the sizes below are the swept corpus's alone
            stores[other][0].drop_corpus()
        with store.session.transaction() as conn:
            conn.execute(("UPDATE entries SET expires_at = :past WHERE corpus = :c "
                                 "AND right(id, 1) IN ('1', '2', '3', '4')"), {"c": store.corpus, "past": past})
        with store.session.autocommit() as conn:
            conn.execute("VACUUM (ANALYZE) entries, embeddings, bm25_postings, bm25_blocks, bm25_docs")
        before, rows_before = sizes(store), rows(store)
        t = time.perf_counter()
        report = store.sweep(vacuum=True)
        swept = time.perf_counter() - t
        after, rows_after = sizes(store), rows(store)
        fresh = generate_corpus(report.deleted, dim=args.dim, seed=99, id_prefix="new")
        vectors.add_all(fresh.entries, embeddings=fresh.embeddings)
        with store.session.autocommit() as conn:
            conn.execute("VACUUM (ANALYZE) entries, embeddings, bm25_postings, bm25_blocks, bm25_docs")
        refilled, rows_refilled = sizes(store), rows(store)
        print(f"\nsweep of {report.deleted} expired entries ({report.tombstones} merged) in {swept:.1f} s "
              "(VACUUM included); rows / total size in kB: before, after the sweep, after as many new entries")
        for table in (*TABLES, "hnsw"):
            r = (f"{rows_before[table]} / {rows_after[table]} / {rows_refilled[table]}" if table in rows_before
                 else "-")
            print(f"  {table:14} rows {r:24} kB {before[table] // 1024} / {after[table] // 1024} / "
                  f"{refilled[table] // 1024}")


if __name__ == "__main__":
    main()
