"""The tuning options of :class:`VectorMemoryStore` (keyword-only, validated, each reaching the
statement or the build it tunes), and an HNSW build that PostgreSQL itself refuses: on a real
PostgreSQL + pgvector database."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from tests.db._watch import watch
from tnsrag_db._db.statement import Plan, Rows, Statement, run_plan
from tnsrag_db._errors import ConfigurationError, DatabaseError
from tnsrag_db._indexes.vector import HNSW_EF_CONSTRUCTION, HNSW_M, VectorMemoryStore
from tnsrag_db._indexes.vector.hnsw import IndexBuildDeferred
from tnsrag_db._indexes.vector.spaces import SPACE_RECHECK_SECONDS, Space
from tnsrag_db._indexes.vector.sql import MAX_SCAN_TUPLES
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry


def _unit(i: int, dim: int = 4) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    v[(i + 1) % dim] = 0.5 + (i % 7) / 10
    return v


def embed(text: str) -> list[float]:
    return _unit(len(text))


def _filled(store: Store, **options: object) -> VectorMemoryStore:
    vectors = VectorMemoryStore(store, embed, index_threshold=None, **options)  # type: ignore[arg-type]
    entries = [MemoryEntry(f"e{i:03d}", f"entry {i}", metadata={"g": str(i % 2)}) for i in range(40)]
    vectors.add_all(entries, embeddings=[_unit(i) for i in range(40)])
    return vectors


def _recorded(plan: Plan[Space | None], store: Store) -> tuple[Space | None, list[Statement]]:
    seen: list[Statement] = []

    def execute(statement: Statement) -> Rows:
        seen.append(statement)
        return store.read(statement.sql, statement.params)

    return run_plan(plan, execute), seen


@pytest.mark.parametrize(("option", "bad"), [
    ("ef_search", 0), ("ef_search", 1001), ("filtered_ef_search", 0), ("filtered_ef_search", "200"),
    ("exact_threshold", -1), ("max_scan_tuples", 0), ("max_scan_tuples", 2.5),
    ("space_recheck_seconds", -1), ("space_recheck_seconds", float("nan")), ("space_recheck_seconds", "5"),
    ("index_threshold", 0), ("hnsw_m", 1), ("hnsw_m", 101), ("hnsw_ef_construction", 3),
    ("hnsw_ef_construction", 1001), ("hnsw_ef_construction", 2 * HNSW_M - 1),
])
def test_a_bad_option_is_a_configuration_error_naming_it(store: Store, option: str, bad: object) -> None:
    with pytest.raises(ConfigurationError, match=option):
        VectorMemoryStore(store, lambda text: [1.0, 0.0], **{option: bad})  # type: ignore[arg-type]


def test_the_options_are_keyword_only(store: Store) -> None:
    with pytest.raises(TypeError):
        VectorMemoryStore(store, lambda text: [1.0, 0.0], None, 50)  # type: ignore[misc]


def test_space_recheck_seconds_sets_how_long_an_unindexed_space_is_trusted(store: Store) -> None:
    assert VectorMemoryStore(store, lambda text: [1.0, 0.0]).spaces.recheck_seconds == SPACE_RECHECK_SECONDS
    for seconds, reads in ((0, 3), (3600, 1)):
        vectors = _filled(store, space_recheck_seconds=seconds)
        statements = [_recorded(vectors.spaces.query_plan(4), store)[1] for _ in range(3)]
        # 0: the unindexed space is read again at every query; an hour: once, then cached.
        assert sum(len(s) for s in statements) == reads, seconds
        assert all(s.columns == ("space_id", "index_name") for ss in statements for s in ss)


def test_a_space_cached_by_a_write_is_read_at_the_first_query_on_a_freshly_booted_machine(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The monotonic clock counts from boot: a minute after boot, a space the write cached and no
    # query has read yet is still read once (it was trusted as if read at boot).
    monkeypatch.setattr("tnsrag_db._indexes.vector.spaces.time.monotonic", lambda: 60.0)
    vectors = _filled(store, space_recheck_seconds=3600)
    statements = [_recorded(vectors.spaces.query_plan(4), store)[1] for _ in range(3)]
    assert [len(s) for s in statements] == [1, 0, 0]


def test_filtered_ef_search_and_max_scan_tuples_reach_the_statement(store: Store) -> None:
    vectors = _filled(store, filtered_ef_search=321, max_scan_tuples=4321)
    vectors.build_index()
    query = np.asarray(_unit(3), dtype=np.float32)
    filtered, _ = vectors.candidates_sql(query, 5, filters={"g": "1"})
    plain, _ = vectors.candidates_sql(query, 5)
    assert "greatest(321," in filtered and "'hnsw.max_scan_tuples', '4321'" in filtered
    assert "'hnsw.ef_search', '100'" in plain and "'hnsw.max_scan_tuples', '4321'" in plain
    default = VectorMemoryStore(store, embed)
    sql, _ = default.candidates_sql(query, 5, filters={"g": "1"})
    assert "greatest(200," in sql and f"'hnsw.max_scan_tuples', '{MAX_SCAN_TUPLES}'" in sql
    # The answers do not depend on the options here (few matches: exact).
    assert vectors.search("entry 3", 5) == default.search("entry 3", 5)


def _index_options(store: Store, name: str) -> list[str]:
    with store.session.transaction() as conn:
        options = conn.execute(("SELECT c.reloptions FROM pg_class c JOIN pg_namespace n "
                                       "ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relname = :n"),
                               {"s": store.schema, "n": name}).scalar_one()
    return sorted(options)


def test_hnsw_m_and_ef_construction_build_the_graph(make_store) -> None:  # type: ignore[no-untyped-def]
    tuned = _filled(make_store(), hnsw_m=8, hnsw_ef_construction=40)
    name = tuned.build_index()
    assert name is not None and _index_options(tuned.store, name) == ["ef_construction=40", "m=8"]
    plain = _filled(make_store())
    name = plain.build_index()
    assert name is not None and _index_options(plain.store, name) == [
        f"ef_construction={HNSW_EF_CONSTRUCTION}", f"m={HNSW_M}"]


def test_a_build_postgresql_refuses_is_raised_in_the_caller_or_deferred_after_a_write(store: Store) -> None:
    # pgvector indexes at most 2,000 dimensions with HNSW: a real build error, from the worker
    # thread of a build with progress, raised in the calling thread.
    dim = 2001
    vectors = VectorMemoryStore(store, lambda text: np.ones(dim), index_threshold=None)
    vectors.add_all([MemoryEntry("a", "a")], embeddings=[np.ones(dim)])
    with pytest.raises(DatabaseError, match="2000 dimensions"):
        vectors.build_index(progress=lambda *a: None, poll_seconds=0.01)
    # The automatic build of a write: the write commits, the failure is a warning.
    auto = VectorMemoryStore(store, lambda text: np.ones(dim), index_threshold=2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        auto.add_all([MemoryEntry("b", "b")], embeddings=[np.ones(dim)])
    assert [type(w.message) for w in seen] == [IndexBuildDeferred] and "the build failed" in str(seen[0].message)
    assert auto.count() == 2 and auto.search("b", 2) != []


def test_an_hnsw_build_sets_the_memory_its_rule_chooses_and_resets_it(store: Store) -> None:
    from tnsrag_db._indexes.vector.hnsw import build_memory_mb, graph_memory_mb

    vectors = _filled(store)
    sent: list[str] = []

    def record(conn: Any, statement: str, params: Any) -> None:
        sent.append(statement)

    with watch(before=record):
        assert vectors.build_index() is not None
    with store.pool.connect() as conn:
        mb = {r.name: int(r.mb) for r in conn.execute((
            "SELECT name, setting::bigint * (CASE unit WHEN 'kB' THEN 1024 WHEN '8kB' THEN 8192 ELSE 1 END) "
            "/ 1048576 AS mb FROM pg_settings WHERE name IN ('maintenance_work_mem', 'shared_buffers')"))}
    expected = build_memory_mb(graph_memory_mb(40, 4, HNSW_M), mb["maintenance_work_mem"], mb["shared_buffers"])
    sets = [s for s in sent if s.startswith("SET maintenance_work_mem")]
    assert sets == [f"SET maintenance_work_mem = '{expected}MB'"]
    assert sent.index(sets[0]) < next(i for i, s in enumerate(sent) if s.startswith("CREATE INDEX CONCURRENTLY"))
    assert any(s == "RESET maintenance_work_mem" for s in sent)
