"""Retrieval scores and plans: the same query scores alike whatever plan PostgreSQL chose.

Float addition is not associative: a BM25 score sums its terms' parts, in lexeme order,
so that two connections with different plans for the same statement (one planned for
its values, one reusing a generic plan made under other statistics) give the same
scores to the last bit.
"""

from __future__ import annotations

from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db import BM25Index, KeywordRAGStrategy, MemoryEntry, RAGContext, connect


def test_scores_do_not_depend_on_the_plan(db_url: URL) -> None:
    """A connection whose generic plans were made before the corpus was loaded (another
    shape than a fresh connection's plans for the full corpus) and fresh connections forced
    to either kind of plan score every entry to the last bit alike: float addition is not
    associative, so an entry's parts are summed in lexeme order, whatever order a plan meets
    them in."""
    from tests.db.test_explain import QUERIES, _corpus

    queries = QUERIES + [" ".join(QUERIES)]
    early = connect(db_url, corpus="plan_free_scores", schema=SCHEMA, pool_size=1, max_overflow=0)
    found = []
    try:
        early_keyword = KeywordRAGStrategy(BM25Index(early))
        early.add(MemoryEntry("seed", " ".join(queries)))
        for q in queries:
            for _ in range(8):
                early_keyword.retrieve(q, RAGContext(10))
        with connect(db_url, corpus="plan_free_scores", schema=SCHEMA) as store:
            _corpus(store)
        found.append([early_keyword.retrieve(q, RAGContext(10)) for q in queries])
    finally:
        early.close()
    for mode in ("auto", "force_generic_plan", "force_custom_plan"):
        url = db_url.update_query_dict({"options": f"-c plan_cache_mode={mode}"})
        with connect(url, corpus="plan_free_scores", schema=SCHEMA, pool_size=1, max_overflow=0) as store:
            keyword = KeywordRAGStrategy(BM25Index(store))
            for q in queries:
                runs = [keyword.retrieve(q, RAGContext(10)) for _ in range(8)]
                assert runs[0] and all(run == runs[0] for run in runs), (mode, q)
            found.append([keyword.retrieve(q, RAGContext(10)) for q in queries])
    assert all(f == found[0] for f in found)
