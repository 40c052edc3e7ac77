"""The library's connections (tnsrag_db._db.pool): a :class:`Connection`'s statements and
:class:`Result`, its transactions, a :class:`Pool` that fails fast when it cannot connect,
the :class:`OneConnection` of the command line, and the statement timeout a connection
carries from one store's call to the next."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import URL

from tnsrag_db._db import aio, runner
from tnsrag_db._db.pool import Connection, OneConnection, Pool
from tnsrag_db._db.runner import set_statement_timeout
from tnsrag_db._db.statement import Statement, one as one_statement
from tnsrag_db._errors import ConfigurationError, DatabaseError
from tnsrag_db._store.store import Store

SCHEMA = "tnsrag"


def _url(db_url: URL) -> str:
    return db_url.render_as_string(hide_password=False)


@pytest.fixture
def table(pool: Pool) -> Iterator[str]:
    """A table of the test's own, ``(n int)``, dropped afterwards."""
    name = f"public.pool_test_{uuid.uuid4().hex[:12]}"
    with pool.begin() as conn:
        conn.execute(f"CREATE TABLE {name} (n int)")
    yield name
    with pool.begin() as conn:
        conn.execute(f"DROP TABLE {name}")


def _numbers(pool: Pool, table: str) -> list[int]:
    """The numbers in ``table`` as a connection of its own sees them (the committed ones)."""
    with pool.connect() as conn:
        return conn.execute(f"SELECT n FROM {table} ORDER BY n").scalars()


def _pid(conn: Connection) -> int:
    return int(conn.execute("SELECT pg_backend_pid()").scalar_one())


# -- Connection and Result ----------------------------------------------------------------

def test_a_result_hands_out_its_rows(pool: Pool) -> None:
    with pool.connect() as conn:
        two = "SELECT n, s FROM (VALUES (1, 'a'), (2, 'b')) AS t(n, s) ORDER BY n"
        result = conn.execute(two)
        assert result.fetchone() == (1, "a")
        second = result.fetchone()
        assert second is not None and second.s == "b"  # named tuples, as the read runner's rows
        assert result.fetchone() is None
        result = conn.execute(two)
        assert result.all() == result.fetchall() == list(result) == [(1, "a"), (2, "b")]
        assert result.first() == (1, "a") and result.scalar() == 1 and result.scalars() == [1, 2]
        with pytest.raises(DatabaseError, match="expected one row, got 2"):
            result.one()
        with pytest.raises(DatabaseError, match="expected at most one row, got 2"):
            result.one_or_none()
        with pytest.raises(DatabaseError, match="expected one row, got 2"):
            result.scalar_one()
        none = conn.execute("SELECT 1 AS n WHERE false")
        assert none.all() == [] and none.first() is None and none.scalar() is None
        assert none.one_or_none() is None and none.scalar_one_or_none() is None
        with pytest.raises(DatabaseError, match="expected one row, got 0"):
            none.one()
        single = conn.execute("SELECT CAST(:v AS int) AS v", {"v": 7})
        assert single.one().v == 7 and single.scalar_one() == 7 and single.scalar_one_or_none() == 7


def test_rowcounts_batches_and_a_missing_parameter(pool: Pool, table: str) -> None:
    seen: list[tuple[str, Sequence[Any]]] = []

    def listen(text: str, values: Sequence[Any]) -> None:
        seen.append((text, values))

    with pool.begin() as conn:
        runner.add_statement_listener(listen)
        try:
            batch = conn.execute(f"INSERT INTO {table} (n) VALUES (:n)", [{"n": 1}, {"n": 2}, {"n": 3}])
            with pytest.raises(psycopg.ProgrammingError, match="needs parameter\\(s\\) m"):
                conn.execute(f"UPDATE {table} SET n = :m WHERE n = :n", {"n": 1})
        finally:
            runner.remove_statement_listener(listen)
        assert batch.rowcount == 3 and batch.all() == []  # one batch, no rows
        assert seen == [(f"INSERT INTO {table} (n) VALUES ($1)", (1,))]  # the batch once; nothing of the refused one
        assert conn.execute(f"UPDATE {table} SET n = n * 10 WHERE n >= :n", {"n": 2}).rowcount == 2
    assert _numbers(pool, table) == [1, 20, 30]


def test_begin_commits_the_block_or_rolls_it_back(pool: Pool, table: str) -> None:
    with pool.connect() as conn:
        before = conn.transaction_number()
        with conn.begin():
            conn.execute(f"INSERT INTO {table} VALUES (1)")
            assert conn.in_transaction()
            assert _numbers(pool, table) == []  # not committed yet: another connection sees nothing
        assert not conn.in_transaction() and _numbers(pool, table) == [1]
        assert conn.transaction_number() == before + 1
        with pytest.raises(RuntimeError, match="boom"), conn.begin():
            conn.execute(f"INSERT INTO {table} VALUES (2)")
            raise RuntimeError("boom")
        assert not conn.in_transaction() and conn.transaction_number() == before + 2
        conn.execute(f"INSERT INTO {table} VALUES (3)")  # a transaction left open...
    assert _numbers(pool, table) == [1]  # ...is rolled back when the connection goes back
    with pool.begin() as conn:
        conn.execute(f"INSERT INTO {table} VALUES (4)")
    assert _numbers(pool, table) == [1, 4]


# -- Pool ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change", [{"host": "127.0.0.1", "port": 1, "query": {}},  # nothing listens
                                    {"database": "no_such_database_here"}, {"username": "no_such_role_here"}])
def test_a_pool_that_cannot_connect_says_so_at_once(db_url: URL, change: dict[str, Any]) -> None:
    """The pool's connection attempts run in its worker thread; a caller waiting for one
    gets the attempt's error as soon as it failed, not the "no connection came free"
    error after the pool's 30 s timeout."""
    pool = Pool(_url(db_url.set(**change)), schema=SCHEMA, timeout=30.0)  # opens nothing yet
    try:
        assert pool.checked_out == 0
        with pytest.raises(DatabaseError, match="^could not connect: ") as exc, pool.connect():
            pass
        assert "came free" not in str(exc.value)
        with pytest.raises(DatabaseError, match="^could not connect: "):
            pool.checkout()  # the read runner's way in
        with Store(pool, corpus="c", schema=SCHEMA) as store, \
                pytest.raises(DatabaseError, match="^could not connect: "):
            store.read("SELECT 1 AS one", {})
    finally:
        pool.close()


def test_every_call_on_a_pool_that_cannot_connect_says_so_and_a_database_that_appears_serves(
        pg_server_url: URL) -> None:
    """A server that stays unreachable: each call, sync or async, gets the error of an attempt
    of its own at once (none waits out the pool's timeout behind reconnection attempts put
    off ever longer). A database that appears serves the very next call."""
    name = f"pool_test_{uuid.uuid4().hex[:12]}"
    url = _url(pg_server_url.set(database=name))
    maintenance = _url(pg_server_url.set(drivername="postgresql"))
    statement = Statement("SELECT current_database() AS db")
    try:
        with Pool(url, schema=SCHEMA, timeout=3.0) as pool, Store(pool, corpus="c", schema=SCHEMA) as store:

            async def async_calls() -> None:
                for _ in range(5):
                    with pytest.raises(DatabaseError, match=f"^could not connect: .*{name}"):
                        await aio.arun(store, one_statement(statement))

            for _ in range(5):
                with pytest.raises(DatabaseError, match=f"^could not connect: .*{name}"), pool.connect():
                    pass
            asyncio.run(async_calls())
            with psycopg.connect(maintenance, autocommit=True) as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with pool.connect() as conn:
                assert conn.execute(statement.sql).scalar_one() == name
            assert asyncio.run(aio.arun(store, one_statement(statement)))[0].db == name
    finally:
        with psycopg.connect(maintenance, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_pool_whose_connections_are_all_in_use_waits_its_timeout(db_url: URL) -> None:
    with Pool(_url(db_url), schema=SCHEMA, pool_size=1, max_overflow=0, timeout=0.3) as pool:
        with pool.connect() as held:
            assert pool.checked_out == 1
            with pytest.raises(DatabaseError, match=r"no connection to .* came free within 0.3 s \(all 1 in use\)"):
                with pool.connect():
                    pass
            assert _pid(held) > 0  # the held one is untouched
        with pool.connect() as conn:  # free again
            assert conn.execute("SELECT current_setting('search_path')").scalar_one() == f"{SCHEMA},public"
    with pytest.raises(ConfigurationError, match="is closed"), pool.connect():
        pass


# -- OneConnection ---------------------------------------------------------------------------

def test_one_connection_is_kept_and_handed_out_once_at_a_time(db_url: URL) -> None:
    with OneConnection(_url(db_url), schema=SCHEMA) as one:
        assert one.checked_out == 0
        with one.connect() as conn:
            pid = _pid(conn)
            assert conn.execute("SELECT current_setting('search_path')").scalar_one() == f"{SCHEMA},public"
            assert one.checked_out == 1
            with pytest.raises(DatabaseError, match="the one connection to .* is in use"), one.connect():
                pass
            with pytest.raises(DatabaseError, match="is in use"):
                one.checkout()
            conn.execute("CREATE TEMP TABLE kept (n int)")
            conn.commit()
            conn.execute("INSERT INTO kept VALUES (1)")  # left open: rolled back at the hand-back
        assert one.checked_out == 0
        with one.connect() as conn:
            assert not conn.in_transaction() and _pid(conn) == pid  # the same session, at rest
            assert conn.execute("SELECT count(*) FROM kept").scalar_one() == 0
        got = one.checkout()  # the read runner's hand-out: the same connection
        try:
            assert got.driver.execute("SELECT pg_backend_pid()").fetchone() == (pid,)
        finally:
            got.release()
        with pytest.raises(RuntimeError), one.connect(autocommit=True) as conn:
            assert _pid(conn) == pid
            raise RuntimeError("an autocommit block that raised: its session state goes with it")
        with one.connect() as conn:
            assert _pid(conn) != pid  # a new connection, opened for this hand-out
    with pytest.raises(ConfigurationError, match="is closed"), one.connect():
        pass


def test_one_connection_that_cannot_connect_says_so(db_url: URL) -> None:
    one = OneConnection(_url(db_url.set(host="127.0.0.1", port=1, query={})), schema=SCHEMA)  # opens nothing yet
    try:
        with pytest.raises(DatabaseError, match="^could not connect: "), one.connect():
            pass
        assert one.checked_out == 0  # nothing held after the failure
    finally:
        one.close()
    with pytest.raises(ConfigurationError, match="schema name must match"):
        OneConnection(_url(db_url), schema="a-b")
    with pytest.raises(ConfigurationError, match="tnsrag_db needs PostgreSQL, got a 'mysql' URL"):
        OneConnection("mysql://u@h/db", schema=SCHEMA)


# -- the statement timeout, a setting of the connection ------------------------------------------

def test_the_statement_timeout_goes_with_the_store_on_one_connection(db_url: URL) -> None:
    timeout = "SELECT current_setting('statement_timeout') AS t"
    with OneConnection(_url(db_url), schema=SCHEMA) as one:
        limited = Store(one, corpus="c", schema=SCHEMA, statement_timeout=7)
        plain = Store(one, corpus="c", schema=SCHEMA)
        # The one connection serves both stores in turn: each call gives it its store's setting.
        assert [s.read(timeout, {})[0].t for s in (limited, plain, limited, limited, plain)] == \
            ["7s", "0", "7s", "7s", "0"]
        with limited.session.transaction() as conn:  # the write path too
            assert conn.execute(timeout).scalar_one() == "7s"
        with plain.timeout(2.5):
            assert plain.read(timeout, {})[0].t == "2500ms"
            with plain.session.transaction() as conn:
                assert conn.execute(timeout).scalar_one() == "2500ms"
        with limited.session.autocommit() as conn:  # index builds: unlimited
            assert conn.execute(timeout).scalar_one() == "0"
        assert plain.read(timeout, {})[0].t == "0"


def test_the_statement_timeout_is_set_only_when_it_changes(db_url: URL) -> None:
    with psycopg.connect(_url(db_url.set(drivername="postgresql")), autocommit=True) as driver:
        info: dict[Any, Any] = {}
        set_statement_timeout(driver, info, 5000)
        assert driver.execute("SHOW statement_timeout").fetchone() == ("5s",)
        driver.execute("SET statement_timeout = 1234")  # behind the library's back
        set_statement_timeout(driver, info, 5000)  # the connection's info says it has 5 s: nothing sent
        assert driver.execute("SHOW statement_timeout").fetchone() == ("1234ms",)
        set_statement_timeout(driver, info, None)
        assert driver.execute("SHOW statement_timeout").fetchone() == ("0",)
        assert info == {}
        driver.autocommit = False
        set_statement_timeout(driver, info, 300)  # outside any transaction: the one it opened is committed
        assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert driver.execute("SHOW statement_timeout").fetchone() == ("300ms",)
