"""Tenant isolation with row-level security: a tenant role reaches its own corpora and nothing else.

Real roles on the test server: the owner (the server's superuser) migrates, switches
row-level security on and grants corpora; two tenant roles each get one corpus. Tenant
A then tries every way it has of reaching tenant B's corpus: the library's API, filters,
raw statements through the library, and SQL typed by hand on its own connection.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db import (
    BM25Index,
    Edge,
    GraphStore,
    HashingEmbedding,
    HybridRAGStrategy,
    KeywordRAGStrategy,
    MemoryEntry,
    VectorMemoryStore,
    connect,
    tenancy,
)
from tnsrag_db._cli import main_group
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import ConfigurationError, DanglingReferenceError, PermissionDeniedError
from tnsrag_db._store.store import Store

PASSWORD = "tnsrag-test-tenant"
#: Tables every populated corpus has rows in.
COUNTED_TABLES = ("corpora", "entries", "embedding_spaces", "embeddings", "bm25_postings", "bm25_stats", "bm25_df",
                  "edges")
#: Every table keyed by corpus: also the merged BM25 postings' (rows once a merge ran).
TABLES = (*COUNTED_TABLES, "bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state", "entry_aliases")


def _conninfo(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass(frozen=True)
class Tenants:
    owner: URL
    a: URL
    b: URL
    role_a: str
    role_b: str
    corpus_a: str
    corpus_b: str


def _populate(url: URL, corpus: str, word: str) -> None:
    with connect(url, corpus=corpus) as store:
        entries = [MemoryEntry(f"{word}{i}", f"{word} refund policy {i} for damaged parcels",
                               metadata={"team": word}) for i in range(12)]
        VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None).add_all(entries)
        GraphStore(store).add_edges([Edge(f"{word}0", f"{word}{i}") for i in range(1, 5)])


def _make_tenants(make_database: Callable[[], URL]) -> Tenants:
    owner = make_database()
    pool = Pool(owner, schema=SCHEMA, pool_size=1)
    suffix = uuid.uuid4().hex[:8]
    role_a, role_b = f"tenant_a_{suffix}", f"tenant_b_{suffix}"
    corpus_a, corpus_b = f"acme_{suffix}", f"globex_{suffix}"
    try:
        migrate.upgrade(pool, schema=SCHEMA)
        with psycopg.connect(_conninfo(owner), autocommit=True) as conn:
            for role in (role_a, role_b):
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                                sql.Literal(PASSWORD)))
                conn.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                    sql.Identifier(str(owner.database)), sql.Identifier(role)))
        result = CliRunner().invoke(main_group, ["db", "upgrade", "--url", _conninfo(owner), "--tenancy", "rls"])
        assert result.exit_code == 0, result.output
        assert tenancy.is_enabled(pool, schema=SCHEMA)
        # The note on metadata filters appears exactly when jsonb @> is not LEAKPROOF.
        assert ("LEAKPROOF" in result.output) != tenancy.filters_use_indexes(pool)
        assert tenancy.grant(pool, schema=SCHEMA, role=role_a, corpus=corpus_a) is True
        result = CliRunner().invoke(main_group, ["db", "tenant", "grant", role_b, corpus_b, "--url", _conninfo(owner)])
        assert result.exit_code == 0, result.output
        _populate(owner, corpus_b, "globex")
        # A's corpus written by the tenant role itself: every test of the module finds both corpora
        # filled, whichever of them runs alone.
        _populate(owner.set(username=role_a, password=PASSWORD), corpus_a, "acme")
    finally:
        pool.close()
    return Tenants(owner, owner.set(username=role_a, password=PASSWORD), owner.set(username=role_b, password=PASSWORD),
                   role_a, role_b, corpus_a, corpus_b)


def _drop(t: Tenants) -> None:
    with psycopg.connect(_conninfo(t.owner.set(database="postgres")), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(t.owner.database))))
        for role in (t.role_a, t.role_b):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def tenants(make_database: Callable[[], URL]) -> Iterator[Tenants]:
    t = _make_tenants(make_database)
    yield t
    _drop(t)


def _owner_counts(t: Tenants, corpus: str) -> dict[str, int]:
    with psycopg.connect(_conninfo(t.owner)) as conn:
        return {table: conn.execute(sql.SQL("SELECT count(*) FROM {}.{} WHERE corpus = %s").format(
            sql.Identifier(SCHEMA), sql.Identifier(table)), (corpus,)).fetchone()[0]  # type: ignore[index]
            for table in COUNTED_TABLES}


def test_the_library_works_for_a_tenant_on_its_own_corpus(tenants: Tenants) -> None:
    _populate(tenants.a, tenants.corpus_a, "acme")  # written again by the tenant role: unchanged
    with connect(tenants.a, corpus=tenants.corpus_a) as store:
        assert store.count() == 12 and store.count({"team": "acme"}) == 12
        assert store.get("acme3") is not None
        assert len(list(store.iter_entries(batch_size=5))) == 12
        keyword = KeywordRAGStrategy(BM25Index(store)).retrieve("damaged refund")
        assert keyword and all(d.content.startswith("acme") for d in keyword)
        vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        assert [i for i, _ in vectors.search("refund policy 3", 3)]
        hybrid = HybridRAGStrategy(BM25Index(store), vectors).retrieve("refund policy 3")
        assert hybrid and all(d.content.startswith("acme") for d in hybrid)
        # The vector pass of a keyword-first ingest, under the policies: another space filled.
        wider = VectorMemoryStore(store, HashingEmbedding(48), index_threshold=None)
        wider.fill_vectors(list(store.iter_entries()), batch_size=5)
        assert wider.count() == 12
        assert store.delete("acme11") is True and store.count() == 11
    # The tenant sees its own grant and no other.
    pool = Pool(tenants.a, schema=SCHEMA, pool_size=1)
    try:
        assert [(g.role, g.corpus) for g in tenancy.grants(pool, schema=SCHEMA)] == [
            (tenants.role_a, tenants.corpus_a)]
    finally:
        pool.close()
    counts = _owner_counts(tenants, tenants.corpus_a)
    assert counts["entries"] == 11 and all(counts.values()), counts


def test_no_api_or_filter_reaches_another_tenants_corpus(tenants: Tenants) -> None:
    before = _owner_counts(tenants, tenants.corpus_b)
    assert all(before.values()), before
    with connect(tenants.a, corpus=tenants.corpus_b) as store:
        assert store.count() == 0 and store.count({"team": "globex"}) == 0
        assert store.get("globex1") is None and store.get_many(["globex1", "globex2"]) == {}
        assert list(store.iter_entries()) == []
        assert KeywordRAGStrategy(BM25Index(store)).retrieve("damaged refund") == []
        assert VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None).search("refund", 3) == []
        for write in (lambda: store.add(MemoryEntry("globex1", "overwritten")),
                      lambda: store.add(MemoryEntry("new", "planted"))):
            with pytest.raises(PermissionDeniedError, match="row-level security"):
                write()
        with pytest.raises(DanglingReferenceError):  # B's entries do not exist for A
            GraphStore(store).add_edges([Edge("globex1", "globex2")])
        assert store.delete("globex1") is False and store.delete_many(["globex2"]) == 0
        assert store.delete_where({"team": "globex"}) == 0 and store.clear() == 0
        store.drop_corpus()
    with connect(tenants.a, corpus=tenants.corpus_a) as own:
        # Filters of its own corpus never widen it.
        assert own.count({"team": "globex"}) == 0 and own.count({"entryId": "globex1"}) == 0
        # Raw statements through the library are held to the policy too.
        every = "SELECT DISTINCT corpus FROM entries /* tnsrag:all-corpora */"  # all the policy lets through
        assert [tuple(r) for r in own.read(every, {})] in ([(tenants.corpus_a,)], [])
        assert own.read("SELECT count(*) FROM entries WHERE corpus = :c", {"c": tenants.corpus_b})[0][0] == 0
    assert _owner_counts(tenants, tenants.corpus_b) == before


def _denied(conn: psycopg.Connection[tuple[object, ...]], statement: str, *args: object) -> str:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(statement, args or None)
    return str(caught.value)


def test_sql_typed_by_hand_on_the_tenants_connection_cannot_read_or_change_another_corpus(tenants: Tenants) -> None:
    _hand_typed_sql_stays_in_its_corpus(tenants)


def _hand_typed_sql_stays_in_its_corpus(tenants: Tenants) -> None:
    before = _owner_counts(tenants, tenants.corpus_b)
    s, b, role_b = SCHEMA, tenants.corpus_b, tenants.role_b
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        conn.execute(f"SET search_path TO {s}, public")
        for table in TABLES:
            seen = {r[0] for r in conn.execute(f"SELECT DISTINCT corpus FROM {table}").fetchall()}
            assert b not in seen and seen <= {tenants.corpus_a}, (table, seen)
            if table == "embedding_spaces":  # tenants update no space row at all (revision 0010)
                assert "permission denied" in _denied(conn, f"UPDATE {table} SET corpus = corpus WHERE corpus = %s", b)
            else:
                assert conn.execute(f"UPDATE {table} SET corpus = corpus WHERE corpus = %s", (b,)).rowcount == 0
            assert conn.execute(f"DELETE FROM {table} WHERE corpus = %s", (b,)).rowcount == 0
        assert conn.execute("UPDATE entries SET content = 'x' WHERE true AND corpus <> %s",
                            (tenants.corpus_a,)).rowcount == 0
        # Moving its own rows into B, or planting rows there, is refused.
        assert "row-level security" in _denied(conn, "UPDATE corpora SET corpus = %s", b)
        assert "row-level security" in _denied(
            conn, "INSERT INTO corpora (corpus) VALUES (%s) ON CONFLICT (corpus) DO UPDATE SET text_config = 'x'", b)
        assert "row-level security" in _denied(
            conn, "INSERT INTO bm25_postings (corpus, lexeme, entry_id, tf, doc_len) VALUES (%s, 'x', 'y', 1, 1)", b)
        # The grants: its own only, and no way to change them.
        assert conn.execute("SELECT role_name, corpus FROM tenant_grants").fetchall() == [
            (tenants.role_a, tenants.corpus_a)]
        assert "permission denied" in _denied(conn, "INSERT INTO tenant_grants (role_name, corpus) VALUES "
                                                    "(current_user, %s)", b)
        assert "permission denied" in _denied(conn, "UPDATE tenant_grants SET corpus = %s", b)
        # A session setting changes nothing; another role is out of reach; the policies stay.
        conn.execute("SELECT set_config('tnsrag.corpus', %s, false)", (b,))
        assert conn.execute("SELECT count(*) FROM entries WHERE corpus = %s", (b,)).fetchone() == (0,)
        assert "permission denied" in _denied(conn, f'SET ROLE "{role_b}"')
        conn.execute("SET row_security = off")  # allowed, but then a query the policy filters fails instead
        assert "row-level security" in _denied(conn, "SELECT count(*) FROM entries WHERE corpus = %s", b)
        conn.execute("RESET row_security")
        for ddl in ("ALTER TABLE entries DISABLE ROW LEVEL SECURITY", "DROP POLICY tenant_isolation ON entries",
                    "CREATE POLICY open ON entries USING (true)", "TRUNCATE entries",
                    "CREATE TRIGGER t BEFORE INSERT ON entries FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()"):
            assert "must be owner" in (msg := _denied(conn, ddl)) or "permission denied" in msg, (ddl, msg)
        with conn.cursor().copy("COPY entries (corpus, id) TO STDOUT") as copy:
            copied = b"".join(bytes(chunk) for chunk in copy)
        assert b.encode() not in copied
        # A leaky function sees only the rows the policy let through (the policy runs first).
        conn.execute("CREATE TEMP TABLE seen (corpus text)")
        conn.execute("CREATE FUNCTION pg_temp.leak(c text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS "
                     "$$ BEGIN INSERT INTO seen VALUES (c); RETURN true; END $$")
        conn.execute("SELECT count(*) FROM entries WHERE pg_temp.leak(corpus)").fetchone()
        assert b not in {r[0] for r in conn.execute("SELECT corpus FROM seen").fetchall()}
        # Planner statistics of the tables (most common values) are not shown either.
        assert conn.execute("SELECT count(*) FROM pg_stats WHERE schemaname = %s AND tablename = 'entries'",
                            (s,)).fetchone() == (0,)
    assert _owner_counts(tenants, tenants.corpus_b) == before


def test_the_policies_look_the_grants_up_through_one_function_no_planted_operator_can_replace(
        tenants: Tenants) -> None:
    """Revision 0008: the grant lookup is ``tnsrag_tenant_corpora()`` in a scalar subquery,
    so no statement plans a scan of ``tenant_grants`` per table reference; the function's
    qualified names (and the grants' own policy) keep a tenant's own ``=`` operator out of it."""
    s = SCHEMA
    assert _owner_counts(tenants, tenants.corpus_b)["entries"] > 0
    with psycopg.connect(_conninfo(tenants.owner), autocommit=True) as conn:
        quals = conn.execute("SELECT tablename, qual, with_check FROM pg_policies WHERE schemaname = %s "
                             "AND policyname IN ('tenant_isolation', 'tenant_filter_pairs')", (s,)).fetchall()
        assert {r[0] for r in quals} == set(TABLES) | {tenancy.PAIRS_TABLE}
        assert all("tnsrag_tenant_corpora()" in r[1] and "tenant_grants" not in r[1] and r[1] == r[2]
                   for r in quals), quals
        source = conn.execute("SELECT prosrc FROM pg_proc WHERE oid = %s::regprocedure",
                              (f"{s}.tnsrag_tenant_corpora()",)).fetchone()[0]  # type: ignore[index]
        assert "OPERATOR(pg_catalog.=)" in source and f"{s}.tenant_grants" in source
        evil = f"evil_{uuid.uuid4().hex[:8]}"
        conn.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(sql.Identifier(evil),
                                                                        sql.Identifier(tenants.role_a)))
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN (VERBOSE, COSTS OFF) SELECT e.id FROM {s}.entries e JOIN {s}.bm25_postings p "
            f"ON p.corpus = e.corpus AND p.entry_id = e.id JOIN {s}.entries e2 ON e2.corpus = e.corpus").fetchall())
        assert "tenant_grants" not in plan and plan.count("tnsrag_tenant_corpora()") >= 3, plan
        # An '=' on text that is always true, first on the search path: a lookup that resolved
        # its operator there would return every role's grants.
        conn.execute(f"CREATE FUNCTION {evil}.always(a text, b text) RETURNS boolean LANGUAGE sql "
                     "AS 'SELECT true'")
        conn.execute(f"CREATE OPERATOR {evil}.= (LEFTARG = text, RIGHTARG = text, FUNCTION = {evil}.always)")
        conn.execute(f"SET search_path TO {evil}, pg_catalog, {s}")
        for table in TABLES:
            seen = {r[0] for r in conn.execute(f"SELECT DISTINCT corpus FROM {s}.{table}").fetchall()}
            assert seen <= {tenants.corpus_a}, (table, seen)
        assert conn.execute(f"SELECT {s}.tnsrag_tenant_corpora()").fetchone() == ([tenants.corpus_a],)
    with psycopg.connect(_conninfo(tenants.owner), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(evil)))


def test_the_owner_sees_every_corpus_and_revoking_hides_one(tenants: Tenants) -> None:
    for corpus in (tenants.corpus_a, tenants.corpus_b):
        with connect(tenants.owner, corpus=corpus) as store:
            assert store.count() > 0
    pool = Pool(tenants.owner, schema=SCHEMA, pool_size=1)
    try:
        later = f"later_{uuid.uuid4().hex[:6]}"
        assert tenancy.grant(pool, schema=SCHEMA, role=tenants.role_b, corpus=later) is True
        assert tenancy.grant(pool, schema=SCHEMA, role=tenants.role_b, corpus=later) is False
        with connect(tenants.b, corpus=later) as store:
            store.add(MemoryEntry("x", "a corpus the tenant creates on its first write"))
            assert store.count() == 1
            assert tenancy.revoke(pool, schema=SCHEMA, role=tenants.role_b, corpus=later) is True
            assert store.count() == 0  # the next statement already sees the revocation
            with pytest.raises(PermissionDeniedError):
                store.add(MemoryEntry("y", "no longer allowed"))
        listed = CliRunner().invoke(main_group, ["db", "tenant", "list", "--url", _conninfo(tenants.owner), "--json"])
        assert listed.exit_code == 0, listed.output
        pairs = {(g["role"], g["corpus"]) for g in json.loads(listed.output)["grants"]}
        assert pairs == {(tenants.role_a, tenants.corpus_a), (tenants.role_b, tenants.corpus_b)}
        with pytest.raises(ConfigurationError, match="no database role"):
            tenancy.grant(pool, schema=SCHEMA, role="no_such_role_xyz", corpus="c")
        with pytest.raises(ConfigurationError, match="row-level security never applies"):
            tenancy.grant(pool, schema=SCHEMA, role=str(tenants.owner.username), corpus="c")
    finally:
        pool.close()


def test_upgrade_downgrade_and_switching_off(fresh_db_url: URL) -> None:
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=1)
    try:
        migrate.upgrade(pool, schema=SCHEMA, revision="0004")
        Store(pool, corpus="kept", schema=SCHEMA).add(MemoryEntry("k1", "kept across the tenancy revisions"))
        migrate.upgrade(pool, schema=SCHEMA)
        assert tenancy.status(pool, schema=SCHEMA) == dict.fromkeys(TABLES, False)  # inert until enabled
        tenancy.enable(pool, schema=SCHEMA)
        assert tenancy.is_enabled(pool, schema=SCHEMA)
        with pool.connect() as conn:
            policies = conn.execute(("SELECT tablename FROM pg_policies WHERE schemaname = :s "
                                            "AND policyname = 'tenant_isolation'"), {"s": SCHEMA}).scalars()
        assert sorted(policies) == sorted(TABLES) == sorted(tenancy.TENANT_TABLES)
        # A table that lost its policy (re-created, say, by a partitioning script) gets it back.
        with pool.begin() as conn:
            conn.execute(f"DROP POLICY tenant_isolation ON {SCHEMA}.edges")
        tenancy.enable(pool, schema=SCHEMA)
        with pool.connect() as conn:
            assert conn.execute("SELECT qual FROM pg_policies WHERE schemaname = :s AND tablename = 'edges'",
                                {"s": SCHEMA}).scalar_one() == conn.execute(
                "SELECT qual FROM pg_policies WHERE schemaname = :s AND tablename = 'entries'",
                {"s": SCHEMA}).scalar_one()
        assert migrate.check(pool, schema=SCHEMA) == []
        result = CliRunner().invoke(main_group, ["db", "upgrade", "--url", _conninfo(fresh_db_url), "--tenancy", "off",
                                                 "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["tenancy"] == "off"
        assert not any(tenancy.status(pool, schema=SCHEMA).values())
        tenancy.enable(pool, schema=SCHEMA)
        migrate.downgrade(pool, schema=SCHEMA, revision="0004")
        with pool.connect() as conn:
            assert conn.execute("SELECT count(*) FROM pg_policies WHERE schemaname = :s",
                                {"s": SCHEMA}).scalar_one() == 0
            assert conn.execute("SELECT to_regclass(:t)", {"t": f"{SCHEMA}.tenant_grants"}).scalar() is None
        assert not any(tenancy.status(pool, schema=SCHEMA).values())
        migrate.upgrade(pool, schema=SCHEMA)
        with connect(fresh_db_url, corpus="kept") as store:
            assert store.get("k1") is not None
    finally:
        pool.close()


def test_partitioned_tables_keep_the_policies(make_database: Callable[[], URL]) -> None:
    """`tnsrag db partition-sql` swaps in new tables: they carry row-level security over."""
    from tnsrag_db._db.partition import PARTITIONED_TABLES, partition_script

    t = _make_tenants(make_database)
    try:
        _populate(t.a, t.corpus_a, "acme")
        pool = Pool(t.owner, schema=SCHEMA, pool_size=1)
        try:
            with pool.connect() as conn:
                script = partition_script(conn, schema=SCHEMA, partitions=2)
            assert script.count("ENABLE ROW LEVEL SECURITY") == len(PARTITIONED_TABLES)
            with psycopg.connect(_conninfo(t.owner), autocommit=True) as raw:
                raw.execute(script)  # type: ignore[arg-type]  # as an operator runs it
            assert tenancy.is_enabled(pool, schema=SCHEMA)
        finally:
            pool.close()
        _hand_typed_sql_stays_in_its_corpus(t)
        with psycopg.connect(_conninfo(t.a)) as conn:  # the partitions themselves are out of reach
            assert "permission denied" in _denied(conn, f"SELECT count(*) FROM {SCHEMA}.entries_p0")
        with connect(t.a, corpus=t.corpus_a) as store:
            assert store.count() == 12 and KeywordRAGStrategy(BM25Index(store)).retrieve("damaged refund")
    finally:
        _drop(t)


def test_a_tenant_merges_its_postings_into_blocks_and_sees_no_others(tenants: Tenants) -> None:
    with connect(tenants.owner, corpus=tenants.corpus_b) as owner_store:
        owner_store.merge_postings()  # the other tenant's postings in blocks too
    with connect(tenants.a, corpus=tenants.corpus_a, merge_after_entries=3) as store:
        store.add_all([MemoryEntry(f"m{i}", f"merged blocks note {i}") for i in range(5)])  # merges after it
        store.merge_postings()
        assert store.delete("m1") is True  # a tombstone, under the tenant's policies
        hits = [i for i, _ in BM25Index(store).search("merged blocks note", 10)]
        assert sorted(hits) == ["m0", "m2", "m3", "m4"]
    with psycopg.connect(_conninfo(tenants.a)) as conn:
        for table in ("bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state"):
            seen = conn.execute(sql.SQL("SELECT count(*), count(*) FILTER (WHERE corpus = %s) FROM {}.{}").format(
                sql.Identifier(SCHEMA), sql.Identifier(table)), (tenants.corpus_a,)).fetchone()
            assert seen is not None and seen[0] == seen[1] > 0, table
    with psycopg.connect(_conninfo(tenants.owner)) as conn:
        other = conn.execute(sql.SQL("SELECT count(*) FROM {}.bm25_docs WHERE corpus = %s").format(
            sql.Identifier(SCHEMA)), (tenants.corpus_b,)).fetchone()
        assert other is not None and other[0] > 0
