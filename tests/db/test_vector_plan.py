"""VectorRAGStrategy as a plan, the index's statements, the vector write path's change hash,
and copied vectors read back: on a real PostgreSQL + pgvector database."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest
from pgvector import Vector

from tnsrag_db._counts import IngestCounts
from tnsrag_db._db import aio
from tnsrag_db._db.statement import AS_OF_PARAM, Plan, Rows, Statement, arun_plan, run_plan
from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._indexes.vector.sql import DOCUMENT_COLUMNS
from tnsrag_db._store.reads import ENTRY_COLUMNS, document_from_row
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.vector import VectorRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext, RetrievedDocument


class Counting:
    """A 4-d embedding from a table (unknown texts: the first axis), counting the texts embedded."""

    name = "counting"

    def __init__(self, table: dict[str, Sequence[float]]) -> None:
        self.table = table
        self.texts: list[str] = []

    def __call__(self, text: str) -> Sequence[float]:
        self.texts.append(text)
        return self.table.get(text, [1.0, 0.0, 0.0, 0.0])


def _corpus(store: Store, n: int = 60) -> tuple[VectorMemoryStore, Counting]:
    rng = np.random.default_rng(11)
    table = {f"text {i}": rng.standard_normal(4).tolist() for i in range(n)}
    table["zero"] = [0.0, 0.0, 0.0, 0.0]
    emb = Counting(table)
    vectors = VectorMemoryStore(store, emb, exact_threshold=5)
    tiers = [MemoryTier.SEMANTIC, MemoryTier.WORKING, MemoryTier.EPISODIC]
    vectors.add_all([MemoryEntry(f"e{i:03d}", f"text {i}", tiers[i % 3], source="s" if i % 2 else None,
                                 metadata={"g": str(i % 4)}) for i in range(n)])
    return vectors, emb


def _statements(plan: Plan[list[RetrievedDocument]], store: Store) -> tuple[list[RetrievedDocument], list[Statement]]:
    """Drive ``plan`` with a recording executor on one transaction of ``store``."""
    seen: list[Statement] = []
    with store.session.transaction() as conn:
        def execute(statement: Statement) -> Rows:
            seen.append(statement)
            return conn.execute(statement.sql, dict(statement.params)).all()

        return run_plan(plan, execute), seen


def _old_retrieve(vectors: VectorMemoryStore, query: str, ctx: RAGContext) -> list[RetrievedDocument]:
    """What retrieve() returned before it became a plan: search_rows with the entry columns."""
    rows = vectors.search_rows(query, ctx.max_results, filters=ctx.metadata_filters, min_score=ctx.min_score,
                               columns=ENTRY_COLUMNS)
    return [document_from_row(row, float(row.score)) for row in rows]


CONTEXTS = [RAGContext(max_results=5), RAGContext(max_results=7, min_score=-1.0),
            RAGContext(max_results=5, min_score=0.3, metadata_filters={"tier": "WORKING"}),
            RAGContext(max_results=4, metadata_filters={"g": "1"}),
            RAGContext(max_results=40, min_score=-1.0, metadata_filters={"g": "2", "tier": "SEMANTIC"})]


def test_plan_retrieve_and_old_path_agree_exact_and_hnsw(store: Store) -> None:
    vectors, _ = _corpus(store)
    strategy = VectorRAGStrategy(vectors)
    for indexed in (False, True):
        if indexed:
            vectors.build_index()
        for query in ("text 3", "text 17", "zero"):
            for ctx in CONTEXTS:
                expected = _old_retrieve(vectors, query, ctx)
                assert strategy.retrieve(query, ctx) == expected, (indexed, query, ctx)
                planned, statements = _statements(strategy.plan(query, ctx), store)
                assert planned == expected
                # The space is cached by now: one statement, whose columns the index names.
                assert [s.columns for s in statements] == [DOCUMENT_COLUMNS]
        assert strategy.retrieve("text 3", RAGContext(max_results=3))  # not vacuous


def test_plan_does_no_io_until_driven_and_validates_then(store: Store) -> None:
    vectors, emb = _corpus(store)
    strategy = VectorRAGStrategy(vectors)
    emb.texts.clear()
    plan = strategy.plan("text 5", RAGContext(max_results=2))
    assert emb.texts == []  # nothing ran: not even the embedding
    first = next(plan)
    assert isinstance(first, Statement) and emb.texts == ["text 5"]
    plan.close()
    with pytest.raises(ValidationError, match="query is blank"):
        next(strategy.plan("  "))
    with pytest.raises(ValidationError, match="context must be a RAGContext"):
        next(strategy.plan("text 1", {"max_results": 3}))  # type: ignore[arg-type]


def test_a_fresh_view_reads_the_space_in_the_plan(store: Store) -> None:
    vectors, emb = _corpus(store)
    fresh = VectorMemoryStore(store, Counting(emb.table))
    docs, statements = _statements(VectorRAGStrategy(fresh).plan("text 9", RAGContext(max_results=3)), store)
    assert [s.columns for s in statements] == [("space_id", "index_name"), DOCUMENT_COLUMNS]
    assert docs == VectorRAGStrategy(vectors).retrieve("text 9", RAGContext(max_results=3))
    empty = VectorMemoryStore(store, Counting({}), name="never-written")
    docs, statements = _statements(VectorRAGStrategy(empty).plan("text 9"), store)
    assert docs == [] and [s.columns for s in statements] == [("space_id", "index_name")]


def test_aretrieve_drives_the_same_plan(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    vectors, _ = _corpus(store)
    strategy = VectorRAGStrategy(vectors)
    driven: list[Statement] = []

    async def arun(target: Store, plan: Plan[list[RetrievedDocument]], *, snapshot: bool = False
                   ) -> list[RetrievedDocument]:
        assert target is store

        async def execute(statement: Statement) -> Rows:
            driven.append(statement)
            return store.read(statement.sql, statement.params)

        return await arun_plan(plan, execute)

    monkeypatch.setattr(aio, "arun", arun)
    ctx = RAGContext(max_results=4, metadata_filters={"g": "3"})
    assert asyncio.run(strategy.aretrieve("text 8", ctx)) == strategy.retrieve("text 8", ctx)
    # The space row (an unindexed space is re-read now and then) and, for the store's first
    # filtered retrieval, the filter pairs' test first, then the documents.
    columns = [s.columns for s in driven]
    assert columns[-1] == DOCUMENT_COLUMNS and set(columns[:-1]) <= {("space_id", "index_name"), ("pairs",)}
    assert len(columns) <= 3


def test_explain_runs_as_one_snapshot_plan(store: Store) -> None:
    vectors, _ = _corpus(store)
    vectors.build_index()
    strategy = VectorRAGStrategy(vectors)
    for ctx in CONTEXTS:
        explained = strategy.explain("text 4", ctx)
        assert [r.document for r in explained.results] == strategy.retrieve("text 4", ctx)
        (plan,) = explained.plans
        assert plan.method in {"exact", "hnsw"} and plan.filtered == bool(ctx.metadata_filters)
        with store.session.executor(snapshot=True) as execute:
            assert plan == vectors.explain_plan(execute, vectors.embed_query("text 4"), ctx.max_results,
                                                filters=ctx.metadata_filters, min_score=ctx.min_score)


def test_candidates_sql_is_unchanged_and_prefix_checked(store: Store) -> None:
    vectors, _ = _corpus(store)
    q = vectors.embed_query("text 2")
    sql, params = vectors.candidates_sql(q, 3, prefix="hv")
    assert all(name.startswith("hv_") for name in params if name != AS_OF_PARAM)  # the instant is shared
    rows = store.read(f"WITH c AS ({sql}) SELECT entry_id, score FROM c", params)
    assert [(r.entry_id, r.score) for r in rows] == vectors.search("text 2", 3)
    with pytest.raises(ConfigurationError, match="prefix"):
        vectors.candidates_sql(q, 3, prefix="v; DROP")
    with pytest.raises(ConfigurationError, match="prefix"):
        vectors.candidates_sql(q, 3, prefix="V")  # one rule for every index: lower case
    with pytest.raises(ValidationError, match="k must be"):
        vectors.candidates_sql(q, True)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="min_score must be a finite number"):
        vectors.candidates_sql(q, 3, min_score=float("nan"))


def test_metadata_only_changes_keep_the_vector_and_text_changes_reembed(store: Store) -> None:
    emb = Counting({"a": [1, 0, 0, 0], "b": [0, 1, 0, 0], "b2": [0, 0, 1, 0]})
    vectors = VectorMemoryStore(store, emb)
    vectors.add_all([MemoryEntry("a", "a", metadata={"k": "1"}), MemoryEntry("b", "b")])
    emb.texts.clear()
    # Identical, metadata changed, source changed, tier changed: none needs a new vector.
    batch = [MemoryEntry("a", "a", metadata={"k": "1"}), MemoryEntry("b", "b", source="new-source")]
    assert vectors.add_all(batch) == IngestCounts(updated=1, unchanged=1)
    assert vectors.add_all([MemoryEntry("a", "a", metadata={"k": "2"})]) == IngestCounts(updated=1)
    assert vectors.ingest([MemoryEntry("a", "a", MemoryTier.WORKING, metadata={"k": "3"})]) == \
        IngestCounts(updated=1)
    assert emb.texts == []
    assert vectors.count() == 2 and vectors.search("a", 1) == [("a", 1.0)]
    doc = VectorRAGStrategy(vectors).retrieve("a", RAGContext(max_results=1))[0]
    assert doc.metadata["k"] == "3" and doc.metadata["tier"] == "WORKING"
    # A new text (with or without other changes) is embedded again, once.
    emb.texts.clear()
    assert vectors.add_all([MemoryEntry("b", "b2", metadata={"x": "y"})]) == IngestCounts(updated=1)
    assert emb.texts == ["b2"]
    assert vectors.search("b2", 1) == [("b", 1.0)]


def test_the_pre_read_compares_the_stored_change_hash(store: Store) -> None:
    emb = Counting({"a": [1, 0, 0, 0]})
    vectors = VectorMemoryStore(store, emb)
    vectors.add(MemoryEntry("a", "a"))
    with store.session.transaction() as conn:
        stored = conn.execute("SELECT content_hash FROM entries WHERE corpus = :c AND id = 'a'",
                              {"c": store.corpus}).scalar_one()
        # A stored hash that no longer matches (as after a change of metadata) makes the
        # pre-read compare the stored text, which is the same: no embedding.
        conn.execute("UPDATE entries SET content_hash = '\\x00'::bytea WHERE corpus = :c AND id = 'a'",
                     {"c": store.corpus})
    emb.texts.clear()
    assert [e.id for e in vectors._needing_vectors([MemoryEntry("a", "a")])] == []
    assert [e.id for e in vectors._needing_vectors([MemoryEntry("a", "other")])] == ["a"]
    assert emb.texts == []
    assert vectors.add(MemoryEntry("a", "a")) == IngestCounts(updated=1)  # the entry path's hash differs too
    with store.session.transaction() as conn:
        assert conn.execute("SELECT content_hash FROM entries WHERE corpus = :c AND id = 'a'",
                            {"c": store.corpus}).scalar_one() == stored
    assert emb.texts == [] and vectors.count() == 1


def test_copied_vectors_read_back_bit_exact(store: Store) -> None:
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((50, 8)).astype(np.float32)
    matrix[0] = [-0.0, 0.0, 1e-45, 3.4e38, -3.4e38, 1, -1, 0.5]
    vectors = VectorMemoryStore(store, Counting({}), name="copy-check")
    entries = [MemoryEntry(f"ü-{i}", f"t{i}") for i in range(len(matrix))]
    vectors.add_all(entries, embeddings=matrix)
    with store.pool.connect() as conn:
        raw = conn.driver
        assert raw is not None
        got = dict(raw.execute("SELECT entry_id, embedding FROM embeddings WHERE corpus = %s",
                               (store.corpus,)).fetchall())
    assert set(got) == {e.id for e in entries}
    for i, e in enumerate(entries):
        stored = got[e.id]
        array = stored.to_numpy() if isinstance(stored, Vector) else np.asarray(stored)
        assert array.dtype == np.float32 and array.tobytes() == matrix[i].tobytes()


def test_an_unfiltered_relaxed_order_scan_answers_as_the_strict_order_scan(store: Store) -> None:
    """Unfiltered HNSW scans run with ``hnsw.iterative_scan = relaxed_order`` (half the
    cost of strict order): their ``ef_search`` candidates come back sorted, so with ``k`` up
    to ``ef_search`` the statement returns what the strict-order statement returns."""
    rng = np.random.default_rng(5)
    table = {f"doc {i}": rng.standard_normal(32).tolist() for i in range(1500)}
    vectors = VectorMemoryStore(store, Counting(table), index_threshold=None, ef_search=40)
    vectors.add_all([MemoryEntry(f"d{i:04d}", f"doc {i}") for i in range(1500)])
    vectors.build_index()
    compared = 0
    with store.session.transaction() as conn:
        for q in rng.standard_normal((30, 32)):
            for k in (10, 40):
                sql, params = vectors.candidates_sql(q, k, min_score=-1.0)
                assert sql.count("'relaxed_order'") >= 1 and "'strict_order'" not in sql
                relaxed = conn.execute(sql, params).all()
                strict = conn.execute((sql.replace("'relaxed_order'", "'strict_order'")), params).all()
                assert [tuple(r) for r in relaxed] == [tuple(r) for r in strict] and len(relaxed) == k
                compared += 1
        # A filtered scan checks rows against the filter: strict order.
        sql, _ = vectors.candidates_sql(rng.standard_normal(32), 10, filters={"tier": "SEMANTIC"})
        assert "'strict_order'" in sql and "'relaxed_order'" not in sql
    assert compared == 60
