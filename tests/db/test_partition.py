"""Hash-partitioning by corpus (tnsrag_db._db.partition): the script keeps data and behaviour."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db._db import migrate
from tnsrag_db._db.partition import PARTITIONED_TABLES, partition_script
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.graph import GraphRAGStrategy
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext
from tnsrag_db.embeddings import HashingEmbedding

WORDS = "harbor lighthouse keeper storm ledger beacon cliff tide lantern rope".split()


def _fill(store: Store) -> None:
    vectors = VectorMemoryStore(store, HashingEmbedding(dimension=64))
    vectors.add_all([MemoryEntry(f"{store.corpus}-{i}", " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 6)),
                                 MemoryTier.WORKING if i % 3 else MemoryTier.SEMANTIC, metadata={"n": str(i % 4)})
                     for i in range(60)])
    GraphStore(store).add_edges([Edge(f"{store.corpus}-{i}", f"{store.corpus}-{(i * 7) % 60}", "rel", 1.0 / (i + 1))
                                 for i in range(1, 60) if (i * 7) % 60 != i])


def _answers(store: Store) -> dict[str, object]:
    ctx = RAGContext(max_results=8, metadata_filters={"n": "1"})
    graph = GraphRAGStrategy("p", GraphStore(store), None, 2, GraphRAGStrategy.DEFAULT_DEPTH_DECAY,
                             GraphRAGStrategy.DEFAULT_MAX_VISITED_NODES)
    docs = {
        "keyword": KeywordRAGStrategy(BM25Index(store)).retrieve("lighthouse storm", ctx),
        "vector": VectorRAGStrategy(VectorMemoryStore(store, HashingEmbedding(dimension=64))).retrieve("beacon", ctx),
        "graph": graph.traverse({f"{store.corpus}-1": 1.0}, RAGContext(max_results=10)),
    }
    out: dict[str, object] = {name: [(d.metadata["entryId"], round(d.score, 9)) for d in found]
                              for name, found in docs.items()}
    out["count"] = store.count()
    out["edges"] = GraphStore(store).count()
    return out


def test_partitioning_keeps_every_row_and_answer(fresh_db_url: URL) -> None:
    with connect(fresh_db_url, corpus="alpha", schema=SCHEMA, auto_migrate=True) as alpha:
        beta = alpha.with_corpus("beta")
        _fill(alpha)
        _fill(beta)
        before = {name: _answers(s) for name, s in (("alpha", alpha), ("beta", beta))}
        with alpha.session.transaction() as conn:
            script = partition_script(conn, schema=SCHEMA, partitions=4)
        alpha.pool.reopen()
        with psycopg.connect(fresh_db_url.set(drivername="postgresql").render_as_string(hide_password=False),
                             autocommit=True) as raw:
            raw.execute(script)  # type: ignore[arg-type]  # the script as an operator runs it
        with alpha.session.transaction() as conn:
            kinds = dict(conn.execute((
                "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relname = ANY(:t)"), {"s": SCHEMA, "t": list(PARTITIONED_TABLES)}).all())
            parts = conn.execute((
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relkind = 'r'"),
                {"s": SCHEMA}).scalar_one()
            plan = "\n".join(conn.execute(
                "EXPLAIN SELECT * FROM entries WHERE corpus = :c AND tier = 'WORKING'", {"c": "alpha"}).scalars())
        assert kinds == {t: "p" for t in PARTITIONED_TABLES}
        assert parts == 4 * len(PARTITIONED_TABLES)
        assert plan.count("entries_p") == 1, plan  # pruned to the corpus's one partition
        assert {name: _answers(s) for name, s in (("alpha", alpha), ("beta", beta))} == before
        assert migrate.check(alpha.pool, schema=SCHEMA) == []  # partitions are not drift
        # Writes, deletes and the cascades work on the partitioned tables.
        alpha.add(MemoryEntry("alpha-new", "a new lighthouse ledger"))
        assert alpha.delete("alpha-1") and alpha.count() == 60
        assert GraphStore(alpha).count() < before["alpha"]["edges"]  # type: ignore[operator]
        beta.drop_corpus()
        assert beta.count() == 0 and GraphStore(beta).count() == 0
        assert _answers(alpha)["count"] == 60
        with alpha.session.transaction() as conn, pytest.raises(ConfigurationError, match="partitioned already"):
            partition_script(conn, schema=SCHEMA)


def test_bad_partition_counts_and_unmigrated_schemas(store: Store, fresh_db_url: URL) -> None:
    with store.session.transaction() as conn:
        for bad in (1, 0, 2000, True, "4"):
            with pytest.raises(ConfigurationError, match="partitions must be an int from 2 to 1024"):
                partition_script(conn, schema=SCHEMA, partitions=bad)  # type: ignore[arg-type]
    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=1)
    try:
        with pool.connect() as conn, pytest.raises(ConfigurationError, match="run `tnsrag db upgrade` first"):
            partition_script(conn, schema="tnsrag")
    finally:
        pool.close()


def test_cli_prints_the_script_without_changing_anything(fresh_db_url: URL) -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import main_group as main

    connect(fresh_db_url, corpus="c", schema=SCHEMA, auto_migrate=True).close()
    url = fresh_db_url.render_as_string(hide_password=False)
    result = CliRunner().invoke(main, ["db", "partition-sql", "--url", url, "--partitions", "3"])
    assert result.exit_code == 0, result.output
    assert result.output.count("PARTITION OF") == 3 * len(PARTITIONED_TABLES)
    assert "FOR VALUES WITH (MODULUS 3, REMAINDER 2)" in result.output
    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=1)
    try:
        with pool.connect() as conn:
            assert conn.execute("SELECT count(*) FROM pg_class WHERE relkind = 'p'").scalar_one() == 0
    finally:
        pool.close()
    bad = CliRunner().invoke(main, ["db", "partition-sql", "--url", url, "--partitions", "1"])
    assert bad.exit_code == 2 and "--partitions" in bad.output
