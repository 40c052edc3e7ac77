"""Tenants choose no key that reaches another tenant: embedding-space ids, sequences, index names.

Row-level security keeps every row in its corpus; these tests cover what rows name
beyond their corpus. A space id names the space's HNSW index (a partial index on
``space_id`` alone), so a tenant able to pick one could put its vectors into another
corpus's index. Tenant roles therefore insert spaces without an id and see no sequence
(revision 0010), the revision repairs databases where ids were planted, and the owner's
index maintenance never crosses corpora. Every other column a tenant writes is planted
with the other tenant's keys to show it changes nothing there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from sqlalchemy.engine import URL

from tests.db.test_tenancy import PASSWORD, Tenants, _conninfo, _drop, _make_tenants
from tests.fix_db import SCHEMA
from tnsrag_db import BM25Index, HashingEmbedding, HybridRAGStrategy, KeywordRAGStrategy, MemoryEntry, connect, tenancy
from tnsrag_db._cli import main_group
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import ConfigurationError, DatabaseError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._indexes.vector.hnsw import drop_space_index
from tnsrag_db._indexes.vector.spaces import Space
from tnsrag_db._store.store import Store

SEQ = f"{SCHEMA}.embedding_spaces_space_id_seq"


def _denied(conn: psycopg.Connection[tuple[object, ...]], statement: str, *args: object) -> str:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(statement, args or None)
    return str(caught.value)


def _vec(values: np.ndarray) -> str:
    return "[" + ",".join(f"{float(v):.6f}" for v in values) + "]"


def _build_indexes(owner: URL, threshold: int) -> tuple[int, dict[str, object], str]:
    result = CliRunner().invoke(main_group, ["db", "build-indexes", "--url", _conninfo(owner),
                                             "--threshold", str(threshold), "--json"])
    out = result.stdout
    return result.exit_code, json.loads(out[:out.rindex("}") + 1]), result.stderr


def _spaces(owner: URL) -> list[tuple[str, int, str, int, str | None]]:
    with psycopg.connect(_conninfo(owner)) as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            f"SELECT corpus, space_id, provider, dimension, index_name FROM {SCHEMA}.embedding_spaces "
            "ORDER BY space_id, corpus").fetchall()]


def _indexes(owner: URL) -> set[str]:
    with psycopg.connect(_conninfo(owner)) as conn:
        return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s "
                                           "AND tablename = 'embeddings'", (SCHEMA,)).fetchall()}


def _answers(url: URL, corpus: str) -> dict[str, object]:
    """Everything B would see: keyword, vector and hybrid rankings with scores, counts."""
    with connect(url, corpus=corpus) as store:
        vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        keyword = KeywordRAGStrategy(BM25Index(store)).retrieve("damaged refund parcels")
        hybrid = HybridRAGStrategy(BM25Index(store), vectors).retrieve("refund policy 3")
        return {"count": store.count(), "filtered": store.count({"team": "globex"}),
                "keyword": [(d.metadata.get("entryId"), d.content, round(d.score, 9)) for d in keyword],
                "vector": [(i, round(s, 9)) for i, s in vectors.search("refund policy 3", 5)],
                "hybrid": [(d.metadata.get("entryId"), d.content, round(d.score, 9)) for d in hybrid]}


@pytest.fixture(scope="module")
def tenants(make_database: Callable[[], URL]) -> Iterator[Tenants]:
    t = _make_tenants(make_database)
    yield t
    _drop(t)


def test_a_tenant_creates_spaces_but_chooses_no_id_and_sees_no_sequence(tenants: Tenants) -> None:
    a = tenants.corpus_a
    [(b_space,)] = {(s[1],) for s in _spaces(tenants.owner) if s[0] == tenants.corpus_b}
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}, public")
        conn.execute("INSERT INTO corpora (corpus) VALUES (%s) ON CONFLICT DO NOTHING", (a,))
        for statement, args in (
                ("INSERT INTO embedding_spaces (corpus, space_id, provider, dimension) VALUES (%s, %s, 'p', 3)",
                 (a, b_space)),
                ("INSERT INTO embedding_spaces (corpus, space_id, provider, dimension) VALUES (%s, %s, 'p', 3)",
                 (a, 10**9)),
                ("UPDATE embedding_spaces SET space_id = %s", (b_space,)),
                ("UPDATE embedding_spaces SET index_name = %s", (f"ix_embeddings_hnsw_{b_space}",)),
                (f"SELECT last_value FROM {SEQ}", ()),
                (f"SELECT nextval('{SEQ}')", ()),
                (f"SELECT setval('{SEQ}', 1)", ()),
                (f"SELECT currval('{SEQ}')", ()),
                ("INSERT INTO entry_filter_pairs (corpus, key, value, entry_id) VALUES (%s, 'team', 'x', 'y')",
                 (a,))):
            assert "permission denied" in _denied(conn, statement, *args), statement
        # What the library does: a space without an id, drawn from the sequence.
        (new_id,) = conn.execute("INSERT INTO embedding_spaces (corpus, provider, dimension) VALUES (%s, 'own', 3) "
                                 "RETURNING space_id", (a,)).fetchone()  # type: ignore[misc]
        assert new_id > b_space
        conn.execute("DELETE FROM embedding_spaces WHERE corpus = %s AND space_id = %s", (a, new_id))
    # The library's own writes as the tenant still create and fill spaces.
    with connect(tenants.a, corpus=a) as store:
        vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        vectors.add_all([MemoryEntry(f"acme{i}", f"acme refund policy {i}") for i in range(5)])
        assert len(vectors.search("refund policy 3", 3)) == 3
    ids = [s[1] for s in _spaces(tenants.owner)]
    assert len(ids) == len(set(ids))


def test_keys_a_tenant_plants_in_its_own_corpus_change_nothing_for_another(tenants: Tenants) -> None:
    """Entries, postings, statistics, document frequencies, edges and the corpus row, written by
    hand in tenant A's corpus with B's ids, lexemes, shards and configuration: B's answers, scores,
    writes and the owner's maintenance are unchanged."""
    a, b = tenants.corpus_a, tenants.corpus_b
    before = _answers(tenants.b, b)
    assert before["keyword"] and before["vector"] and before["hybrid"]
    with psycopg.connect(_conninfo(tenants.owner)) as conn:
        lexemes = [r[0] for r in conn.execute(f"SELECT DISTINCT lexeme FROM {SCHEMA}.bm25_postings WHERE corpus = %s",
                                              (b,)).fetchall()]
        b_ids = [r[0] for r in conn.execute(f"SELECT id FROM {SCHEMA}.entries WHERE corpus = %s", (b,)).fetchall()]
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}, public")
        conn.execute("INSERT INTO corpora (corpus) VALUES (%s) ON CONFLICT DO NOTHING", (a,))
        conn.execute("UPDATE corpora SET text_config = 'simple' WHERE corpus = %s", (a,))
        for entry_id in b_ids:
            conn.execute("INSERT INTO entries (corpus, id, content, tier, content_hash, doc_len, lexemes, metadata) "
                         "VALUES (%s, %s, 'planted', 'SEMANTIC', '\\x00', 1000000, %s, '{\"team\": \"globex\"}') "
                         "ON CONFLICT (corpus, id) DO UPDATE SET doc_len = 1000000",
                         (a, entry_id, lexemes))
        for lexeme in lexemes:
            for entry_id in b_ids:
                conn.execute("INSERT INTO bm25_postings (corpus, lexeme, entry_id, tf, doc_len) "
                             "VALUES (%s, %s, %s, 1000, 1) ON CONFLICT DO NOTHING", (a, lexeme, entry_id))
            for shard in range(-3, 40):
                conn.execute("INSERT INTO bm25_df (corpus, lexeme, shard, df) VALUES (%s, %s, %s, -1000000) "
                             "ON CONFLICT DO NOTHING", (a, lexeme, shard))
        for shard in range(-3, 40):
            conn.execute("INSERT INTO bm25_stats (corpus, shard, n_docs, total_len) VALUES (%s, %s, -5, -5) "
                         "ON CONFLICT DO NOTHING", (a, shard))
        conn.execute("INSERT INTO edges (corpus, src, dst, relation, weight) VALUES (%s, %s, %s, 'related', 1e300) "
                     "ON CONFLICT DO NOTHING", (a, b_ids[0], b_ids[1]))
    assert _answers(tenants.b, b) == before
    # B keeps writing, and the owner's sweep and orphan clean-up leave B's index alone.
    with connect(tenants.b, corpus=b) as store:
        VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None).add_all(
            [MemoryEntry("globex-new", "globex refund policy for planted neighbours", metadata={"team": "globex"})])
        assert store.get("globex-new") is not None
        assert store.drop_orphan_hnsw_indexes() == []
    code, report, _ = _build_indexes(tenants.owner, threshold=5)
    assert code == 0 and report["failed"] == [], report
    after = _answers(tenants.b, b)
    assert after["count"] == before["count"] + 1  # type: ignore[operator]
    with connect(tenants.a, corpus=a) as store:
        store.drop_corpus()


def _old_tenant_privileges(owner: URL, role: str) -> None:
    """The grants tenant roles had before revision 0010."""
    with psycopg.connect(_conninfo(owner), autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT INSERT, UPDATE ON {}.embedding_spaces TO {}").format(
            sql.Identifier(SCHEMA), sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
            sql.Identifier(SCHEMA), sql.Identifier(role)))


def _may_choose_ids(owner: URL, role: str) -> bool:
    with psycopg.connect(_conninfo(owner)) as conn:
        row = conn.execute("SELECT has_column_privilege(%s, %s, 'space_id', 'INSERT') "
                           "OR has_table_privilege(%s, %s, 'UPDATE') OR has_sequence_privilege(%s, %s, 'SELECT')",
                           (role, f"{SCHEMA}.embedding_spaces", role, f"{SCHEMA}.embedding_spaces", role, SEQ)
                           ).fetchone()
    return bool(row and row[0])


def test_revision_0010_repairs_planted_space_ids_and_the_sweep_isolates_each_space(
        make_database: Callable[[], URL]) -> None:
    owner = make_database()
    pool = Pool(owner, schema=SCHEMA, pool_size=1)
    suffix = uuid.uuid4().hex[:8]
    role_a, a, b, c = f"planter_{suffix}", f"alpha_{suffix}", f"beta_{suffix}", f"gamma_{suffix}"
    try:
        migrate.upgrade(pool, schema=SCHEMA)
        with psycopg.connect(_conninfo(owner), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role_a),
                                                                            sql.Literal(PASSWORD)))
        tenancy.enable(pool, schema=SCHEMA)
        tenancy.grant(pool, schema=SCHEMA, role=role_a, corpus=a)
        assert not _may_choose_ids(owner, role_a)
        rng = np.random.default_rng(7)
        for corpus in (b, c):  # written by the owner: two corpora with due indexes
            with connect(owner, corpus=corpus) as store:
                VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None).add_all(
                    [MemoryEntry(f"{corpus}-{i}", f"{corpus} refund policy {i}") for i in range(30)])
        # A database as it was before revision 0010 (whose downgrade gives the old privileges back).
        migrate.downgrade(pool, schema=SCHEMA, revision="0009")
        assert _may_choose_ids(owner, role_a)
        [(b_id, b_dim)] = [(s[1], s[3]) for s in _spaces(owner) if s[0] == b]
        # Tenant A plants a space under B's id with 16-d vectors, and a 3-d trap at the next id.
        tenant = owner.set(username=role_a, password=PASSWORD)
        with psycopg.connect(_conninfo(tenant), autocommit=True) as conn:
            conn.execute(f"SET search_path TO {SCHEMA}, public")
            conn.execute("INSERT INTO corpora (corpus) VALUES (%s)", (a,))
            (last,) = conn.execute(f"SELECT last_value FROM {SEQ}").fetchone()  # type: ignore[misc]
            for space_id, dim in ((b_id, b_dim), (last + 1, 3)):
                conn.execute("INSERT INTO embedding_spaces (corpus, space_id, provider, dimension) "
                             "VALUES (%s, %s, %s, %s)", (a, space_id, f"planted-{dim}", dim))
                for i in range(25):
                    entry_id = f"p{dim}-{i}"
                    conn.execute("INSERT INTO entries (corpus, id, content, tier, content_hash) "
                                 "VALUES (%s, %s, 'planted', 'SEMANTIC', '\\x00') ON CONFLICT DO NOTHING",
                                 (a, entry_id))
                    conn.execute("INSERT INTO embeddings (corpus, space_id, entry_id, embedding) "
                                 "VALUES (%s, %s, %s, %s::vector)", (a, space_id, entry_id, _vec(rng.normal(size=dim))))
        # The owner's sweep: both spaces sharing B's id fail, named with corpus and cause; the rest is built.
        code, report, err = _build_indexes(owner, threshold=20)
        failed = sorted((f["corpus"], f["space_id"], f["error"]) for f in report["failed"])  # type: ignore[union-attr]
        assert failed == sorted([(a, b_id, "ConfigurationError"), (b, b_id, "ConfigurationError")]), report
        assert code == 2
        assert f"corpus {b!r}" in err and "shared by corpora" in err
        assert sorted(r["corpus"] for r in report["built"]) == sorted([a, c])  # type: ignore[union-attr]
        # The owner's drop of A's colliding space's index cannot reach B's.
        with pytest.raises(ConfigurationError, match="shared by corpora"):
            drop_space_index(Store(pool, corpus=a, schema=SCHEMA), Space(b_id, 16, None))
        assert drop_space_index(Store(pool, corpus=c, schema=SCHEMA), Space(b_id, 16, None)) is False
        assert f"ix_embeddings_hnsw_{b_id}" not in _indexes(owner)  # never built: it was shared

        migrate.upgrade(pool, schema=SCHEMA)
        assert not _may_choose_ids(owner, role_a)
        spaces = _spaces(owner)
        ids = [s[1] for s in spaces]
        assert len(ids) == len(set(ids)), spaces
        assert [s[1] for s in spaces if s[0] == b] == [b_id]  # the oldest keeps its id
        with psycopg.connect(_conninfo(owner)) as conn:
            by_space = dict(conn.execute(f"SELECT space_id, array_agg(DISTINCT corpus) FROM {SCHEMA}.embeddings "
                                         "GROUP BY space_id").fetchall())
            assert all(len(v) == 1 for v in by_space.values()), by_space
            assert by_space[b_id] == [b]
            moved = [s for s in spaces if s[0] == a and s[3] == 16]
            assert len(moved) == 1 and moved[0][1] != b_id
            assert conn.execute(f"SELECT count(*) FROM {SCHEMA}.embeddings WHERE corpus = %s AND space_id = %s",
                                (a, moved[0][1])).fetchone() == (25,)
            (nxt,) = conn.execute(f"SELECT last_value FROM {SEQ}").fetchone()  # type: ignore[misc]
            assert nxt >= max(ids)
        # B's next space takes a fresh id, past the trap: its vectors are written and found.
        with connect(owner, corpus=b) as store:
            wider = VectorMemoryStore(store, HashingEmbedding(24), index_threshold=None)
            wider.add_all([MemoryEntry(f"{b}-{i}", f"{b} refund policy {i}") for i in range(30)])
            assert [i for i, _ in wider.search(f"{b} refund policy 3", 3)][0] == f"{b}-3"
        code, report, err = _build_indexes(owner, threshold=20)
        assert code == 0 and report["failed"] == [], (report, err)
        assert sorted(r["corpus"] for r in report["built"]) == sorted([a, b, b])  # type: ignore[union-attr]
        with connect(owner, corpus=b) as store:
            found = VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None).search(f"{b} refund", 10)
            assert len(found) == 10 and all(i.startswith(b) for i, _ in found)
        with pool.connect() as conn:
            grants = set(conn.execute((
                "SELECT privilege_type FROM information_schema.role_table_grants WHERE grantee = :r "
                "AND table_schema = :s AND table_name = 'embedding_spaces'"), {"r": role_a, "s": SCHEMA}).scalars())
        assert grants == {"SELECT", "DELETE"}
    finally:
        pool.close()
        with psycopg.connect(_conninfo(owner.set(database="postgres")), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(owner.database))))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role_a)))


def test_a_tenant_holding_the_hnsw_build_lock_is_named_instead_of_waited_for(tenants: Tenants) -> None:
    """Advisory locks carry no privilege: a tenant can take the key the owner's builds take
    turns under. The owner's build and drop name the holder at once instead of waiting forever."""
    due = f"due_{uuid.uuid4().hex[:8]}"
    with connect(tenants.owner, corpus=due) as store:
        VectorMemoryStore(store, HashingEmbedding(8), index_threshold=None).add_all(
            [MemoryEntry(f"d{i}", f"due entry {i}") for i in range(3)])
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"tnsrag_db.hnsw_build:{SCHEMA}",))
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
        pool = Pool(tenants.owner, schema=SCHEMA, pool_size=1)
        try:
            store = Store(pool, corpus=tenants.corpus_b, schema=SCHEMA)
            with pytest.raises(DatabaseError, match=rf"held by pid {pid} \(role '{tenants.role_a}'\)"):
                VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None).build_index()
        finally:
            pool.close()
        result = CliRunner().invoke(main_group, ["db", "build-indexes", "--url", _conninfo(tenants.owner),
                                                 "--threshold", "1", "--json"])
        report = json.loads(result.stdout[:result.stdout.rindex("}") + 1])
        assert result.exit_code == len(report["failed"]) >= 1
        assert all(f"held by pid {pid}" in f["message"] for f in report["failed"])
    code, report, _ = _build_indexes(tenants.owner, threshold=1)  # once it lets go, the sweep runs
    assert code == 0 and report["failed"] == [] and due in {r["corpus"] for r in report["built"]}, report
