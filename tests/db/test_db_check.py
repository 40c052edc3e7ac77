"""``tnsrag db check``: the library's own run-time objects are not drift; real drift is named readably."""

from __future__ import annotations

from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._cli import main_group
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import HashingEmbedding


def _check(url: URL, *extra: str) -> object:
    return CliRunner().invoke(main_group, ["db", "check", "--url", url.render_as_string(hide_password=False), *extra])


def test_check_ignores_hnsw_indexes_and_names_real_drift(fresh_db_url: URL) -> None:
    res = _check(fresh_db_url)
    assert res.exit_code == 1  # type: ignore[attr-defined]
    assert "schema tnsrag is not migrated" in res.output and "None" not in res.output  # type: ignore[attr-defined]
    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)
    try:
        migrate.upgrade(pool, schema="tnsrag")
        for corpus in ("one", "two"):
            store = Store(pool, corpus=corpus)
            vectors = VectorMemoryStore(store, HashingEmbedding())
            vectors.add_all([MemoryEntry(f"e{i}", f"entry number {i} about agents") for i in range(20)])
            assert vectors.build_index() is not None
        with pool.connect() as conn:
            built = conn.execute(("SELECT count(*) FROM pg_indexes WHERE schemaname = 'tnsrag' "
                                         "AND indexname LIKE 'ix_embeddings_hnsw_%'")).scalar_one()
        assert built == 2
        assert migrate.check(pool, schema="tnsrag") == []
        res = _check(fresh_db_url)
        assert res.exit_code == 0 and "no drift" in res.output, res.output  # type: ignore[attr-defined]
        # A hand-made index on the same table is still drift, as is a dropped column.
        with pool.begin() as conn:
            conn.execute("CREATE INDEX ix_hand_made ON embeddings (entry_id)")
            conn.execute("ALTER TABLE entries DROP COLUMN doc_len")
        res = _check(fresh_db_url)
        out = res.output  # type: ignore[attr-defined]
        assert res.exit_code == 1, out  # type: ignore[attr-defined]
        assert "differs from this release's declarations" in out
        assert "column entries.doc_len is declared but missing from the database" in out
        assert "index embeddings.ix_hand_made is in the database but not declared" in out
        assert "hnsw" not in out and "Index(" not in out and "('" not in out
        res = _check(fresh_db_url, "--json")
        assert '"ok": false' in res.output  # type: ignore[attr-defined]
    finally:
        pool.close()
