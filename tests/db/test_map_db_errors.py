"""map_db_errors: each SQLSTATE family reaches the caller as its own DatabaseError subclass,
with the driver error as ``__cause__`` and its SQLSTATE kept; provoked on a real server
where PostgreSQL can be made to raise it, raised by the server on request otherwise."""

from __future__ import annotations

import threading

import psycopg
import pytest

from tnsrag_db._db.driver_errors import map_db_errors
from tnsrag_db._db.session import retry_on_deadlock
from tnsrag_db._errors import (
    ConfigurationError,
    ConnectionLostError,
    ConstraintViolationError,
    DatabaseError,
    DeadlockError,
    EmbeddingValidationError,
    InvalidEntryError,
    LockTimeoutError,
    PermissionDeniedError,
    RetrievalError,
    StatementTimeoutError,
    StrategyUnavailableError,
    TnsragError,
    ValidationError,
)
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry

# SQLSTATE -> the class it maps to (exactly, not a subclass of it).
RAISED = [
    ("40P01", DeadlockError),
    ("57014", StatementTimeoutError),
    ("55P03", LockTimeoutError),
    ("42501", PermissionDeniedError),
    ("25006", PermissionDeniedError),
    ("23505", ConstraintViolationError),
    ("23503", ConstraintViolationError),
    ("23514", ConstraintViolationError),
    ("23502", ConstraintViolationError),
    ("57P01", ConnectionLostError),
    ("08006", ConnectionLostError),
    ("22012", DatabaseError),
    ("40001", DatabaseError),  # a serialization failure is no deadlock: not retried
]


def _raise_sql(code: str) -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION 'raised %', '{code}' USING ERRCODE = '{code}'; END $$"


@pytest.mark.parametrize(("code", "expected"), RAISED)
def test_each_sqlstate_maps_to_its_class(store: Store, code: str, expected: type[DatabaseError]) -> None:
    with pytest.raises(DatabaseError) as caught:
        with store.session.transaction() as conn:
            conn.execute((_raise_sql(code)))
    assert type(caught.value) is expected
    assert caught.value.sqlstate == code
    assert isinstance(caught.value.__cause__, psycopg.Error)
    assert f"raised {code}" in str(caught.value)
    assert str(caught.value).startswith(f"database error in corpus {store.corpus!r}")


def test_a_bare_driver_error_maps_too() -> None:
    # The write path streams COPY through the driver connection: psycopg's own errors.
    with pytest.raises(ConstraintViolationError) as caught:
        with map_db_errors("copying"):
            raise psycopg.errors.UniqueViolation("duplicate key")
    assert isinstance(caught.value.__cause__, psycopg.errors.UniqueViolation)
    assert str(caught.value) == "copying: duplicate key"


def test_library_errors_pass_through_and_unencodable_text_is_a_validation_error() -> None:
    with pytest.raises(InvalidEntryError):
        with map_db_errors("x"):
            raise InvalidEntryError("bad")
    with pytest.raises(ValidationError, match="lone surrogate at position 4"):
        with map_db_errors("x"):
            "bad \ud800".encode()
    with pytest.raises(KeyError):  # anything else is not the mapping's business
        with map_db_errors("x"):
            raise KeyError("k")


def test_a_real_deadlock_is_a_deadlock_error(store: Store) -> None:
    store.add_all([MemoryEntry("a", "first"), MemoryEntry("b", "second")])
    barrier = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def side(first: str, second: str) -> None:
        try:
            with store.session.transaction() as conn:
                update = "UPDATE entries SET source = 'x' WHERE corpus = :c AND id = :id"
                conn.execute(update, {"c": store.corpus, "id": first})
                barrier.wait()
                conn.execute(update, {"c": store.corpus, "id": second})
        except BaseException as exc:  # noqa: BLE001 - inspected below
            errors.append(exc)

    threads = [threading.Thread(target=side, args=("a", "b")), threading.Thread(target=side, args=("b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(errors) == 1  # PostgreSQL aborted one side; the other committed
    assert type(errors[0]) is DeadlockError and errors[0].sqlstate == "40P01"


def test_a_real_statement_timeout(store: Store) -> None:
    with store.timeout(0.05), pytest.raises(StatementTimeoutError, match="57014") as caught:
        store.session.read("SELECT pg_sleep(2)", {})
    assert caught.value.sqlstate == "57014"


def test_a_real_lock_not_available(store: Store) -> None:
    store.add(MemoryEntry("held", "a row another session holds"))
    with store.session.transaction() as holder:
        holder.execute("SELECT 1 FROM entries WHERE corpus = :c AND id = 'held' FOR UPDATE",
                       {"c": store.corpus})
        with pytest.raises(StatementTimeoutError, match="55P03"):
            with store.session.transaction() as conn:
                conn.execute("SELECT 1 FROM entries WHERE corpus = :c AND id = 'held' FOR UPDATE NOWAIT",
                             {"c": store.corpus})


def test_real_constraint_violations(store: Store) -> None:
    store.add(MemoryEntry("dup", "stored once"))
    unique = ("INSERT INTO entries (corpus, id, content, tier, content_hash) "
              "VALUES (:c, 'dup', 'again', 'WORKING', '\\x00')")
    foreign = ("INSERT INTO edges (corpus, src, dst) VALUES (:c, 'dup', 'nowhere')")
    check = ("UPDATE entries SET tier = 'NO_SUCH_TIER' WHERE corpus = :c AND id = 'dup'")
    for sql, code in ((unique, "23505"), (foreign, "23503"), (check, "23514")):
        with pytest.raises(ConstraintViolationError) as caught:
            with store.session.transaction() as conn:
                conn.execute(sql, {"c": store.corpus})
        assert caught.value.sqlstate == code
    entry = store.get("dup")
    assert entry is not None and entry.content == "stored once"


def test_a_real_read_only_transaction_refuses_a_write(store: Store) -> None:
    with pytest.raises(PermissionDeniedError, match="25006"):
        with store.session.transaction() as conn:
            conn.execute("SET TRANSACTION READ ONLY")
            conn.execute("DELETE FROM entries WHERE corpus = :c", {"c": store.corpus})


def test_retry_on_deadlock_retries_deadlocks_only(store: Store) -> None:
    calls: list[str] = []

    def once(code: str) -> None:
        calls.append(code)
        with store.session.transaction() as conn:
            conn.execute((_raise_sql(code)))

    with pytest.raises(ConstraintViolationError):
        retry_on_deadlock(lambda: once("23505"))
    with pytest.raises(DeadlockError):
        retry_on_deadlock(lambda: once("40P01"), retries=1)
    assert calls == ["23505", "40P01", "40P01"]


@pytest.mark.parametrize(("error", "runtime"), [
    (DeadlockError("d"), True),
    (ConstraintViolationError("c"), True),
    (StatementTimeoutError("t"), True),
    (ConnectionLostError("l"), True),
    (RetrievalError("r"), True),
    (EmbeddingValidationError("e"), True),
    (StrategyUnavailableError("s"), False),
    (ConfigurationError("c"), False),
    (ValidationError("v"), False),
    (TnsragError("t"), False),
])
def test_each_class_says_whether_it_is_a_runtime_failure(error: TnsragError, runtime: bool) -> None:
    assert error.runtime_failure is runtime


def test_a_write_error_is_one_line_with_the_driver_error_as_its_cause(store: Store) -> None:
    # Once the message carried SQLAlchemy's "[SQL: ...]", "[parameters: ...]" and its
    # "Background on this error" link; the driver's own error stays on the cause.
    with pytest.raises(DatabaseError) as info:
        with store.session.transaction() as conn:
            conn.execute("SELECT 1 / CAST(:zero AS int)", {"zero": 0})
    message = str(info.value)
    assert message == f"database error in corpus {store.corpus!r}: division by zero", message
    assert "[SQL:" not in message and "[parameters:" not in message and "sqlalche.me" not in message
    assert isinstance(info.value.__cause__, psycopg.errors.DivisionByZero)  # the driver's, for debugging
    assert info.value.sqlstate == "22012"
