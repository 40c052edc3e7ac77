"""Several processes writing one corpus at once lose nothing."""

from __future__ import annotations

import multiprocessing as mp

from sqlalchemy.engine import URL

from tests.db._helpers import run_processes
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry


def _writer(url: str, corpus: str, worker: int, barrier: mp.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    pool = Pool(url, schema="tnsrag", pool_size=1)
    store = Store(pool, corpus=corpus)
    barrier.wait()
    for start in range(0, 500, 50):
        store.add_all([MemoryEntry(f"w{worker}-{i}", f"worker {worker} entry {i} shared words") for i in
                       range(start, start + 50)])
    # and some single upserts, overlapping with the other workers
    for i in range(20):
        store.add(MemoryEntry(f"w{worker}-{i}", f"worker {worker} entry {i} updated"))
    pool.close()


def test_four_processes_upsert_500_each(store: Store, db_url: URL) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    url = db_url.render_as_string(hide_password=False)
    assert run_processes(_writer, [(url, store.corpus, w, barrier) for w in range(4)]) == [0, 0, 0, 0]
    assert store.count() == 2000
    expected = {f"w{w}-{i}": f"worker {w} entry {i} " + ("updated" if i < 20 else "shared words")
                for w in range(4) for i in range(500)}
    assert {e.id: e.content for e in store.iter_entries()} == expected
    with store.session.transaction() as conn:
        n_docs, total = conn.execute(
            "SELECT sum(n_docs), sum(total_len) FROM bm25_stats WHERE corpus = :c", {"c": store.corpus}).one()
        real_len = conn.execute("SELECT sum(doc_len) FROM entries WHERE corpus = :c",
                                {"c": store.corpus}).scalar_one()
        postings_len = conn.execute("SELECT sum(tf) FROM bm25_postings WHERE corpus = :c",
                                    {"c": store.corpus}).scalar_one()
    assert n_docs == 2000
    assert total == real_len == postings_len


def test_document_frequencies_match_postings_after_concurrent_writes(store: Store, db_url: URL) -> None:
    """bm25_df (sharded) must equal the postings count per term after concurrent upserts and deletes."""
    test_four_processes_upsert_500_each(store, db_url)
    for w in range(4):
        store.delete(f"w{w}-1")
    with store.session.transaction() as conn:
        mismatched = conn.execute((
            "SELECT coalesce(p.lexeme, d.lexeme) FROM "
            "(SELECT lexeme, count(*) AS n FROM bm25_postings WHERE corpus = :c GROUP BY lexeme) p "
            "FULL JOIN (SELECT lexeme, sum(df) AS n FROM bm25_df WHERE corpus = :c GROUP BY lexeme "
            "           HAVING sum(df) <> 0) d USING (lexeme) "
            "WHERE p.n IS DISTINCT FROM d.n"), {"c": store.corpus}).scalars()
    assert mismatched == []


# -- heavy contention: few ids, every kind of write ---------------------------------------

_WORDS = "alpha beta gamma delta agent memory vector graph".split()


def _contender(url: str, corpus: str, seed: int, ops: int) -> None:
    import random

    from tnsrag_db._errors import DanglingReferenceError
    from tnsrag_db._indexes.graph import Edge, GraphStore
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.embeddings import HashingEmbedding

    pool = Pool(url, schema="tnsrag", pool_size=1)
    store = Store(pool, corpus=corpus)
    vectors = VectorMemoryStore(store, HashingEmbedding())
    graph = GraphStore(store)
    rng = random.Random(seed)

    def batch() -> list[MemoryEntry]:
        return [MemoryEntry(f"c{j}", " ".join(rng.choices(_WORDS, k=rng.randint(1, 6))),
                            metadata={"g": str(rng.randrange(2))}) for j in rng.sample(range(4), rng.randint(1, 3))]

    try:
        for _ in range(ops):
            roll, i = rng.random(), rng.randrange(4)
            if roll < 0.35:
                store.delete(f"c{i}")
            elif roll < 0.45:
                store.delete_where({"g": str(rng.randrange(2))})
            elif roll < 0.6:
                entries = batch()
                counts = vectors.add_all(entries)
                # Every entry of a batch is accounted for, even when a delete raced it.
                assert counts.inserted + counts.updated + counts.unchanged == len(entries), counts
            elif roll < 0.65:
                # Entry and edge together, the edge's other end outside the batch: the one
                # write that takes entries out of id order (PostgreSQL may abort it or its
                # opponent to break a deadlock; the library runs the aborted call again).
                j = rng.randrange(4)
                try:
                    graph.add_with_edges([MemoryEntry(f"c{j}", "agent memory " + rng.choice(_WORDS))],
                                         [Edge(f"c{j}", f"c{(j + 1 + rng.randrange(3)) % 4}")])
                except DanglingReferenceError:
                    pass
            elif roll < 0.7:
                try:
                    graph.add_edge(f"c{i}", f"c{(i + 1 + rng.randrange(3)) % 4}")
                except DanglingReferenceError:
                    pass  # the end was deleted: a typed error, as documented
            else:
                entries = batch()
                counts = store.add_all(entries)
                assert counts.inserted + counts.updated + counts.unchanged == len(entries), counts
    finally:
        pool.close()


def test_contended_writers_and_deleters_keep_every_index_consistent(store: Store, db_url: URL) -> None:
    """Four processes upserting, deleting (by id and by filter), embedding and linking the same
    four entries: no deadlock, no duplicate posting, no lost write, and every derived row
    (postings, df, statistics, vectors) agrees with the entries that remain."""
    url = db_url.render_as_string(hide_password=False)
    assert run_processes(_contender, [(url, store.corpus, seed, 150) for seed in range(4)]) == [0, 0, 0, 0]
    c = {"c": store.corpus}
    with store.session.transaction() as conn:
        orphan_postings = conn.execute((
            "SELECT count(*) FROM bm25_postings p WHERE p.corpus = :c AND NOT EXISTS (SELECT 1 FROM entries e "
            "WHERE e.corpus = p.corpus AND e.id = p.entry_id AND p.lexeme = ANY(e.lexemes))"), c).scalar_one()
        missing_postings = conn.execute((
            "SELECT count(*) FROM entries e CROSS JOIN unnest(e.lexemes) AS l(lexeme) WHERE e.corpus = :c "
            "AND NOT EXISTS (SELECT 1 FROM bm25_postings p WHERE p.corpus = e.corpus AND p.entry_id = e.id "
            "AND p.lexeme = l.lexeme)"), c).scalar_one()
        df_wrong = conn.execute((
            "SELECT count(*) FROM (SELECT lexeme, sum(df) AS n FROM bm25_df WHERE corpus = :c GROUP BY lexeme) d "
            "FULL JOIN (SELECT lexeme, count(*) AS n FROM bm25_postings WHERE corpus = :c GROUP BY lexeme) p "
            "USING (lexeme) WHERE coalesce(d.n, 0) <> coalesce(p.n, 0)"), c).scalar_one()
        stats = conn.execute((
            "SELECT (SELECT coalesce(sum(n_docs), 0) FROM bm25_stats WHERE corpus = :c), "
            "(SELECT coalesce(sum(total_len), 0) FROM bm25_stats WHERE corpus = :c), "
            "(SELECT count(*) FROM entries WHERE corpus = :c), "
            "(SELECT coalesce(sum(doc_len), 0) FROM entries WHERE corpus = :c)"), c).one()
        stale_vectors = conn.execute((
            "SELECT count(*) FROM embeddings x WHERE x.corpus = :c AND NOT EXISTS "
            "(SELECT 1 FROM entries e WHERE e.corpus = x.corpus AND e.id = x.entry_id)"), c).scalar_one()
    assert (orphan_postings, missing_postings, df_wrong, stale_vectors) == (0, 0, 0, 0)
    assert stats[0] == stats[2] and stats[1] == stats[3]
