"""Metadata filters under tenant isolation: the filter pairs (migration 0007, used only with tenancy on).

A tenant's filtered retrieval finds its entries through ``entry_filter_pairs`` with
text equality, an index condition below the row-level security policy, instead of
filtering its whole corpus after the policy (``jsonb @>`` is not LEAKPROOF). The pairs
follow every write, and they open no way into another tenant's corpus: a tenant reads
only its own, writes none, and cannot reach the triggers that write them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from tests.db._helpers import read_statements
from tests.db._watch import watch
from tests.db.test_tenancy import Tenants, _conninfo, _denied, _drop, _make_tenants, _populate
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
    tenancy,
)
from tnsrag_db._db import migrate
from tnsrag_db._db.filter_pairs import FILTER_PAIRS_TRIGGERS, FilterPairs
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.filters import filter_sql
from tnsrag_db._store.store import Store

PAIRS_OF_ENTRIES = ("SELECT e.corpus, m.key, m.value #>> '{}', e.id FROM {s}.entries e, jsonb_each(e.metadata) m "
                    "WHERE jsonb_typeof(m.value) = 'string' ORDER BY 1, 2, 3, 4")


@pytest.fixture(scope="module")
def tenants(make_database: Callable[[], URL]) -> Iterator[Tenants]:
    t = _make_tenants(make_database)
    with connect(t.a, corpus=t.corpus_a) as store:
        VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None).add_all([
            MemoryEntry(f"x{i}", f"parcel refund policy {i} for damaged goods",
                        metadata={"team": "acme", "shelf": f"s{i % 4}"}) for i in range(40)])
    _populate(t.a, t.corpus_a, "acme")
    yield t
    _drop(t)


def _pairs(url: URL) -> list[tuple[str, ...]]:
    with psycopg.connect(_conninfo(url)) as conn:
        return [tuple(r) for r in conn.execute(f"SELECT corpus, key, value, entry_id FROM {SCHEMA}.entry_filter_pairs "
                                               "ORDER BY 1, 2, 3, 4").fetchall()]


def _recomputed(url: URL) -> list[tuple[str, ...]]:
    with psycopg.connect(_conninfo(url)) as conn:
        return [tuple(r) for r in conn.execute(PAIRS_OF_ENTRIES.replace("{s}", SCHEMA)).fetchall()]


def test_a_tenants_filtered_retrieval_is_right_and_looks_its_pairs_up_by_index(tenants: Tenants) -> None:
    pool = Pool(tenants.owner, schema=SCHEMA, pool_size=1)
    try:
        assert tenancy.filters_use_indexes(pool, schema=SCHEMA)
    finally:
        pool.close()
    shelf = RAGContext(metadata_filters={"shelf": "s1"})
    with connect(tenants.a, corpus=tenants.corpus_a) as store:
        keyword, vectors = BM25Index(store), VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        expected = {f"x{i}" for i in range(40) if i % 4 == 1}
        assert {i for i, _ in vectors.search("refund policy", 50, filters={"shelf": "s1"})} == expected
        assert {i for i, _ in keyword.search("refund policy", 50, filters={"shelf": "s1"})} == expected
        for strategy in (KeywordRAGStrategy(keyword), VectorRAGStrategy(vectors), HybridRAGStrategy(keyword, vectors)):
            found = strategy.retrieve("damaged refund policy", shelf)
            assert found and all(d.metadata["shelf"] == "s1" for d in found), strategy
        # Two keys: both must hold; another team's value matches nothing.
        both = {"shelf": "s2", "team": "acme"}
        assert {i for i, _ in vectors.search("refund", 50, filters=both)} == {f"x{i}" for i in range(40) if i % 4 == 2}
        assert vectors.search("refund", 5, filters={"shelf": "s2", "team": "globex"}) == []
        assert store.uses_filter_pairs() is True  # tenancy is on: the pairs formulation
        statement, params = vectors.candidates_sql(HashingEmbedding(32)("refund"), 5, filters={"shelf": "s1"})
        kstatement, kparams = keyword.candidates_sql("refund policy", 5, filters={"shelf": "s1"})
        with store.session.transaction() as conn:
            # What is checked is that the policy leaves "id = ANY" usable as an index
            # condition: on these few rows, once analysed (autovacuum may at any time), a
            # sequential scan is the cheaper plan, so sequential scans are off here.
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(conn.execute("EXPLAIN (COSTS OFF) " + statement, params).scalars())
            kplan = "\n".join(conn.execute("EXPLAIN (COSTS OFF) " + kstatement, kparams).scalars())
    assert "entry_filter_pairs" in kplan and "@>" not in kplan, kplan
    # Under the policy the entries are fetched by primary key with the ids the pairs gave
    # (texteq is LEAKPROOF, so "id = ANY" stays an index condition), not read corpus-wide.
    assert "entry_filter_pairs" in plan
    assert any("Index Cond" in line and "id = ANY" in line for line in plan.splitlines()), plan


def test_the_pairs_follow_every_write(tenants: Tenants) -> None:
    with connect(tenants.a, corpus=tenants.corpus_a) as store:
        vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        vectors.add_all([MemoryEntry("m1", "moved between shelves", metadata={"shelf": "s1", "n": "1"}),
                         MemoryEntry("m2", "no metadata at all")])
        assert store.count({"shelf": "s1"}) == 11
        vectors.add_all([MemoryEntry("m1", "moved between shelves", metadata={"shelf": "s9"})])  # metadata changed
        assert [i for i, _ in vectors.search("moved shelves", 5, filters={"shelf": "s9"})] == ["m1"]
        assert "m1" not in {i for i, _ in vectors.search("moved shelves", 50, filters={"shelf": "s1"})}
        assert vectors.search("moved shelves", 5, filters={"n": "1"}) == []
        vectors.add_all([MemoryEntry("m1", "new text, same metadata", metadata={"shelf": "s9"})])
        assert [i for i, _ in BM25Index(store).search("text", 5, filters={"shelf": "s9"})] == ["m1"]
        # One write of many rows: metadata changed, kept, dropped, gained, and new entries.
        vectors.add_all([MemoryEntry(f"b{i}", f"batch entry {i}", metadata={"shelf": f"s{i % 3}", "n": str(i)})
                         for i in range(30)])
        vectors.add_all([MemoryEntry(f"b{i}", f"batch entry {i} again",
                                     metadata=({} if i % 5 == 0 else {"shelf": f"s{i % 3}", "n": str(i)} if i % 2
                                               else {"shelf": "s7"})) for i in range(40)])
        assert _pairs(tenants.owner) == _recomputed(tenants.owner)
        assert sorted(i for i, _ in BM25Index(store).search("batch", 50, filters={"shelf": "s7"})) == sorted(
            f"b{i}" for i in range(40) if i % 5 and not i % 2)
        assert store.delete("m1") is True
        assert vectors.search("moved shelves", 5, filters={"shelf": "s9"}) == []
    assert _pairs(tenants.owner) == _recomputed(tenants.owner)
    assert not any(p[3] == "m1" for p in _pairs(tenants.owner))


def test_a_tenant_can_neither_read_nor_write_another_tenants_pairs(tenants: Tenants) -> None:
    s, a, b = SCHEMA, tenants.corpus_a, tenants.corpus_b
    before = _pairs(tenants.owner)
    assert {p[0] for p in before} == {a, b}
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        conn.execute(f"SET search_path TO {s}, public")
        assert {r[0] for r in conn.execute("SELECT DISTINCT corpus FROM entry_filter_pairs").fetchall()} == {a}
        assert conn.execute("SELECT count(*) FROM entry_filter_pairs WHERE corpus = %s", (b,)).fetchone() == (0,)
        # No writes at all, not even to its own corpus: the triggers keep the pairs.
        for statement in ("INSERT INTO entry_filter_pairs VALUES (%s, 'team', 'acme', 'globex1')",
                          "UPDATE entry_filter_pairs SET corpus = %s", "DELETE FROM entry_filter_pairs WHERE corpus = %s",
                          "TRUNCATE entry_filter_pairs"):
            args = () if statement.startswith("TRUNCATE") else (a,)
            assert "permission denied" in _denied(conn, statement, *args), statement
        # The trigger function is not callable; the triggers cannot be switched off or dropped.
        msg = _denied(conn, "SELECT tnsrag_filter_pairs_sync()")
        assert "permission denied" in msg or "trigger" in msg, msg
        for ddl in ("ALTER TABLE entries DISABLE TRIGGER tnsrag_filter_pairs_insert",
                    "DROP TRIGGER tnsrag_filter_pairs_update ON entries",
                    "ALTER TABLE entry_filter_pairs DISABLE ROW LEVEL SECURITY",
                    "DROP POLICY tenant_filter_pairs ON entry_filter_pairs",
                    "CREATE OR REPLACE FUNCTION tnsrag_filter_pairs_sync() RETURNS trigger LANGUAGE plpgsql "
                    "AS $$ BEGIN RETURN NULL; END $$"):
            assert "must be owner" in (msg := _denied(conn, ddl)) or "permission denied" in msg, (ddl, msg)
        # Its writes reach only its own corpus's pairs (the trigger copies rows that passed the policy).
        assert "row-level security" in _denied(
            conn, "INSERT INTO entries (corpus, id, content, tier, content_hash) VALUES (%s, 'p', 'x', 'WORKING', '')", b)
        conn.execute("UPDATE entries SET metadata = metadata || '{\"team\": \"globex\"}' WHERE id = 'acme1'")
        # A leaky function applied to the pairs sees only the rows the policy let through.
        conn.execute("CREATE TEMP TABLE seen (corpus text)")
        conn.execute("CREATE FUNCTION pg_temp.leak(c text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS "
                     "$$ BEGIN INSERT INTO seen VALUES (c); RETURN true; END $$")
        conn.execute("SELECT count(*) FROM entry_filter_pairs WHERE pg_temp.leak(corpus) AND key = 'team'").fetchone()
        assert b not in {r[0] for r in conn.execute("SELECT corpus FROM seen").fetchall()}
    after = _pairs(tenants.owner)
    assert [p for p in after if p[0] == b] == [p for p in before if p[0] == b]
    assert (a, "team", "globex", "acme1") in after and after == _recomputed(tenants.owner)
    with connect(tenants.a, corpus=b) as store:  # B's corpus through the library: nothing, filtered or not
        vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        assert vectors.search("refund", 5, filters={"team": "globex"}) == []
        assert BM25Index(store).search("refund", 5, filters={"team": "globex"}) == []


def _triggers(pool: sa.engine.Pool, prefix: str = "tnsrag_filter_pairs") -> set[str]:
    """The triggers on ``entries`` whose names start with ``prefix`` (default: the filter
    pairs'; the BM25 retirement triggers of revision 0011 are there with or without tenancy)."""
    with pool.connect() as conn:
        return set(conn.execute((
            "SELECT tg.tgname FROM pg_trigger tg WHERE tg.tgrelid = CAST(:t AS regclass) AND NOT tg.tgisinternal "
            "AND starts_with(tg.tgname, :prefix)"), {"t": f"{SCHEMA}.entries", "prefix": prefix}).scalars())


def test_the_pairs_switch_with_tenancy_and_go_with_a_downgrade(fresh_db_url: URL) -> None:
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=1)

    def pairs_rls() -> bool:
        with pool.connect() as conn:
            return bool(conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = CAST(:t AS regclass)",
                                     {"t": f"{SCHEMA}.entry_filter_pairs"}).scalar_one())

    try:
        migrate.upgrade(pool, schema=SCHEMA, revision="0006")
        Store(pool, corpus="kept", schema=SCHEMA).add_all([MemoryEntry("k1", "written before the pairs", metadata={"shelf": "s1", "n": "2"})])
        tenancy.enable(pool, schema=SCHEMA)
        assert not tenancy.filters_use_indexes(pool, schema=SCHEMA) or _leakproof(pool)
        # The revision only creates the table (RLS on it follows the other tables'): no trigger, no backfill.
        migrate.upgrade(pool, schema=SCHEMA)
        assert pairs_rls() and _triggers(pool) == set() and _pairs(fresh_db_url) == []
        assert tenancy.filters_use_indexes(pool, schema=SCHEMA) == _leakproof(pool)
        assert Store(pool, corpus="kept", schema=SCHEMA).uses_filter_pairs() is False
        tenancy.enable(pool, schema=SCHEMA)  # attaches the triggers and fills the pairs
        assert _triggers(pool) == set(FILTER_PAIRS_TRIGGERS) and tenancy.filters_use_indexes(pool, schema=SCHEMA)
        assert _pairs(fresh_db_url) == [("kept", "n", "2", "k1"), ("kept", "shelf", "s1", "k1")]
        assert Store(pool, corpus="kept", schema=SCHEMA).uses_filter_pairs() is True
        tenancy.disable(pool, schema=SCHEMA)  # the triggers stay and keep the pairs
        assert not pairs_rls() and _triggers(pool) == set(FILTER_PAIRS_TRIGGERS)
        assert Store(pool, corpus="kept", schema=SCHEMA).uses_filter_pairs() is False  # new stores: @>
        Store(pool, corpus="kept", schema=SCHEMA).add_all([MemoryEntry("k3", "written with tenancy off", metadata={"shelf": "s1"})])
        assert ("kept", "shelf", "s1", "k3") in _pairs(fresh_db_url)
        assert _pairs(fresh_db_url) == _recomputed(fresh_db_url)
        tenancy.enable(pool, schema=SCHEMA)
        assert pairs_rls() and _pairs(fresh_db_url) == _recomputed(fresh_db_url)
        Store(pool, corpus="kept", schema=SCHEMA).delete("k3")  # the delete trigger (no foreign key)
        assert _pairs(fresh_db_url) == _recomputed(fresh_db_url) and not any(p[3] == "k3" for p in _pairs(fresh_db_url))
        with pool.begin() as conn:  # lost triggers (a table swapped in by hand): reported, then restored
            conn.execute(f"DROP TRIGGER tnsrag_filter_pairs_update ON {SCHEMA}.entries")
            conn.execute(f"ALTER TABLE {SCHEMA}.entries DISABLE TRIGGER tnsrag_filter_pairs_insert")
        assert tenancy.filters_use_indexes(pool, schema=SCHEMA) == _leakproof(pool)
        assert Store(pool, corpus="kept", schema=SCHEMA).uses_filter_pairs() is False  # back to @>: still right
        Store(pool, corpus="kept", schema=SCHEMA).add_all([
            MemoryEntry("k1", "written before the pairs", metadata={"shelf": "s3"}),
            MemoryEntry("k2", "written while the triggers were off", metadata={"shelf": "s3"})])
        assert _pairs(fresh_db_url) != _recomputed(fresh_db_url)
        tenancy.enable(pool, schema=SCHEMA)
        assert tenancy.filters_use_indexes(pool, schema=SCHEMA)
        assert _pairs(fresh_db_url) == _recomputed(fresh_db_url) == [("kept", "shelf", "s3", "k1"),
                                                                      ("kept", "shelf", "s3", "k2")]
        migrate.downgrade(pool, schema=SCHEMA, revision="0006")
        with pool.connect() as conn:
            assert conn.execute("SELECT to_regclass(:t)",
                                {"t": f"{SCHEMA}.entry_filter_pairs"}).scalar() is None
            assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'tnsrag_filter_pairs%'"
                                ).scalar_one() == 0
            assert conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'tnsrag_filter_pairs_sync'"
                                ).scalar_one() == 0
    finally:
        pool.close()


def test_without_tenancy_no_trigger_and_filtered_statements_use_metadata_containment(store: Store) -> None:
    # The statements every deployment without tenancy sends: exactly those of metadata @>
    # (the predicate of filter_sql without the pairs, in the base and in the HNSW row check).
    assert _triggers(store.pool) == set() and store.uses_filter_pairs() is False
    with store.pool.connect() as conn:  # no foreign key either: writes never touch the pairs
        assert conn.execute(("SELECT count(*) FROM pg_constraint WHERE conrelid = CAST(:t AS regclass) "
                                    "AND contype = 'f'"), {"t": f"{SCHEMA}.entry_filter_pairs"}).scalar_one() == 0
    vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
    vectors.add_all([MemoryEntry("o1", "refund policy", metadata={"shelf": "s1"}), MemoryEntry("o2", "refund policy")])
    assert [i for i, _ in vectors.search("refund", 5, filters={"shelf": "s1"})] == ["o1"]
    assert [i for i, _ in BM25Index(store).search("refund", 5, filters={"shelf": "s1"})] == ["o1"]
    with store.pool.connect() as conn:
        assert conn.execute(f"SELECT count(*) FROM {SCHEMA}.entry_filter_pairs").scalar_one() == 0
    filters = {"shelf": "s1", "tier": "WORKING"}
    vsql, _ = vectors.candidates_sql(HashingEmbedding(32)("refund"), 5, filters=filters)
    ksql, _ = BM25Index(store).candidates_sql("refund", 5, filters=filters)
    for sql, p in ((vsql, "v"), (ksql, "k")):
        predicate, _ = filter_sql(filters, alias=f"{p}_e", prefix=f"{p}_f")
        assert "entry_filter_pairs" not in sql and predicate in sql, sql
        assert predicate == f"{p}_e.tier = :{p}_f_tier AND {p}_e.metadata @> CAST(:{p}_f_meta AS jsonb)"
    # The same statements as a store told outright that the pairs are off (no catalog query).
    told = Store(store.pool, corpus=store.corpus, schema=SCHEMA, _pairs=FilterPairs(SCHEMA, False))
    assert VectorMemoryStore(told, HashingEmbedding(32), index_threshold=None).candidates_sql(
        HashingEmbedding(32)("refund"), 5, filters=filters)[0] == vsql


def test_a_store_opened_before_tenancy_keeps_containment_with_the_same_results(fresh_db_url: URL) -> None:
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=2)
    try:
        migrate.upgrade(pool, schema=SCHEMA)
        early = Store(pool, corpus="c", schema=SCHEMA)
        keyword = BM25Index(early)
        early.add_all([MemoryEntry(f"e{i}", f"refund note {i}", metadata={"shelf": f"s{i % 2}"}) for i in range(6)])
        before = keyword.search("refund", 10, filters={"shelf": "s1"})
        tenancy.enable(pool, schema=SCHEMA)
        assert "entry_filter_pairs" not in keyword.candidates_sql("refund", 5, filters={"shelf": "s1"})[0]
        assert keyword.search("refund", 10, filters={"shelf": "s1"}) == before
        late = BM25Index(Store(pool, corpus="c", schema=SCHEMA))
        assert "entry_filter_pairs" in late.candidates_sql("refund", 5, filters={"shelf": "s1"})[0]
        assert late.search("refund", 10, filters={"shelf": "s1"}) == before
        # The command line's store (one connection) makes the same choice on its own connection.
        with connect(fresh_db_url, corpus="c", schema=SCHEMA, _one_connection=True) as lean:
            assert lean.run(lean.filter_pairs_plan()) is True
            assert BM25Index(lean).search("refund", 10, filters={"shelf": "s1"}) == before
        tenancy.disable(pool, schema=SCHEMA)
        with connect(fresh_db_url, corpus="c", schema=SCHEMA, _one_connection=True) as lean:
            assert lean.run(lean.filter_pairs_plan()) is False
        # A store opened while tenancy was on keeps the pairs after it is switched off:
        # they are still kept, so its answers stay those of @> (new writes included).
        early.add_all([MemoryEntry("e9", "refund note written after tenancy off", metadata={"shelf": "s1"})])
        assert "entry_filter_pairs" in late.candidates_sql("refund", 5, filters={"shelf": "s1"})[0]
        after = keyword.search("refund", 10, filters={"shelf": "s1"})
        assert "e9" in [i for i, _ in after] and late.search("refund", 10, filters={"shelf": "s1"}) == after
        early.delete("e1")
        after = keyword.search("refund", 10, filters={"shelf": "s1"})
        assert "e1" not in [i for i, _ in after] and late.search("refund", 10, filters={"shelf": "s1"}) == after
    finally:
        pool.close()


def _leakproof(pool: sa.engine.Pool) -> bool:
    with pool.connect() as conn:
        return bool(conn.execute(("SELECT proleakproof FROM pg_proc WHERE oid = "
                                         "'pg_catalog.jsonb_contains(jsonb, jsonb)'::regprocedure")).scalar_one())


def test_partitioning_keeps_the_pair_triggers(make_database: Callable[[], URL]) -> None:
    """`tnsrag db partition-sql` swaps in a new `entries`: its pair triggers come along, so
    a tenant store's filters (through the pairs) still see every new write and delete."""
    from tnsrag_db._db.partition import partition_script

    t = _make_tenants(make_database)
    try:
        _populate(t.a, t.corpus_a, "acme")
        with connect(t.a, corpus=t.corpus_a) as store:
            assert store.uses_filter_pairs() is True
            keyword = BM25Index(store)
            before = keyword.search("refund", 20, filters={"team": "acme"})
            assert len(before) == 12
            pool = Pool(t.owner, schema=SCHEMA, pool_size=1)
            try:
                with pool.connect() as conn:
                    script = partition_script(conn, schema=SCHEMA, partitions=2)
                assert script.count("CREATE TRIGGER tnsrag_filter_pairs_") == len(FILTER_PAIRS_TRIGGERS)
                # The rows move before the triggers are made: no pair is written twice.
                assert script.index("INSERT INTO") < script.index("CREATE TRIGGER")
                with psycopg.connect(_conninfo(t.owner), autocommit=True) as raw:
                    raw.execute(script)  # type: ignore[arg-type]  # as an operator runs it
                assert _triggers(pool) == set(FILTER_PAIRS_TRIGGERS)
                assert _triggers(pool, "tnsrag_bm25_retire") == {"tnsrag_bm25_retire_deleted",
                                                                   "tnsrag_bm25_retire_rewritten"}
                assert tenancy.filters_use_indexes(pool, schema=SCHEMA)
            finally:
                pool.close()
            assert _pairs(t.owner) == _recomputed(t.owner)
            store.pool.reopen()  # the old table's plans and connections go
            assert keyword.search("refund", 20, filters={"team": "acme"}) == before
            store.add_all([MemoryEntry("acme-new", "refund policy written after partitioning",
                                       metadata={"team": "acme"})])
            store.delete("acme3")
            after = [i for i, _ in keyword.search("refund", 20, filters={"team": "acme"})]
            assert "acme-new" in after and "acme3" not in after and len(after) == 12
            assert _pairs(t.owner) == _recomputed(t.owner)
    finally:
        _drop(t)


def test_the_choice_is_made_by_the_first_filtered_retrieval_not_by_building_an_index(fresh_db_url: URL) -> None:
    """Building a BM25 index or a vector store over a store sends nothing (Python 3.11's
    isinstance check of a protocol evaluates its properties: the choice was once made, with a
    catalog query, when the index was built), and the first filtered retrieval decides."""
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=2)
    sent: list[str] = []

    def record(conn: object, statement: str, params: object) -> None:
        sent.append(statement)

    try:
        migrate.upgrade(pool, schema=SCHEMA)
        VectorMemoryStore(Store(pool, corpus="c", schema=SCHEMA), HashingEmbedding(32), index_threshold=None).add_all(
            [MemoryEntry(f"e{i}", f"refund note {i}", metadata={"shelf": f"s{i % 2}"}) for i in range(6)])
        with watch(before=record), read_statements() as reads:
            store = Store(pool, corpus="c", schema=SCHEMA)
            keyword = BM25Index(store)
            vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
        assert sent == [] and reads == []
        tenancy.enable(pool, schema=SCHEMA)  # after the indexes were built, before any filtered retrieval
        assert "entry_filter_pairs" in keyword.candidates_sql("refund", 5, filters={"shelf": "s1"})[0]
        assert "entry_filter_pairs" in vectors.candidates_sql(HashingEmbedding(32)("refund"), 5,
                                                              filters={"shelf": "s1"})[0]
    finally:
        pool.close()


def test_tenancy_off_on_the_cli_says_the_pair_triggers_stay(fresh_db_url: URL) -> None:
    import json

    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    url = fresh_db_url.render_as_string(hide_password=False)
    never = CliRunner().invoke(main_group, ["db", "upgrade", "--url", url, "--json"])
    assert never.exit_code == 0, never.output
    assert json.loads(never.output)["filter_pair_triggers"] is False  # tenancy never on: no trigger
    on = CliRunner().invoke(main_group, ["db", "upgrade", "--url", url, "--tenancy", "rls", "--json"])
    assert on.exit_code == 0, on.output
    assert json.loads(on.output)["filter_pair_triggers"] is True and "triggers stay" not in on.output
    off = CliRunner().invoke(main_group, ["db", "upgrade", "--url", url, "--tenancy", "off"])
    assert off.exit_code == 0, off.output
    assert "tenancy off" in off.output and "filter pairs' triggers stay" in off.output
    assert "downgrade --revision 0006" in off.output
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=1)
    try:
        assert tenancy.pair_triggers_attached(pool, schema=SCHEMA) and not tenancy.is_enabled(pool, schema=SCHEMA)
        migrate.downgrade(pool, schema=SCHEMA, revision="0006")
        assert tenancy.pair_triggers_attached(pool, schema=SCHEMA) is False
    finally:
        pool.close()


def test_metadata_only_filters_read_the_pairs_alone_with_the_answers_of_the_entry_rows(tenants: Tenants) -> None:
    """A filter of metadata keys only takes its ids (and the HNSW and BM25 per-row checks)
    from the pairs without reading an entry row; adding a ``tier`` key every entry matches
    sends the same filter through the entry rows, and every path gives the same answers:
    vector exact and HNSW, BM25 plain, pruned, with few and with many postings to check."""
    corpus = f"{tenants.corpus_a}_big"
    owner_engine = Pool(tenants.owner, schema=SCHEMA, pool_size=1)
    try:
        tenancy.grant(owner_engine, schema=SCHEMA, role=tenants.role_a, corpus=corpus)
    finally:
        owner_engine.close()
    words = ("alpha", "bravo", "charlie", "delta", "echo")
    with connect(tenants.owner, corpus=corpus) as owner:  # the owner builds the HNSW index
        VectorMemoryStore(owner, HashingEmbedding(32), index_threshold=100).add_all([
            MemoryEntry(f"big{i}", f"parcel box {words[i % 5]} {words[i % 3]} item {i}",
                        metadata={"lot": f"l{i % 7}", "grade": f"g{i % 3}", "n": str(i)}) for i in range(1200)])
    rows_of = {"tier": "SEMANTIC"}  # every entry's tier: the same filter, through the entry rows
    filters = [{"lot": "l3"}, {"lot": "l3", "grade": "g1"}, {"n": "17"}, {"lot": "none"}]
    with connect(tenants.a, corpus=corpus) as store:
        keyword = BM25Index(store)
        for threshold in (50, 5000):  # HNSW with a per-row check, and the exact scan of few matches
            vectors = VectorMemoryStore(store, HashingEmbedding(32), exact_threshold=threshold)
            for f in filters:
                statement, _ = vectors.candidates_sql(HashingEmbedding(32)("parcel"), 5, filters=f)
                matches = statement.split("v_m AS MATERIALIZED (", 1)[1].split(")", 1)[0]
                assert "entry_filter_pairs" in matches and "FROM entries" not in matches, statement
                expected = {f"big{i}" for i in range(1200)
                            if all({"lot": f"l{i % 7}", "grade": f"g{i % 3}", "n": str(i)}[k] == v
                                   for k, v in f.items())}
                for query in ("parcel alpha", "item 17 echo"):
                    found = vectors.search(query, 5, filters=f)
                    assert found == vectors.search(query, 5, filters={**f, **rows_of}), (threshold, f, query)
                    assert {i for i, _ in found} <= expected and len(found) == min(5, len(expected))
                assert {i for i, _ in vectors.search("parcel", 1000, filters=f)} == expected, (threshold, f)
        for f in filters:
            for query in ("parcel", "parcel box", "parcel alpha item", "charlie", "item 17 echo"):
                for k in (3, 500):
                    found = keyword.search(query, k, filters=f)
                    assert found == keyword.search(query, k, filters={**f, **rows_of}), (f, query, k)
        kstatement, _ = keyword.candidates_sql("parcel box", 5, filters={"lot": "l3"})
        fe = kstatement.split("k_fe AS MATERIALIZED (", 1)[1].split("\n), ", 1)[0]
        assert "entry_filter_pairs" in fe and "FROM entries" not in fe, kstatement


def test_a_tenants_metadata_filtered_statements_keep_their_generic_plan(make_database: Callable[[], URL]) -> None:
    """A tenant's prepared statements filtered through the pairs are planned once, not per
    run: their custom plans cost what the generic one costs (the pairs' values move no
    estimate that the plan depends on), so PostgreSQL keeps the generic plan. In a database
    of its own, analyzed: in the shared one the tenant's corpus may be estimated smaller
    than the average corpus (depending on what other tests wrote and on whether autovacuum
    analyzed it since), and then its custom plans are cheaper (see docs/deployment.md,
    "Tenancy"), which made this test fail now and then."""
    t = _make_tenants(make_database)
    try:
        with connect(t.a, corpus=t.corpus_a) as store:
            VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None).add_all([
                MemoryEntry(f"x{i}", f"parcel refund policy {i} for damaged goods",
                            metadata={"team": "acme", "shelf": f"s{i % 4}"}) for i in range(40)])
        _populate(t.a, t.corpus_a, "acme")
        with psycopg.connect(_conninfo(t.owner), autocommit=True) as conn:
            conn.execute(f"ANALYZE {SCHEMA}.entries, {SCHEMA}.entry_filter_pairs, {SCHEMA}.embeddings, "
                         f"{SCHEMA}.bm25_postings, {SCHEMA}.bm25_df")
        with connect(t.a, corpus=t.corpus_a, pool_size=1, max_overflow=0) as store:
            vectors = VectorMemoryStore(store, HashingEmbedding(32), index_threshold=None)
            keyword = BM25Index(store)
            for i in range(21):
                f = {"shelf": f"s{i % 4}"}
                assert vectors.search(f"refund policy {i}", 5, filters=f)
                assert keyword.search("refund policy", 5, filters=f)
            rows = store.read("SELECT left(statement, 12) AS s, generic_plans AS g, custom_plans AS c "
                              "FROM pg_prepared_statements WHERE statement LIKE '%entry_filter_pairs%'", {})
        assert len(rows) == 2 and all(r.g >= 10 and r.c <= 5 for r in rows), rows
    finally:
        _drop(t)


def test_a_large_tenants_filtered_vector_statement_keeps_its_generic_plan(make_database: Callable[[], URL]) -> None:
    """Revision 0009: ``embeddings.corpus`` counts as one distinct value, so the generic
    plan's estimate of ``corpus = $1`` is the largest corpus's share and its HNSW branch
    (``LIMIT k`` over the ordered scan) costs no more than a custom plan's. Before it, a
    tenant whose corpus is most of the table had every filtered vector statement planned
    afresh (0 generic plans in 16 runs)."""
    t = _make_tenants(make_database)
    try:
        big = f"{t.corpus_a}_big"
        owner_engine = Pool(t.owner, schema=SCHEMA, pool_size=1)
        try:
            tenancy.grant(owner_engine, schema=SCHEMA, role=t.role_a, corpus=big)
            with connect(t.owner, corpus=big) as owner:  # the owner builds the HNSW index
                VectorMemoryStore(owner, HashingEmbedding(32), index_threshold=100).add_all([
                    MemoryEntry(f"big{i}", f"parcel box {i % 11} item {i}", metadata={"lot": f"l{i % 9}"})
                    for i in range(2000)])
            with owner_engine.connect() as conn:
                conn.execute(f"ANALYZE {SCHEMA}.embeddings, {SCHEMA}.entries, {SCHEMA}.entry_filter_pairs")
                conn.commit()
            with connect(t.a, corpus=big, pool_size=1, max_overflow=0) as store:
                vectors = VectorMemoryStore(store, HashingEmbedding(32), exact_threshold=50)
                for i in range(21):
                    found = vectors.search(f"parcel box {i}", 5, filters={"lot": f"l{i % 9}"})
                    assert len(found) == 5 and all(int(e[3:]) % 9 == i % 9 for e, _ in found), found
                rows = store.read("SELECT generic_plans AS g, custom_plans AS c FROM pg_prepared_statements "
                                  "WHERE statement LIKE '%v_h AS MATERIALIZED%'", {})
            assert len(rows) == 1 and rows[0].g >= 10 and rows[0].c <= 5, rows

            def option() -> list[str] | None:
                with owner_engine.connect() as conn:
                    return conn.execute(
                        "SELECT a.attoptions FROM pg_attribute a WHERE a.attrelid = "
                        f"'{SCHEMA}.embeddings'::regclass AND a.attname = 'corpus'").scalar_one()

            assert option() == ["n_distinct=1"]
            migrate.downgrade(owner_engine, schema=SCHEMA, revision="0008")
            assert option() is None
            migrate.upgrade(owner_engine, schema=SCHEMA)
            assert option() == ["n_distinct=1"]
        finally:
            owner_engine.close()
    finally:
        _drop(t)
