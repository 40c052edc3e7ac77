"""The library on a real Citus cluster (a coordinator and two workers, tests/citus_cluster.py),
its tables distributed by corpus with ``tnsrag db distribute --citus``: the same answers as
a single server, the same corpus after rewrites, deletes, sweeps and merges, and every
statement of a corpus, reads and writes alike, one task routed to one worker."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from tests.citus_cluster import Cluster
from tests.db._helpers import read_statements
from tnsrag_db import (
    BM25Index,
    ConfigurationError,
    Edge,
    GraphRAGStrategy,
    GraphStore,
    HierarchicalRAGStrategy,
    HierarchyIndex,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    MemoryEntry,
    MemoryTier,
    RAGContext,
    VectorMemoryStore,
    VectorRAGStrategy,
)
from tnsrag_db._cli import main_group
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.citus import distribute
from tnsrag_db._store.expiry import SweepReport
from tnsrag_db._store.store import Store

SCHEMA = "tnsrag"
WORDS = ["agent", "memory", "vector", "keyword", "graph", "time", "tree", "query"]
ENTRIES = [
    MemoryEntry("a", "agent memory agent", MemoryTier.SEMANTIC),
    MemoryEntry("b", "memory vector graph", MemoryTier.WORKING),
    MemoryEntry("c", "agent keyword query", MemoryTier.SEMANTIC, metadata={"tenant": "acme"}),
    MemoryEntry("d", "time tree memory memory", MemoryTier.EPISODIC),
    MemoryEntry("e", "graph graph tree", MemoryTier.SEMANTIC),
    MemoryEntry("f", "agent memory vector keyword", MemoryTier.WORKING, metadata={"tenant": "acme"}),
]
EDGES = [Edge("a", "e"), Edge("e", "d")]


def _embedding(text: str) -> list[float]:
    lowered = text.lower()
    return [float(lowered.count(w)) + 0.01 * i for i, w in enumerate(WORDS)]


@pytest.fixture(scope="module")
def citus_engine(citus_cluster: Cluster) -> Iterator[Pool]:
    """An engine on the coordinator, its schema migrated and distributed by corpus."""
    pool = Pool(citus_cluster.coordinator.url, schema=SCHEMA, pool_size=2)
    migrate.upgrade(pool, schema=SCHEMA)
    distribute(pool, schema=SCHEMA)
    yield pool
    pool.close()


def _load(store: Store) -> dict[str, Any]:
    """The test corpus written into ``store``, and the strategies over it."""
    vectors = VectorMemoryStore(store, _embedding)
    vectors.add_all(ENTRIES)
    graph_store = GraphStore(store)
    graph_store.add_edges(EDGES)
    keywords = BM25Index(store)
    G = GraphRAGStrategy
    return {
        "keyword": KeywordRAGStrategy(keywords),
        "vector": VectorRAGStrategy(vectors),
        "hybrid": HybridRAGStrategy(keywords, vectors),
        "graph": G("test", graph_store, None, G.DEFAULT_MAX_DEPTH, G.DEFAULT_DEPTH_DECAY, G.DEFAULT_MAX_VISITED_NODES),
    }


def _answers(strategies: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    contexts = {"all": RAGContext(10, -1.0), "acme": RAGContext(10, -1.0, {"tenant": "acme"}),
                "working": RAGContext(3, -1.0, {"tier": "WORKING"})}
    return {f"{name} {label}": [(d.metadata["entryId"], d.score) for d in strategy.retrieve("agent memory", ctx)]
            for name, strategy in strategies.items() for label, ctx in contexts.items()}


def _cluster_store(pool: Pool) -> Store:
    return Store(pool, corpus=f"citus_{uuid.uuid4().hex[:10]}", schema=SCHEMA)


@pytest.mark.citus
def test_distribute_puts_every_table_in_one_colocation_group_by_corpus(citus_cluster: Cluster,
                                                                       citus_engine: Pool) -> None:
    with psycopg.connect(citus_cluster.coordinator.conninfo) as conn:
        rows = conn.execute("SELECT table_name::text, distribution_column, colocation_id FROM citus_tables "
                            "WHERE table_name::text LIKE %s", (f"{SCHEMA}.%",)).fetchall()
        policies = conn.execute("SELECT qual, with_check FROM pg_policies WHERE schemaname = %s "
                                "AND policyname IN ('tenant_isolation', 'tenant_filter_pairs')", (SCHEMA,)).fetchall()
        triggers = conn.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                                (f"{SCHEMA}.entries",)).fetchall()
    from tnsrag_db._db.schema import metadata

    assert sorted(f"{SCHEMA}.{t.name}" for t in metadata.sorted_tables) == sorted(r[0] for r in rows)
    assert {r[1] for r in rows} == {"corpus"} and len({r[2] for r in rows}) == 1
    from tnsrag_db.tenancy import TENANT_TABLES

    assert len(policies) == len(TENANT_TABLES) + 1  # and the filter pairs' own
    for qual, check in policies:  # the grant lookup is a direct call, no subquery
        assert qual == check == f"(corpus = ANY ({SCHEMA}.tnsrag_tenant_corpora()))"
    assert triggers == []
    for worker in citus_cluster.workers:  # the schema's functions reached every node
        with psycopg.connect(worker.conninfo) as conn:
            assert conn.execute(f"SELECT serves_from FROM {SCHEMA}.tnsrag_schema_compat()").fetchone() == ("0013",)
            assert conn.execute(f"SELECT {SCHEMA}.tnsrag_tenant_corpora()").fetchone() == ([],)
    again = distribute(citus_engine, schema=SCHEMA)  # safe to run again
    assert again.distributed == [] and len(again.already) == len(rows) and again.triggers == []


@pytest.mark.citus
def test_answers_on_the_cluster_equal_the_single_servers(citus_engine: Pool,
                                                        make_store: Callable[..., Store]) -> None:
    single = _answers(_load(make_store()))
    store = _cluster_store(citus_engine)
    try:
        on_cluster = _answers(_load(store))
    finally:
        store.drop_corpus()
    assert on_cluster == single
    assert [i for i, _ in single["graph all"]][:2] == ["a", "e"]  # the walk reached e through a -> e
    assert {i for i, _ in single["keyword acme"]} == {"c", "f"}


def _literal(value: Any) -> Any:
    """A parameter as a literal PostgreSQL coerces to the parameter's type (a vector as its text)."""
    if hasattr(value, "tolist"):
        return "[" + ",".join(repr(float(x)) for x in value.tolist()) + "]"
    return value


def _explain(conn: psycopg.Connection[Any], text: str, values: tuple[Any, ...]) -> str:
    """EXPLAIN of a statement the library sent (``$n`` parameters) with its values."""
    conn.execute(sql.SQL("PREPARE tnsrag_probe AS {}").format(sql.SQL(text)))
    try:
        args = sql.SQL(", ").join(sql.Literal(_literal(v)) for v in values)
        plan = conn.execute(sql.SQL("EXPLAIN EXECUTE tnsrag_probe({})").format(args)).fetchall()
    finally:
        conn.execute("DEALLOCATE tnsrag_probe")
    return "\n".join(r[0] for r in plan)


def _walkers(store: Store, strategies: dict[str, Any]) -> dict[str, Any]:
    """The strategies of :func:`_load` and a hierarchy walk over a small tree written into
    ``store`` (under the keyword strategy)."""
    HierarchyIndex(store).add_all([MemoryEntry("root", "tree of agents", MemoryTier.SEMANTIC),
                                   MemoryEntry("sec", "agent memory section", MemoryTier.SEMANTIC, parent_id="root"),
                                   MemoryEntry("leaf", "agent memory leaf", MemoryTier.SEMANTIC, parent_id="sec")])
    return {**strategies, "hierarchy": HierarchicalRAGStrategy(strategies["keyword"], HierarchyIndex(store))}


#: The contexts each read is sent with: unfiltered, by metadata, by column.
_CONTEXTS = {"all": RAGContext(5), "acme": RAGContext(5, -1.0, {"tenant": "acme"}),
             "working": RAGContext(5, -1.0, {"tier": "WORKING"})}


@pytest.mark.citus
@pytest.mark.parametrize("strategy", ["keyword", "vector", "hybrid", "graph", "hierarchy"])
def test_each_corpus_statement_of_a_query_runs_as_one_task_on_one_worker(
        citus_cluster: Cluster, citus_engine: Pool, strategy: str) -> None:
    """EXPLAIN of every statement a query and its explanation send, unfiltered, filtered by
    metadata and by a column: one task, routed to one worker."""
    store = _cluster_store(citus_engine)
    try:
        chosen = _walkers(store, _load(store))[strategy]
        for ctx in _CONTEXTS.values():  # warm: the space and filter-pair lookups are cached (catalog reads)
            chosen.retrieve("agent memory", ctx)
        with read_statements() as sent:
            for ctx in _CONTEXTS.values():
                assert chosen.retrieve("agent memory", ctx)
                assert chosen.explain("agent memory", ctx).results
        assert sent
        with psycopg.connect(citus_cluster.coordinator.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {SCHEMA}, public")
            for _, text, values in sent:
                plan = _explain(conn, text, values)
                assert "Custom Scan (Citus Adaptive)" in plan, plan
                assert re.findall(r"Task Count: (\d+)", plan) == ["1"], plan
    finally:
        store.drop_corpus()


@pytest.mark.citus
def test_no_statement_of_a_corpus_is_planned_as_more_than_one_task(citus_cluster: Cluster,
                                                                   citus_engine: Pool) -> None:
    """Every statement the library sends for one corpus, reads, writes, rewrites, deletes,
    sweeps and merges alike, on a coordinator where Citus refuses any plan of more than one
    task (``citus.multi_task_query_log_level = error``, which also applies to each
    subplan of a statement Citus plans in steps): each is one task on one worker."""
    url = citus_cluster.coordinator.url + "?options=-c%20citus.multi_task_query_log_level%3Derror"
    strict = Pool(url, schema=SCHEMA, pool_size=1)
    store = Store(strict, corpus=f"citus_{uuid.uuid4().hex[:10]}", schema=SCHEMA)
    try:
        with strict.connect() as conn:  # the setting is in force: a statement over every shard fails
            with pytest.raises(psycopg.Error, match="multi-task query about to be executed"):
                conn.execute("SELECT count(*) FROM entries")
        changed = _change(store)
        strategies = _walkers(store, changed["strategies"])
        for strategy in strategies.values():
            for ctx in _CONTEXTS.values():
                explained = [d.document for d in strategy.explain("agent memory", ctx).results]
                assert strategy.retrieve("agent memory", ctx) == explained
        assert store.count() == 8 and store.count({"tenant": "acme"}) == 3  # b, c, f
        assert len(list(store.iter_entries(batch_size=3))) == 8
        assert store.delete_where({"tier": "SEMANTIC"}, older_than=timedelta(microseconds=1)) > 0
        assert store.clear() > 0
    finally:
        strict.close()
        _cluster_store(citus_engine).with_corpus(store.corpus).drop_corpus()  # its orphan sweep spans shards


def _served_on_workers(cluster: Cluster, schema: str) -> set[str]:
    served = set()
    for worker in cluster.workers:
        with psycopg.connect(worker.conninfo) as conn:
            row = conn.execute(f"SELECT serves_from FROM {schema}.tnsrag_schema_compat()").fetchone()
            assert row is not None
            served.add(str(row[0]))
    return served


@pytest.mark.citus
def test_upgrade_of_a_distributed_schema_reaches_every_node(citus_cluster: Cluster) -> None:
    schema = "tnsrag_up"
    pool = Pool(citus_cluster.coordinator.url, schema=schema, pool_size=1)
    try:
        migrate.upgrade(pool, schema=schema, revision="0011")
        migrate.upgrade(pool, schema=schema)  # a schema upgraded from 0011 serves 0010 ...
        with pytest.raises(ConfigurationError, match="upgrade --finish"):
            distribute(pool, schema=schema)  # ... whose writers need the triggers
        migrate.finish(pool, schema=schema)
        report = distribute(pool, schema=schema)
        assert report.triggers == ["tnsrag_bm25_retire_deleted", "tnsrag_bm25_retire_rewritten"]
        # A revision after distribution: 0012 again (it reads a distributed table, then
        # replaces a function, which Citus propagates to every node).
        migrate.downgrade(pool, schema=schema, revision="0011")
        for worker in citus_cluster.workers:
            with psycopg.connect(worker.conninfo) as conn:
                assert conn.execute("SELECT to_regprocedure(%s)", (f"{schema}.tnsrag_schema_compat()",)
                                    ).fetchone() == (None,)
        migrate.upgrade(pool, schema=schema)  # from 0011 with no blocks: serves 0010 again
        assert _served_on_workers(citus_cluster, schema) == {"0010"}
        migrate.finish(pool, schema=schema)  # CREATE OR REPLACE FUNCTION, propagated as well
        assert _served_on_workers(citus_cluster, schema) == {"0013"}  # the floor of the last revision
        assert migrate.check(pool, schema=schema) == []
    finally:
        pool.close()
        with psycopg.connect(citus_cluster.coordinator.conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.mark.citus
def test_cli_distributes(citus_cluster: Cluster) -> None:
    schema = "tnsrag_cli"
    runner = CliRunner()
    url = citus_cluster.coordinator.url
    try:
        res = runner.invoke(main_group, ["db", "distribute", "--citus", "--url", url, "--schema", schema])
        assert res.exit_code != 0 and "run tnsrag db upgrade first" in res.output
        assert runner.invoke(main_group, ["db", "upgrade", "--url", url, "--schema", schema]).exit_code == 0
        res = runner.invoke(main_group, ["db", "distribute", "--citus", "--url", url, "--schema", schema])
        assert res.exit_code == 0, res.output
        from tnsrag_db._db.schema import metadata

        assert res.output.startswith(f"schema {schema}: {len(metadata.sorted_tables)} tables distributed by corpus")
    finally:
        with psycopg.connect(citus_cluster.coordinator.conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_distribute_refuses_a_server_without_citus(pool: Pool) -> None:
    with pytest.raises(ConfigurationError, match="no citus extension"):
        distribute(pool, schema=SCHEMA)


@pytest.mark.citus
def test_export_and_restore_into_a_new_corpus_on_the_cluster(citus_cluster: Cluster, citus_engine: Pool,
                                                             tmp_path: Any) -> None:
    store = _cluster_store(citus_engine)
    restored = _cluster_store(citus_engine)
    url = citus_cluster.coordinator.url
    runner = CliRunner()
    try:
        before = _answers(_load(store))
        res = runner.invoke(main_group, ["export", "--url", url, "--corpus", store.corpus, "--vectors"])
        assert res.exit_code == 0, res.output
        dump = tmp_path / "corpus.jsonl"
        dump.write_text("".join(line + "\n" for line in res.output.splitlines() if line.startswith("{")))
        res = runner.invoke(main_group, ["ingest", "--url", url, "--corpus", restored.corpus, str(dump)])
        assert res.exit_code == 0, res.output
        assert "6 inserted" in res.output
        again = _answers({"vector": VectorRAGStrategy(VectorMemoryStore(restored, _embedding)),
                          "keyword": KeywordRAGStrategy(BM25Index(restored))})
        assert again == {k: v for k, v in before.items() if k.split()[0] in ("vector", "keyword")}
        assert restored.count() == store.count() == len(ENTRIES)
    finally:
        store.drop_corpus()
        restored.drop_corpus()


#: An instant every entry written with it has already passed (a sweep deletes it).
_PAST = datetime(2020, 1, 1, tzinfo=timezone.utc)


def _change(store: Store) -> dict[str, Any]:
    """The test corpus, merged, then changed every way a stored entry can change: its text,
    its metadata (and expiry), deleted one and many, by filter, expired and swept, merged
    again. Returns the strategies and what each step reported."""
    strategies = _load(store)
    vectors = strategies["vector"].vectors
    vectors.add_all([MemoryEntry("i", "keyword vector time", MemoryTier.SEMANTIC, expires_at=_PAST)])
    done: dict[str, Any] = {"merged": store.merge_postings().entries}
    done["text"] = vectors.add_all([MemoryEntry("a", "agent keyword tree tree", MemoryTier.SEMANTIC)])
    done["metadata"] = store.add_all([MemoryEntry("b", "memory vector graph", MemoryTier.WORKING,
                                                  metadata={"tenant": "acme"}, ttl=3600.0)])
    done["delete"] = store.delete("d")
    done["delete_many"] = store.delete_many(["e", "nothing"])
    vectors.add_all([MemoryEntry("g", "agent memory graph", MemoryTier.SEMANTIC, metadata={"tenant": "beta"}),
                     MemoryEntry("h", "memory query", MemoryTier.EPISODIC, metadata={"tenant": "beta"}),
                     MemoryEntry("k", "time query", MemoryTier.SEMANTIC, expires_at=_PAST),
                     MemoryEntry("j", "tree query agent", MemoryTier.WORKING)])
    done["delete_where"] = store.delete_where({"tenant": "beta"})
    done["sweep"] = store.sweep()
    done["text unmerged"] = vectors.add_all([MemoryEntry("j", "tree tree graph", MemoryTier.WORKING)])
    done["merged again"] = store.merge_postings().entries
    done["text merged"] = store.add_all([MemoryEntry("c", "agent keyword memory", MemoryTier.SEMANTIC,
                                                     metadata={"tenant": "acme"})])
    return {"strategies": strategies, "done": done}


def _stored(store: Store) -> dict[str, Any]:
    """What the corpus holds: its entries, BM25 statistics and document frequencies, and its
    postings (rows and merged blocks alike, by entry)."""
    c = {"c": store.corpus}
    return {
        "entries": sorted((r.id, r.content, r.tier, json.dumps(r.metadata, sort_keys=True), r.doc_len,
                           sorted(r.lexemes), r.expires_at is None) for r in store.read(
            "SELECT id, content, tier, metadata, doc_len, lexemes, expires_at FROM entries WHERE corpus = :c", c)),
        "stats": [tuple(r) for r in store.read(
            "SELECT sum(n_docs) AS n, sum(total_len) AS l FROM bm25_stats WHERE corpus = :c", c)],
        "df": sorted((r.lexeme, r.df) for r in store.read(
            "SELECT lexeme, sum(df) AS df FROM bm25_df WHERE corpus = :c GROUP BY lexeme HAVING sum(df) <> 0", c)),
        "postings": sorted(tuple(r) for r in store.read(
            "SELECT p.entry_id, p.lexeme, p.tf FROM bm25_postings p WHERE p.corpus = :c "
            "UNION ALL SELECT d.entry_id, b.lexeme, u.tf FROM bm25_blocks b "
            "CROSS JOIN LATERAL unnest(b.docnos, b.tfs) AS u(docno, tf) "
            "JOIN bm25_docs d ON d.corpus = b.corpus AND d.docno = u.docno WHERE b.corpus = :c", c)),
        "vectors": sorted(r.entry_id for r in store.read(
            "SELECT entry_id FROM embeddings WHERE corpus = :c", c)),
        "tombstones": store.read("SELECT count(*) AS n FROM bm25_tombstones WHERE corpus = :c", c)[0].n,
    }


@pytest.mark.citus
def test_changes_and_deletes_on_the_cluster_equal_the_single_servers(citus_engine: Pool,
                                                                    make_store: Callable[..., Store]) -> None:
    single = make_store()
    expected = _change(single)
    store = _cluster_store(citus_engine)
    try:
        changed = _change(store)
        assert changed["done"] == expected["done"]
        assert _stored(store) == _stored(single)
        assert _answers(changed["strategies"]) == _answers(expected["strategies"])
    finally:
        store.drop_corpus()
    done = expected["done"]
    assert done["merged"] == 7 and done["merged again"] > 0
    assert done["delete"] is True and done["delete_many"] == 1 and done["delete_where"] == 2
    # merged, then gone: a (rewritten), d, e (deleted), i (expired); k was never merged
    assert done["sweep"] == SweepReport(deleted=2, tombstones=4)
    assert done["text"].updated == 1 and done["metadata"].updated == 1
    stored = _stored(single)
    assert [e[0] for e in stored["entries"]] == ["a", "b", "c", "f", "j"]
    assert stored["vectors"] == ["a", "b", "f", "j"]  # c's text changed without a vector write: its vector went


@pytest.mark.citus
def test_a_schema_that_had_tenancy_on_is_distributed_once_it_is_off(citus_cluster: Cluster) -> None:
    """Tenancy on is refused; switched off (its filter-pair triggers stay attached), the
    schema is distributed, the triggers dropped, and filtered queries answer through
    ``@>``. Tenancy cannot be switched on again on the cluster (Citus refuses triggers on
    distributed tables)."""
    from tnsrag_db import DatabaseError, tenancy
    from tnsrag_db._db.filter_pairs import FILTER_PAIRS_TRIGGERS

    schema = "tnsrag_ten"
    pool = Pool(citus_cluster.coordinator.url, schema=schema, pool_size=1)
    try:
        migrate.upgrade(pool, schema=schema)
        tenancy.enable(pool, schema=schema)
        with pytest.raises(ConfigurationError, match="tenant isolation on"):
            distribute(pool, schema=schema)
        tenancy.disable(pool, schema=schema)
        assert tenancy.pair_triggers_attached(pool, schema=schema)
        report = distribute(pool, schema=schema)
        from tnsrag_db._db.schema import metadata

        assert set(FILTER_PAIRS_TRIGGERS) <= set(report.triggers)
        assert len(report.distributed) == len(metadata.sorted_tables)
        assert not tenancy.pair_triggers_attached(pool, schema=schema)
        store = Store(pool, corpus="acme", schema=schema)
        store.add_all(ENTRIES)
        assert not store.uses_filter_pairs()
        assert {d.metadata["entryId"] for d in KeywordRAGStrategy(BM25Index(store)).retrieve(
            "agent", RAGContext(10, -1.0, {"tenant": "acme"}))} == {"c", "f"}
        with pytest.raises(DatabaseError, match="triggers are not supported on distributed tables"):
            tenancy.enable(pool, schema=schema)
    finally:
        pool.close()
        with psycopg.connect(citus_cluster.coordinator.conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
