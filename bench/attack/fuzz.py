"""Hypothesis fuzz of entries, filters and queries against a real store.

Every generated call must either succeed or raise a TnsragError (never a driver error,
UnicodeEncodeError, ...); a rejected batch must leave the corpus as it was; a stored
entry must read back equal.
"""

from __future__ import annotations

import collections
import time

from hypothesis import HealthCheck, given, settings, strategies as st

from bench.attack._support import SCHEMA, arguments, engine_for, migrated_database, print_table
from tnsrag_db import BM25Index, HashingEmbedding, KeywordRAGStrategy, MemoryEntry, RAGContext, VectorMemoryStore
from tnsrag_db._errors import TnsragError
from tnsrag_db._store.store import Store

TEXT = st.text(st.characters(codec=None), max_size=60) | st.sampled_from(
    ["", " ", "\x00", "\ud800", "a\udfffb", "'; DROP TABLE entries; --", "漢" * 400, "x" * 5000, "TAN-5326"])


def main() -> None:
    args = arguments(__doc__ or "", 30.0)
    outcome: collections.Counter[str] = collections.Counter()
    escaped: list[str] = []
    with migrated_database(args.url) as url:
        pool = engine_for(url)
        store = Store(pool, corpus="fuzz", schema=SCHEMA)
        vectors = VectorMemoryStore(store, HashingEmbedding(16), index_threshold=None)
        keyword = KeywordRAGStrategy(BM25Index(store))
        deadline = time.monotonic() + args.seconds

        def attempt(what: str, fn) -> None:  # type: ignore[no-untyped-def]
            try:
                fn()
                outcome[f"{what}: ok"] += 1
            except TnsragError as exc:
                outcome[f"{what}: {type(exc).__name__}"] += 1
            except Exception as exc:  # the failure this script looks for
                escaped.append(f"{what}: {type(exc).__name__}: {str(exc)[:100]}")

        @settings(max_examples=2000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(ids=st.lists(TEXT, min_size=1, max_size=4), content=TEXT, source=st.none() | TEXT,
               meta=st.dictionaries(TEXT, TEXT, max_size=2), query=TEXT, k=st.integers(-2, 2**70),
               fkey=TEXT, fvalue=TEXT)
        def run(ids, content, source, meta, query, k, fkey, fvalue) -> None:  # type: ignore[no-untyped-def]
            if time.monotonic() > deadline:
                return
            before = store.count()

            def write() -> None:
                batch = [MemoryEntry(i, content, source=source, metadata=meta) for i in ids]
                vectors.add_all(batch)
                for e in batch:
                    assert store.get(e.id) == e

            try:
                write()
                outcome["write: ok"] += 1
            except TnsragError as exc:
                outcome[f"write: {type(exc).__name__}"] += 1
                if store.count() != before:
                    escaped.append("a rejected write changed the corpus")
            except Exception as exc:
                escaped.append(f"write: {type(exc).__name__}: {str(exc)[:100]}")
            attempt("keyword", lambda: keyword.retrieve(query, RAGContext(max(1, min(k, 50)),
                                                                          metadata_filters={fkey: fvalue})))
            attempt("bm25 k", lambda: BM25Index(store).search(query, k))
            attempt("vector", lambda: vectors.search(query, k, filters={fkey: fvalue}))
            attempt("context", lambda: RAGContext(k))
            attempt("get", lambda: store.get(fkey))

        run()
        pool.close()
    rows: list[tuple[str, object]] = sorted(outcome.items())
    rows.append(("untyped errors / half-writes", len(escaped)))
    rows += [(f"  {e}", "") for e in escaped[:10]]
    rows.append(("verdict", "held" if not escaped else "BROKEN"))
    print_table("fuzz of entries, filters, queries", rows)


if __name__ == "__main__":
    main()
