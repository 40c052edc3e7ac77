"""A tenant cannot stall another: tenant A tries each lock it can take against tenant B.

Real roles on the test server, as in test_tenancy.py: the owner migrates, switches
row-level security on and grants each tenant its corpus, with a short ``lock_timeout``
(the bound ``tnsrag db tenant grant`` puts on a tenant role). Tenant A then holds, on its
own connection, what it can: the corpus and merge lock keys computed from B's corpus name,
the salted keys themselves (as if it had read them in ``pg_locks``), and every shared table
under ``LOCK TABLE ... ACCESS EXCLUSIVE`` (its UPDATE privilege allows it). B's writes,
searches and merges either go through or fail after the bound with a
:class:`LockTimeoutError` naming A's role. No timing is asserted beyond generous waits.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from sqlalchemy.engine import URL

from bench.attack._support import create_login_roles
from tests.db.test_tenancy import Tenants, _conninfo
from tests.fix_db import SCHEMA
from tnsrag_db import BM25Index, HashingEmbedding, LockTimeoutError, MemoryEntry, VectorMemoryStore, connect, tenancy
from tnsrag_db._cli import main_group
from tnsrag_db._db import migrate
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import ConfigurationError

PASSWORD = "tnsrag-test-stall"
#: The bound the tenants get here (seconds): short, so that each stall costs the suite little.
BOUND = 1.0
#: How long a test lets B's operation take before calling it stalled (far beyond the bound).
GENEROUS = 60.0


@pytest.fixture(scope="module")
def tenants(make_database: Callable[[], URL]) -> Iterator[Tenants]:
    owner = make_database()
    suffix = uuid.uuid4().hex[:8]
    role_a, role_b = f"stall_a_{suffix}", f"stall_b_{suffix}"
    corpus_a, corpus_b = f"acme_{suffix}", f"globex_{suffix}"
    pool = Pool(owner, schema=SCHEMA, pool_size=1)
    try:
        migrate.upgrade(pool, schema=SCHEMA)
        create_login_roles(_conninfo(owner), str(owner.database), (role_a, role_b), PASSWORD)
        tenancy.enable(pool, schema=SCHEMA)
        tenancy.grant(pool, schema=SCHEMA, role=role_a, corpus=corpus_a, lock_timeout=BOUND)
        tenancy.grant(pool, schema=SCHEMA, role=role_b, corpus=corpus_b, lock_timeout=BOUND)
    finally:
        pool.close()
    t = Tenants(owner, owner.set(username=role_a, password=PASSWORD), owner.set(username=role_b, password=PASSWORD),
                role_a, role_b, corpus_a, corpus_b)
    with connect(t.b, corpus=corpus_b) as store:
        VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None).add_all(
            [MemoryEntry(f"g{i}", f"globex refund policy {i} for damaged parcels") for i in range(12)])
    with connect(t.a, corpus=corpus_a) as store:
        store.add(MemoryEntry("a0", "acme note"))
    yield t
    with psycopg.connect(_conninfo(owner.set(database="postgres")), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(owner.database))))
        for role in (role_a, role_b):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _in_thread(fn: Callable[[], object]) -> object:
    """``fn()`` run in a thread, its result or exception, within :data:`GENEROUS` seconds."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed back to the test
            out.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(GENEROUS)
    assert not worker.is_alive(), f"B was stalled for more than {GENEROUS:.0f} s"
    return out[0]


def _b_write(t: Tenants, tag: str) -> Callable[[], object]:
    def write() -> object:
        with connect(t.b, corpus=t.corpus_b) as store:
            return store.add(MemoryEntry(f"late-{tag}-{uuid.uuid4().hex[:6]}", "written while A holds a lock"))
    return write


def _b_search(t: Tenants) -> Callable[[], object]:
    def search() -> object:
        with connect(t.b, corpus=t.corpus_b) as store:
            return BM25Index(store).search("damaged parcels refund", 5)
    return search


def _b_vector_search(t: Tenants) -> Callable[[], object]:
    def search() -> object:
        with connect(t.b, corpus=t.corpus_b) as store:
            return VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None).search("damaged parcels", 5)
    return search


def _b_merge(t: Tenants) -> Callable[[], object]:
    def merge() -> object:
        with connect(t.b, corpus=t.corpus_b) as store:
            store.add_all([MemoryEntry(f"m-{uuid.uuid4().hex[:6]}-{i}", f"merge fodder {i}") for i in range(3)])
            return store.merge_postings()
    return merge


def _named_a(result: object, t: Tenants) -> None:
    """``result`` is a lock timeout naming A's role (and no other)."""
    assert isinstance(result, LockTimeoutError), repr(result)
    assert result.holders == (t.role_a,) and result.holders_known
    assert repr(t.role_a) in str(result) and "lock_timeout" in str(result)
    assert result.sqlstate == "55P03"


def _salted_key(t: Tenants, name: str) -> int:
    """A key of B's corpus as the library computes it (read as the owner: A cannot)."""
    with psycopg.connect(_conninfo(t.owner)) as conn:
        row = conn.execute(sql.SQL("SELECT hashtextextended(%s || ':' || lock_salt::text, 0) FROM {}.corpora "
                                   "WHERE corpus = %s").format(sql.Identifier(SCHEMA)), (name, t.corpus_b)).fetchone()
    assert row is not None
    return int(row[0])


def test_grant_bounds_the_tenant_roles_lock_waits(tenants: Tenants) -> None:
    pool = Pool(tenants.owner, schema=SCHEMA, pool_size=1)
    try:
        assert tenancy.lock_timeout(pool, role=tenants.role_b) == BOUND
        with pytest.raises(ConfigurationError, match="lock_timeout"):
            tenancy.grant(pool, schema=SCHEMA, role=tenants.role_b, corpus=tenants.corpus_b, lock_timeout=-1)
        assert tenancy.lock_timeout(pool, role=tenants.role_b) == BOUND  # nothing changed
    finally:
        pool.close()
    with psycopg.connect(_conninfo(tenants.b)) as conn:  # what every session of the role gets
        assert conn.execute("SHOW lock_timeout").fetchone() == ("1s",)
    # The CLI's default bound, reported; then back to the tests' own.
    result = CliRunner().invoke(main_group, ["db", "tenant", "grant", tenants.role_b, tenants.corpus_b, "--url",
                                             _conninfo(tenants.owner), "--json"])
    assert result.exit_code == 0, result.output
    assert '"lock_timeout": 30.0' in result.output
    result = CliRunner().invoke(main_group, ["db", "tenant", "grant", tenants.role_b, tenants.corpus_b, "--url",
                                             _conninfo(tenants.owner), "--lock-timeout", str(BOUND)])
    assert result.exit_code == 0 and "lock_timeout 1 s" in result.output, result.output


def test_the_corpus_keys_computed_from_names_stall_nobody(tenants: Tenants) -> None:
    """A holds the keys of earlier releases (hashes of B's corpus name): B writes and merges."""
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        for name in (f"tnsrag_db.corpus:{SCHEMA}:{tenants.corpus_b}", f"tnsrag_db.bm25-merge:{SCHEMA}:{tenants.corpus_b}"):
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (name,))
        try:
            assert not isinstance(_in_thread(_b_write(tenants, "computed")), BaseException)
            report = _in_thread(_b_merge(tenants))
            assert not isinstance(report, BaseException) and report.entries > 0 and report.held_by == ()  # type: ignore[attr-defined]
        finally:
            conn.execute("SELECT pg_advisory_unlock_all()")


def test_a_tenant_cannot_read_the_salt(tenants: Tenants) -> None:
    with psycopg.connect(_conninfo(tenants.a)) as conn:
        seen = conn.execute(sql.SQL("SELECT count(*) FROM {}.corpora WHERE corpus = %s").format(
            sql.Identifier(SCHEMA)), (tenants.corpus_b,)).fetchone()
        assert seen == (0,)
        stats = conn.execute("SELECT count(*) FROM pg_stats WHERE schemaname = %s AND tablename = 'corpora'",
                             (SCHEMA,)).fetchone()
        assert stats == (0,)


def test_a_leaked_corpus_key_delays_b_within_the_bound_and_names_a(tenants: Tenants) -> None:
    """Had A read B's key in pg_locks, holding it delays B's writes by the bound, no more."""
    key = _salted_key(tenants, f"tnsrag_db.corpus:{SCHEMA}:{tenants.corpus_b}")
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            _named_a(_in_thread(_b_write(tenants, "leaked")), tenants)
            assert not isinstance(_in_thread(_b_search(tenants)), BaseException)  # reads take no corpus lock
        finally:
            conn.execute("SELECT pg_advisory_unlock_all()")
    assert not isinstance(_in_thread(_b_write(tenants, "after")), BaseException)


def test_a_leaked_merge_key_is_named_by_explicit_and_automatic_merges(
        tenants: Tenants, caplog: pytest.LogCaptureFixture) -> None:
    key = _salted_key(tenants, f"tnsrag_db.bm25-merge:{SCHEMA}:{tenants.corpus_b}")
    with psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            _named_a(_in_thread(_b_merge(tenants)), tenants)

            def automatic() -> object:
                with connect(tenants.b, corpus=tenants.corpus_b, merge_after_entries=2) as store:
                    store.add_all([MemoryEntry(f"auto-{i}", f"automatic merge {i}") for i in range(3)])
                    return store.writer.merge(wait=False)

            with caplog.at_level(logging.WARNING, logger="tnsrag_db"):
                report = _in_thread(automatic)
            assert not isinstance(report, BaseException)
            assert report.ran is False and report.held_by == (tenants.role_a,)  # type: ignore[attr-defined]
            warned = [r.getMessage() for r in caplog.records if "merge lock is held" in r.getMessage()]
            assert warned and repr(tenants.role_a) in warned[0]
        finally:
            conn.execute("SELECT pg_advisory_unlock_all()")
    report = _in_thread(_b_merge(tenants))
    assert not isinstance(report, BaseException) and report.entries > 0  # type: ignore[attr-defined]


#: The tables B's write and keyword search go through.
LOCKED_TABLES = ("corpora", "entries", "bm25_postings", "bm25_df", "bm25_stats", "bm25_docs", "embeddings")


@pytest.mark.parametrize("table", LOCKED_TABLES)
def test_lock_table_delays_b_within_the_bound_and_names_a(tenants: Tenants, table: str) -> None:
    with psycopg.connect(_conninfo(tenants.a)) as conn:
        conn.execute(sql.SQL("LOCK TABLE {}.{} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(SCHEMA),
                                                                                sql.Identifier(table)))
        try:
            results = [_in_thread(operation) for operation in (_b_write(tenants, table), _b_search(tenants),
                                                               _b_vector_search(tenants))]
        finally:
            conn.rollback()
    for result in results:
        if isinstance(result, BaseException):
            _named_a(result, tenants)
    # Each table stops at least one of B's operations (else the attack tried nothing).
    assert any(isinstance(r, LockTimeoutError) for r in results), results
    assert not isinstance(_in_thread(_b_write(tenants, f"{table}-after")), BaseException)


def test_pg_locks_revoked_hides_the_keys_and_the_holder(tenants: Tenants) -> None:
    """The statements docs/deployment.md gives, in this database: A can no longer read
    pg_locks (nor call the function under it); B's timeout still comes, holder unknown."""
    with psycopg.connect(_conninfo(tenants.owner), autocommit=True) as owner:
        owner.execute("REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC")
        owner.execute("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_lock_status() FROM PUBLIC")
        try:
            with psycopg.connect(_conninfo(tenants.a)) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("SELECT objid FROM pg_locks WHERE locktype = 'advisory'")
                conn.rollback()
                with pytest.raises(psycopg.errors.InsufficientPrivilege):  # the function under the view
                    conn.execute("SELECT objid FROM pg_lock_status() WHERE locktype = 'advisory'")
                conn.rollback()
                conn.execute(sql.SQL("LOCK TABLE {}.entries IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(SCHEMA)))
                try:
                    result = _in_thread(_b_write(tenants, "revoked"))
                finally:
                    conn.rollback()
            assert isinstance(result, LockTimeoutError) and not result.holders_known and result.holders == ()
            assert "holder is unknown" in str(result)
        finally:
            owner.execute("GRANT EXECUTE ON FUNCTION pg_catalog.pg_lock_status() TO PUBLIC")
            owner.execute("GRANT SELECT ON pg_catalog.pg_locks TO PUBLIC")


@pytest.mark.parametrize("command", [["query", "damaged parcels"], ["ingest", "--sample", "--embedding", "hash"]])
def test_the_cli_names_the_holder(tenants: Tenants, command: list[str]) -> None:
    """What a user of the command line sees: the error names A's role (the keyword query
    reads through the lean driver path, the ingest through a store)."""
    with psycopg.connect(_conninfo(tenants.a)) as conn:
        conn.execute(sql.SQL("LOCK TABLE {}.entries IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(SCHEMA)))
        try:
            result = _in_thread(lambda: CliRunner().invoke(main_group, [
                *command, "--url", _conninfo(tenants.b), "--corpus", tenants.corpus_b]))
        finally:
            conn.rollback()
    assert not isinstance(result, BaseException)
    assert result.exit_code != 0 and "lock_timeout" in result.output, result.output  # type: ignore[attr-defined]
    error_line = next(line for line in result.output.splitlines() if "lock_timeout" in line)  # type: ignore[attr-defined]
    assert f"held by role {tenants.role_a!r}" in error_line  # on the error's first line, before any statement


def test_until_the_finish_the_old_keys_are_taken_too_and_after_it_no_longer(tenants: Tenants) -> None:
    """A schema that still serves a release before the salted keys (a rolling upgrade not
    finished): B takes the computed key too, so A delays it within the bound; once the
    upgrade is finished the same long-lived store stops taking it."""
    from tnsrag_db._db.migration_ops import compat_function_sql

    pool = Pool(tenants.owner, schema=SCHEMA, pool_size=1)
    try:
        with pool.begin() as conn:
            conn.execute((compat_function_sql(SCHEMA, "0012", "0013")))
        with connect(tenants.b, corpus=tenants.corpus_b) as store, \
                psycopg.connect(_conninfo(tenants.a), autocommit=True) as conn:
            store.add(MemoryEntry("window-0", "written before A takes the key"))
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))",
                         (f"tnsrag_db.corpus:{SCHEMA}:{tenants.corpus_b}",))
            try:
                _named_a(_in_thread(lambda: store.add(MemoryEntry("window-1", "in the window"))), tenants)
                assert migrate.finish(pool, schema=SCHEMA).serves_from == "0013"
                assert not isinstance(_in_thread(lambda: store.add(MemoryEntry("window-2", "finished"))), BaseException)
            finally:
                conn.execute("SELECT pg_advisory_unlock_all()")
    finally:
        with pool.begin() as conn:
            conn.execute((compat_function_sql(SCHEMA, "0013", None)))
        pool.close()
