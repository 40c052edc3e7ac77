"""DistinctContentRAGStrategy and ``tnsrag query --distinct``: identical contents collapse to one result."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._cli import main_group
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.distinct import DUPLICATES_KEY, DistinctContentRAGStrategy, collapse_duplicates
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext

CHANGELOG = "Version 2.1: fixed the parser crash on empty input; faster changelog rendering."


def _corpus(store: Store) -> KeywordRAGStrategy:
    # The same changelog shipped by three packages, and other notes about the parser.
    store.add_all([MemoryEntry(f"pkg{n}/changelog#0", CHANGELOG) for n in range(3)]
                  + [MemoryEntry(f"note{n}", f"The parser note {n}: empty input handling, crash report {n}.")
                     for n in range(6)])
    return KeywordRAGStrategy(BM25Index(store))


def ids(docs: object) -> list[str]:
    return [d.metadata["entryId"] for d in docs]  # type: ignore[attr-defined]


def test_identical_contents_collapse_to_the_best_and_k_results_remain(store: Store) -> None:
    keyword = _corpus(store)
    plain = keyword.retrieve("parser crash empty input changelog", RAGContext(5))
    assert sum(d.content == CHANGELOG for d in plain) == 3  # the copies take three of five slots
    distinct = DistinctContentRAGStrategy(keyword)
    docs = distinct.retrieve("parser crash empty input changelog", RAGContext(5))
    assert len(docs) == 5 and len({d.content for d in docs}) == 5
    [kept] = [d for d in docs if d.content == CHANGELOG]
    first = ids(plain)[0]
    assert kept.metadata["entryId"] == first and kept.score == plain[0].score
    assert json.loads(kept.metadata[DUPLICATES_KEY]) == [i for i in ids(plain) if i.startswith("pkg") and i != first]
    assert all(DUPLICATES_KEY not in d.metadata for d in docs if d.content != CHANGELOG)
    # the same through the plan and the async API
    assert store.run(distinct.plan("parser crash empty input changelog", RAGContext(5))) == docs
    assert asyncio.run(distinct.aretrieve("parser crash empty input changelog", RAGContext(5))) == docs
    assert distinct.name == "keyword"


def test_explain_keeps_the_collapse(store: Store) -> None:
    distinct = DistinctContentRAGStrategy(_corpus(store))
    explained = distinct.explain("parser crash empty input changelog", RAGContext(5))
    assert explained.documents == distinct.retrieve("parser crash empty input changelog", RAGContext(5))
    [plan] = [p for p in explained.plans if p.stream == "distinct"]
    assert "2 result(s) with identical content folded" in plan.detail
    assert [r.rank for r in explained.results] == [1, 2, 3, 4, 5]
    assert all(r.explanation.score == r.document.score for r in explained.results)


def test_collapse_keeps_order_and_a_bad_base_is_refused() -> None:
    assert collapse_duplicates([]) == ([], {})
    with pytest.raises(ConfigurationError, match="retrieve"):
        DistinctContentRAGStrategy(object())  # type: ignore[arg-type]


def test_cli_distinct_and_the_empty_corpus_note(db_url: URL, store: Store) -> None:
    _corpus(store)
    url = db_url.render_as_string(hide_password=False)
    runner = CliRunner()
    base = ["query", "parser crash empty input changelog", "--url", url, "--corpus", store.corpus,
            "--strategy", "keyword", "--top-k", "4", "--json"]
    plain = json.loads(runner.invoke(main_group, base).stdout)["results"]
    distinct = runner.invoke(main_group, [*base, "--distinct"])
    assert distinct.exit_code == 0, distinct.output
    results = json.loads(distinct.stdout)["results"]
    assert len(results) == 4 and len({r["content"] for r in results}) == 4
    assert sum(r["content"] == CHANGELOG for r in plain) >= 2
    explained = json.loads(runner.invoke(main_group, [*base, "--distinct", "--explain"]).stdout)
    assert [r["id"] for r in explained["results"]] == [r["id"] for r in results]
    assert any(p["stream"] == "distinct" for p in explained["plans"])
    # an existing corpus without entries says so
    empty = f"empty_{uuid.uuid4().hex[:8]}"
    emptied = Store(store.pool, corpus=empty, schema=store.schema)
    emptied.add(MemoryEntry("gone", "written, then deleted"))
    emptied.delete("gone")
    try:
        out = runner.invoke(main_group, ["query", "anything", "--url", url, "--corpus", empty,
                                         "--strategy", "keyword"])
        assert out.exit_code == 0, out.output
        assert f"note: corpus '{empty}' holds no entries yet" in out.output
    finally:
        Store(store.pool, corpus=empty, schema=store.schema).drop_corpus()
