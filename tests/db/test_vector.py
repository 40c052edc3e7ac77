"""VectorMemoryStore and VectorRAGStrategy on a real PostgreSQL + pgvector database."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from sqlalchemy.engine import URL

from bench._corpus import GROUP_01PCT, GROUP_1PCT, generate_corpus
from tests.fix_db import SCHEMA
from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.hooks import ConnectionHooks
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import EmbeddingValidationError, InvalidFilterError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext


class TableEmbedding:
    """Looks texts up in a table (unknown texts embed to the first axis); counts calls."""

    def __init__(self, table: Mapping[str, Sequence[float]], name: str = "table", dim: int = 3) -> None:
        self.table = dict(table)
        self.name = name
        self.dim = dim
        self.calls: list[str] = []

    def __call__(self, text: str) -> Sequence[float]:
        self.calls.append(text)
        return self.table.get(text, [1.0] + [0.0] * (self.dim - 1))


def spaces(store: Store) -> list[tuple[str, int, str | None]]:
    with store.session.transaction() as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT provider, dimension, index_name FROM embedding_spaces WHERE corpus = :c ORDER BY provider, dimension",
            {"c": store.corpus}).all()]


def vector_rows(store: Store) -> int:
    with store.session.transaction() as conn:
        return int(conn.execute("SELECT count(*) FROM embeddings WHERE corpus = :c",
                                {"c": store.corpus}).scalar_one())


def test_spec_filter_example_returns_best_working_entry(store: Store) -> None:
    emb = TableEmbedding({"agent memory": [1, 0, 0], "semantic fact about agent memory": [1, 0.05, 0],
                          "working note on agent memory": [1, 0.5, 0], "unrelated": [0, 0, 1]})
    vectors = VectorMemoryStore(store, emb)
    vectors.add_all([
        MemoryEntry("s1", "semantic fact about agent memory", MemoryTier.SEMANTIC, source="kb"),
        MemoryEntry("w1", "working note on agent memory", MemoryTier.WORKING, metadata={"team": "core"}),
        MemoryEntry("w2", "unrelated", MemoryTier.WORKING),
    ])
    strategy = VectorRAGStrategy(vectors)
    assert strategy.name == "vector"
    unfiltered = strategy.retrieve("agent memory", RAGContext(max_results=1))
    assert [d.metadata["entryId"] for d in unfiltered] == ["s1"]
    assert dict(unfiltered[0].metadata) == {"tier": "SEMANTIC", "entryId": "s1", "source": "kb"}
    assert unfiltered[0].source == "kb"
    filtered = strategy.retrieve("agent memory", RAGContext(max_results=1, metadata_filters={"tier": "WORKING"}))
    assert len(filtered) == 1
    doc = filtered[0]
    assert doc.content == "working note on agent memory"
    assert dict(doc.metadata) == {"tier": "WORKING", "entryId": "w1", "team": "core"}
    assert doc.score == pytest.approx(1 / math.sqrt(1.25), abs=1e-6)
    assert strategy.retrieve("agent memory", RAGContext(metadata_filters={"team": "core"}))[0].metadata[
        "entryId"] == "w1"
    assert strategy.retrieve("agent memory", RAGContext(metadata_filters={"team": "Core"})) == []


def test_filter_on_missing_key_returns_nothing_and_blank_keys_rejected(store: Store) -> None:
    vectors = VectorMemoryStore(store, TableEmbedding({}))
    vectors.add_all([MemoryEntry(f"e{i}", f"text {i}") for i in range(5)])
    assert len(vectors.search("q", 10)) == 5
    assert vectors.search("q", 10, filters={"nobody": "has"}) == []
    assert VectorRAGStrategy(vectors).retrieve("q", RAGContext(metadata_filters={"nobody": "has"})) == []
    with pytest.raises(InvalidFilterError):
        vectors.search("q", 10, filters={" ": "x"})


def test_min_score_is_inclusive_and_scores_are_cosine(store: Store) -> None:
    emb = TableEmbedding({"q": [1, 0, 0], "same": [2, 0, 0], "three-four": [3, 4, 0], "orth": [0, 1, 0],
                          "opposite": [-1, 0, 0]})
    vectors = VectorMemoryStore(store, emb)
    vectors.add_all([MemoryEntry(t, t) for t in ("same", "three-four", "orth", "opposite")])
    results = vectors.search("q", 10, min_score=-1.0)
    assert [i for i, _ in results] == ["same", "three-four", "orth", "opposite"]
    assert [s for _, s in results] == pytest.approx([1.0, 0.6, 0.0, -1.0], abs=1e-12)
    for _, score in results:
        kept = vectors.search("q", 10, min_score=score)
        assert kept == [r for r in results if r[1] >= score]
        assert vectors.search("q", 10, min_score=math.nextafter(score, math.inf)) == [r for r in results
                                                                                       if r[1] > score]
    assert vectors.search("q", 10) == results[:3]  # default min_score 0.0 keeps the orthogonal entry
    docs = VectorRAGStrategy(vectors).retrieve("q", RAGContext(min_score=0.6))
    assert [d.metadata["entryId"] for d in docs] == ["same", "three-four"]


def test_zero_vectors_score_zero_never_nan(store: Store) -> None:
    emb = TableEmbedding({"q": [1, 0, 0], "zero": [0, 0, 0], "b": [0, 1, 0], "a": [1, 1, 0], "nothing": [0, 0, 0]})
    vectors = VectorMemoryStore(store, emb)
    vectors.add_all([MemoryEntry(t, t) for t in ("zero", "b", "a")])
    results = vectors.search("q", 10, min_score=-1.0)
    assert [i for i, _ in results] == ["a", "b", "zero"]  # b and zero tie at 0: by id
    assert results[2][1] == 0.0 and not any(math.isnan(s) for _, s in results)
    assert vectors.search("nothing", 10, min_score=-1.0) == [("a", 0.0), ("b", 0.0), ("zero", 0.0)]
    assert vectors.search("nothing", 10, min_score=0.5) == []
    vectors.build_index()  # HNSW never returns zero vectors: the exact fallback must bring it
    assert vectors.search("q", 10, min_score=-1.0) == results
    assert vectors.search("nothing", 2) == [("a", 0.0), ("b", 0.0)]


def test_two_embedding_spaces_coexist_in_one_corpus(store: Store) -> None:
    small = VectorMemoryStore(store, TableEmbedding({"x": [1, 0, 0], "q": [1, 0, 0], "y": [0, 1, 0]}, name="m3"))
    big = VectorMemoryStore(store, TableEmbedding({"x": [0, 0, 0, 1], "q": [0, 1, 0, 0], "y": [0, 1, 0, 0]},
                                                  name="m4", dim=4))
    entries = [MemoryEntry("x", "x"), MemoryEntry("y", "y")]
    assert small.add_all(entries) == IngestCounts(inserted=2)
    assert big.add_all(entries) == IngestCounts(unchanged=2)
    assert spaces(store) == [("m3", 3, None), ("m4", 4, None)]
    assert vector_rows(store) == 4
    assert small.search("q", 1) == [("x", 1.0)]
    assert big.search("q", 1) == [("y", 1.0)]
    assert big.build_index() is not None
    assert [s[2] is not None for s in spaces(store)] == [False, True]
    assert big.search("q", 1) == [("y", 1.0)] and small.search("q", 1) == [("x", 1.0)]
    # The same provider name with another dimension is a space of its own.
    assert big.drop_index() is True and big.drop_index() is False
    assert [s[2] for s in spaces(store)] == [None, None]
    assert big.search("q", 1) == [("y", 1.0)]
    other = VectorMemoryStore(store, TableEmbedding({"x": [1, 0], "y": [0, 1]}, name="m3", dim=2))
    other.add_all(entries)
    assert [(p, d) for p, d, _ in spaces(store)] == [("m3", 2), ("m3", 3), ("m4", 4)]


def test_changed_text_is_reembedded_and_unchanged_is_not(store: Store) -> None:
    emb = TableEmbedding({"q": [1, 0, 0], "old text": [0, 1, 0], "new text": [1, 0, 0]})
    vectors = VectorMemoryStore(store, emb)
    vectors.add(MemoryEntry("e", "old text"))
    assert vectors.search("q", 1) == [("e", 0.0)]
    emb.calls.clear()
    assert vectors.add(MemoryEntry("e", "old text")) == IngestCounts(unchanged=1)
    assert emb.calls == []  # identical entries are not embedded again
    assert vectors.add(MemoryEntry("e", "old text", MemoryTier.WORKING)) == IngestCounts(updated=1)
    assert emb.calls == []  # only the tier changed: the vector stays
    assert vectors.add(MemoryEntry("e", "new text")) == IngestCounts(updated=1)
    assert emb.calls == ["new text"]
    assert vectors.search("q", 1) == [("e", 1.0)]
    assert vector_rows(store) == 1
    # An entry written by Store alone (no vector) gets one on the next vector write.
    store.add(MemoryEntry("plain", "old text"))
    assert vectors.add_all([MemoryEntry("plain", "old text")]) == IngestCounts(unchanged=1)
    assert vector_rows(store) == 2


def test_bad_vector_rejects_whole_batch(store: Store) -> None:
    emb = TableEmbedding({"good": [1, 0, 0], "bad": [1, float("nan"), 0], "short": [1, 0]})
    vectors = VectorMemoryStore(store, emb)
    with pytest.raises(EmbeddingValidationError, match="non-finite"):
        vectors.add_all([MemoryEntry("g", "good"), MemoryEntry("b", "bad")])
    assert store.count() == 0 and vector_rows(store) == 0
    vectors.add(MemoryEntry("g", "good"))
    with pytest.raises(EmbeddingValidationError, match="dimension 2, expected 3"):
        vectors.add_all([MemoryEntry("g2", "good"), MemoryEntry("s", "short")])
    with pytest.raises(EmbeddingValidationError, match="non-finite"):
        vectors.add_all([MemoryEntry("p1", "x"), MemoryEntry("p2", "y")], embeddings=[[1, 0, 0], [0, math.inf, 0]])
    with pytest.raises(EmbeddingValidationError, match="2 embeddings for 1 entries"):
        vectors.add_all([MemoryEntry("p1", "x")], embeddings=[[1, 0, 0], [0, 1, 0]])
    assert store.count() == 1 and vector_rows(store) == 1


def test_precomputed_embeddings_and_candidates_sql(store: Store) -> None:
    vectors = VectorMemoryStore(store, TableEmbedding({}, name="pre"))
    entries = [MemoryEntry("a", "alpha", metadata={"k": "v"}), MemoryEntry("b", "beta"), MemoryEntry("c", "gamma")]
    assert vectors.add_all(entries, embeddings=np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0]])) == \
        IngestCounts(inserted=3)
    sql, params = vectors.candidates_sql([1, 0, 0], 2, prefix="vv")
    with store.session.transaction() as conn:
        rows = conn.execute(f"WITH cand AS ({sql}) SELECT entry_id, score FROM cand", params).all()
    assert [r.entry_id for r in rows] == ["a", "b"]
    sql, params = vectors.candidates_sql([1, 0, 0], 5, filters={"k": "v"})
    with store.session.transaction() as conn:
        assert conn.execute(sql, params).scalars() == ["a"]


def _exact_top(corpus_vectors: np.ndarray, ids: list[str], query: np.ndarray, k: int) -> list[str]:
    scores = corpus_vectors @ query / (np.linalg.norm(corpus_vectors, axis=1) * np.linalg.norm(query))
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))
    return [ids[i] for i in order[:k]]


@pytest.fixture(scope="module")
def hnsw_corpus(db_url: URL) -> Iterator[Callable[[], tuple[VectorMemoryStore, object]]]:
    """A 4,000-entry corpus with a built HNSW index, shared by the filtered-HNSW tests.

    On a space this small the planner may answer the HNSW branch with a sort of the whole
    space (also correct); its connections here disable seq scans and sorts where an
    alternative exists, so the HNSW index scan is what the tests exercise.
    """
    def _force_index_scans(dbapi_conn: Any, _info: object) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute("SET enable_seqscan = off")
            cur.execute("SET enable_sort = off")
        dbapi_conn.commit()

    pool = Pool(db_url, schema=SCHEMA, pool_size=2, hooks=[ConnectionHooks("index_scans", configure=_force_index_scans)])

    corpus = generate_corpus(4000, dim=64, seed=7)
    store = Store(pool, corpus="test_vector_hnsw_module")
    store.clear()

    class Lookup:
        name = "bench-64"

        def __call__(self, text: str) -> Sequence[float]:
            return corpus.query_vectors(1, seed=int(text))[0]

    # exact_threshold 0: every filtered query takes the HNSW path (with its exact fallback).
    vectors = VectorMemoryStore(store, Lookup(), exact_threshold=0, index_threshold=None)
    vectors.add_all(corpus.entries, embeddings=corpus.embeddings)
    assert vectors.build_index() == vectors.build_index()  # idempotent
    yield lambda: (vectors, corpus)
    with pool.begin() as conn:
        conn.execute("DELETE FROM corpora WHERE corpus = :c", {"c": store.corpus})
    pool.close()


FILTERS = [{"group": GROUP_1PCT}, {"group": GROUP_01PCT}, {"tier": "PROCEDURAL"}, {"tier": "WORKING"},
           {"tier": "WORKING", "group": GROUP_1PCT}, {"tier": "EPISODIC"}]


def _filtered_runs(vectors: VectorMemoryStore, corpus: object, filters: dict[str, str],
                   queries: int = 12) -> list[tuple[list[tuple[str, float]], list[str], int]]:
    ctx = RAGContext(metadata_filters=filters)
    keep = [i for i, e in enumerate(corpus.entries) if ctx.matches({"tier": e.tier.name, **e.metadata})]  # type: ignore[attr-defined]
    assert keep  # every filter matches something in this corpus
    ids = [corpus.entries[i].id for i in keep]  # type: ignore[attr-defined]
    runs = []
    for seed in range(queries):
        query = corpus.query_vectors(1, seed=seed)[0]  # type: ignore[attr-defined]
        expected = _exact_top(corpus.embeddings[keep], ids, query, 10)  # type: ignore[attr-defined]
        runs.append((vectors.search(str(seed), 10, filters=filters, min_score=-1.0), expected, len(keep)))
    return runs


@pytest.mark.parametrize("filters", FILTERS[:3] + FILTERS[4:5])
def test_selective_filters_are_exact_with_the_index_built(
        hnsw_corpus: Callable[[], tuple[VectorMemoryStore, object]], filters: dict[str, str]) -> None:
    """1 % and 0.1 % selectivity (≤ exact_threshold matches): exactly the exact-search top-k."""
    vectors, corpus = hnsw_corpus()
    view = VectorMemoryStore(vectors.store, vectors.embedding, exact_threshold=100, index_threshold=None)
    for got, expected, matches in _filtered_runs(view, corpus, filters):
        assert len(got) == min(10, matches)
        assert [i for i, _ in got] == expected


def test_filtered_hnsw_path_never_falls_short_and_keeps_recall(
        hnsw_corpus: Callable[[], tuple[VectorMemoryStore, object]]) -> None:
    """exact_threshold 0 forces the HNSW path (iterative scan + exact fallback) at every selectivity."""
    vectors, corpus = hnsw_corpus()
    hits = total = 0
    for filters in FILTERS:
        for got, expected, matches in _filtered_runs(vectors, corpus, filters):
            assert len(got) == min(10, matches)
            assert all(a[1] >= b[1] for a, b in zip(got, got[1:]))
            hits += len({i for i, _ in got} & set(expected))
            total += len(expected)
    assert hits / total >= 0.99, hits / total


def test_unfiltered_hnsw_recall(hnsw_corpus: Callable[[], tuple[VectorMemoryStore, object]]) -> None:
    vectors, corpus = hnsw_corpus()
    ids = [e.id for e in corpus.entries]
    hits = 0
    for seed in range(20):
        query = corpus.query_vectors(1, seed=seed)[0]
        got = [i for i, _ in vectors.search(str(seed), 10)]
        assert len(got) == 10
        hits += len(set(got) & set(_exact_top(corpus.embeddings, ids, query, 10)))
    assert hits / 200 >= 0.95


@pytest.mark.parametrize(("exact_threshold", "filters", "hnsw_used"), [
    (0, {"tier": "WORKING"}, True), (0, None, True), (10_000, {"tier": "WORKING"}, False)])
def test_plan_uses_hnsw_only_above_the_exact_threshold(
        hnsw_corpus: Callable[[], tuple[VectorMemoryStore, object]], exact_threshold: int,
        filters: dict[str, str] | None, hnsw_used: bool) -> None:
    vectors, corpus = hnsw_corpus()
    view = VectorMemoryStore(vectors.store, vectors.embedding, exact_threshold=exact_threshold, index_threshold=None)
    sql, params = view.candidates_sql(corpus.query_vectors(1, seed=3)[0], 10, filters=filters)
    with view.store.session.transaction() as conn:
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).scalar_one()
    loops: list[int] = []

    def walk(node: dict) -> None:  # type: ignore[type-arg]
        if str(node.get("Index Name", "")).startswith("ix_embeddings_hnsw_"):
            loops.append(int(node.get("Actual Loops", 0)))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    assert (max(loops, default=0) > 0) == hnsw_used


def test_concurrent_index_builds_create_one_index(store: Store) -> None:
    from concurrent.futures import ThreadPoolExecutor

    emb = TableEmbedding({})
    VectorMemoryStore(store, emb).add_all([MemoryEntry(f"e{i}", f"t{i}") for i in range(50)],
                                          embeddings=np.random.default_rng(1).standard_normal((50, 3)))
    views = [VectorMemoryStore(store, TableEmbedding({})) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        names = list(pool.map(lambda v: v.build_index(), views))
    assert len(set(names)) == 1 and names[0] is not None
    with store.session.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = :n",
                            {"n": names[0]}).scalar_one() == 1
    assert spaces(store) == [("table", 3, names[0])]


def test_batches_count_outcomes_and_a_bad_vector_rejects_the_whole_batch(store: Store) -> None:
    vectors = VectorMemoryStore(store, TableEmbedding({}))
    rows = np.random.default_rng(2).standard_normal((25, 3))
    entries = [MemoryEntry(f"e{i:02d}", f"text {i}") for i in range(25)]
    assert vectors.add_all(entries, embeddings=rows) == IngestCounts(inserted=25)
    changed = entries[:12] + [MemoryEntry("e12", "changed"), MemoryEntry("new", "new")]
    assert vectors.add_all(changed, embeddings=np.vstack([rows[:13], rows[:1]])) == \
        IngestCounts(inserted=1, updated=1, unchanged=12)
    assert store.count() == 26 and vector_rows(store) == 26
    bad = [MemoryEntry(f"b{i:02d}", "x") for i in range(15)] + [MemoryEntry("e00", "clash")]
    with pytest.raises(EmbeddingValidationError):  # rejected before anything is written
        vectors.add_all(bad, embeddings=np.vstack([rows[:15], [[np.nan, 0, 0]]]))
    assert store.count() == 26


def test_drop_corpus_drops_the_spaces_hnsw_index(make_store) -> None:  # type: ignore[no-untyped-def]

    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db._indexes.vector.hnsw import hnsw_index_name
    from tnsrag_db._types import MemoryEntry

    store = make_store()
    vectors = VectorMemoryStore(store, lambda text: [1.0, float(len(text))], index_threshold=None)
    vectors.add_all([MemoryEntry(f"e{i}", "x" * i) for i in range(1, 20)])
    name = vectors.build_index()
    assert name is not None

    def exists() -> bool:
        with store.session.transaction() as conn:
            return conn.execute("SELECT to_regclass(:n) IS NOT NULL",
                                {"n": f"{store.schema}.{name}"}).scalar_one()

    assert exists() and name.startswith("ix_embeddings_hnsw_") and name == hnsw_index_name(int(name.rsplit("_", 1)[1]))
    store.drop_corpus()
    assert not exists()


def test_build_index_reports_progress_from_postgresql(store: Store) -> None:
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((6000, 48)).astype(np.float32)
    entries = [MemoryEntry(f"p{i:05d}", f"progress entry {i}") for i in range(len(matrix))]
    vectors = VectorMemoryStore(store, lambda text: matrix[0], index_threshold=None)
    vectors.add_all(entries, embeddings=matrix)
    calls: list[tuple[str, int, int]] = []
    assert vectors.build_index(progress=lambda *a: calls.append(a), poll_seconds=0.01) is not None
    polled = [c for c in calls if c[0] != "done"]
    assert polled, "no progress row was read while the index built"
    # PostgreSQL's CREATE INDEX CONCURRENTLY phases; pgvector reports "loading tuples"
    # as the sub-phase of "building index".
    phases = {"initializing", "waiting for writers before build", "waiting for writers before validation",
              "index validation: scanning index", "index validation: sorting tuples",
              "index validation: scanning table", "waiting for old snapshots"}
    assert all(c[0] in phases or c[0].startswith("building index") for c in polled), polled
    assert any(c[0].startswith("building index") for c in polled), polled
    assert all(0 <= done <= total for _, done, total in polled)
    assert calls[-1][0] == "done" and calls[-1][1] == calls[-1][2] > 0
    # Built already: nothing runs, nothing is reported.
    again: list[tuple[str, int, int]] = []
    assert vectors.build_index(progress=lambda *a: again.append(a)) is not None
    assert again == []


def test_add_all_hands_index_progress_to_the_build_it_triggers(store: Store) -> None:
    rng = np.random.default_rng(6)
    matrix = rng.standard_normal((300, 8)).astype(np.float32)
    entries = [MemoryEntry(f"q{i:04d}", f"entry {i}") for i in range(len(matrix))]
    vectors = VectorMemoryStore(store, lambda text: matrix[0], index_threshold=len(entries))
    calls: list[tuple[str, int, int]] = []
    vectors.add_all(entries[:-1], embeddings=matrix[:-1], index_progress=lambda *a: calls.append(a))
    assert calls == []  # below the threshold: no build
    vectors.add_all(entries[-1:], embeddings=matrix[-1:], index_progress=lambda *a: calls.append(a))
    assert calls and calls[-1][0] == "done"


def test_build_index_progress_arguments_errors_and_empty_space(store: Store,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tnsrag_db._errors import DatabaseError, ValidationError

    vectors = VectorMemoryStore(store, lambda text: [1.0, 0.0], index_threshold=None)
    with pytest.raises(ValidationError, match="poll_seconds"):
        vectors.build_index(progress=lambda *a: None, poll_seconds=0)
    # no vectors yet: nothing to build, no progress call, no error
    calls: list[tuple[str, int, int]] = []
    assert vectors.build_index(progress=lambda *a: calls.append(a), poll_seconds=0.01) is None
    assert calls == []

    # An error of the build (on its worker thread) is raised in the caller's thread.
    def failing(on_pid: object) -> None:
        raise DatabaseError("the build failed")

    monkeypatch.setattr(vectors, "_build_index", failing)
    with pytest.raises(DatabaseError, match="the build failed"):
        vectors.build_index(progress=lambda *a: calls.append(a), poll_seconds=0.01)
    assert calls == []


def test_writes_go_on_while_an_index_builds_and_land_in_the_index(make_store: Callable[..., Store]) -> None:
    # The build is CREATE INDEX CONCURRENTLY: the shared embeddings table keeps taking
    # writes, of this corpus and of others, while it runs (a plain CREATE INDEX would hold
    # them until the build commits), and a vector written meanwhile is in the index.
    store, other_store = make_store(), make_store()
    rng = np.random.default_rng(8)
    matrix = rng.standard_normal((8000, 64)).astype(np.float32)
    late = rng.standard_normal(64).astype(np.float32)
    entries = [MemoryEntry(f"b{i:05d}", f"build entry {i}") for i in range(len(matrix))]
    vectors = VectorMemoryStore(store, lambda text: late, index_threshold=None)
    vectors.add_all(entries, embeddings=matrix)
    other = VectorMemoryStore(other_store, lambda text: [1.0, 2.0], index_threshold=None)
    still_building: list[bool] = []

    def during_build(phase: str, done: int, total: int) -> None:
        if still_building or phase == "done":
            return
        other.add(MemoryEntry("o1", "another corpus, same table"))
        vectors.add(MemoryEntry("late", "written while the index builds"))
        with store.session.transaction() as conn:
            still_building.append(conn.execute(
                "SELECT count(*) FROM pg_stat_progress_create_index WHERE relid = to_regclass(:t)",
                {"t": f"{store.schema}.embeddings"}).scalar_one() == 1)

    name = vectors.build_index(progress=during_build, poll_seconds=0.01)
    assert still_building == [True]
    assert other_store.count() == 1 and store.count() == len(entries) + 1
    with store.session.transaction() as conn:
        assert conn.execute("SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:n)",
                            {"n": f"{store.schema}.{name}"}).scalar_one() is True
        # Read through the index alone: the late vector must be in the graph.
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL hnsw.ef_search = 400")
        space_id = int(conn.execute("SELECT space_id FROM embedding_spaces WHERE corpus = :c",
                                    {"c": store.corpus}).scalar_one())
        query = (f"SELECT entry_id FROM embeddings WHERE space_id = {space_id} "  # the partial index's predicate
                 "ORDER BY embedding::vector(64) <=> CAST(:q AS vector(64)) LIMIT 1")
        params = {"q": str(late.tolist())}
        assert name in "\n".join(conn.execute(f"EXPLAIN {query}", params).scalars())
        assert conn.execute(query, params).scalar_one() == "late"


def test_a_dropped_corpus_leaves_no_hnsw_index_and_orphans_are_swept(make_store: Callable[..., Store]) -> None:
    store, other_store = make_store(), make_store()
    rng = np.random.default_rng(9)
    built = []
    for s in (store, other_store):
        vectors = VectorMemoryStore(s, lambda text: [1.0, 0.0], index_threshold=None)
        vectors.add_all([MemoryEntry(f"e{i}", f"t{i}") for i in range(30)], embeddings=rng.standard_normal((30, 2)))
        built.append(vectors.build_index())

    def indexes() -> set[str]:
        with store.session.transaction() as conn:
            return set(conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = :s AND indexname = ANY(:n)",
                {"s": store.schema, "n": built}).scalars())

    assert indexes() == set(built)
    store.drop_corpus()
    assert indexes() == {built[1]}
    # A process that died between the commit and the drop leaves an index whose space is
    # gone: the next sweep (from any corpus) removes it, and only it.
    with other_store.session.transaction() as conn:
        conn.execute("DELETE FROM embedding_spaces WHERE corpus = :c", {"c": other_store.corpus})
    assert store.drop_orphan_hnsw_indexes() == [built[1]]
    assert indexes() == set() and store.drop_orphan_hnsw_indexes() == []


def test_drop_corpus_does_not_wait_for_a_build_unless_it_has_an_index_to_drop(
        make_store: Callable[..., Store]) -> None:
    import threading

    store, plain, indexed = make_store(), make_store(), make_store()
    plain.add(MemoryEntry("p", "a corpus without vectors"))
    vectors = VectorMemoryStore(indexed, lambda text: [1.0, 0.0], index_threshold=None)
    vectors.add_all([MemoryEntry(f"e{i}", f"t{i}") for i in range(20)],
                    embeddings=np.random.default_rng(10).standard_normal((20, 2)))
    name = vectors.build_index()
    with store.session.autocommit() as conn, store.session.hnsw_build_lock(conn):  # as a build running elsewhere does
        done = threading.Event()
        threading.Thread(target=lambda: (plain.drop_corpus(), done.set()), daemon=True).start()
        assert done.wait(10), "drop_corpus of a corpus without an index waited for the build lock"
        waiting = threading.Thread(target=indexed.drop_corpus, daemon=True)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive()  # its index goes only once the build is over
    waiting.join(10)
    assert not waiting.is_alive()
    with store.session.transaction() as conn:
        assert conn.execute("SELECT to_regclass(:n)", {"n": f"{store.schema}.{name}"}).scalar() is None
