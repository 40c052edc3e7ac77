"""Cost of tenant isolation: vector, keyword and hybrid queries of a tenant role, row-level security on vs off.

Usage::

    python -m bench.bench_tenancy --n 20000 --dim 128 --queries 40 --rounds 4 [--leakproof]
    python -m bench.bench_tenancy --interleave [--server-time [--prepared]] [--aa]

Starts an embedded server unless ``--url`` names one (a superuser URL: the script
creates a database and a tenant role and drops both afterwards). The tenant's corpus
of ``n`` entries sits beside two other tenants' corpora of ``n/2`` entries each, all
written by the owner with HNSW indexes built. The same tenant role then runs the same
queries with row-level security switched off and on, in rounds of alternating order
(off, on, on, off, ...) so that drift on a noisy machine, and coming first after a
switch, hit both sides; the table shows the medians per mode and their ratio (on / off,
same run). Each kind runs unfiltered and with
a metadata filter matching 1 % (``group``) and 9 % (``band``) of the entries. Under a
policy PostgreSQL uses a condition as an index condition only when its operators are
LEAKPROOF, which jsonb's ``@>`` is not: the filters find their entries through the
filter pairs (migration 0007, text equality) instead. ``--leakproof`` adds a mode with
``@>`` marked LEAKPROOF as well (superuser only; restored after). Last, EXPLAIN
(ANALYZE, BUFFERS) of the keyword and vector candidate statements under the policy,
unfiltered and filtered: the grant lookup is one InitPlan per table reference (a call
of ``tnsrag_tenant_corpora()``, revision 0008, planned in microseconds) and the
corpus-led indexes (and, filtered, the pairs' primary key) still serve the scans.
``--server-time`` times EXPLAIN ANALYZE, which plans every statement afresh: it includes
the planning that the library's prepared statements skip once PostgreSQL keeps their
generic plan (``bench/bench_plan_reuse.py``), so wall time is what a caller sees.
``--server-time --prepared`` times prepared statements instead (``PREPARE`` once per
connection, then ``EXPLAIN (ANALYZE, TIMING OFF, SUMMARY) EXECUTE``), so the plan cache
keeps its generic plans as it does for the library's statements; with ``--interleave``
the owner's and the tenant's same query alternate, each on its own connection: the
policy's cost on the server with the client's noise left out. ``--interleave --aa`` runs
the same comparison with the owner on both sides (a second store, engine and connection
of the owner in place of the tenant's): an A/A run, whose on/off ratios show how far
from 1.000 the machine's noise alone moves them. The interleaved modes also report the
paired ratio: the geometric mean of each query's on/off ratio (its two sides run back to
back), with a 95 % bootstrap interval over the queries.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from sqlalchemy.engine import make_url

from bench._common import scratch_database
from bench._corpus import GROUP_1PCT, generate_corpus
from bench.bench_vector import Lookup
from tnsrag_db import tenancy
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._db.runner import bind as native_sql
from tnsrag_db._db.statement import Plan, Statement, run_plan
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import RAGContext
from tnsrag_db.evaluation.resampling import bootstrap_interval

SCHEMA = "tnsrag"
PASSWORD = "bench-tenant"


def _write(owner: Store, corpus: str, n: int, dim: int, seed: int) -> tuple[list[str], Lookup]:
    data = generate_corpus(n, dim=dim, seed=seed, id_prefix=corpus)
    # A second key matching 9 % of the entries (1 in 11).
    data.entries[:] = [dataclasses.replace(e, metadata={**e.metadata, "band": "b9" if i % 11 == 0 else f"o{i % 11}"})
                       for i, e in enumerate(data.entries)]
    queries = data.query_vectors(64, seed=seed + 7)
    lookup = Lookup(queries, {})
    vectors = VectorMemoryStore(owner.with_corpus(corpus), lookup, index_threshold=1000)
    vectors.add_all(data.entries, embeddings=data.embeddings)
    texts = [" ".join(e.content.split()[:3]) for e in data.entries[: 64]]
    return texts, lookup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=None, help="superuser URL of a server (default: an embedded one)")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=60, help="queries of each kind per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per mode (alternating)")
    parser.add_argument("--leakproof", action="store_true",
                        help="also time RLS on with jsonb @> marked LEAKPROOF (needs a superuser; restored after)")
    parser.add_argument("--server-time", action="store_true",
                        help="time each query by the server's own planning + execution time (EXPLAIN (ANALYZE, "
                             "TIMING OFF, SUMMARY) of every statement of its plan) instead of wall time: the "
                             "client's noise left out; planning is also shown on its own")
    parser.add_argument("--prepared", action="store_true",
                        help="with --server-time: time prepared statements (PREPARE once per connection, then "
                             "EXPLAIN ... EXECUTE), whose generic plans PostgreSQL keeps as for the library's own")
    parser.add_argument("--interleave", action="store_true",
                        help="keep RLS on and alternate query by query with the owner's same query as 'off' "
                             "(finer interleaving than rounds of switching RLS off and on)")
    parser.add_argument("--aa", action="store_true",
                        help="with --interleave: the owner on both sides (A/A), the ratios' noise floor")
    args = parser.parse_args()
    if args.aa and not args.interleave:
        parser.error("--aa compares the owner with itself query by query: use it with --interleave")
    if args.prepared and not args.server_time:
        parser.error("--prepared times the server's execution: use it with --server-time")
    with scratch_database(args.url, "tnsrag_bench", role_password=PASSWORD) as (url, role):
        assert role is not None
        _run(url, role, args)


def _run(url: object, role: str, args: argparse.Namespace) -> None:
    owner_url = make_url(str(url)) if not hasattr(url, "set") else url
    owner_engine = Pool(owner_url, schema=SCHEMA, pool_size=2)  # type: ignore[arg-type]
    migrate.upgrade(owner_engine, schema=SCHEMA)
    owner = Store(owner_engine, corpus="bench_tenancy", schema=SCHEMA)
    t0 = time.perf_counter()
    texts, lookup = _write(owner, "bench_tenancy", args.n, args.dim, 1)
    for k, other in enumerate(("other_a", "other_b")):
        _write(owner, other, args.n // 2, args.dim, 10 + k)
    with owner.session.autocommit() as conn:
        conn.execute("VACUUM (ANALYZE) tnsrag.entries, tnsrag.embeddings, tnsrag.bm25_postings, tnsrag.bm25_df")
    print(f"wrote {args.n} + 2 x {args.n // 2} entries in {time.perf_counter() - t0:.0f} s")
    with psycopg.connect(owner_url.set(drivername="postgresql").render_as_string(hide_password=False),  # type: ignore[attr-defined]
                         autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
            sql.Identifier(str(owner_url.database)), sql.Identifier(role)))  # type: ignore[attr-defined]
    tenancy.grant(owner_engine, schema=SCHEMA, role=role, corpus="bench_tenancy")
    # The "on" side: the tenant role, or with --aa the owner again (its own engine and connection).
    on_url = owner_url if args.aa else owner_url.set(username=role, password=PASSWORD)  # type: ignore[attr-defined]
    tenant_engine = Pool(on_url, schema=SCHEMA, pool_size=2)
    tenant = Store(tenant_engine, corpus="bench_tenancy", schema=SCHEMA)
    lookup.extra.update({t: lookup.queries[i % 64] for i, t in enumerate(texts)})
    strategies = _strategies(tenant, lookup, texts)
    keyword, vectors = BM25Index(tenant), VectorMemoryStore(tenant, lookup, index_threshold=1000)
    times: dict[tuple[str, str], list[float]] = {}
    plan_times: dict[tuple[str, str], list[float]] = {}
    counts: dict[tuple[str, str], int] = {}
    tenant_conn = psycopg.connect(on_url.set(drivername="postgresql").render_as_string(hide_password=False),
                                  autocommit=True)
    register_vector(tenant_conn)
    tenant_conn.execute(f"SET search_path = {SCHEMA}, public")
    modes = ("off", "on", "on+lp") if args.leakproof and not args.interleave else ("off", "on")
    if args.interleave and args.server_time:
        owner_conn = psycopg.connect(owner_url.set(drivername="postgresql")  # type: ignore[attr-defined]
                                     .render_as_string(hide_password=False), autocommit=True)
        register_vector(owner_conn)
        owner_conn.execute(f"SET search_path = {SCHEMA}, public")
        tenancy.enable(owner_engine, schema=SCHEMA)
        _interleaved_server(args, {"off": (owner, _plans(owner, lookup, texts), owner_conn),
                                   "on": (tenant, _plans(tenant, lookup, texts), tenant_conn)},
                            times, plan_times, counts)
        owner_conn.close()
    elif args.interleave:
        _interleaved(args, owner_engine, _strategies(owner, lookup, texts), strategies, times, counts)
    for r in range(0 if args.interleave else args.rounds):
        # ABBA order (off, on, on, off, ...): each mode runs first, right after a switch, as often.
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            (tenancy.disable if mode == "off" else tenancy.enable)(owner_engine, schema=SCHEMA)
            _leakproof(owner, mode == "on+lp")
            # A store learns once whether tenancy (and so the filter pairs) is on: a new one per switch.
            fresh_store = Store(tenant_engine, corpus="bench_tenancy", schema=SCHEMA)
            fresh = _strategies(fresh_store, lookup, texts)
            plans = _plans(fresh_store, lookup, texts)
            # A policy switch invalidates the plans of prepared statements: each mode prepares its own.
            prepared: dict[str, str] = {}
            if args.prepared:
                tenant_conn.execute("DEALLOCATE ALL")
            for kind, run in fresh.items():
                for i in range(5):
                    run(i)  # warm
                for i in range(args.queries):
                    if args.server_time:
                        spent, planning, out = _server_seconds(plans[kind](i), fresh_store, tenant_conn,
                                                               prepared if args.prepared else None)
                        plan_times.setdefault((kind, mode), []).append(planning)
                    else:
                        t = time.perf_counter()
                        out = run(i)
                        spent = time.perf_counter() - t
                    times.setdefault((kind, mode), []).append(spent)
                    counts[(kind, mode)] = counts.get((kind, mode), 0) + len(out)  # type: ignore[arg-type]
    print(f"\ntenant role, {args.n} entries in its corpus (+{args.n} of other tenants), dim {args.dim}, "
          f"{args.rounds} x {args.queries} queries per kind and mode")
    if args.interleave and args.aa:
        print("A/A, interleaved query by query: both sides are the owner (no policy), each with its own store and "
              "connection; the ratios show the noise floor")
    elif args.interleave:
        print("interleaved query by query: 'RLS off' is the owner (no policy), 'RLS on' the tenant role")
    if args.server_time:
        print("times: the server's planning + execution of each query's statements (EXPLAIN ANALYZE, TIMING OFF)"
              + ("; prepared statements, PostgreSQL's plan cache choosing generic or custom plans" if args.prepared
                 else ""))
    lp = f" {'on+lp ms':>9} {'lp/off':>7}" if args.leakproof and not args.interleave else ""
    paired_head = f" {'paired':>7} {'95 % interval':>13}" if args.interleave else ""
    print(f"{'query':<11} {'RLS off ms':>11} {'RLS on ms':>10} {'on/off':>7} {'p90 off':>8} {'p90 on':>7}{lp}"
          f"{paired_head} {'rows same':>10}")
    for kind in strategies:
        off, on = times[(kind, "off")], times[(kind, "on")]
        m_off, m_on = statistics.median(off) * 1000, statistics.median(on) * 1000
        extra = ""
        if lp:
            m_lp = statistics.median(times[(kind, "on+lp")]) * 1000
            extra = f" {m_lp:>9.2f} {m_lp / m_off:>7.3f}"
        if args.interleave:
            ratio, (low, high) = _paired_ratio(on, off)
            extra += f" {ratio:>7.3f} {f'{low:.3f}-{high:.3f}':>13}"
        same = len({counts[(kind, m)] for m in modes}) == 1
        print(f"{kind:<11} {m_off:>11.2f} {m_on:>10.2f} {m_on / m_off:>7.3f} {np.quantile(off, .9) * 1000:>8.2f} "
              f"{np.quantile(on, .9) * 1000:>7.2f}{extra} {str(same):>10}")
    if args.interleave:
        print("paired: the geometric mean of the per-query ratios on/off (the same query, run back to back), "
              "with its 95 % bootstrap interval over the queries")
    if plan_times:
        print("of which planning (medians, ms; EXPLAIN plans every statement, a prepared one may reuse a plan):")
        for kind in strategies:
            off_p, on_p = (statistics.median(plan_times[(kind, m)]) * 1000 for m in ("off", "on"))
            print(f"{kind:<11} {off_p:>11.2f} {on_p:>10.2f} {on_p / off_p if off_p else float('nan'):>7.3f}")
    _leakproof(owner, False)
    tenancy.enable(owner_engine, schema=SCHEMA)
    tenant = Store(tenant_engine, corpus="bench_tenancy", schema=SCHEMA)
    keyword, vectors = BM25Index(tenant), VectorMemoryStore(tenant, lookup, index_threshold=1000)
    _explain(tenant_engine, keyword, vectors, texts[0], lookup.queries[0])
    tenant_conn.close()
    tenant_engine.close()
    owner_engine.close()


def _paired_ratio(on: list[float], off: list[float]) -> tuple[float, tuple[float, float]]:
    """The geometric mean of the paired ratios ``on[i] / off[i]`` (the interleaved modes
    time the two sides of query ``i`` back to back) and its 95 % percentile bootstrap
    interval over the queries."""
    logs = np.log(np.asarray(on) / np.asarray(off))
    low, high = bootstrap_interval(logs, resamples=2_000)
    return float(np.exp(logs.mean())), (float(np.exp(low)), float(np.exp(high)))


def _strategies(store: Store, lookup: Lookup, texts: list[str]) -> dict[str, Callable[[int], object]]:
    """The timed queries of ``store``: each kind unfiltered, at 1 % and at 9 % (what each
    strategy's ``retrieve`` does: its plan run on the store)."""
    return {kind: (lambda i, make=make: store.run(make(i))) for kind, make in _plans(store, lookup, texts).items()}


def _plans(store: Store, lookup: Lookup, texts: list[str]) -> dict[str, Callable[[int], Plan[Any]]]:
    """The queries' plans (no I/O): each kind unfiltered, at 1 % and at 9 %."""
    keyword = BM25Index(store)
    vectors = VectorMemoryStore(store, lookup, index_threshold=1000)
    # Hybrid embeds its text query: the keyword texts have vectors too (lookup.extra).
    out: dict[str, Callable[[int], Plan[Any]]] = {
        "vector": lambda i: VectorRAGStrategy(vectors).plan(f"q:{i % 64}"),
        "keyword": lambda i: KeywordRAGStrategy(keyword).plan(texts[i % len(texts)]),
        "hybrid": lambda i: HybridRAGStrategy(keyword, vectors).plan(texts[i % len(texts)]),
    }
    for label, ctx in (("1%", RAGContext(metadata_filters={"group": GROUP_1PCT})),
                       ("9%", RAGContext(metadata_filters={"band": "b9"}))):
        out[f"vector {label}"] = lambda i, c=ctx: VectorRAGStrategy(vectors).plan(f"q:{i % 64}", c)
        out[f"keyword {label}"] = lambda i, c=ctx: KeywordRAGStrategy(keyword).plan(texts[i % len(texts)], c)
        out[f"hybrid {label}"] = lambda i, c=ctx: HybridRAGStrategy(keyword, vectors).plan(texts[i % len(texts)], c)
    return out


def _server_seconds(plan: Plan[Any], store: Store, conn: psycopg.Connection[Any],
                    prepared: dict[str, str] | None = None) -> tuple[float, float, Any]:
    """The server's planning + execution time of every statement of ``plan`` (EXPLAIN
    ANALYZE with TIMING OFF on ``conn``, the same role), its planning share, and the plan's
    result (its statements' rows read through ``store``). With ``prepared`` (statement text
    to name, per ``conn``), each statement is prepared once and timed as ``EXECUTE``."""
    spent = planning = 0.0

    def execute(statement: Statement) -> Any:
        nonlocal spent, planning
        text, names = native_sql(statement.sql)
        values = tuple(statement.params[name] for name in names)
        if prepared is None:
            with psycopg.RawCursor(conn) as cur:
                cur.execute("EXPLAIN (ANALYZE, TIMING OFF, SUMMARY) " + text, values)
                report = "\n".join(str(row[0]) for row in cur.fetchall())
        else:
            name = prepared.get(text)
            if name is None:
                name = prepared[text] = f"bench_{len(prepared)}"
                conn.execute(f"PREPARE {name} AS {text}")  # the library's own statement text
            # Values as literals of their types (a client-side cursor): EXECUTE takes no $n.
            with psycopg.ClientCursor(conn) as cur:
                cur.execute(f"EXPLAIN (ANALYZE, TIMING OFF, SUMMARY) EXECUTE {name}"
                            + (f"({', '.join(['%s'] * len(values))})" if values else ""), values)
                report = "\n".join(str(row[0]) for row in cur.fetchall())
        for label in ("Planning Time", "Execution Time"):
            found = re.search(label + r": ([0-9.]+) ms", report)
            seconds = float(found.group(1)) / 1000 if found else 0.0
            spent += seconds
            if label == "Planning Time":
                planning += seconds
        return store.read(statement.sql, statement.params)

    result = run_plan(plan, execute)
    return spent, planning, result


def _interleaved(args: argparse.Namespace, owner_engine: object, off: dict[str, Callable[[int], object]],
                 on: dict[str, Callable[[int], object]], times: dict[tuple[str, str], list[float]],
                 counts: dict[tuple[str, str], int]) -> None:
    """Row-level security stays on; "off" is the same query by the owner (no policy applies to
    it), alternated with the tenant's query by query (order swapped every other query), so
    that the machine's drift hits both sides alike."""
    tenancy.enable(owner_engine, schema=SCHEMA)  # type: ignore[arg-type]
    for _ in range(args.rounds):
        for kind in on:
            for i in range(5):
                off[kind](i), on[kind](i)  # warm
            for i in range(args.queries):
                for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    t = time.perf_counter()
                    out = (off if mode == "off" else on)[kind](i)
                    times.setdefault((kind, mode), []).append(time.perf_counter() - t)
                    counts[(kind, mode)] = counts.get((kind, mode), 0) + len(out)  # type: ignore[arg-type]


def _interleaved_server(args: argparse.Namespace,
                        sides: dict[str, tuple[Store, dict[str, Callable[[int], Plan[Any]]], psycopg.Connection[Any]]],
                        times: dict[tuple[str, str], list[float]], plan_times: dict[tuple[str, str], list[float]],
                        counts: dict[tuple[str, str], int]) -> None:
    """:func:`_interleaved` by the server's time: "off" is the owner's query on the owner's
    connection, "on" the tenant's on the tenant's, alternating query by query."""
    prepared: dict[str, dict[str, str]] = {mode: {} for mode in sides}
    for _ in range(args.rounds):
        for kind in sides["on"][1]:
            for i in range(args.queries + 5):  # the first five warm (and let the plan cache choose)
                for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    store, plans, conn = sides[mode]
                    spent, planning, out = _server_seconds(plans[kind](i), store, conn,
                                                           prepared[mode] if args.prepared else None)
                    if i >= 5:
                        times.setdefault((kind, mode), []).append(spent)
                        plan_times.setdefault((kind, mode), []).append(planning)
                        counts[(kind, mode)] = counts.get((kind, mode), 0) + len(out)


def _leakproof(owner: Store, on: bool) -> None:
    """Mark jsonb's ``@>`` (jsonb_contains) LEAKPROOF, or not (superuser only; --leakproof)."""
    with owner.session.autocommit() as conn:
        known = conn.execute("SELECT proleakproof FROM pg_proc WHERE oid = "
                                     "'pg_catalog.jsonb_contains(jsonb, jsonb)'::regprocedure").scalar_one()
        if bool(known) != on:
            conn.execute("ALTER FUNCTION pg_catalog.jsonb_contains(jsonb, jsonb) "
                                 + ("LEAKPROOF" if on else "NOT LEAKPROOF"))


def _explain(pool: object, keyword: BM25Index, vectors: VectorMemoryStore, text: str, q: object) -> None:

    one = {"group": GROUP_1PCT}
    for label, (statement, params) in (("keyword", keyword.candidates_sql(text, 10)),
                                       ("vector", vectors.candidates_sql(q, 10)),  # type: ignore[arg-type]
                                       ("keyword 1%", keyword.candidates_sql(text, 10, filters=one)),
                                       ("vector 1%", vectors.candidates_sql(q, 10, filters=one))):  # type: ignore[arg-type]
        with pool.connect() as conn:  # type: ignore[attr-defined]
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, params).scalars()
        keep = [line for line in plan if any(w in line for w in ("InitPlan", "Index", "Seq Scan", "Buffers: shared",
                                                                  "Execution Time", "tenant_grants", "Filter: "))]
        print(f"\nEXPLAIN (ANALYZE, BUFFERS) {label} candidates under RLS (selected lines):")
        for line in keep[:24]:
            print("  " + line)


if __name__ == "__main__":
    main()
