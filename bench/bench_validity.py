"""Validity in time: what leaving out the entries not live (expired, not valid or not
recorded now) costs keyword and vector search.

Usage::

    python -m bench.bench_validity [--url URL] [--n 20000] [--dim 128] [--queries 200] [--rounds 3]

Three corpora of the same ``n`` generated entries (:func:`bench._corpus.generate_corpus`,
with vectors, HNSW built, ``VACUUM (ANALYZE)``) in a scratch database: ``none`` (no entry
states a validity), ``stated`` (every entry valid from an instant in the past, 30 % until
one a year ahead: none outside its validity now) and ``history`` (a corpus that keeps
history, 10 % of whose entries were written again with another text, so it also holds
``n / 10`` closed versions). For each corpus, each query runs two statements, alternating
query by query: this version's ranking (keyword: :meth:`BM25Index.ranking_statement`,
vector: :meth:`VectorMemoryStore.candidates_sql`, top 10) and the same statement rendered
without any exclusion (:func:`bench.bench_expiry.without_expiry`: no entry checked, keyword
search's best rows by one ORDER BY and limit), both through ``Store.read``. It prints the medians
and this version's over the other's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from bench._common import scratch_database
from bench.bench_expiry import K, compare, load, workload
from bench.bench_vector import Lookup
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import connect

PROVIDER = "bench-validity"


def main() -> None:
    args, corpus, queries, texts = workload(__doc__.splitlines()[0])
    past, ahead = datetime(2020, 1, 1, tzinfo=timezone.utc), datetime.now(timezone.utc) + timedelta(days=365)
    stated = [replace(e, valid_from=past, valid_until=ahead if i % 10 < 3 else None)
              for i, e in enumerate(corpus.entries)]
    lookup = Lookup(queries, {})
    with scratch_database(args.url, "bench_validity") as (url, _):
        stores = {}
        for name, entries in (("none", corpus.entries), ("stated", stated), ("history", corpus.entries)):
            store = connect(url.render_as_string(hide_password=False), corpus=f"validity_{name}", auto_migrate=True)
            vectors = VectorMemoryStore(store, lookup, name=PROVIDER, index_threshold=None)
            load(store, vectors, entries, corpus.embeddings)
            if name == "history":
                store.set_history()
                again = [i for i in range(len(entries)) if i % 10 == 0]
                rewritten = [replace(entries[i], content=entries[(i + 1) % len(entries)].content) for i in again]
                vectors.add_all(rewritten, embeddings=corpus.embeddings[[(i + 1) % len(entries) for i in again]])
                load_stats(store)
                print(f"  {store.corpus}: {len(rewritten)} entries written again, their versions kept", flush=True)
            stores[name] = (store, vectors)
        print(f"\nn={args.n}, dim={args.dim}, {args.queries} queries x {args.rounds} rounds, top {K}; "
              "median ms: with the exclusion / without / ratio")
        for name, (store, vectors) in stores.items():
            keywords = BM25Index(store)

            def keyword(i: int, keywords: BM25Index = keywords) -> tuple[str, dict[str, Any]]:
                st = keywords.ranking_statement(texts[i], K)
                return st.sql, dict(st.params)

            kw = compare(store, keyword, args.queries, args.rounds)
            vec = compare(store, lambda i, v=vectors: v.candidates_sql(queries[i], K), args.queries, args.rounds)
            print(f"  {name:7} keyword {kw[0]:.2f} / {kw[1]:.2f} / {kw[0] / kw[1]:.3f}   "
                  f"vector {vec[0]:.2f} / {vec[1]:.2f} / {vec[0] / vec[1]:.3f}", flush=True)


def load_stats(store: Any) -> None:

    with store.session.autocommit() as conn:
        conn.execute("VACUUM (ANALYZE) entries, embeddings, bm25_postings")


if __name__ == "__main__":
    main()
