"""The static single-corpus check behind tests/fix_corpus_scope.py (Citus routing rule)."""

from __future__ import annotations

import pytest

from tests._corpus_scope import corpus_violations

PINNED = [
    "SELECT e.id FROM entries e WHERE e.corpus = %(c)s AND e.id = %(id)s",
    "SELECT id FROM entries WHERE corpus = %(c)s",
    "SELECT e.id FROM entries e JOIN embeddings x ON x.corpus = e.corpus AND x.entry_id = e.id "
    "WHERE e.corpus = %(c)s",
    "SELECT e.id FROM entries e JOIN embeddings x USING (corpus) WHERE e.corpus = %(c)s",
    "UPDATE embedding_spaces SET index_name = NULL WHERE corpus = %(c)s AND space_id = %(s)s",
    "DELETE FROM edges g WHERE g.corpus = CAST(%(c)s AS TEXT) AND g.src = %(id)s",
    "INSERT INTO entries (corpus, id, content) VALUES (%(c)s, %(id)s, %(t)s)",
    "INSERT INTO bm25_df AS t (corpus, lexeme, shard, df) SELECT %(c)s, l, 0, 1 FROM unnest(%(l)s) AS l "
    "ON CONFLICT (corpus, lexeme, shard) DO UPDATE SET df = t.df + 1",
    "SELECT x.id FROM stage s CROSS JOIN LATERAL (SELECT x.id FROM entries x WHERE x.corpus = %(c)s "
    "AND x.id = s.id OFFSET 0) x",
    "SELECT count(*) FROM entries /* tnsrag:all-corpora */",
    "CREATE INDEX CONCURRENTLY ix ON embeddings USING hnsw (embedding) WHERE space_id = 4",
    "ANALYZE (SKIP_LOCKED) entries, bm25_postings",
    "SELECT c.relname FROM pg_class c WHERE c.relname = 'entries'",
    # The read runner's hidden corpus (tnsrag_db._db.statement.hidden_corpus) pins as the parameter does.
    "SELECT e.id FROM entries e WHERE e.corpus = (SELECT CAST(%(c)s AS text)) AND e.id = %(id)s",
]

UNPINNED = [
    ("SELECT count(*) FROM entries", "entries"),
    ("SELECT 1 FROM embedding_spaces WHERE space_id = %(s)s", "embedding_spaces"),
    ("DELETE FROM embeddings x WHERE x.ctid = ANY (ARRAY(SELECT q.ctid FROM embeddings q "
     "WHERE q.corpus = %(c)s))", "embeddings (as x)"),
    ("SELECT e.id FROM entries e JOIN edges g ON g.src = e.id WHERE e.corpus = %(c)s", "edges"),
    ("SELECT e.id FROM entries e WHERE e.corpus = ANY(%(cs)s)", "entries"),
    ("SELECT a.id FROM entries a JOIN entries b ON a.id = b.id WHERE a.corpus = %(c1)s AND b.corpus = %(c2)s",
     "several corpora"),
    ("INSERT INTO entries (corpus, id) SELECT e.corpus, e.id FROM entries e", "entries"),
    # A subquery that reads a table is not a constant.
    ("SELECT e.id FROM entries e WHERE e.corpus = (SELECT k.corpus FROM corpora k LIMIT 1)", "entries"),
]


@pytest.mark.parametrize("statement", PINNED)
def test_statements_pinned_to_one_corpus_pass(statement: str) -> None:
    assert corpus_violations(statement) == []


@pytest.mark.parametrize(("statement", "named"), UNPINNED)
def test_statements_reaching_beyond_one_corpus_are_named(statement: str, named: str) -> None:
    problems = corpus_violations(statement)
    assert problems and any(named in p for p in problems), problems


def test_two_parameters_bound_to_one_corpus_are_one_corpus() -> None:
    statement = ("SELECT a.id FROM entries a JOIN embeddings b ON a.id = b.entry_id "
                 "WHERE a.corpus = %(k_c)s AND b.corpus = %(v_c)s")
    assert corpus_violations(statement, {"k_c": "docs", "v_c": "docs"}) == []
    assert any("several corpora" in p for p in corpus_violations(statement, {"k_c": "docs", "v_c": "other"}))
