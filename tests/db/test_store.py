"""Store writes, reads and deletes on a real database."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.hooks import ConnectionHooks
from tnsrag_db._db.pool import Pool
from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import ConfigurationError, InvalidEntryError
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry, MemoryTier


def test_add_get_roundtrip(store: Store) -> None:
    ts = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    entry = MemoryEntry("e1", "Agents persist memory.", MemoryTier.EPISODIC, source="notes.md", timestamp=ts,
                        metadata={"tenant": "acme"})
    assert store.add(entry) == IngestCounts(inserted=1)
    assert store.get("e1") == entry
    assert store.get("missing") is None


def test_reingest_is_idempotent_and_updates_are_counted(store: Store) -> None:
    batch = [MemoryEntry(f"id{i}", f"text number {i}") for i in range(50)]
    assert store.add_all(batch) == IngestCounts(inserted=50)
    assert store.add_all(batch) == IngestCounts(unchanged=50)
    changed = batch[:3] + [MemoryEntry("id3", "new text"), MemoryEntry("new", "brand new")]
    assert store.add_all(changed) == IngestCounts(inserted=1, updated=1, unchanged=3)
    assert store.get("id3") == MemoryEntry("id3", "new text")
    assert store.count() == 51


def test_bad_entry_rejects_whole_batch(store: Store) -> None:
    store.add(MemoryEntry("keep", "kept"))
    good = MemoryEntry("g", "good")
    bad = MemoryEntry("b", "bad")
    object.__setattr__(bad, "content", "nul\x00byte")
    with pytest.raises(InvalidEntryError) as info:
        store.add_all([good, bad])
    assert info.value.entry_id == "b" and info.value.index == 1
    with pytest.raises(InvalidEntryError, match="appears twice"):
        store.add_all([good, MemoryEntry("g", "again")])
    assert store.count() == 1 and store.get("g") is None


def test_delete_and_delete_where(store: Store) -> None:
    store.add_all([MemoryEntry("a", "x", metadata={"k": "v"}), MemoryEntry("b", "y", metadata={"k": "V"}),
                   MemoryEntry("c", "z", MemoryTier.WORKING)])
    assert store.delete_where({"k": "v"}) == 1
    assert store.delete_where({"tier": "WORKING"}) == 1
    assert store.delete("b") is True
    assert store.delete("b") is False
    assert store.count() == 0


def test_cli_ingest_and_query_every_strategy(db_url: object, tmp_path: object) -> None:
    import json
    import uuid
    from pathlib import Path

    from click.testing import CliRunner

    from tnsrag_db._cli import main_group
    from tnsrag_db._strategies.registry import STRATEGY_NAMES

    url = db_url.render_as_string(hide_password=False)  # type: ignore[attr-defined]
    corpus = f"cli_{uuid.uuid4().hex[:8]}"
    doc = Path(str(tmp_path)) / "guide.md"
    doc.write_text("# Guide\n\nIntro text.\n\n## Memory\n\nAgents share memory across processes.\n")
    runner = CliRunner()
    args = ["--url", url, "--corpus", corpus, "--json"]
    first = runner.invoke(main_group, ["ingest", "--sample", str(doc), *args])
    assert first.exit_code == 0, first.output
    counts = json.loads(first.stdout)  # the summary; progress goes to stderr
    assert counts["inserted"] == counts["entries"] == 12
    again = json.loads(runner.invoke(main_group, ["ingest", "--sample", str(doc), *args]).stdout)
    assert again["unchanged"] == 12 and again["inserted"] == 0
    for name in STRATEGY_NAMES:
        res = runner.invoke(main_group, ["query", "agents share memory", "--strategy", name, "--top-k", "2",
                                         "--filter", "tier=SEMANTIC", *args])
        assert res.exit_code == 0, (name, res.output)
        out = json.loads(res.output)
        assert out["strategy"] == name
        assert all(r["metadata"]["tier"] == "SEMANTIC" for r in out["results"])
    res = runner.invoke(main_group, ["query", "agents", "--strategy", "keyword", "--filter", "tenant=acme", *args])
    assert [r["metadata"]["entryId"] for r in json.loads(res.output)["results"]] == ["tenant-acme"]
    bad = runner.invoke(main_group, ["query", "x", "--filter", "novalue", *args])
    assert bad.exit_code != 0


def test_drop_corpus_removes_everything_and_allows_reuse(store: Store) -> None:

    store.add_all([MemoryEntry("a", "alpha beta"), MemoryEntry("b", "beta gamma")])
    store.drop_corpus()
    with store.session.transaction() as conn:
        for table in ("entries", "bm25_postings", "bm25_stats", "corpora"):
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE corpus = :c",
                                {"c": store.corpus}).scalar_one() == 0, table
    assert store.add_all([MemoryEntry("a", "alpha beta")]) == IngestCounts(inserted=1)


def test_a_bulk_write_refreshes_planner_statistics(fresh_db_url: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # A database of its own: in the shared one other tests' rows (and autovacuum analysing
    # them, which the refresh skips rather than waits for) made the comparison flaky.
    from tnsrag_db._store.store import connect

    store = connect(fresh_db_url, corpus="stats", auto_migrate=True, analyze_after_rows=30)  # type: ignore[arg-type]

    def reltuples_and_rows() -> tuple[float, int]:
        with store.session.transaction() as conn:
            return (conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass").scalar_one(),
                    conn.execute("SELECT count(*) FROM entries").scalar_one())

    store.add_all([MemoryEntry(f"small-{i}", "a few words") for i in range(10)])  # below the threshold
    store.add_all([MemoryEntry(f"bulk-{i}", f"bulk entry {i}") for i in range(40)])
    estimated, rows = reltuples_and_rows()
    assert estimated == rows  # ANALYZE ran after the bulk write (a small table is sampled whole)
    assert store.writer.refresh_statistics(29) is False
    with pytest.raises(ConfigurationError, match="cannot analyse 'entries; DROP'"):
        store.writer.refresh_statistics(100, ("entries; DROP",))
    store.close()


def test_a_batched_ingest_refreshes_planner_statistics_once_for_all_its_batches(fresh_db_url: object) -> None:
    # Each batch commits on its own, below the threshold; the ingest as a whole is above it.
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db._store.store import connect
    from tnsrag_db.embeddings import HashingEmbedding

    store = connect(fresh_db_url, corpus="batched", auto_migrate=True, analyze_after_rows=30)  # type: ignore[arg-type]
    entries = [MemoryEntry(f"b-{i}", f"batched entry {i}") for i in range(400)]
    VectorMemoryStore(store, HashingEmbedding(16)).ingest(entries, batch_size=100, vectors=False)
    with store.session.transaction() as conn:
        estimated = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass").scalar_one()
    assert estimated == 400
    # A second corpus, under a tenth of the table but unknown to the statistics: refreshed too.
    other = connect(fresh_db_url, corpus="other", auto_migrate=True, analyze_after_rows=30)  # type: ignore[arg-type]
    VectorMemoryStore(other, HashingEmbedding(16)).ingest(entries[:35], batch_size=10, vectors=False)
    with other.session.transaction() as conn:
        estimated = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass").scalar_one()
    assert estimated == 435
    store.close()
    other.close()


def test_statistics_refresh_leaves_a_table_that_an_index_build_holds(store: Store, pool: Pool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A concurrent index build holds SHARE UPDATE EXCLUSIVE on embeddings and waits for
    # older snapshots: the refresh must not queue behind it (a deadlock), but analyse
    # the other tables and skip that one.
    def with_threshold(rows: int) -> Store:
        return Store(store.pool, corpus=store.corpus, schema=store.schema, analyze_after_rows=rows)

    def reltuples_and_rows() -> tuple[float, int]:
        with store.session.transaction() as conn:
            return (conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'entries'::regclass").scalar_one(),
                    conn.execute("SELECT count(*) FROM entries").scalar_one())

    with_threshold(30).add_all([MemoryEntry(f"x-{i}", f"entry {i}") for i in range(40)])  # analysed
    with_threshold(10**9).add_all([MemoryEntry(f"y-{i}", f"entry {i}") for i in range(25)])  # not analysed
    estimated, rows = reltuples_and_rows()
    assert estimated != rows
    with pool.connect() as holder:
        holder.execute(f"LOCK TABLE {store.schema}.embeddings IN SHARE UPDATE EXCLUSIVE MODE")
        assert with_threshold(30).writer.refresh_statistics(10**9, ("embeddings",)) is True  # no wait, no lock timeout
        estimated, rows = reltuples_and_rows()
        assert estimated == rows  # entries analysed although embeddings was held
        holder.rollback()


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def _explained_engine(pool: Pool, plans: list[dict[str, Any]]) -> Pool:
    """A fresh engine whose connections send every statement's real plan (auto_explain at
    NOTICE level) to ``plans``; skips the test where auto_explain cannot be loaded."""
    import json

    import psycopg

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if text.startswith("duration:") and "{" in text:
            plans.append(json.loads(text[text.index("{"):])["Plan"])

    with pool.connect() as conn:
        raw = conn.driver
        try:
            with raw.cursor() as cur:
                cur.execute("LOAD 'auto_explain'")
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("LOAD 'auto_explain' needs a superuser on this server")
        raw.commit()
    from tests.fix_db import SCHEMA
    from tnsrag_db._db.pool import Pool

    def _explain(dbapi_conn: Any, info: Any) -> None:
        with dbapi_conn.cursor() as cur:
            for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                            "SET auto_explain.log_analyze = on", "SET auto_explain.log_format = json",
                            "SET auto_explain.log_level = notice", "SET client_min_messages = notice"):
                cur.execute(setting)
        dbapi_conn.commit()
        dbapi_conn.add_notice_handler(on_notice)

    return Pool(pool.conninfo, schema=SCHEMA, pool_size=1, hooks=[ConnectionHooks("auto_explain", configure=_explain)])


def test_writes_probe_by_key_even_when_statistics_predate_the_corpus(pool: Pool, make_store: Any) -> None:
    """A corpus created after the last ANALYZE is estimated at one row; the write path must
    still reach its rows by key, not scan the whole corpus once per written entry. Checked
    on the real plans (auto_explain, sent to the client as notices): no plan node of an
    update, a delete or an edge write reads more than a handful of rows."""
    seed = make_store()
    seed.add_all([MemoryEntry(f"s{i}", "a few seed words") for i in range(20)])
    with pool.begin() as conn:
        conn.execute("ANALYZE entries, bm25_postings, embeddings")  # statistics without the new corpus
    store = make_store()
    store.add_all([MemoryEntry(f"e{i:04d}", f"entry {i} with some shared words") for i in range(2000)])
    plans: list[dict[str, Any]] = []
    probe_engine = _explained_engine(pool, plans)
    try:
        probe = Store(probe_engine, corpus=store.corpus)
        probe.add(MemoryEntry("e0007", "entry 7 rewritten with other words"))  # content changed
        probe.add(MemoryEntry("e0008", "entry 8 with some shared words", metadata={"k": "v"}))  # metadata only
        probe.delete("e0009")
        from tnsrag_db._indexes.graph import Edge, GraphStore
        GraphStore(probe).add_edges([Edge("e0010", "e0011")])
    finally:
        probe_engine.close()
    assert len(plans) > 10
    worst = max((node.get("Actual Rows", 0) * node.get("Actual Loops", 1), node.get("Node Type"), node.get("Relation Name"))
                for plan in plans for node in _plan_nodes(plan))
    assert worst[0] <= 100, worst


def _handled(node: dict[str, Any]) -> float:
    """The rows a plan node looked at: those it returned and those its filters removed, over all its loops."""
    return (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)) * node.get("Actual Loops", 1)


def test_bulk_deletes_and_rewrites_read_their_targets_by_ctid_when_statistics_predate_the_corpus(
        pool: Pool, make_store: Any) -> None:
    """On statistics that predate the corpus (estimated at one row), the postings and
    vectors a delete_many or a rewrite of 2,000 entries removes are read by ctid: no node
    over bm25_postings or embeddings looks at many more rows than the postings deleted (reading
    the whole corpus through its index, each row tested against every target, is
    quadratic). The entries themselves are read at most once each (their ctids are a
    constant array, tested by hash). Probes reading one row per stage row are not
    counted here (see test_writes_probe_by_key_even_when_statistics_predate_the_corpus)."""
    from tnsrag_db import VectorMemoryStore

    seed = make_store()
    seed.add_all([MemoryEntry(f"s{i}", "a few seed words") for i in range(20)])
    with pool.begin() as conn:
        conn.execute("ANALYZE entries, bm25_postings, embeddings, bm25_docs")  # without the new corpus
    size = 6000
    store = make_store(analyze_after_rows=10**9, merge_after_entries=10**9)
    entries = [MemoryEntry(f"e{i:05d}", f"entry {i} with some shared words and term{i % 97}") for i in range(size)]
    store.add_all(entries)
    VectorMemoryStore(store, lambda text: [1.0, float(len(text))], index_threshold=None).fill_vectors(entries[2000:4000])
    rewritten = [entry.id for entry in entries[2000:4000]]
    c = {"c": store.corpus}
    with pool.connect() as conn:
        postings = conn.execute("SELECT count(*) FROM bm25_postings WHERE corpus = :c AND entry_id < 'e02000'",
                                c).scalar_one()
        # The other corpora's entries in the table (other tests' in one database): a plan that
        # reads the table once in one pass (a sequential scan) reads them too.
        others = conn.execute("SELECT count(*) FROM entries WHERE corpus <> :c", c).scalar_one()
    plans: list[dict[str, Any]] = []
    explained = _explained_engine(pool, plans)
    try:
        probe = Store(explained, corpus=store.corpus, analyze_after_rows=10**9, merge_after_entries=10**9)
        assert probe.delete_many([f"e{i:05d}" for i in range(2000)]) == 2000
        counts = probe.add_all([MemoryEntry(entry_id, f"{entry_id} rewritten with other words") for entry_id in rewritten])
        assert counts.updated == 2000
    finally:
        explained.close()
    with pool.connect() as conn:
        assert conn.execute("SELECT count(*) FROM entries WHERE corpus = :c", c).scalar_one() == size - 2000
        assert conn.execute("SELECT count(*) FROM embeddings WHERE corpus = :c", c).scalar_one() == 0
    nodes = [node for plan in plans for node in _plan_nodes(plan)]
    side = [node for node in nodes if node.get("Relation Name") in ("bm25_postings", "embeddings")
            and node.get("Actual Loops", 1) == 1 and "Scan" in node.get("Node Type", "")]
    assert any(node["Node Type"] == "Tid Scan" for node in side)
    worst = max((_handled(node), node.get("Node Type"), node.get("Relation Name")) for node in side)
    assert worst[0] <= 1.5 * postings, worst  # the rewrite's postings number about the delete's
    worst = max((_handled(node), node.get("Node Type"), node.get("Relation Name")) for node in nodes
                if node.get("Relation Name") == "entries" and node.get("Actual Loops", 1) == 1)
    assert worst[0] <= size + others, worst


def _one_connection_store(db_url: Any, corpus: str, *, ping_after_idle: float = 1.0) -> Store:
    from tests.fix_db import SCHEMA
    from tnsrag_db._db.pool import Pool

    return Store(Pool(db_url, schema=SCHEMA, pool_size=1, max_overflow=0, ping_after_idle=ping_after_idle),
                 corpus=corpus, schema=SCHEMA, owns_pool=True)


def _kill_pooled_connection(store: Store, pool: Pool) -> None:
    pid = store.read("SELECT pg_backend_pid() AS pid", {})[0].pid
    with pool.connect() as conn:
        conn.execute("SELECT pg_terminate_backend(:p, 5000)", {"p": pid})


def test_a_dead_pooled_connection_is_replaced_without_an_error(db_url: Any, pool: Pool) -> None:
    from tnsrag_db._errors import DatabaseError

    def in_transaction(store: Store) -> int:
        with store.session.transaction() as conn:
            return int(conn.execute("SELECT count(*) FROM entries WHERE corpus = :c",
                                    {"c": store.corpus}).scalar_one())

    store = _one_connection_store(db_url, "test_dead_connection")
    pinged = _one_connection_store(db_url, "test_dead_connection", ping_after_idle=0.0)
    never = _one_connection_store(db_url, "test_dead_connection", ping_after_idle=3600.0)
    try:
        store.add(MemoryEntry("a", "alpha"))
        # Reused at once (no ping is due): a read notices the disconnect and runs again.
        _kill_pooled_connection(store, pool)
        assert store.read("SELECT count(*) AS n FROM entries WHERE corpus = :c", {"c": store.corpus})[0].n == 1
        # Idle long enough to be pinged: the checkout replaces it before a transaction uses it.
        assert pinged.get("a") is not None
        _kill_pooled_connection(pinged, pool)
        assert in_transaction(pinged) == 1
        assert pinged.get("a") is not None
        # Neither: a transaction fails once as a DatabaseError, and the pool has recovered.
        # (get() reads through the read path, which runs a read again: a transaction here.)
        assert never.get("a") is not None
        _kill_pooled_connection(never, pool)
        with pytest.raises(DatabaseError):
            in_transaction(never)
        assert in_transaction(never) == 1 and never.get("a") is not None
        # And get() itself survives a dead pooled connection now.
        _kill_pooled_connection(never, pool)
        assert never.get("a") is not None
    finally:
        store.drop_corpus()
        for each in (store, pinged, never):
            each.close()


def test_run_drives_a_plan_on_one_connection(store: Store) -> None:
    store.add_all([MemoryEntry(id=f"p{i}", content=f"plan entry {i}") for i in range(3)])

    def plan() -> Plan[tuple[int, int, int]]:
        first = yield Statement("SELECT pg_backend_pid() AS pid, count(*) AS n FROM entries WHERE corpus = :c",
                                {"c": store.corpus})
        second = yield Statement("SELECT pg_backend_pid() AS pid")
        return first[0].pid, second[0].pid, first[0].n

    pid_a, pid_b, count = store.run(plan())
    assert pid_a == pid_b and count == 3


def test_run_with_snapshot_sees_one_committed_state(store: Store) -> None:
    store.add(MemoryEntry(id="s0", content="before"))

    def plan(new_id: str) -> Plan[tuple[int, int]]:
        before = yield Statement("SELECT count(*) AS n FROM entries WHERE corpus = :c", {"c": store.corpus})
        store.add(MemoryEntry(id=new_id, content="written meanwhile"))  # another connection commits
        after = yield Statement("SELECT count(*) AS n FROM entries WHERE corpus = :c", {"c": store.corpus})
        return before[0].n, after[0].n

    assert store.run(plan("s1"), snapshot=True) == (1, 1)
    assert store.run(plan("s2"), snapshot=False) == (2, 3)  # autocommit: each statement sees the latest commit


@pytest.mark.parametrize("batch_size", [0, -1, True, 2.5, "10"])
def test_iter_entries_refuses_a_bad_batch_size(store: Store, batch_size: object) -> None:
    from tnsrag_db._errors import ValidationError

    store.add(MemoryEntry("a", "alpha"))
    with pytest.raises(ValidationError, match="batch_size"):
        list(store.iter_entries(batch_size=batch_size))  # type: ignore[arg-type]


def test_content_hashes_are_what_a_write_would_skip(store: Store) -> None:
    from tnsrag_db._store.write import content_hash

    a, b = MemoryEntry("h1", "one"), MemoryEntry("h2", "two", metadata={"k": "v"})
    store.add_all([a, b])
    assert store.content_hashes(["h1", "h2", "missing"]) == {"h1": content_hash(a), "h2": content_hash(b)}
    changed = MemoryEntry("h2", "two", metadata={"k": "w"})
    assert store.content_hashes(["h2"])["h2"] != content_hash(changed)
    assert store.content_hashes([]) == {}


def test_names_in_either_unicode_form_are_one_name(store: Store) -> None:
    import unicodedata

    from tnsrag_db._indexes.graph import Edge, GraphStore

    nfc, nfd = unicodedata.normalize("NFC", "café-notes"), unicodedata.normalize("NFD", "café-notes")
    assert nfc != nfd
    store.add(MemoryEntry(nfd, "Written under the decomposed id."))
    store.add(MemoryEntry("child", "A section.", parent_id=nfd))
    # Before: the decomposed id was a second entry that printed the same as the composed one.
    assert store.count() == 2 and store.get(nfc) is not None and store.get(nfd) is not None
    assert [e.id for e in store.iter_entries()] == sorted(["child", nfc])
    assert store.get("child").parent_id == nfc  # type: ignore[union-attr]
    assert set(store.get_many([nfd, "child"])) == {nfc, "child"}
    GraphStore(store).add_edge("child", nfd)
    assert Edge("child", nfd).dst == nfc and GraphStore(store).count() == 1
    # a corpus name typed either way is one corpus
    corpus_nfc = unicodedata.normalize("NFC", store.corpus + "-é")
    assert store.with_corpus(unicodedata.normalize("NFD", corpus_nfc)).corpus == corpus_nfc
    assert store.delete(nfc) and store.get(nfd) is None


def test_a_closed_store_refuses_reads_and_writes(db_url: object) -> None:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._store.store import connect

    with connect(db_url, corpus="closed-store") as store:  # type: ignore[arg-type]
        store.add(MemoryEntry("a", "alpha"))
        assert not store.closed
    # Before: the store kept working after close() and after its with block.
    assert store.closed
    for call in (lambda: store.get("a"), lambda: store.add(MemoryEntry("b", "beta")), lambda: store.count(),
                 lambda: BM25Index(store).search("alpha", 3), lambda: store.delete("a")):
        with pytest.raises(ConfigurationError, match="closed"):
            call()
    store.close()  # idempotent
    with connect(db_url, corpus="closed-store") as again:  # type: ignore[arg-type]
        assert again.get("a") is not None
        again.drop_corpus()


def test_tuning_options_of_connect_are_checked(db_url: Any) -> None:
    from tests.fix_db import SCHEMA
    from tnsrag_db._store.store import connect

    with pytest.raises(ConfigurationError, match="analyze_after_rows must be an int >= 1, got 0"):
        connect(db_url, schema=SCHEMA, analyze_after_rows=0)
    with pytest.raises(ConfigurationError, match="ping_after_idle must be a finite number of seconds >= 0, got nan"):
        connect(db_url, schema=SCHEMA, ping_after_idle=float("nan"))
    with connect(db_url, schema=SCHEMA, corpus="tuned", analyze_after_rows=7) as tuned:
        assert tuned.writer.analyze_after_rows == 7
        assert tuned.with_corpus("other").writer.analyze_after_rows == 7
