"""Retrieval plans: prepared statements keep PostgreSQL's generic plan, and scores do not depend on the plan.

The driver prepares a statement from its fifth execution on; PostgreSQL's plan cache
then compares the generic plan's cost with the custom plans' and keeps the generic one
unless a custom plan is cheaper. The BM25 and hybrid statements hide from the planner
the values that only move its estimates (the query's terms:
:func:`tnsrag_db._db.statement.hidden`, and, on a database without Citus, the corpus:
:func:`~tnsrag_db._db.statement.hidden_corpus`; limits are integer literals), so their
custom plans cost what the generic plan costs and the generic plan is kept. A rare filter value stays visible and may still
plan better by itself.

Float addition is not associative: a BM25 score sums its terms' parts in lexeme order,
so that two connections with different plans for the same statement give the same
scores to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db import (
    BM25Index,
    HashingEmbedding,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    MemoryEntry,
    RAGContext,
    VectorMemoryStore,
    VectorRAGStrategy,
    connect,
)
from tnsrag_db._db.runner import bind
from tnsrag_db._db.statement import Statement, run_plan
from tnsrag_db._store.store import Store

WORDS = ("parcel", "refund", "damaged", "courier", "invoice", "warehouse", "label", "return")


def _plans(store: Store, start: str) -> tuple[int, int]:
    """(generic, custom) plans of the prepared statements starting with ``start``, on the
    store's only pooled connection (the one the retrievals ran on)."""
    rows = store.read(
        "SELECT coalesce(sum(generic_plans), 0) AS g, coalesce(sum(custom_plans), 0) AS c "
        "FROM pg_prepared_statements WHERE starts_with(statement, :m)", {"m": start})
    return int(rows[0].g), int(rows[0].c)


def test_keyword_and_hybrid_statements_are_planned_once_and_reused(make_database: Callable[[], URL]) -> None:
    # A database of its own, where a corpus forty times larger lies beside the one searched:
    # with the corpus visible to the planner, the small corpus's custom plans estimate
    # cheaper than the generic plan and PostgreSQL would plan every run again. The read
    # runner hides the corpus (tnsrag_db._db.statement.hidden_corpus) on a database without
    # Citus, which routes by the visible value (tests/db/test_citus_cluster.py).
    url = make_database()
    with connect(url, corpus="plan_reuse_large", schema=SCHEMA, auto_migrate=True) as large:
        large.add_all([MemoryEntry(f"l{i}", f"{WORDS[i % 8]} {WORDS[(i * 5) % 8]} ledger {i % 97}")
                       for i in range(12_000)])
    with connect(url, corpus="plan_reuse", schema=SCHEMA, pool_size=1, max_overflow=0) as store:
        vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        vectors.add_all([MemoryEntry(f"e{i}", f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} note {i}",
                                     metadata={"shelf": f"s{i % 3}"}) for i in range(300)])
        # Statistics and sizes of exactly these rows, now: otherwise autovacuum vacuums and
        # analyses the tables at a moment of its own (the new rows are past its thresholds),
        # maybe among the runs below, whose plans it then invalidates and has planned again.
        with store.session.autocommit() as conn:
            conn.execute("VACUUM ANALYZE entries, bm25_postings, bm25_df, bm25_stats, embeddings")
        keyword = KeywordRAGStrategy(BM25Index(store))
        hybrid = HybridRAGStrategy(BM25Index(store), vectors)
        # Four terms: an entry's parts are summed in lexeme order, so its score does not depend
        # on the plan (float addition is not associative).
        probe = "parcel refund damaged courier"
        before_k, before_h = keyword.retrieve(probe), hybrid.retrieve(probe)
        queries = [f"{WORDS[i % 8]} {WORDS[(i + 3) % 8]}" for i in range(20)]
        for q in queries:
            # One limit: each limit is a statement text of its own (a literal the plan knows).
            assert keyword.retrieve(q, RAGContext(10)), q
            assert hybrid.retrieve(q, RAGContext(10)), q
        # 21 runs of each: the driver prepares from the sixth on; PostgreSQL makes five custom
        # plans, then keeps the generic one (the plain BM25 statement and the fused one).
        for start in ("WITH k_rk AS", "WITH hk_q AS"):
            generic, custom = _plans(store, start)
            assert generic >= 10 and custom <= 5, (start, generic, custom)
        for _ in range(8):
            assert keyword.retrieve(probe) == before_k
            assert hybrid.retrieve(probe) == before_h


def test_scores_do_not_depend_on_the_plan(db_url: URL) -> None:
    """A connection whose generic plans were made before the corpus was loaded (another
    shape than a fresh connection's plans for the full corpus) and fresh connections forced
    to either kind of plan score every entry to the last bit alike: float addition is not
    associative, so an entry's parts are summed in lexeme order, whatever order a plan meets
    them in."""
    from tests.db.test_explain import QUERIES, _corpus

    queries = QUERIES + [" ".join(QUERIES)]
    early = connect(db_url, corpus="plan_free_scores", schema=SCHEMA, pool_size=1, max_overflow=0)
    found = []
    try:
        early_keyword = KeywordRAGStrategy(BM25Index(early))
        early.add(MemoryEntry("seed", " ".join(queries)))
        for q in queries:
            for _ in range(8):
                early_keyword.retrieve(q, RAGContext(10))
        with connect(db_url, corpus="plan_free_scores", schema=SCHEMA) as store:
            _corpus(store)
        found.append([early_keyword.retrieve(q, RAGContext(10)) for q in queries])
    finally:
        early.close()
    for mode in ("auto", "force_generic_plan", "force_custom_plan"):
        url = db_url.update_query_dict({"options": f"-c plan_cache_mode={mode}"})
        with connect(url, corpus="plan_free_scores", schema=SCHEMA, pool_size=1, max_overflow=0) as store:
            assert store.read("SHOW plan_cache_mode", {})[0].plan_cache_mode == mode  # the URL's options hold
            keyword = KeywordRAGStrategy(BM25Index(store))
            for q in queries:
                runs = [keyword.retrieve(q, RAGContext(10)) for _ in range(8)]
                assert runs[0] and all(run == runs[0] for run in runs), (mode, q)
            found.append([keyword.retrieve(q, RAGContext(10)) for q in queries])
    assert all(f == found[0] for f in found)


def _entry_rows_read(url: URL, statement: Statement) -> int:
    """The most entry rows one node of ``statement``'s generic plan reads (rows × loops):
    prepared on a connection of its own and run once with EXPLAIN ANALYZE."""
    from pgvector.psycopg import register_vector

    text, names = bind(statement.sql)
    values = tuple(statement.params[name] for name in names)
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        register_vector(conn)
        conn.execute(f"SET search_path = {SCHEMA}, public")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE probe AS {text}")
        with psycopg.ClientCursor(conn) as cur:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe"
                        + (f"({', '.join(['%s'] * len(values))})" if values else ""), values)
            plan = cur.fetchone()[0][0]["Plan"]  # type: ignore[index]

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    return max((int(n.get("Actual Rows", 0) * n.get("Actual Loops", 1)) for n in nodes(plan)
                if n.get("Relation Name") == "entries"), default=0)


def test_the_documents_join_probes_entries_by_key_whatever_the_corpus_is_estimated_at(
        make_database: Callable[[], URL]) -> None:
    """The retrieval statements join their top k to the entry rows one primary-key probe per
    row. A generic plan estimates a corpus at the average corpus's size; in a database of a
    thousand corpora it took a large one for a few rows and read all of them instead
    (scanned once and rescanned per result row: 56 vs 1.9 ms for 20k entries)."""
    url = make_database()
    with connect(url, corpus="large", schema=SCHEMA, pool_size=1, max_overflow=0, auto_migrate=True) as store:
        vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        vectors.add_all([MemoryEntry(f"e{i}", f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} note {i}") for i in range(3000)])
        with store.session.autocommit() as conn:
            # What a thousand corpora would make of the estimate of one corpus's rows.
            for table in ("entries", "bm25_postings", "bm25_df", "bm25_stats", "corpora"):
                conn.execute(f"ALTER TABLE {SCHEMA}.{table} ALTER COLUMN corpus SET (n_distinct = 1000)")
                conn.execute(f"ANALYZE {SCHEMA}.{table}")
        keyword = KeywordRAGStrategy(BM25Index(store))
        hybrid = HybridRAGStrategy(BM25Index(store), vectors)
        vector = VectorRAGStrategy(vectors)
        for name, plan in (("keyword", keyword.plan("parcel refund", RAGContext(10))),
                           ("hybrid", hybrid.plan("parcel refund", RAGContext(10))),
                           ("vector", vector.plan("parcel refund", RAGContext(10)))):
            seen: list[Statement] = []

            def execute(statement: Statement) -> Any:
                seen.append(statement)
                return store.read(statement.sql, statement.params)

            assert len(run_plan(plan, execute)) == 10, name
            assert _entry_rows_read(url, seen[-1]) <= 20, name


def test_an_explanation_keeps_the_statements_prepared_on_its_connection(db_url: URL) -> None:
    # An explanation reads in one snapshot (a read-only transaction). Ended by ROLLBACK, it
    # made psycopg deallocate every statement prepared on the connection, so the retrievals
    # after it were planned again until they had run five times more.
    with connect(db_url, corpus="plan_reuse_explain", schema=SCHEMA, pool_size=1, max_overflow=0) as store:
        try:
            store.add_all([MemoryEntry(f"e{i}", f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} note {i}") for i in range(60)])
            keyword = KeywordRAGStrategy(BM25Index(store))
            for i in range(8):
                keyword.retrieve(f"{WORDS[i % 8]} {WORDS[(i + 3) % 8]}")
            prepared = _plans(store, "WITH k_rk")
            assert sum(prepared) > 0, prepared
            explained = keyword.explain("parcel refund")
            assert explained.results
            keyword.retrieve("parcel courier")
            after = _plans(store, "WITH k_rk")
            # The same prepared statement, run once more: nothing was deallocated.
            assert sum(after) == sum(prepared) + 1, (prepared, after)
        finally:
            store.drop_corpus()
