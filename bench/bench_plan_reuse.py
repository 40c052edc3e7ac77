"""Plan reuse: the retrieval statements as they are, against the same statements with their hidden values shown.

Usage::

    python -m bench.bench_plan_reuse --n 20000 --queries 40 --rounds 3 [--url URL] [--tenancy]
    python -m bench.bench_plan_reuse --n 2000 --others 40000 --corpus


The BM25 and hybrid statements (and, with tenancy, the filter pairs' lookups) hide the
values that only move the planner's estimates in scalar subqueries
(:func:`tnsrag_db._db.statement.hidden`), so that PostgreSQL keeps a prepared
statement's generic plan instead of planning every execution. This script writes a
corpus of ``n`` entries (dim 128, 1 % of them in one metadata group, 1 % with tier
PROCEDURAL), takes each kind of query's statements as the library builds them, and runs
them on two connections of their own, prepared as the library's driver lane prepares
them (from the sixth run): "hidden" as built, "shown" with every hidden value put back in
plain sight (what the statements were before). Query by query the two alternate. The
table shows the medians, their ratio (same run) and the generic and custom plans
PostgreSQL made (``pg_prepared_statements``). With ``--tenancy``, row-level security is
switched on and the queries run as a tenant role (metadata filters through the filter
pairs). Starts an embedded server unless ``--url`` names one (a superuser URL: the
script creates a database, and with ``--tenancy`` a role, and drops them afterwards).

With ``--others N`` another corpus of ``N`` entries lies beside the one searched (the
database of a user with several corpora). With ``--corpus`` the two variants are the
corpus's: "hidden" as the read runner sends a statement on a database without Citus (the
corpus too in a scalar subquery, :func:`tnsrag_db._db.statement.hidden_corpus`), "shown"
as built (the corpus visible, as on Citus, which routes by it).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from sqlalchemy.engine import URL

from bench._common import scratch_database
from bench._corpus import GROUP_1PCT, generate_corpus
from bench.bench_vector import Lookup
from tnsrag_db import tenancy
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._db.runner import bind as native_sql
from tnsrag_db._db.statement import Plan, Statement, hidden_corpus, run_plan
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryTier, RAGContext

SCHEMA = "tnsrag"
PASSWORD = "bench-plan-reuse"
CORPUS = "bench_plan_reuse"
#: What :func:`tnsrag_db._db.statement.hidden` wraps around a bound value.
_HIDDEN = re.compile(r"\(SELECT (CAST\(:\w+ AS [\w\[\]]+\))\)")


def shown(text: str) -> str:
    """``text`` with every hidden value in plain sight again."""
    return _HIDDEN.sub(r"\1", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="superuser URL of a server (default: an embedded one)")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=40, help="queries of each kind per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenancy", action="store_true", help="row-level security on, queries as a tenant role")
    parser.add_argument("--others", type=int, default=0, help="entries of another corpus beside the one searched")
    parser.add_argument("--corpus", action="store_true",
                        help="compare the corpus hidden (as the runner sends it) with the statements as built")
    parser.add_argument("--explain", default=None, metavar="KIND",
                        help="also print EXPLAIN (ANALYZE, BUFFERS) of KIND's prepared statements, both variants")
    args = parser.parse_args()
    with scratch_database(args.url, "bench_reuse", role_password=PASSWORD if args.tenancy else None) as (url, role):
        _run(url, role, args)


def _run(url: URL, role: str | None, args: argparse.Namespace) -> None:
    owner_engine = Pool(url, schema=SCHEMA, pool_size=2)
    migrate.upgrade(owner_engine, schema=SCHEMA)
    owner = Store(owner_engine, corpus=CORPUS, schema=SCHEMA)
    data = generate_corpus(args.n, dim=128, seed=3, id_prefix=CORPUS)
    data.entries[:] = [e if i % 100 != 7 else dataclasses.replace(e, tier=MemoryTier.PROCEDURAL)
                       for i, e in enumerate(data.entries)]
    lookup = Lookup(data.query_vectors(64, seed=9), {})
    t0 = time.perf_counter()
    VectorMemoryStore(owner, lookup, index_threshold=1000).add_all(data.entries, embeddings=data.embeddings)
    with owner.session.autocommit() as owner_conn:
        owner_conn.execute(f"VACUUM (ANALYZE) {SCHEMA}.entries, {SCHEMA}.embeddings, {SCHEMA}.bm25_postings, "
                             f"{SCHEMA}.bm25_df")
    if args.others:
        other = generate_corpus(args.others, dim=128, seed=4, id_prefix="other")
        VectorMemoryStore(owner.with_corpus(f"{CORPUS}_other"), lookup, index_threshold=1000).add_all(
            other.entries, embeddings=other.embeddings)
        with owner.session.autocommit() as owner_conn:
            owner_conn.execute(f"VACUUM (ANALYZE) {SCHEMA}.entries, {SCHEMA}.embeddings, {SCHEMA}.bm25_postings, "
                               f"{SCHEMA}.bm25_df")
    print(f"wrote {args.n} entries (and {args.others} of another corpus) in {time.perf_counter() - t0:.0f} s")
    texts = [" ".join(e.content.split()[:3]) for e in data.entries[:64]]
    lookup.extra.update({t: lookup.queries[i % 64] for i, t in enumerate(texts)})
    query_url = url
    if args.tenancy:
        assert role is not None
        with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                             autocommit=True) as conn:
            conn.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                sql.Identifier(str(url.database)), sql.Identifier(role)))
        tenancy.enable(owner_engine, schema=SCHEMA)
        tenancy.grant(owner_engine, schema=SCHEMA, role=role, corpus=CORPUS)
        query_url = url.set(username=role, password=PASSWORD)
    pool = Pool(query_url, schema=SCHEMA, pool_size=2)
    store = Store(pool, corpus=CORPUS, schema=SCHEMA)
    kinds = _kinds(store, lookup, texts)
    conninfo = query_url.set(drivername="postgresql").render_as_string(hide_password=False)
    hide, show = (hidden_corpus, lambda t: t) if args.corpus else (lambda t: t, shown)
    print(f"\n{args.n} entries ({args.others} in another corpus), {args.rounds} x {args.queries} queries per kind"
          + ("; hidden: the corpus too, shown: as built" if args.corpus else "")
          + (", as a tenant role with row-level security on" if args.tenancy else "")
          + "; statements prepared on one connection per variant, the variants alternating")
    print(f"{'query':<13} {'hidden ms':>10} {'shown ms':>9} {'ratio':>6} {'hidden g/c':>11} {'shown g/c':>10}")
    for kind, make in kinds.items():
        statements = [_statements(store, make(i)) for i in range(args.queries)]
        conns = {}
        for variant in ("hidden", "shown"):
            conn = psycopg.connect(conninfo, autocommit=True)
            register_vector(conn)
            conn.execute(f"SET search_path = {SCHEMA}, public")
            conns[variant] = conn
        times: dict[str, list[float]] = {v: [] for v in conns}
        for r in range(args.rounds + 1):  # round 0 warms up (and prepares)
            for i, group in enumerate(statements):
                for variant in (("hidden", "shown") if (i + r) % 2 == 0 else ("shown", "hidden")):
                    spent = _execute(conns[variant], group, show if variant == "shown" else hide)
                    if r:
                        times[variant].append(spent)
        counts = {v: c.execute("SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) "
                               "FROM pg_prepared_statements").fetchone() for v, c in conns.items()}
        if kind == args.explain:
            for variant, conn in conns.items():
                _explain(conn, variant, statements[0], show if variant == "shown" else hide)
        for conn in conns.values():
            conn.close()
        hid, sho = (statistics.median(times[v]) * 1000 for v in ("hidden", "shown"))
        g = {v: f"{int(c[0])}/{int(c[1])}" for v, c in counts.items() if c is not None}
        print(f"{kind:<13} {hid:>10.2f} {sho:>9.2f} {hid / sho:>6.2f} {g['hidden']:>11} {g['shown']:>10}")
    pool.close()
    owner_engine.close()


def _kinds(store: Store, lookup: Lookup, texts: list[str]) -> dict[str, Callable[[int], Plan[Any]]]:
    keyword, vectors = BM25Index(store), VectorMemoryStore(store, lookup, index_threshold=1000)
    group = RAGContext(metadata_filters={"group": GROUP_1PCT})
    tier = RAGContext(metadata_filters={"tier": "PROCEDURAL"})
    return {
        "keyword": lambda i: KeywordRAGStrategy(keyword).plan(texts[i % 64]),
        "hybrid": lambda i: HybridRAGStrategy(keyword, vectors).plan(texts[i % 64]),
        "vector": lambda i: VectorRAGStrategy(vectors).plan(f"q:{i % 64}"),
        "keyword 1%": lambda i: KeywordRAGStrategy(keyword).plan(texts[i % 64], group),
        "hybrid 1%": lambda i: HybridRAGStrategy(keyword, vectors).plan(texts[i % 64], group),
        "vector 1%": lambda i: VectorRAGStrategy(vectors).plan(f"q:{i % 64}", group),
        "keyword tier": lambda i: KeywordRAGStrategy(keyword).plan(texts[i % 64], tier),
    }


def _statements(store: Store, plan: Plan[Any]) -> list[Statement]:
    """The statements ``plan`` runs (run once through the store, which answers them)."""
    seen: list[Statement] = []

    def execute(statement: Statement) -> Any:
        seen.append(statement)
        return store.read(statement.sql, statement.params)

    run_plan(plan, execute)
    return seen


def _explain(conn: psycopg.Connection[Any], variant: str, statements: list[Statement],
             rewrite: Callable[[str], str]) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of the plan each prepared statement runs now (EXECUTE)."""
    for statement in statements:
        text, names = native_sql(rewrite(statement.sql))
        row = conn.execute("SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
                           "WHERE statement = %s", (text,)).fetchone()
        if row is None:
            continue
        args = tuple(statement.params[n] for n in names)
        marks = ", ".join(["%s"] * len(args))
        with psycopg.ClientCursor(conn) as cur:  # the values inlined as literals of EXECUTE
            cur.execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {row[0]}({marks})", args)
            plan = "\n".join(str(r[0]) for r in cur.fetchall())
        print(f"\n-- {variant}: {row[1]} generic / {row[2]} custom plans so far\n{plan}")


def _execute(conn: psycopg.Connection[Any], statements: list[Statement], rewrite: Callable[[str], str]) -> float:
    """Seconds to run ``statements`` (rewritten) as the driver lane runs them: ``$n``
    parameters, prepared by psycopg from the sixth execution of a text on."""
    started = time.perf_counter()
    with psycopg.RawCursor(conn) as cur:
        for statement in statements:
            text, names = native_sql(rewrite(statement.sql))
            cur.execute(text, tuple(statement.params[n] for n in names))
            cur.fetchall()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
