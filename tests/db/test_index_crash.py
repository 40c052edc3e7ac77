"""A process killed (SIGKILL) during its HNSW build: the index PostgreSQL finished is used."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db import HashingEmbedding, MemoryEntry, VectorMemoryStore
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.store import Store


def _build(url: str, corpus: str) -> None:
    pool = Pool(url, schema=SCHEMA)
    VectorMemoryStore(Store(pool, corpus=corpus, schema=SCHEMA), HashingEmbedding(16),
                      index_threshold=None).build_index()


def _poll(conn: psycopg.Connection, sql: str, timeout: float = 60.0) -> tuple[object, ...]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(sql).fetchone()
        if row is not None:
            return tuple(row)
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {sql}")


@pytest.mark.slow
def test_index_finished_by_the_server_after_its_builder_died_is_used(store: Store, db_url: URL) -> None:
    vectors = VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None)
    vectors.add_all([MemoryEntry(f"v{i}", f"vector text {i} about topic {i % 17}") for i in range(600)])
    conninfo = db_url.set(drivername="postgresql").render_as_string(hide_password=False)
    url = db_url.render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as watch, psycopg.connect(conninfo) as old:
        # An old snapshot: the concurrent build finishes the index, then waits for it.
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT count(*) FROM tnsrag.entries").fetchone()
        builder = mp.get_context("spawn").Process(target=_build, args=(url, store.corpus))
        builder.start()
        try:
            pid, = _poll(watch, "SELECT pid FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' "
                                "AND wait_event_type = 'Lock'")
            assert builder.pid is not None
            os.kill(builder.pid, signal.SIGKILL)  # the client dies; its server process goes on
            builder.join(30)
        finally:
            if builder.is_alive():
                builder.kill()
        old.rollback()
        _poll(watch, f"SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = {int(pid)})")
    rows = store.read("SELECT s.index_name, i.indisvalid FROM embedding_spaces s JOIN pg_class c "
                      "ON c.relname = 'ix_embeddings_hnsw_' || s.space_id::text JOIN pg_index i ON i.indexrelid = c.oid "
                      "WHERE s.corpus = :c", {"c": store.corpus})
    assert [(r.index_name, r.indisvalid) for r in rows] == [(None, True)]  # finished, never recorded
    # A new view (any process) searches through the index at once.
    fresh = VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None)
    sql, params = fresh.candidates_sql(HashingEmbedding(16)("topic 3"), 5)
    assert "hnsw.ef_search" in sql  # the index path (exact scans carry no HNSW settings)
    assert len(store.read(sql, params)) == 5
