"""Session.run on the read runner (tnsrag_db._db.runner): statements run on the pooled
psycopg connection without SQLAlchemy's execution machinery, with the rows SQLAlchemy
would give, and errors mapped by the one driver-error mapping."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL

from tests import fix_corpus_scope
from tests.fix_db import SCHEMA
from tnsrag_db._db import runner
from tnsrag_db._db.runner import bind
from tnsrag_db._db.statement import Statement, hidden_corpus
from tnsrag_db._errors import DatabaseError, StatementTimeoutError, ValidationError
from tnsrag_db._store.store import Store, connect
from tnsrag_db._types import MemoryEntry, MemoryTier

# Every kind of value the plans read, a duplicate column name and an unnamed one.
_ROWS_SQL = ("SELECT e.id AS entry_id, e.content, e.tier, e.source, e.metadata, 1.5::float8 AS score, "
             "CAST(:n AS numeric) AS n, ARRAY[1, 2] AS arr, NULL::text AS nothing, e.id AS entry_id, 7 "
             "FROM entries e WHERE e.corpus = :c ORDER BY e.id")


@pytest.fixture()
def filled(store: Store) -> Store:
    store.add_all([MemoryEntry("a", "alpha words", MemoryTier.EPISODIC, source="s1", metadata={"k": "v"}),
                   MemoryEntry("b", "beta words")])
    return store


@contextmanager
def _listening() -> Iterator[list[str]]:
    """A statement listener on the read runner, recording the texts it sends."""
    seen: list[str] = []

    def record(text: str, values: Any) -> None:
        seen.append(text)

    runner.add_statement_listener(record)
    try:
        yield seen
    finally:
        runner.remove_statement_listener(record)


def _in_transaction(store: Store, sql: str, params: dict[str, Any]) -> list[Any]:
    """``sql``'s rows through the write path's connection (a transaction)."""
    with store.session.transaction() as conn:
        return list(conn.execute(sql, params).all())


def test_rows_of_reads_and_of_transactions_are_alike_by_position_and_by_name(filled: Store) -> None:
    params = {"n": 3, "c": filled.corpus}
    with _listening() as seen:
        driver = filled.session.read(_ROWS_SQL, params)
    through_sa = _in_transaction(filled, _ROWS_SQL, params)
    assert seen == [bind(hidden_corpus(_ROWS_SQL))[0]]  # the listener saw it as sent (the corpus hidden: no Citus)
    assert type(driver[0]) is type(through_sa[0])  # one row class per column list, both paths
    assert [tuple(r) for r in driver] == [tuple(r) for r in through_sa]
    assert [type(v) for v in driver[0]] == [type(v) for v in through_sa[0]]
    first = driver[0]
    assert (first.entry_id, first.content, first.tier, first.source) == ("a", "alpha words", "EPISODIC", "s1")
    assert first.metadata == {"k": "v"} and first.score == 1.5 and first.arr == [1, 2] and first.nothing is None
    entry_id, *_rest = first
    assert entry_id == "a" and first[-1] == 7 and len(first) == 11


def test_a_statement_without_rows_and_an_empty_result(filled: Store) -> None:
    assert filled.session.read("SELECT id FROM entries WHERE corpus = :c AND false", {"c": filled.corpus}) == []


def test_errors_are_the_same_in_reads_and_in_transactions(filled: Store) -> None:
    bad = "SELECT no_such_column FROM entries WHERE corpus = :c"
    with pytest.raises(DatabaseError) as driver:
        filled.session.read(bad, {"c": filled.corpus})
    with pytest.raises(DatabaseError) as through_sa:
        _in_transaction(filled, bad, {"c": filled.corpus})
    assert type(driver.value) is type(through_sa.value)
    assert str(driver.value).startswith(f"database error in corpus {filled.corpus!r}: ")
    assert 'column "no_such_column" does not exist' in str(driver.value)
    assert isinstance(driver.value.__cause__, psycopg.errors.UndefinedColumn)  # the driver's own error
    assert type(driver.value.__cause__) is type(through_sa.value.__cause__)
    assert driver.value.sqlstate == through_sa.value.sqlstate == "42703"
    # The connection stays usable after the error.
    assert filled.session.read("SELECT count(*) AS n FROM entries WHERE corpus = :c", {"c": filled.corpus})[0].n == 2


def test_a_statement_timeout_in_the_driver_lane(filled: Store) -> None:
    with filled.session.timeout(0.05), pytest.raises(StatementTimeoutError) as caught:
        filled.session.read("SELECT pg_sleep(2), count(*) FROM entries WHERE corpus = :c", {"c": filled.corpus})
    assert caught.value.sqlstate == "57014"
    assert filled.session.read("SELECT 1 AS one", {})[0].one == 1


def test_unencodable_text_is_a_validation_error_in_the_driver_lane(filled: Store) -> None:
    with pytest.raises(ValidationError):
        filled.session.read("SELECT id FROM entries WHERE corpus = :c AND id = :i", {"c": filled.corpus, "i": "\ud800"})


def test_a_snapshot_runs_its_statements_in_one_read_only_transaction(filled: Store) -> None:
    def plan() -> Any:
        first = yield _statement("SELECT txid_current_if_assigned() AS x, current_setting('transaction_read_only') AS ro")
        second = yield _statement("SELECT pg_current_xact_id_if_assigned() AS x, "
                                  "current_setting('transaction_isolation') AS iso, now() AS t1")
        third = yield _statement("SELECT now() AS t1")
        return first[0], second[0], third[0]

    first, second, third = filled.session.run(plan(), snapshot=True)
    assert first.ro == "on" and second.iso == "repeatable read"
    assert second.t1 == third.t1  # now() is the transaction's start: one transaction


def _statement(sql: str) -> Any:
    from tnsrag_db._db.statement import Statement

    return Statement(sql, {})


@pytest.mark.skipif(os.environ.get("TNSRAG_CORPUS_SCOPE", "on") == "off", reason="the corpus-scope plugin is off")
def test_the_corpus_scope_plugin_sees_the_read_runner(filled: Store) -> None:
    sql = "SELECT id FROM entries WHERE corpus = :c AND id = :i /* read lane probe */"
    filled.session.read(sql, {"c": filled.corpus, "i": "a"})
    text, names = bind(hidden_corpus(sql))  # as the runner sends it on a database without Citus
    key, named = fix_corpus_scope.pyformat(text, [{"c": filled.corpus, "i": "a"}[n] for n in names])
    where, params = fix_corpus_scope._SEEN[key]
    assert f"{os.sep}tnsrag_db{os.sep}" in where  # sent by library code
    assert sorted(map(repr, params.values())) == sorted(map(repr, named.values())) and len(params) == 2


def test_percent_signs_and_repeated_parameters(filled: Store) -> None:
    rows = filled.session.read("SELECT id, :c = :c AS same, 'a%' AS pct FROM entries WHERE corpus = :c "
                               "AND content LIKE 'al%' AND id = ANY(:ids)", {"c": filled.corpus, "ids": ["a", "b"]})
    assert [(r.id, r.same, r.pct) for r in rows] == [("a", True, "a%")]


def test_a_missing_parameter_is_a_database_error(filled: Store) -> None:
    with pytest.raises(DatabaseError):
        filled.session.read("SELECT id FROM entries WHERE corpus = :c AND id = :missing", {"c": filled.corpus})


def _one_connection(store: Store) -> Store:
    from tests.fix_db import SCHEMA
    from tnsrag_db._db.pool import Pool

    pool = Pool(store.pool.conninfo, schema=SCHEMA, pool_size=1, max_overflow=0)
    return Store(pool, corpus=store.corpus, schema=SCHEMA, owns_pool=True)


def _in_one_transaction(store: Store) -> bool:
    """Whether two statements of ``session.transaction()`` share one transaction (its
    ``now()``): the pooled connection came back out of autocommit."""
    import time

    with store.session.transaction() as conn:
        first = conn.execute("SELECT now()").scalar_one()
        time.sleep(0.01)
        return bool(conn.execute("SELECT now() = :t", {"t": first}).scalar_one())


def test_reads_hand_the_connection_back_for_transactions(filled: Store) -> None:
    # One pooled connection: every read and every transaction below share it.
    one = _one_connection(filled)
    try:
        assert one.read("SELECT count(*) AS n FROM entries WHERE corpus = :c", {"c": one.corpus})[0].n == 2
        assert _in_one_transaction(one)
        with pytest.raises(DatabaseError):  # a failed read, then a transaction again
            one.read("SELECT no_such_column FROM entries WHERE corpus = :c", {"c": one.corpus})
        assert _in_one_transaction(one)
        with one.session.timeout(0.05), pytest.raises(StatementTimeoutError):
            one.read("SELECT pg_sleep(2)", {})
        assert _in_one_transaction(one)
        # Reads in autocommit: each statement its own transaction (no open snapshot between them).
        assert one.read("SELECT current_setting('transaction_isolation') AS i, "
                        "txid_current_if_assigned() IS NULL AS none", {})[0].none
        assert one.pool.checked_out == 0  # type: ignore[attr-defined]
    finally:
        one.close()


def test_an_interrupted_read_discards_its_connection(filled: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    one = _one_connection(filled)
    try:
        pid = one.read("SELECT pg_backend_pid() AS pid", {})[0].pid

        def interrupt(text: str, values: Any) -> None:
            raise KeyboardInterrupt

        runner.add_statement_listener(interrupt)
        try:
            with pytest.raises(KeyboardInterrupt):
                one.read("SELECT 1 AS one", {})
        finally:
            runner.remove_statement_listener(interrupt)
        # The interrupted connection was not handed out again: a new one answers.
        assert one.read("SELECT pg_backend_pid() AS pid", {})[0].pid != pid
        assert _in_one_transaction(one) and one.pool.checked_out == 0  # type: ignore[attr-defined]
    finally:
        one.close()


def test_a_pooled_connection_the_driver_knows_is_closed_is_replaced(filled: Store) -> None:
    one = _one_connection(filled)
    try:
        pid = one.read("SELECT pg_backend_pid() AS pid", {})[0].pid
        with one.pool.connect() as conn:
            conn.driver.close()  # closed under the pool's feet
        assert one.read("SELECT count(*) AS n FROM entries WHERE corpus = :c", {"c": one.corpus})[0].n == 2
        assert one.read("SELECT pg_backend_pid() AS pid", {})[0].pid != pid
        assert _in_one_transaction(one) and one.pool.checked_out == 0  # type: ignore[attr-defined]
    finally:
        one.close()


def test_every_strategy_answers_and_explains_on_a_pool_of_one_connection(db_url: URL) -> None:
    """A retrieval holds one connection from its first statement to its last: what its
    statements need to know first (the space a query vector searches, whether tenancy's
    filter pairs are in use) is read by the plan's own first statements, never by a second
    checkout while the plan holds the first. With a pool of one, a second checkout would
    wait for the connection the plan holds (the first filtered vector search and hybrid
    retrieval of a fresh store timed out so once)."""
    from tnsrag_db import GraphStore, HashingEmbedding, RAGContext, VectorMemoryStore
    from tnsrag_db._db.pool import Pool
    from tnsrag_db._strategies.registry import STRATEGY_NAMES, build_strategy

    with connect(db_url, corpus="one_connection", schema=SCHEMA) as writer:
        VectorMemoryStore(writer, HashingEmbedding(32), index_threshold=None).add_all(
            [MemoryEntry(f"e{i}", f"refund policy {i}", metadata={"shelf": f"s{i % 2}"},
                         parent_id=None if i < 2 else f"e{i % 2}") for i in range(6)])
        GraphStore(writer).add_edge("e3", "e5", "refers")
    pool = Pool(db_url, schema=SCHEMA, pool_size=1, max_overflow=0, timeout=2)
    try:
        ctx = RAGContext(5, 0.0, {"shelf": "s1"})
        for name in STRATEGY_NAMES:
            for explain in (False, True):
                store = Store(pool, corpus="one_connection", schema=SCHEMA)  # knows nothing yet
                strategy = build_strategy(name, store, embedding=HashingEmbedding(32))
                found = (strategy.explain("refund policy", ctx).documents if explain  # type: ignore[attr-defined]
                         else strategy.retrieve("refund policy", ctx))
                assert found and all(d.metadata["shelf"] == "s1" for d in found), (name, explain, found)
                assert pool.checked_out == 0  # type: ignore[attr-defined]
    finally:
        pool.close()


def test_after_a_burst_the_surplus_connections_close_and_calls_settle_on_one(db_url: Any) -> None:
    """After three connections were in use at once, reads one after another give the
    surplus back to the server: once idle for ``max_idle`` the pool closes them, one per
    interval, and the calls settle on one connection (the server keeps no idle backend
    per past burst, and the reads no longer cycle through cold connections)."""
    import time
    from contextlib import ExitStack

    from tnsrag_db._db.pool import Pool

    store = Store(Pool(db_url, schema=SCHEMA, pool_size=3, max_overflow=0, max_idle=0.3), corpus="test_burst",
                  schema=SCHEMA, owns_pool=True)
    try:
        with ExitStack() as burst:
            pids = {int(burst.enter_context(store.pool.connect()).execute("SELECT pg_backend_pid()").scalar_one())
                    for _ in range(3)}
        assert len(pids) == 3
        seen: list[int] = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            seen.append(store.read("SELECT pg_backend_pid() AS pid", {})[0].pid)
            time.sleep(0.02)
        assert set(seen) <= pids and len(set(seen[:3])) > 1  # they cycled at first
        assert len(set(seen[-20:])) == 1  # and settled on one
        with store.pool.connect() as conn:
            alive = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:p)",
                                 {"p": sorted(pids)}).scalar_one()
        assert alive == 1
    finally:
        store.close()


def test_a_urls_own_libpq_options_reach_the_connections(db_url: URL) -> None:
    """``?options=-c ...`` in the URL sets those settings on every pooled connection, beside
    the library's ``search_path`` (they were dropped: the library's own ``options`` replaced
    them)."""
    from tnsrag_db._db.pool import Pool

    url = db_url.update_query_dict({"options": "-c statement_timeout=4321 -c plan_cache_mode=force_custom_plan"})
    pool = Pool(url, schema=SCHEMA, pool_size=1, max_overflow=0)
    try:
        with pool.connect() as conn:
            assert conn.execute("SHOW statement_timeout").scalar_one() == "4321ms"
            assert conn.execute("SHOW plan_cache_mode").scalar_one() == "force_custom_plan"
            assert conn.execute("SHOW search_path").scalar_one() == f"{SCHEMA},public"
        # The async API's pool (made from this engine) connects with the same options.
        import asyncio

        from tnsrag_db._db.aio import arun
        from tnsrag_db._db.statement import one

        store = Store(pool, corpus="test_libpq_options", schema=SCHEMA)
        shown = asyncio.run(arun(store, one(Statement("SELECT current_setting('statement_timeout') AS timeout, "
                                                      "current_setting('search_path') AS path"))))
        assert (shown[0].timeout, shown[0].path) == ("4321ms", f"{SCHEMA},public")
    finally:
        pool.close()
