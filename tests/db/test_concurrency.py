"""Several processes writing one corpus at once lose nothing."""

from __future__ import annotations

import multiprocessing as mp

import sqlalchemy as sa
from sqlalchemy.engine import URL

from tnsrag_db.store.engine import create_engine
from tnsrag_db.store.store import Store
from tnsrag_db.types import MemoryEntry


def _writer(url: str, corpus: str, worker: int, barrier: mp.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    engine = create_engine(url, schema="tnsrag", pool_size=1)
    store = Store(engine, corpus=corpus)
    barrier.wait()
    for start in range(0, 500, 50):
        store.add_all([MemoryEntry(f"w{worker}-{i}", f"worker {worker} entry {i} shared words") for i in
                       range(start, start + 50)])
    # and some single upserts, overlapping with the other workers
    for i in range(20):
        store.add(MemoryEntry(f"w{worker}-{i}", f"worker {worker} entry {i} updated"))
    engine.dispose()


def test_four_processes_upsert_500_each(store: Store, db_url: URL) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    url = db_url.render_as_string(hide_password=False)
    procs = [ctx.Process(target=_writer, args=(url, store.corpus, w, barrier)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert store.count() == 2000
    for w in range(4):
        assert store.get(f"w{w}-0") == MemoryEntry(f"w{w}-0", f"worker {w} entry 0 updated")
        assert store.get(f"w{w}-499") == MemoryEntry(f"w{w}-499", f"worker {w} entry 499 shared words")
    with store.transaction() as conn:
        n_docs, total = conn.execute(sa.text(
            "SELECT sum(n_docs), sum(total_len) FROM bm25_stats WHERE corpus = :c"), {"c": store.corpus}).one()
        real_len = conn.execute(sa.text("SELECT sum(doc_len) FROM entries WHERE corpus = :c"),
                                {"c": store.corpus}).scalar_one()
        postings_len = conn.execute(sa.text("SELECT sum(tf) FROM bm25_postings WHERE corpus = :c"),
                                    {"c": store.corpus}).scalar_one()
    assert n_docs == 2000
    assert total == real_len == postings_len


def test_document_frequencies_match_postings_after_concurrent_writes(store: Store, db_url: URL) -> None:
    """bm25_df (sharded) must equal the postings count per term after concurrent upserts and deletes."""
    test_four_processes_upsert_500_each(store, db_url)
    for w in range(4):
        store.delete(f"w{w}-1")
    with store.transaction() as conn:
        mismatched = conn.execute(sa.text(
            "SELECT coalesce(p.lexeme, d.lexeme) FROM "
            "(SELECT lexeme, count(*) AS n FROM bm25_postings WHERE corpus = :c GROUP BY lexeme) p "
            "FULL JOIN (SELECT lexeme, sum(df) AS n FROM bm25_df WHERE corpus = :c GROUP BY lexeme "
            "           HAVING sum(df) <> 0) d USING (lexeme) "
            "WHERE p.n IS DISTINCT FROM d.n"), {"c": store.corpus}).scalars().all()
    assert mismatched == []
