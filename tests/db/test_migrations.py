"""Migrations on a real server: up, down, idempotent, concurrent, confined to the schema, drift-free."""

from __future__ import annotations

import multiprocessing as mp

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tests.db._helpers import run_processes
from tnsrag_db._cli import main_group
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import SchemaNotReadyError
from tnsrag_db._store.store import connect

EXPECTED_TABLES = {"alembic_version", "bm25_blocks", "bm25_df", "bm25_docs", "bm25_merge_state", "bm25_postings", "bm25_stats", "bm25_tombstones", "corpora", "edges", "embedding_spaces",
                   "embeddings", "entries", "entry_aliases", "entry_filter_pairs", "tenant_grants"}


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _tables(url: URL) -> dict[str, set[str]]:
    pool = Pool(url, schema="tnsrag", pool_size=1)
    try:
        with pool.connect() as conn:
            rows = conn.execute((
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
                # the write path's per-session temp tables are not schema objects
                "AND table_schema NOT LIKE 'pg\\_temp\\_%'")).all()
    finally:
        pool.close()
    out: dict[str, set[str]] = {}
    for schema, name in rows:
        out.setdefault(schema, set()).add(name)
    return out


def test_up_down_up_and_noop(fresh_db_url: URL) -> None:
    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=1)
    try:
        assert migrate.current_revision(pool, schema="tnsrag") is None
        migrate.upgrade(pool, schema="tnsrag")
        head = migrate.head_revision()
        assert migrate.current_revision(pool, schema="tnsrag") == head
        assert _tables(fresh_db_url) == {"tnsrag": EXPECTED_TABLES}
        assert migrate.check(pool, schema="tnsrag") == []
        migrate.upgrade(pool, schema="tnsrag")  # second upgrade: a no-op
        assert migrate.current_revision(pool, schema="tnsrag") == head
        migrate.downgrade(pool, schema="tnsrag")
        assert migrate.current_revision(pool, schema="tnsrag") is None
        assert _tables(fresh_db_url) == {"tnsrag": {"alembic_version"}}
        migrate.upgrade(pool, schema="tnsrag")
        assert _tables(fresh_db_url) == {"tnsrag": EXPECTED_TABLES}
    finally:
        pool.close()


def _upgrade_worker(url: str, barrier: mp.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    pool = Pool(url, schema="tnsrag", pool_size=1)
    barrier.wait()
    try:
        migrate.upgrade(pool, schema="tnsrag")
    finally:
        pool.close()


def test_concurrent_upgrades_all_succeed(fresh_db_url: URL) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    assert run_processes(_upgrade_worker, [(_url(fresh_db_url), barrier)] * 4, 120) == [0, 0, 0, 0]
    assert _tables(fresh_db_url) == {"tnsrag": EXPECTED_TABLES}
    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=1)
    try:
        assert migrate.current_revision(pool, schema="tnsrag") == migrate.head_revision()
        assert migrate.check(pool, schema="tnsrag") == []
    finally:
        pool.close()


def test_custom_schema_and_url_never_migrates_implicitly(fresh_db_url: URL) -> None:
    with pytest.raises(SchemaNotReadyError, match="tnsrag db upgrade"):
        connect(_url(fresh_db_url), schema="agent_mem")
    assert _tables(fresh_db_url) == {}
    # libpq form (postgresql://) is accepted, and auto_migrate creates only the named schema.
    libpq = _url(fresh_db_url).replace("postgresql+psycopg://", "postgresql://")
    with connect(libpq, schema="agent_mem", auto_migrate=True) as store:
        assert store.count() == 0
    assert _tables(fresh_db_url) == {"agent_mem": EXPECTED_TABLES}


def test_offline_sql_has_lock_schema_and_tables() -> None:
    up = migrate.offline_sql(schema="tnsrag")
    assert "pg_advisory_xact_lock" in up
    assert "CREATE SCHEMA IF NOT EXISTS tnsrag" in up
    assert "CREATE TABLE tnsrag.entries" in up
    down = migrate.offline_sql(schema="tnsrag", revision_range="head:base")
    assert "DROP TABLE tnsrag.entries" in down


def test_cli_db_commands(fresh_db_url: URL) -> None:
    runner = CliRunner()
    url = _url(fresh_db_url)
    res = runner.invoke(main_group, ["db", "current", "--url", url, "--json"])
    assert res.exit_code == 0 and '"current": null' in res.output
    res = runner.invoke(main_group, ["db", "check", "--url", url])
    assert res.exit_code == 1
    res = runner.invoke(main_group, ["db", "upgrade", "--url", url])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main_group, ["db", "check", "--url", url, "--json"])
    assert res.exit_code == 0 and '"ok": true' in res.output
    res = runner.invoke(main_group, ["db", "downgrade", "--url", url])  # no terminal, no --yes: refused
    assert res.exit_code == 1 and "refusing to downgrade" in res.output and "--yes" in res.output
    assert migrate.current_revision(Pool(fresh_db_url, schema="tnsrag", pool_size=1),
                                    schema="tnsrag") == migrate.head_revision()
    res = runner.invoke(main_group, ["db", "downgrade", "--url", url, "--yes"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main_group, ["db", "sql", "--range", "base:head"])
    assert "CREATE TABLE tnsrag.corpora" in res.output


def test_alembic_cli_from_the_source_checkout(fresh_db_url: URL) -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    url = _url(fresh_db_url)
    # Read-only commands on an empty database create nothing (no schema, no extension).
    run = subprocess.run([sys.executable, "-m", "alembic", "-x", f"url={url}", "current"], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert _tables(fresh_db_url) == {}
    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=1)
    try:
        with pool.connect() as conn:
            assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'tnsrag'").scalar() == 0
            assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").scalar() == 0
    finally:
        pool.close()
    run = subprocess.run([sys.executable, "-m", "alembic", "-x", f"url={url}", "upgrade", "head"], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert _tables(fresh_db_url) == {"tnsrag": EXPECTED_TABLES}
    run = subprocess.run([sys.executable, "-m", "alembic", "-x", f"url={url}", "current"], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert migrate.head_revision() in run.stdout


def test_0002_keeps_data_and_keys_the_metadata_index_by_corpus(fresh_db_url: URL) -> None:
    from tnsrag_db._store.store import Store
    from tnsrag_db._types import MemoryEntry

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)

    def metadata_indexes() -> dict[str, str]:
        with pool.connect() as conn:
            return dict(conn.execute((
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'tnsrag' AND tablename = 'entries' "
                "AND indexdef LIKE '%metadata%'")).all())

    try:
        migrate.upgrade(pool, schema="tnsrag", revision="0001")
        for tenant in ("a", "b"):
            Store(pool, corpus=tenant).add_all(
                [MemoryEntry(f"{tenant}{i}", f"text {i}", metadata={"group": f"g{i % 3}"}) for i in range(30)])
        assert set(metadata_indexes()) == {"ix_entries_metadata"}
        migrate.upgrade(pool, schema="tnsrag")
        indexes = metadata_indexes()
        assert set(indexes) == {"ix_entries_corpus_metadata"}
        assert "gin (corpus, metadata jsonb_path_ops)" in indexes["ix_entries_corpus_metadata"]
        assert migrate.check(pool, schema="tnsrag") == []
        assert Store(pool, corpus="a").count({"group": "g1"}) == 10
        migrate.downgrade(pool, schema="tnsrag", revision="0001")
        assert set(metadata_indexes()) == {"ix_entries_metadata"}
        # (this release's reads need its own schema, with expiry: counted here by hand)
        with pool.connect() as conn:
            assert conn.execute(("SELECT count(*) FROM tnsrag.entries WHERE corpus = 'b' "
                                        "AND metadata @> '{\"group\": \"g2\"}'")).scalar_one() == 10
    finally:
        pool.close()


def test_0003_drops_the_unique_key_without_corpus_and_keeps_spaces(fresh_db_url: URL) -> None:
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db._store.store import Store
    from tnsrag_db._types import MemoryEntry
    from tnsrag_db.embeddings import HashingEmbedding

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)

    def unique_keys() -> set[str]:
        with pool.connect() as conn:
            return set(conn.execute((
                "SELECT conname FROM pg_constraint WHERE conrelid = 'tnsrag.embedding_spaces'::regclass "
                "AND contype = 'u'")).scalars())

    try:
        migrate.upgrade(pool, schema="tnsrag", revision="0002")
        vectors = VectorMemoryStore(Store(pool, corpus="a"), HashingEmbedding(dimension=16))
        vectors.add_all([MemoryEntry(f"e{i}", f"text {i}") for i in range(5)])
        assert "uq_embedding_spaces_space_id" in unique_keys()
        migrate.upgrade(pool, schema="tnsrag")
        assert unique_keys() == {"uq_embedding_spaces_corpus_provider_dimension"}
        assert migrate.check(pool, schema="tnsrag") == []
        assert vectors.count() == 5 and len(vectors.search("text 3", 3)) == 3
        migrate.downgrade(pool, schema="tnsrag", revision="0002")
        assert "uq_embedding_spaces_space_id" in unique_keys()
    finally:
        pool.close()


def test_an_engine_that_ran_the_upgrade_serves_vector_searches(fresh_db_url: URL) -> None:
    # The upgrade's connection was opened before the vector extension existed, so it
    # lacks the vector type adaptation; it must not go back to the pool.
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db._store.store import Store
    from tnsrag_db._types import MemoryEntry
    from tnsrag_db.embeddings import HashingEmbedding

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=1, max_overflow=0)
    try:
        migrate.upgrade(pool, schema="tnsrag")
        vectors = VectorMemoryStore(Store(pool, corpus="a"), HashingEmbedding(dimension=16))
        vectors.add_all([MemoryEntry(f"e{i}", f"text {i}") for i in range(3)])
        assert [entry_id for entry_id, _ in vectors.search("text 1", 1)] == ["e1"]
    finally:
        pool.close()


def test_0004_keys_edges_by_destination_and_keeps_them(fresh_db_url: URL) -> None:
    from tnsrag_db._indexes.graph import GraphStore
    from tnsrag_db._store.store import Store
    from tnsrag_db._types import MemoryEntry

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)

    def key_and_indexes() -> tuple[str, set[str]]:
        with pool.connect() as conn:
            key = conn.execute((
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = 'tnsrag.edges'::regclass AND contype = 'p'")).scalar_one()
            names = set(conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'tnsrag' AND tablename = 'edges'").scalars())
        return key, names

    try:
        migrate.upgrade(pool, schema="tnsrag", revision="0003")
        graph = GraphStore(Store(pool, corpus="a"))
        graph.store.add_all([MemoryEntry(i, f"text {i}") for i in "xyz"])
        # The edges as that schema knows them (this release's edge write needs revision 0017).
        with pool.begin() as conn:
            conn.execute(("INSERT INTO tnsrag.edges (corpus, src, dst, weight) VALUES "
                                 "('a', 'x', 'y', 1.0), ('a', 'x', 'z', 2.0)"))
        assert key_and_indexes() == ("PRIMARY KEY (corpus, src, relation, dst)",
                                     {"pk_edges", "ix_edges_corpus_src_weight", "ix_edges_corpus_dst"})
        migrate.upgrade(pool, schema="tnsrag")
        assert key_and_indexes() == ("PRIMARY KEY (corpus, dst, relation, src)",
                                     {"pk_edges", "ix_edges_corpus_src_weight", "ix_edges_corpus_bounded"})
        assert migrate.check(pool, schema="tnsrag") == []
        assert [e.dst for e in graph.neighbours("x")] == ["z", "y"]  # heaviest first
        graph.add_edge("x", "y", weight=3.0)  # the upsert still finds its conflict target
        assert [(e.dst, e.weight) for e in graph.neighbours("x")] == [("y", 3.0), ("z", 2.0)]
        migrate.downgrade(pool, schema="tnsrag", revision="0003")
        assert key_and_indexes()[0] == "PRIMARY KEY (corpus, src, relation, dst)"
        assert graph.count() == 2
    finally:
        pool.close()


def test_0017_adds_edge_validity_without_rewriting_edges(fresh_db_url: URL) -> None:
    from datetime import datetime, timezone

    from tnsrag_db._indexes.graph import GraphStore
    from tnsrag_db._store.store import Store
    from tnsrag_db._types import MemoryEntry

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)

    def layout() -> tuple[int, set[str], set[str]]:
        with pool.connect() as conn:
            node = conn.execute("SELECT pg_relation_filenode('tnsrag.edges')").scalar_one()
            columns = set(conn.execute((
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = 'tnsrag' AND table_name = 'edges'")).scalars())
            names = set(conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'tnsrag' AND tablename = 'edges'").scalars())
        return int(node), columns, names

    try:
        migrate.upgrade(pool, schema="tnsrag", revision="0016")
        graph = GraphStore(Store(pool, corpus="a"))
        graph.store.add_all([MemoryEntry(i, f"text {i}") for i in "xyz"])
        with pool.begin() as conn:
            conn.execute(("INSERT INTO tnsrag.edges (corpus, src, dst, weight) VALUES "
                                 "('a', 'x', 'y', 1.0), ('a', 'x', 'z', 2.0)"))
        node, columns, indexes = layout()
        assert not {"valid_from", "valid_until"} & columns and "ix_edges_corpus_bounded" not in indexes
        migrate.upgrade(pool, schema="tnsrag")
        after = layout()
        # Nullable columns without a default: the table keeps its file (nothing rewritten).
        assert after[0] == node and {"valid_from", "valid_until"} <= after[1]
        assert "ix_edges_corpus_bounded" in after[2]
        assert migrate.check(pool, schema="tnsrag") == []
        # The edges written before are unbounded: followed at every instant.
        assert [(e.dst, e.valid_from, e.valid_until) for e in graph.neighbours("x")] == [("z", None, None),
                                                                                         ("y", None, None)]
        graph.add_edge("x", "y", valid_until=datetime(2020, 1, 1, tzinfo=timezone.utc))
        assert [e.dst for e in graph.neighbours("x")] == ["z"]
        migrate.downgrade(pool, schema="tnsrag", revision="0016")
        node, columns, indexes = layout()
        assert not {"valid_from", "valid_until"} & columns and "ix_edges_corpus_bounded" not in indexes
        assert graph.count() == 2
    finally:
        pool.close()
