"""The SQLAlchemy-free read path (tnsrag_db._db.driver): the same SQL in the driver's form,
the same rows, scores and errors as a Store, on a real corpus."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.engine import URL

from tests.db._helpers import RecordingStore
from tests.db.test_bm25 import PRUNE_QUERIES, pruning_entries
from tnsrag_db._cli._common import DEFAULT_SCHEMA as CLI_DEFAULT_SCHEMA
from tnsrag_db._db import migrate, revisions, runner
from tnsrag_db._db.driver import DriverStore
from tnsrag_db._db.read_store import ReadStore
from tnsrag_db._db.runner import bind
from tnsrag_db._db.schema import DEFAULT_SCHEMA
from tnsrag_db._db.settings import check_timeout, libpq_url, validate_schema_name
from tnsrag_db._errors import ConfigurationError, DatabaseError, StatementTimeoutError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext

#: The psycopg dialect rendering PostgreSQL's own ``$n`` parameters.
_DIALECT = psycopg_dialect.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]


def _sqlalchemy_form(sql: str) -> tuple[str, tuple[str, ...]]:
    """What SQLAlchemy makes of ``text(sql)`` with ``$n`` parameters: the text and the names in number order."""
    compiled = sa.text(sql).compile(dialect=_DIALECT)
    return str(compiled.string), tuple(compiled.positiontup or ())


def _conninfo(db_url: URL) -> str:
    found = libpq_url(db_url.render_as_string(hide_password=False))
    assert found is not None
    return found


@pytest.fixture
def lean(db_url: URL, store: Store) -> Iterator[DriverStore]:
    with DriverStore(_conninfo(db_url), corpus=store.corpus, schema=store.schema,
                     max_query_terms=store.max_query_terms) as opened:
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


def test_bind_matches_sqlalchemy_on_every_bm25_statement(lean: DriverStore) -> None:
    index = BM25Index(lean)
    statements = []
    for filters in (None, {"tier": "WORKING"}, {"tier": "WORKING", "source": "a.md", "topic": "x%y"}):
        for plain in (True, False):
            statements.append(index.ranking_statement("agents share memory", 5, filters=filters, plain=plain).sql)
            statements.append(index.documents_statement("TAN-5326 memory", 3, filters=filters, plain=plain).sql)
    statements.append(index.term_figures_sql("agents memory", ["a"])[0])
    # The term statistics' statements, as the index reads them.
    recording = RecordingStore(lean)
    stats = BM25Index(recording)
    stats.query_terms("agents memory")
    stats.document_terms(["a"])
    stats.corpus_statistics()
    stats.document_frequency(["agent"])
    assert len({text for text, _ in recording.reads}) == 4
    statements += [text for text, _ in recording.reads]
    for sql in statements:
        assert bind(sql) == _sqlalchemy_form(sql), sql[:200]


def test_the_sqlalchemy_free_copies_agree_with_the_originals() -> None:
    assert CLI_DEFAULT_SCHEMA == DEFAULT_SCHEMA
    assert revisions.shipped_head() == revisions.shipped_head() == migrate.head_revision()
    for name in ("tnsrag", "_x9", "a" * 63, "a" * 64, "Tnsrag", "1abc", "a-b", "", "a b", "tnsrag;drop"):
        try:
            validate_schema_name(name)
        except ConfigurationError as exc:
            with pytest.raises(ConfigurationError) as lean_exc:
                DriverStore("", corpus="c", schema=name, max_query_terms=1)
            assert str(lean_exc.value) == str(exc)
        else:
            DriverStore("", corpus="c", schema=name, max_query_terms=1)
    for seconds in (None, 0.0005, 1, 2.5, 0, -1, float("inf"), float("nan"), "1", True, 86_400 * 24):
        try:
            expected = check_timeout(seconds)
        except ConfigurationError as exc:
            with pytest.raises(ConfigurationError) as lean_exc:
                DriverStore("", corpus="c", schema="s", max_query_terms=1, statement_timeout=seconds)  # type: ignore[arg-type]
            assert str(lean_exc.value) == str(exc)
        else:
            made = DriverStore("", corpus="c", schema="s", max_query_terms=1, statement_timeout=seconds)  # type: ignore[arg-type]
            assert made._timeout_ms == expected


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


def test_a_driver_store_is_a_read_store_and_bm25_takes_it(lean: DriverStore, store: Store) -> None:
    assert isinstance(lean, ReadStore) and isinstance(store, ReadStore)
    assert BM25Index(lean).store is lean
    with pytest.raises(ConfigurationError, match="BM25Index needs a Store, got object"):
        BM25Index(object())  # type: ignore[arg-type]


def test_keyword_results_equal_the_stores(lean: DriverStore, store: Store) -> None:
    index = BM25Index(store)
    index.add_all(pruning_entries(random.Random(7), 120))
    index.add_all([MemoryEntry("id-%d" % n, f"agents share memory note {n} TAN-5326", "EPISODIC", source="n.md",
                               metadata={"topic": "t%d" % (n % 3)}) for n in range(12)])
    contexts = [RAGContext(), RAGContext(3), RAGContext(50, 2.5), RAGContext(10, 0.0, {"tier": "WORKING"}),
                RAGContext(10, 0.0, {"topic": "t1"}), RAGContext(10, 0.0, {"source": "n.md", "topic": "t2"}),
                RAGContext(5, 1e9)]
    compared = 0
    for prune_min_df in (10**9, 1):  # the plain statement alone, then the deferral to the pruned one
        index, lean_index = BM25Index(store, prune_min_df=prune_min_df), BM25Index(lean, prune_min_df=prune_min_df)
        full, light = KeywordRAGStrategy(index), KeywordRAGStrategy(lean_index)
        for query in [*PRUNE_QUERIES, "TAN-5326", "agents share memory"]:
            for ctx in contexts:
                want = full.retrieve(query, ctx)
                got = light.retrieve(query, ctx)
                assert got == want, (query, ctx)
                compared += bool(want)
                k = ctx.max_results
                assert lean_index.search(query, k, filters=ctx.metadata_filters, min_score=ctx.min_score) \
                    == index.search(query, k, filters=ctx.metadata_filters, min_score=ctx.min_score)
    assert compared > 20  # most cases found something: the comparison is not of empty lists
    light_index = BM25Index(lean)
    assert light_index.query_terms("Agents share TAN-5326") == index.query_terms("Agents share TAN-5326")
    assert light_index.corpus_statistics() == index.corpus_statistics()
    assert light_index.document_terms(["id-1", "nope"]) == index.document_terms(["id-1", "nope"])
    assert light_index.document_frequency(["agent", "memori", "zzz"]) == \
        index.document_frequency(["agent", "memori", "zzz"])
    assert lean.run(light.plan("agents share memory", RAGContext(4)), snapshot=True) == \
        full.retrieve("agents share memory", RAGContext(4))


def test_rows_have_attribute_access_and_listeners_see_each_statement(lean: DriverStore) -> None:
    seen: list[tuple[str, Sequence[Any]]] = []

    def listen(text: str, values: Sequence[Any]) -> None:
        seen.append((text, values))

    runner.add_statement_listener(listen)
    try:
        rows = lean.read("SELECT :c AS corpus, 2 AS n, CAST('{\"a\": \"b\"}' AS jsonb) AS metadata", {"c": lean.corpus})
    finally:
        runner.remove_statement_listener(listen)
    assert rows[0].corpus == lean.corpus and rows[0].n == 2 and rows[0].metadata == {"a": "b"}
    assert rows[0][1] == 2
    assert seen == [("SELECT $1 AS corpus, 2 AS n, CAST('{\"a\": \"b\"}' AS jsonb) AS metadata", (lean.corpus,))]
    lean.read("SELECT 1 AS one", {})
    assert len(seen) == 1  # removed


def test_at_head_on_a_migrated_and_an_unmigrated_database(lean: DriverStore, fresh_db_url: URL) -> None:
    assert lean.at_head() is True
    with DriverStore(_conninfo(fresh_db_url), corpus="c", schema="tnsrag", max_query_terms=8) as bare:
        assert bare.at_head() is False
        assert bare.read("SELECT 1 AS one", {})[0].one == 1  # the failed probe left the connection usable
    with DriverStore(_conninfo(fresh_db_url), corpus="c", schema="no_such_schema", max_query_terms=8) as bare:
        assert bare.at_head() is False


def test_driver_errors_are_the_librarys(lean: DriverStore, db_url: URL) -> None:
    with pytest.raises(DatabaseError, match=f"database error in corpus {lean.corpus!r}"):
        lean.read("SELECT * FROM no_such_table_here", {})
    assert lean.read("SELECT 1 AS one", {})[0].one == 1  # autocommit: the error ended nothing else
    with pytest.raises(ValidationError, match="not Unicode text"):
        lean.read("SELECT :x AS x", {"x": "\udc80"})
    with DriverStore(_conninfo(db_url), corpus="c", schema="tnsrag", max_query_terms=8,
                     statement_timeout=0.05) as slow:
        with pytest.raises(StatementTimeoutError, match="statement cancelled \\(57014\\)") as exc:
            slow.read("SELECT pg_sleep(2)", {})
        assert exc.value.sqlstate == "57014"
    unreachable = db_url.set(host="127.0.0.1", port=1).render_as_string(hide_password=False)
    with DriverStore(libpq_url(unreachable) or "", corpus="c", schema="tnsrag", max_query_terms=8) as gone:
        with pytest.raises(DatabaseError, match="^could not connect: "):  # connect()'s words
            gone.at_head()
