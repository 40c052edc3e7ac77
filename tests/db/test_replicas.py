"""Read replicas on a real streaming standby (pg_basebackup of an embedded primary)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests._standby import PrimaryWithStandby
from tnsrag_db._db.pool import Pool
from tnsrag_db._db.replicas import ReadReplicas, Replica, WriteToken, verify_standby
from tnsrag_db._db.statement import Statement, one
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import HashingEmbedding

DB = "tnsrag_replicas"
SCHEMA = "tnsrag"


@pytest.fixture(scope="module")
def pair() -> Iterator[PrimaryWithStandby]:
    servers = PrimaryWithStandby()
    try:
        with psycopg.connect(servers.primary_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        connect(servers.url("primary", DB), corpus="setup", auto_migrate=True).close()
        _wait_replayed(servers)
        yield servers
    finally:
        servers.close()


def _wait_replayed(servers: PrimaryWithStandby, timeout: float = 30.0) -> None:
    with psycopg.connect(servers.primary_url, autocommit=True) as conn:
        target = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]  # type: ignore[index]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(servers.standby_url, autocommit=True) as conn:
                row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
                if row and row[0]:
                    return
        except psycopg.OperationalError:
            pass
        time.sleep(0.05)
    raise AssertionError("the standby did not catch up")


def _replay(servers: PrimaryWithStandby, action: str) -> None:
    with psycopg.connect(servers.standby_url, autocommit=True) as conn:
        conn.execute(f"SELECT pg_wal_replay_{action}()")


def _served_by_standby(store: Store) -> bool:
    return bool(store.run(one(Statement("SELECT pg_is_in_recovery() AS standby")))[0].standby)


def _store(pair: PrimaryWithStandby, corpus: str, **options: object) -> Store:
    return connect(pair.url("primary", DB), corpus=corpus, read_urls=[pair.url("standby", DB)],
                   **options)  # type: ignore[arg-type]


def test_write_token_round_trips_and_orders() -> None:
    token = WriteToken.parse("16/B374D848")
    assert str(token) == "16/B374D848" and token.lsn == (0x16 << 32) | 0xB374D848
    assert WriteToken.parse("0/3000000") < WriteToken.parse("0/3000148") < token
    with pytest.raises(ValueError, match="not a WAL position"):
        WriteToken.parse("3000000")


def test_reads_go_to_the_standby_and_writes_to_the_primary(pair: PrimaryWithStandby) -> None:
    with _store(pair, "routing") as store:
        store.add(MemoryEntry("r1", "replicated entry about lighthouses"))
        assert _served_by_standby(store)
        setting = store.run(one(Statement("SELECT current_setting('default_transaction_read_only') AS ro")))
        assert setting[0].ro == "on"  # no write can go there
        # The write went to the primary; an eventual read of the standby may lag it, a read
        # after the write's token sees it (on the standby once replayed, else the primary).
        assert store.last_write_token is not None
        assert store.after(store.last_write_token).count() == 1
        store.drop_corpus()


def test_a_write_takes_one_primary_checkout_and_every_write_advances_the_token(pair: PrimaryWithStandby) -> None:
    from tnsrag_db._indexes.graph import GraphStore

    with _store(pair, "one_checkout") as store:
        checkouts: list[object] = []
        primary = store.pool
        take = primary.connect
        primary.connect = lambda *a, **k: (checkouts.append(a), take(*a, **k))[1]  # type: ignore[method-assign]
        try:
            store.add_all([MemoryEntry("c1", "first of two"), MemoryEntry("c2", "second of two")])
        finally:
            del primary.connect  # type: ignore[method-assign]
        assert len(checkouts) == 1  # the WAL position is read on the write's own connection
        first = store.last_write_token
        assert first is not None
        with psycopg.connect(pair.primary_url, autocommit=True) as conn:
            now = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]  # type: ignore[index]
        assert first <= WriteToken.parse(now)
        # An edge-only write is a write like any other: read-your-writes covers it.
        GraphStore(store).add_edge("c1", "c2")
        assert store.last_write_token is not None and store.last_write_token > first
        # Removing an edge too: a read after its token no longer sees the edge.
        added = store.last_write_token
        assert GraphStore(store).remove_edge("c1", "c2")
        assert store.last_write_token is not None and store.last_write_token > added
        assert GraphStore(store.after(store.last_write_token)).neighbours("c1") == []
        store.drop_corpus()


def test_read_your_writes_waits_for_replay_or_reads_the_primary(pair: PrimaryWithStandby) -> None:
    keyword = "lighthouse"
    _replay(pair, "pause")
    try:
        with _store(pair, "ryw", consistency="read_your_writes", replica_wait_timeout=0.3) as store, \
                _store(pair, "ryw") as eventual:
            store.add(MemoryEntry("w1", f"the {keyword} keeper writes a log"))
            token = store.last_write_token
            assert token is not None
            strategy = KeywordRAGStrategy(BM25Index(store))
            # The standby has not replayed the write: an eventual read misses it ...
            assert KeywordRAGStrategy(BM25Index(eventual)).retrieve(keyword) == []
            # ... the read-your-writes store waited 0.3 s, then read the primary.
            assert [d.metadata["entryId"] for d in strategy.retrieve(keyword)] == ["w1"]
            assert not _served_by_standby(store)
            # A token handed to another store gives it the same guarantee.
            assert [d.metadata["entryId"] for d in
                    KeywordRAGStrategy(BM25Index(eventual.after(token))).retrieve(keyword)] == ["w1"]
            _replay(pair, "resume")
            # Once replayed, the standby serves the read again, and sees the write.
            assert [d.metadata["entryId"] for d in strategy.retrieve(keyword)] == ["w1"]
            assert _served_by_standby(store)
            store.drop_corpus()
    finally:
        _replay(pair, "resume")


def test_the_reads_a_write_acts_on_go_to_the_primary(pair: PrimaryWithStandby) -> None:
    # A vector view's pre-read (which entries of a batch need a vector) runs on the read
    # runner, on the primary: a standby that has not replayed the last write would have the
    # view embed again what the corpus already holds.
    in_recovery = Statement("SELECT pg_is_in_recovery() AS standby")
    _replay(pair, "pause")
    try:
        with _store(pair, "primary_reads") as store:
            assert store.session.run(one(in_recovery))[0].standby
            assert not store.session.run(one(in_recovery), primary=True)[0].standby
            vectors = VectorMemoryStore(store, HashingEmbedding(), index_threshold=None)
            entry = MemoryEntry("p1", "written while replay is paused")
            vectors.add_all([entry])
            assert vectors.needing_vectors([entry]) == []
            assert vectors.needing_vectors([MemoryEntry("p1", "a new text")]) != []
            store.drop_corpus()
    finally:
        _replay(pair, "resume")


def test_a_lagging_standby_is_skipped(pair: PrimaryWithStandby) -> None:
    _replay(pair, "pause")
    try:
        with _store(pair, "lag", max_replica_lag=0.0) as store:
            store.add(MemoryEntry("l1", "written while replay is paused"))
            time.sleep(0.05)
            assert not _served_by_standby(store)  # behind by more than 0 s: the primary reads
            store.drop_corpus()
    finally:
        _replay(pair, "resume")


def test_a_killed_standby_fails_no_read(pair: PrimaryWithStandby) -> None:
    primary = Pool(pair.url("primary", DB), schema=SCHEMA)
    standby = Pool(pair.url("standby", DB), schema=SCHEMA, read_only=True)
    replicas = ReadReplicas([Replica("standby", standby)], retry_after=0.5)
    store = Store(primary, corpus="kill", schema=SCHEMA, owns_pool=True, read_replicas=replicas)
    store.add(MemoryEntry("k1", "a lighthouse on the cape"))
    _wait_replayed(pair)
    strategy = KeywordRAGStrategy(BM25Index(store))
    results: list[list[str]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                results.append([d.metadata["entryId"] for d in strategy.retrieve("lighthouse")])
            except BaseException as exc:  # noqa: BLE001 - collected and asserted on
                errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        time.sleep(0.3)
        pair.stop_standby()
        time.sleep(1.0)
        assert not _served_by_standby(store)  # the primary serves meanwhile
        pair.start_standby()
        deadline = time.monotonic() + 20
        while not _served_by_standby(store):  # back on the standby after retry_after
            assert time.monotonic() < deadline, "reads never returned to the standby"
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
        store.drop_corpus()
        store.close()
    assert errors == []
    assert results and all(r == ["k1"] for r in results)


def test_bad_replica_urls(pair: PrimaryWithStandby, pg_server_url: URL) -> None:
    primary_url = pair.url("primary", DB)
    missing = "postgresql://postgres@/tnsrag_replicas?host=/nonexistent-socket-dir"
    with pytest.raises(ConfigurationError, match="read replica .*nonexistent-socket-dir.* is unreachable"):
        connect(primary_url, read_urls=[missing])
    with connect(primary_url, corpus="optional", read_urls=[missing], replicas_optional=True) as store:
        assert not _served_by_standby(store)  # the primary reads; nothing fails
    with pytest.raises(ConfigurationError, match="is not a standby"):
        connect(primary_url, read_urls=[primary_url])
    with pytest.raises(ConfigurationError, match="a list of URLs"):
        connect(primary_url, read_urls=pair.url("standby", DB))  # type: ignore[arg-type]
    other = Pool(pg_server_url, schema=SCHEMA)
    standby = Pool(pair.url("standby", DB), schema=SCHEMA)
    try:
        with pytest.raises(ConfigurationError, match="not a standby of the primary .system identifier"):
            verify_standby(other, standby, "the standby")
    finally:
        other.close()
        standby.close()
    with pytest.raises(ConfigurationError, match="consistency must be one of"):
        connect(primary_url, consistency="strong")
    with connect(primary_url) as plain:
        with pytest.raises(ConfigurationError, match="token must be a WriteToken"):
            plain.after("0/1")  # type: ignore[arg-type]


def test_a_standby_rejects_writes_even_through_its_engine(pair: PrimaryWithStandby) -> None:
    standby = Pool(pair.url("standby", DB), schema=SCHEMA, read_only=True)
    try:
        with pytest.raises(psycopg.Error, match="read-only transaction"), standby.begin() as conn:
            conn.execute("CREATE TEMP TABLE t (x int)")
    finally:
        standby.close()




def test_cli_query_reads_from_the_standby(pair: PrimaryWithStandby, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    with _store(pair, "cli") as store:
        store.add(MemoryEntry("c1", "the lighthouse keeper's ledger"))
        _wait_replayed(pair)
        primary, standby = pair.url("primary", DB), pair.url("standby", DB)
        args = ["query", "lighthouse ledger", "--strategy", "keyword", "--corpus", "cli", "--url", primary, "--json"]
        result = CliRunner().invoke(main_group, [*args, "--read-url", standby])
        assert result.exit_code == 0, result.output
        assert '"id": "c1"' in result.output
        monkeypatch.setenv("TNSRAG_READ_URLS", "postgresql://postgres@/x?host=/nonexistent-standby")
        failed = CliRunner().invoke(main_group, args)
        assert failed.exit_code == 1 and "nonexistent-standby" in failed.output and "unreachable" in failed.output
        store.drop_corpus()


def test_lag_is_measured_from_the_primarys_progress(pair: PrimaryWithStandby) -> None:
    """A standby that just fell behind an idle primary's first write is not 'minutes behind'
    (the age of its last replayed transaction would say so); one stuck for longer than the
    bound is skipped."""
    with _store(pair, "lagclock", max_replica_lag=1.0) as store:
        _replay(pair, "pause")
        try:
            time.sleep(1.5)  # the primary idles: the last replayed transaction gets old
            store.add(MemoryEntry("t1", "first write after a quiet spell"))
            assert _served_by_standby(store)  # behind by a moment only
            time.sleep(2.2)  # replay stays paused beyond the 1 s bound (and the 1 s check interval)
            assert not _served_by_standby(store)
        finally:
            _replay(pair, "resume")
        _wait_replayed(pair)
        time.sleep(1.1)
        assert _served_by_standby(store)  # caught up: back on the standby
        store.drop_corpus()
