"""Every failure reaches the caller as a typed error with nothing half-written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL, Connection

from tests.fix_db import SCHEMA
from tnsrag_db import (
    BM25Index,
    HashingEmbedding,
    KeywordRAGStrategy,
    MemoryEntry,
    RAGContext,
    VectorMemoryStore,
)
from tnsrag_db._db.hooks import ConnectionHooks
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import (
    ConfigurationError,
    ConnectionLostError,
    InvalidEntryError,
    InvalidFilterError,
    StatementTimeoutError,
    ValidationError,
)
from tnsrag_db._store.store import Store

LONE = "bad \ud800 text"


def test_nul_in_ids_to_read_or_delete_gives_a_validation_error(store: Store) -> None:
    """PostgreSQL text cannot hold NUL: the driver refused such an id with a plain DatabaseError."""
    store.add(MemoryEntry("ok", "fine text"))
    for call in (lambda: store.get("a\x00b"), lambda: store.get_many(["ok", "a\x00b"]),
                 lambda: store.delete("a\x00b"), lambda: store.delete_many(["ok", "a\x00b"])):
        with pytest.raises(ValidationError, match="NUL"):
            call()
    assert store.count() == 1 and store.get("ok") is not None


def test_lone_surrogates_anywhere_give_typed_errors_and_write_nothing(store: Store) -> None:
    store.add(MemoryEntry("ok", "fine text"))
    for make in (lambda: MemoryEntry(LONE, "x"), lambda: MemoryEntry("a", LONE),
                 lambda: MemoryEntry("a", "x", source=LONE), lambda: MemoryEntry("a", "x", parent_id=LONE),
                 lambda: MemoryEntry("a", "x", metadata={"k": LONE}),
                 lambda: MemoryEntry("a", "x", metadata={LONE: "v"})):
        with pytest.raises(InvalidEntryError, match="surrogate"):
            make()
    with pytest.raises(InvalidFilterError, match="surrogate"):
        store.count({"k": LONE})
    with pytest.raises(InvalidFilterError, match="surrogate"):
        RAGContext(metadata_filters={LONE: "v"})
    with pytest.raises(ValidationError, match="surrogate"):
        BM25Index(store).search(LONE, 3)
    with pytest.raises(ValidationError, match="surrogate"):
        KeywordRAGStrategy(BM25Index(store)).retrieve(LONE)
    vectors = VectorMemoryStore(store, HashingEmbedding(8), index_threshold=None)
    with pytest.raises(ValidationError, match="surrogate"):
        vectors.search(LONE, 3)
    with pytest.raises(ConfigurationError):
        store.with_corpus(LONE)
    # Arguments the driver would have had to encode: a ValidationError, not UnicodeEncodeError.
    with pytest.raises(ValidationError):
        store.get(LONE)
    with pytest.raises(ValidationError):
        store.delete(LONE)
    assert [e.id for e in store.iter_entries()] == ["ok"]


def _timeout_engine(url: URL, milliseconds: int) -> Pool:
    def _short_timeout(dbapi_conn: Any, info: Any) -> None:  # a server-side statement_timeout
        dbapi_conn.execute(f"SET statement_timeout = '{milliseconds}ms'")
        dbapi_conn.commit()

    return Pool(url, schema=SCHEMA, pool_size=1, hooks=[ConnectionHooks("short_timeout", configure=_short_timeout)])


def test_server_statement_timeout_during_a_bulk_write_is_a_statement_timeout_error(store: Store, db_url: URL) -> None:
    pool = _timeout_engine(db_url, 5)
    try:
        limited = Store(pool, corpus=store.corpus, schema=SCHEMA)
        batch = [MemoryEntry(f"t{i}", f"bulk entry number {i} with several words of text " * 3) for i in range(20_000)]
        with pytest.raises(StatementTimeoutError, match="57014"):
            limited.add_all(batch)
    finally:
        pool.close()
    assert store.count() == 0


def test_a_disconnect_during_a_write_names_the_disconnect_and_commits_nothing(store: Store, db_url: URL) -> None:
    conninfo = db_url.set(drivername="postgresql").render_as_string(hide_password=False)

    def work(conn: Connection) -> None:
        store.writer.write_in(conn, [MemoryEntry("x1", "first half")])
        pid = conn.execute("SELECT pg_backend_pid()").scalar_one()
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        store.writer.write_in(conn, [MemoryEntry("x2", "second half")])

    with pytest.raises(ConnectionLostError, match="terminat|closed|lost") as info:
        store.writer.transaction(work)
    assert "Can't reconnect" not in str(info.value)
    assert store.count() == 0
