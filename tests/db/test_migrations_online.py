"""Upgrades beside live writers: DDL gives up on a lock it cannot get quickly instead of queueing.

While DDL waits for a table lock, every writer of that table queues behind it. Here a
long transaction holds a lock on ``entries`` while four writer threads write and the
schema is upgraded from 0004 (revision 0005 creates a policy on every table; 0006 builds
an index concurrently): each write's latency is measured, against the worst write of the
same run before the upgrade (the machine is shared).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db import MemoryEntry
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import MigrationError
from tnsrag_db._store.store import Store

WRITERS = 4


def _conninfo(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _writers(url: URL) -> Iterator[list[list[tuple[float, float]]]]:
    """Four threads writing one entry per transaction until the block ends; yields, per
    thread, each write's (start, latency), from 1.5 s before the block on."""
    pool = Pool(url, schema=SCHEMA, pool_size=WRITERS + 1)
    stop = threading.Event()
    latencies: list[list[tuple[float, float]]] = [[] for _ in range(WRITERS)]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        store = Store(pool, corpus=f"w{n}", schema=SCHEMA)
        i = 0
        try:
            while not stop.is_set():
                started = time.perf_counter()
                store.add(MemoryEntry(f"e{i}", f"writer {n} entry {i} about refunds"))
                latencies[n].append((started, time.perf_counter() - started))
                i += 1
        except BaseException as exc:  # surfaced by the test below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.5)  # the baseline: how long writes take on this machine right now
        yield latencies
        time.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        pool.close()
    assert not errors, errors


@contextmanager
def _long_transaction(url: URL) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A transaction holding ACCESS SHARE on entries (a long report, say) until released."""
    conn = psycopg.connect(_conninfo(url))
    conn.execute(f"SELECT count(*) FROM {SCHEMA}.entries")
    try:
        yield conn
    finally:
        conn.close()


def _at_0004(url: URL) -> None:
    pool = Pool(url, schema=SCHEMA, pool_size=1)
    try:
        migrate.upgrade(pool, schema=SCHEMA, revision="0004")
        Store(pool, corpus="seed", schema=SCHEMA).add_all(
            [MemoryEntry(f"s{i}", f"seed entry {i}") for i in range(200)])
    finally:
        pool.close()


def _summary(latencies: list[list[tuple[float, float]]], since: float) -> tuple[int, float, float]:
    """(writes, worst latency of a write started before ``since``, worst of those after).

    The machine is shared: a write can be slow without waiting for any lock. The bound is
    a second beyond the worst write of the same run before the upgrade began.
    """
    flat = [w for x in latencies for w in x]
    before = max((lat for start, lat in flat if start < since), default=0.0)
    after = max((lat for start, lat in flat if start >= since), default=0.0)
    return len(flat), before, after


@pytest.mark.slow
def test_upgrade_beside_four_writers_and_a_long_transaction_never_stalls_a_writer(fresh_db_url: URL) -> None:
    _at_0004(fresh_db_url)
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=1)
    try:
        with _writers(fresh_db_url) as latencies, _long_transaction(fresh_db_url) as long_tx:
            # The long transaction ends 2.5 s into the upgrade: until then the policy on
            # entries cannot be created. Unbounded, the DDL would queue for 2.5 s and every
            # writer with it.
            timer = threading.Timer(2.5, long_tx.rollback)
            started = time.perf_counter()
            timer.start()
            migrate.upgrade(pool, schema=SCHEMA, lock_timeout=0.4, lock_retries=10)
            took = time.perf_counter() - started
            timer.join()
            during = sum(1 for x in latencies for start, _ in x if start >= started)
        assert migrate.current_revision(pool, schema=SCHEMA) == migrate.head_revision()
        assert took >= 2.0  # it did meet the lock and retried
    finally:
        pool.close()
    writes, baseline, worst = _summary(latencies, started)
    assert all(len(x) > 5 for x in latencies) and during > 0, [len(x) for x in latencies]
    assert worst < baseline + 1.0, f"a write waited {worst:.2f} s ({writes} writes; {baseline:.2f} s before)"


@pytest.mark.slow
def test_upgrade_facing_a_lock_held_throughout_retries_then_fails_clearly(fresh_db_url: URL) -> None:
    _at_0004(fresh_db_url)
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=1)
    try:
        with _writers(fresh_db_url) as latencies, _long_transaction(fresh_db_url) as long_tx:
            pid = long_tx.info.backend_pid
            started = time.perf_counter()
            with pytest.raises(MigrationError) as failed:
                migrate.upgrade(pool, schema=SCHEMA, lock_timeout=0.3, lock_retries=2)
        message = str(failed.value)
        assert "gave up after 3 attempts" in message and "lock_timeout=0.3 s" in message, message
        assert f"pid {pid}" in message, message  # names the transaction in the way
        # Nothing half-done: 0005 rolled back, the schema is still usable at 0004.
        assert migrate.current_revision(pool, schema=SCHEMA) == "0004"
        migrate.upgrade(pool, schema=SCHEMA)  # once the transaction is gone, it goes through
        assert migrate.current_revision(pool, schema=SCHEMA) == migrate.head_revision()
    finally:
        pool.close()
    writes, baseline, worst = _summary(latencies, started)
    assert worst < baseline + 1.0, f"a write waited {worst:.2f} s ({writes} writes; {baseline:.2f} s before)"


def test_a_concurrent_index_build_left_invalid_is_rebuilt(fresh_db_url: URL) -> None:
    """0006 builds its index concurrently; an invalid leftover (an interrupted build) is replaced."""
    pool = Pool(fresh_db_url, schema=SCHEMA, pool_size=1)
    try:
        migrate.upgrade(pool, schema=SCHEMA, revision="0005")
        with psycopg.connect(_conninfo(fresh_db_url), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {SCHEMA}.tenant_grants (role_name, corpus) VALUES ('r', 'c'), ('r2', 'c')")
            # A unique index over a duplicated column fails half-way and stays INVALID.
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(f"CREATE UNIQUE INDEX CONCURRENTLY ix_tenant_grants_corpus ON {SCHEMA}.tenant_grants "
                             "(corpus)")
            valid = f"SELECT indisvalid, indisunique FROM pg_index WHERE indexrelid = '{SCHEMA}.ix_tenant_grants_corpus'::regclass"
            assert conn.execute(valid).fetchone() == (False, True)
            migrate.upgrade(pool, schema=SCHEMA)
            assert conn.execute(valid).fetchone() == (True, False)
        assert migrate.check(pool, schema=SCHEMA) == []
        assert migrate.offline_sql(schema=SCHEMA, revision_range="0005:0006").count("CONCURRENTLY") == 1
    finally:
        pool.close()


def test_lock_options_on_the_command_line(fresh_db_url: URL) -> None:
    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    result = CliRunner().invoke(main_group, ["db", "upgrade", "--url", _conninfo(fresh_db_url), "--lock-timeout", "1.5",
                                             "--lock-retries", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert '"at_head": true' in result.output
    bad = CliRunner().invoke(main_group, ["db", "upgrade", "--url", _conninfo(fresh_db_url), "--lock-timeout", "-1"])
    assert bad.exit_code != 0 and "--lock-timeout" in bad.output
