"""The read runner (tnsrag_db._db.runner) under a store: statements in PostgreSQL's own
``$n`` form (what SQLAlchemy would compile), rows with attribute access, statement
listeners, driver errors as the library's, and the schema checks of an opening store, on
one connection (:class:`~tnsrag_db._db.pool.OneConnection`, the command line's) as on a pool."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import URL

from tests.db.test_bm25 import PRUNE_QUERIES, pruning_entries
from tnsrag_db._db import migrate, runner
from tnsrag_db._db.pool import OneConnection
from tnsrag_db._db.runner import bind
from tnsrag_db._db.settings import libpq_url
from tnsrag_db._errors import ConfigurationError, DatabaseError, StatementTimeoutError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext

SCHEMA = "tnsrag"
#: The psycopg dialect rendering PostgreSQL's own ``$n`` parameters.
_DIALECT = psycopg_dialect.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]


def _sqlalchemy_form(sql: str) -> tuple[str, tuple[str, ...]]:
    """What SQLAlchemy makes of ``text(sql)`` with ``$n`` parameters: the text and the names in number order."""
    compiled = sa.text(sql).compile(dialect=_DIALECT)
    return str(compiled.string), tuple(compiled.positiontup or ())


def _url(db_url: URL) -> str:
    return db_url.render_as_string(hide_password=False)


@pytest.fixture
def one(db_url: URL, store: Store) -> Iterator[Store]:
    """``store``'s corpus, opened on one connection as the command line opens it."""
    with connect(_url(db_url), corpus=store.corpus, schema=store.schema, _one_connection=True) as opened:
        assert isinstance(opened.pool, OneConnection)
        yield opened


@pytest.mark.parametrize("sql", [
    "SELECT :a, :b_2",
    "SELECT x::int, :v::text, CAST(:w AS jsonb)",  # casts stay, parameters around them do not
    "SELECT 'a:b', :x",
    "SELECT 100 % 7, '%(x)s', :y",  # percent signs stay (the raw cursor parses no query text)
    "SELECT '\\:escaped', :p",  # a backslashed colon is a literal colon
    "SELECT :é",
    "SELECT a:=1",
    "SELECT :a:b",
    "SELECT :a, :b, :a",  # a repeated name keeps its number
])
def test_bind_is_what_sqlalchemy_compiles(sql: str) -> None:
    assert bind(sql) == _sqlalchemy_form(sql)


def test_bind_matches_sqlalchemy_on_every_bm25_statement(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    index = BM25Index(store)
    statements = []
    for filters in (None, {"tier": "WORKING"}, {"tier": "WORKING", "source": "a.md", "topic": "x%y"}):
        for plain in (True, False):
            for pairs in (False, True) if filters else (False,):
                statements.append(index.ranking_statement("agents share memory", 5, filters=filters, plain=plain,
                                                          pairs=pairs).sql)
                statements.append(index.documents_statement("TAN-5326 memory", 3, filters=filters, plain=plain,
                                                            pairs=pairs).sql)
    statements.append(index.term_figures_sql("agents memory", ["a"])[0])
    # The term statistics' statements, as the index reads them.
    reads: list[str] = []
    read = store.read

    def recording(sql: str, params: Mapping[str, Any]) -> list[Any]:
        reads.append(sql)
        return read(sql, params)

    monkeypatch.setattr(store, "read", recording)
    index.query_terms("agents memory")
    index.document_terms(["a"])
    index.corpus_statistics()
    index.document_frequency(["agent"])
    assert len(set(reads)) == 4
    statements += reads
    for sql in statements:
        assert bind(sql) == _sqlalchemy_form(sql), sql[:200]


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql://u:p@h:5/db?sslmode=disable", "postgresql://u:p@h:5/db?sslmode=disable"),
    ("postgres://u@/db?host=/tmp", "postgresql://u@/db?host=/tmp"),
    ("postgresql+psycopg://u@h/db", "postgresql://u@h/db"),
    ("postgresql+psycopg2://u@h/db", "postgresql://u@h/db"),
    ("mysql://u@h/db", None),
    ("sqlite:///x.db", None),
    ("not a url", None),
])
def test_libpq_url(url: str, expected: str | None) -> None:
    assert libpq_url(url) == expected


def test_bm25_takes_a_store_on_one_connection_and_nothing_else(one: Store) -> None:
    assert BM25Index(one).store is one
    with pytest.raises(ConfigurationError, match="BM25Index needs a Store, got object"):
        BM25Index(object())  # type: ignore[arg-type]


def test_keyword_results_on_one_connection_are_the_pools(one: Store, store: Store) -> None:
    """The command line's store (one connection, kept between calls) answers as a pooled
    one: the plain statement, the deferral to the pruned one, snapshots and the term
    statistics, one call after the other on the same connection."""
    index = BM25Index(store)
    index.add_all(pruning_entries(random.Random(7), 120))
    index.add_all([MemoryEntry("id-%d" % n, f"agents share memory note {n} TAN-5326", "EPISODIC", source="n.md",
                               metadata={"topic": "t%d" % (n % 3)}) for n in range(12)])
    contexts = [RAGContext(), RAGContext(3), RAGContext(50, 2.5), RAGContext(10, 0.0, {"tier": "WORKING"}),
                RAGContext(10, 0.0, {"source": "n.md", "topic": "t2"}), RAGContext(5, 1e9)]
    compared = 0
    for prune_min_df in (10**9, 1):  # the plain statement alone, then the deferral to the pruned one
        pooled = KeywordRAGStrategy(BM25Index(store, prune_min_df=prune_min_df))
        single = KeywordRAGStrategy(BM25Index(one, prune_min_df=prune_min_df))
        for query in [*PRUNE_QUERIES, "TAN-5326", "agents share memory"]:
            for ctx in contexts:
                want = pooled.retrieve(query, ctx)
                assert single.retrieve(query, ctx) == want, (query, ctx)
                assert one.run(single.plan(query, ctx), snapshot=True) == want, (query, ctx)
                compared += bool(want)
    assert compared > 20  # most cases found something: the comparison is not of empty lists
    pool = one.pool
    assert isinstance(pool, OneConnection) and pool.checked_out == 0  # handed back after each call
    single_index = BM25Index(one)
    assert single_index.query_terms("Agents share TAN-5326") == index.query_terms("Agents share TAN-5326")
    assert single_index.corpus_statistics() == index.corpus_statistics()
    assert single_index.document_terms(["id-1", "nope"]) == index.document_terms(["id-1", "nope"])
    assert single_index.document_frequency(["agent", "memori", "zzz"]) == \
        index.document_frequency(["agent", "memori", "zzz"])


@pytest.mark.parametrize("on_one_connection", [True, False])
def test_rows_have_attribute_access_and_listeners_see_each_statement(one: Store, store: Store,
                                                                     on_one_connection: bool) -> None:
    target = one if on_one_connection else store
    seen: list[tuple[str, Sequence[Any]]] = []

    def listen(text: str, values: Sequence[Any]) -> None:
        seen.append((text, values))

    sql = "SELECT :c AS corpus, 2 AS n, CAST('{\"a\": \"b\"}' AS jsonb) AS metadata"
    sent = "SELECT $1 AS corpus, 2 AS n, CAST('{\"a\": \"b\"}' AS jsonb) AS metadata"
    # The read runner sends the corpus hidden from the planner (no Citus here); a connection, as given.
    read = "SELECT (SELECT CAST($1 AS text)) AS corpus, 2 AS n, CAST('{\"a\": \"b\"}' AS jsonb) AS metadata"
    runner.add_statement_listener(listen)
    try:
        rows = target.read(sql, {"c": target.corpus})  # the read runner
        with target.pool.connect() as conn:  # a connection handed out for writes and maintenance
            row = conn.execute(sql, {"c": "other"}).one()
    finally:
        runner.remove_statement_listener(listen)
    assert rows[0].corpus == target.corpus and rows[0].n == 2 and rows[0].metadata == {"a": "b"}
    assert rows[0][1] == 2 and tuple(rows[0]) == (target.corpus, 2, {"a": "b"})
    assert row.corpus == "other" and row._fields == ("corpus", "n", "metadata")
    assert seen == [(read, (target.corpus,)), (sent, ("other",))]
    target.read("SELECT 1 AS one", {})
    assert len(seen) == 2  # removed


def test_the_schema_state_of_a_migrated_and_an_unmigrated_database(db_url: URL, fresh_db_url: URL) -> None:
    with OneConnection(_url(db_url), schema=SCHEMA) as db:
        state = migrate.schema_state(db, schema=SCHEMA)
        assert state.at_head and state.usable and state.revision == migrate.head_revision()
        assert migrate.is_at_head(db, schema=SCHEMA)
    with OneConnection(_url(fresh_db_url), schema=SCHEMA) as bare:
        state = migrate.schema_state(bare, schema=SCHEMA)
        assert state.revision is None and not state.at_head and not state.usable
        assert "is not migrated" in str(state.error(SCHEMA))
        assert not migrate.is_at_head(bare, schema=SCHEMA)
        with bare.connect() as conn:  # the failed probe left the connection usable
            assert conn.execute("SELECT 1 AS one").one().one == 1
    with OneConnection(_url(db_url), schema="no_such_schema") as missing:
        state = migrate.schema_state(missing, schema="no_such_schema")
        assert state.revision is None and not state.at_head


def test_driver_errors_are_the_librarys(one: Store, db_url: URL) -> None:
    with pytest.raises(DatabaseError, match=f"database error in corpus {one.corpus!r}"):
        one.read("SELECT * FROM no_such_table_here", {})
    assert one.read("SELECT 1 AS one", {})[0].one == 1  # autocommit: the error ended nothing else
    with pytest.raises(ValidationError, match="not Unicode text"):
        one.read("SELECT :x AS x", {"x": "\udc80"})
    with connect(_url(db_url), corpus="c", schema=SCHEMA, statement_timeout=0.05, _one_connection=True) as slow:
        with pytest.raises(StatementTimeoutError, match="statement cancelled \\(57014\\)") as exc:
            slow.read("SELECT pg_sleep(2)", {})
        assert exc.value.sqlstate == "57014"
        assert slow.read("SELECT 1 AS one", {})[0].one == 1  # the connection serves on
    unreachable = _url(db_url.set(host="127.0.0.1", port=1, query={}))
    with pytest.raises(DatabaseError, match="^could not connect: "):  # opening the store
        connect(unreachable, corpus="c", schema=SCHEMA, _one_connection=True)
    with Store(OneConnection(unreachable, schema=SCHEMA), corpus="c", owns_pool=True) as gone:
        with pytest.raises(DatabaseError, match="^could not connect: "):  # a read of a store already open
            gone.read("SELECT 1 AS one", {})
