"""BM25 postings merged into blocks: the same scores as the per-entry rows, whatever mix of
layouts, deletes, rewrites, tombstones and concurrent merges; writers of the previous
revision kept correct by the triggers; the downgrade moving blocks back to rows."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.engine import URL

from tests.db._helpers import run_processes
from tests.db._watch import unwatched, watch
from tests.db.test_bm25 import (
    PRUNE_QUERIES,
    QUERIES,
    VOCAB,
    ReferenceBM25,
    analysed_counts,
    assert_matches_reference,
    expected_top,
    generated_entries,
    pruning_entries,
    query_terms_independently,
    random_text,
)
from tnsrag_db._db.pool import Connection, Pool
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.bm25 import merge
from tnsrag_db._store.bm25.merge import BLOCK
from tnsrag_db._store.sql import tid_scans_only
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry, MemoryTier


def layout(store: Store) -> dict[str, int]:
    """How the corpus's postings are held, and the invariants of the layout checked."""
    with store.session.transaction() as conn:
        c = {"c": store.corpus}
        row = conn.execute(("""
            SELECT (SELECT count(*) FROM bm25_docs WHERE corpus = :c) AS merged,
                   (SELECT count(DISTINCT entry_id) FROM bm25_postings WHERE corpus = :c) AS rows_entries,
                   (SELECT count(*) FROM bm25_tombstones WHERE corpus = :c) AS tombstones,
                   (SELECT count(*) FROM bm25_blocks WHERE corpus = :c) AS blocks,
                   (SELECT coalesce(max(n), 0) FROM bm25_blocks WHERE corpus = :c) AS fullest,
                   -- an entry in both layouts, or a merged number without its entry
                   (SELECT count(*) FROM bm25_docs d WHERE d.corpus = :c AND (EXISTS (
                      SELECT 1 FROM bm25_postings p WHERE p.corpus = :c AND p.entry_id = d.entry_id)
                      OR NOT EXISTS (SELECT 1 FROM entries e WHERE e.corpus = :c AND e.id = d.entry_id))) AS both,
                   -- blocks whose arrays disagree with their bounds or are out of order
                   (SELECT count(*) FROM bm25_blocks b WHERE b.corpus = :c AND (
                      cardinality(b.docnos) <> b.n OR cardinality(b.tfs) <> b.n OR cardinality(b.dls) <> b.n
                      OR b.docnos[1] < b.first_docno OR b.docnos[b.n] <> b.last_docno
                      OR b.docnos <> ARRAY(SELECT x FROM unnest(b.docnos) x ORDER BY x))) AS bad_blocks,
                   -- df against the live postings of both layouts
                   (SELECT count(*) FROM (SELECT lexeme, sum(df) AS df FROM bm25_df WHERE corpus = :c
                                          GROUP BY lexeme HAVING sum(df) <> 0) d
                    FULL JOIN (SELECT lexeme, count(*) AS df FROM (
                                 SELECT lexeme FROM bm25_postings WHERE corpus = :c
                                 UNION ALL
                                 SELECT b.lexeme FROM bm25_blocks b CROSS JOIN unnest(b.docnos) u(docno)
                                 WHERE b.corpus = :c AND u.docno NOT IN (
                                   SELECT docno FROM bm25_tombstones WHERE corpus = :c)) x
                               GROUP BY lexeme) p USING (lexeme)
                    WHERE d.df IS DISTINCT FROM p.df) AS wrong_df"""), c).one()
    assert row.both == 0 and row.bad_blocks == 0 and row.wrong_df == 0, row
    assert row.fullest <= BLOCK
    return row._asdict()


def test_merged_blocks_score_like_rows_through_updates_deletes_and_purges(make_store: Callable[..., Store]) -> None:
    store = make_store(merge_after_entries=10**9)  # merges only when asked
    index = BM25Index(store)
    rng = random.Random(3)
    batch = generated_entries(rng, 300)
    # A term in every entry: its postings span several blocks.
    batch = [MemoryEntry(e.id, e.content + " everywhere", e.tier, metadata=e.metadata) for e in batch]
    store.add_all(batch[:200])
    report = store.merge_postings()
    assert report.entries == 200 and report.postings > 0
    before = layout(store)
    assert before["merged"] == 200 and before["rows_entries"] == 0 and before["blocks"] > 0
    with store.session.transaction() as conn:
        assert conn.execute("SELECT max(n) FROM bm25_blocks WHERE corpus = :c AND lexeme = 'everywher'",
                            {"c": store.corpus}).scalar_one() == BLOCK
    store.add_all(batch[200:])  # these stay rows: both layouts answer together
    assert layout(store)["rows_entries"] == 100
    assert_matches_reference(index, [*QUERIES, "everywhere agent"])

    # Merged entries rewritten, re-sent unchanged, changed in metadata only, deleted.
    store.add_all([MemoryEntry("d000", "alpha alpha rank"), MemoryEntry("d010", "now a short memory text"),
                   batch[11], MemoryEntry("d012", batch[12].content, MemoryTier.WORKING, metadata={"group": "x"})])
    assert store.delete("d020") and store.delete("d250")
    assert store.delete_where({"group": "g2"}) > 0
    mixed = layout(store)
    assert mixed["tombstones"] > 0
    assert_matches_reference(index, [*QUERIES, "everywhere agent", "alpha rank"])

    # The next merge takes the rows and the tombstones out.
    store.merge_postings()
    merged = layout(store)
    assert merged["tombstones"] == 0 and merged["rows_entries"] == 0
    assert_matches_reference(index, [*QUERIES, "everywhere agent", "alpha rank"])
    # Explanations and feedback statistics read the blocks too.
    hits = index.search("everywhere memory", 5)
    explained = index.explain_scores(lambda st: store.read(st.sql, st.params), "everywhere memory", dict(hits))
    assert set(explained) == {i for i, _ in hits}
    for entry_id, score in hits:
        figures = {t.term: t for t in explained[entry_id].terms}
        assert figures["everywher"].tf == 1
        assert abs(sum(t.contribution for t in figures.values()) - score) < 1e-9
    terms = index.document_terms([i for i, _ in hits])
    assert all(terms[i].get("everywher") == 1 for i, _ in hits)


@pytest.mark.parametrize(("probe_cost", "filter_probe_max"), [(0.0, 1e12), (1e12, 0.0)])
def test_pruned_and_filtered_search_over_both_layouts_is_exact(make_store: Callable[..., Store], probe_cost: float,
                                                             filter_probe_max: float) -> None:
    store = make_store(merge_after_entries=10**9)
    entries = pruning_entries(random.Random(5), 160)
    store.add_all(entries[:100])
    store.merge_postings()
    store.add_all(entries[100:])
    store.delete("p003")
    store.add(MemoryEntry("p004", "zzcommon zzmid rewritten"))
    by_id = {e.id: e for e in store.iter_entries()}
    reference = ReferenceBM25(dict(zip(by_id, analysed_counts(store, [e.content for e in by_id.values()]))))
    index = BM25Index(store, prune_min_df=1, probe_cost=probe_cost, filter_probe_max=filter_probe_max)
    nonempty = 0
    for q in PRUNE_QUERIES:
        terms = query_terms_independently(store, q)
        for k in (1, 3, 10, 200):
            for f in ({}, {"tier": "WORKING"}, {"group": "g1", "tier": "SEMANTIC"}):
                for m in (0.0, 2.5):
                    got = index.search(q, k, filters=f or None, min_score=m)
                    want = expected_top(reference, by_id, terms, k, f, m)
                    assert [i for i, _ in got] == [i for i, _ in want], (q, k, f, m)
                    assert all(abs(a - b) <= 1e-9 for (_, a), (_, b) in zip(got, want))
                    nonempty += bool(got)
    assert nonempty > 20
    # Exact ties across the two layouts (duplicated texts in both) are ordered by id.
    ties = index.search("zzcommon zzrare agent", 200)
    assert ties == sorted(ties, key=lambda r: (-r[1], r[0]))


def test_writers_merge_as_they_write_and_a_sweep_takes_the_rest(make_store: Callable[..., Store]) -> None:
    store = make_store(merge_after_entries=50)
    rng = random.Random(9)
    for start in range(0, 180, 30):
        store.add_all(generated_entries(rng, 30, prefix=f"w{start}-"))
    state = layout(store)
    assert state["merged"] >= 150 and state["rows_entries"] <= 30
    assert store.merge_postings(sweep=True).entries == state["rows_entries"]
    assert layout(store)["rows_entries"] == 0
    assert_matches_reference(BM25Index(store), QUERIES)
    with pytest.raises(ConfigurationError, match="merge_after_entries"):
        make_store(merge_after_entries=0)


def _merging_writer(url: str, corpus: str, seed: int, ops: int) -> None:
    from tnsrag_db._db.pool import Pool

    pool = Pool(url, schema="tnsrag", pool_size=1)
    store = Store(pool, corpus=corpus, merge_after_entries=3)
    rng = random.Random(seed)
    try:
        for _ in range(ops):
            roll = rng.random()
            if roll < 0.2:
                store.delete(f"c{rng.randrange(40):02d}")
            elif roll < 0.3:
                store.merge_postings(sweep=False)
            else:
                ids = rng.sample(range(40), rng.randint(1, 4))
                store.add_all([MemoryEntry(f"c{i:02d}", random_text(rng, rng.randint(1, 30)),
                                           metadata={"group": f"g{rng.randrange(8)}"}) for i in ids])
    finally:
        pool.close()


@pytest.mark.slow
def test_concurrent_writers_and_merges_keep_scores_exact(make_store: Callable[..., Store], db_url: URL) -> None:
    store = make_store()
    store.add_all(generated_entries(random.Random(11), 40, prefix="c"))
    url = db_url.render_as_string(hide_password=False)
    assert run_processes(_merging_writer, [(url, store.corpus, seed, 60) for seed in range(4)], 180) == [0, 0, 0, 0]
    state = layout(store)
    assert state["merged"] > 0
    assert_matches_reference(BM25Index(store), QUERIES)
    from bench.attack._support import inconsistencies  # the attack suite's own recomputation

    assert inconsistencies(store) == dict.fromkeys(inconsistencies(store), 0)
    store.merge_postings()
    assert layout(store)["tombstones"] == 0
    assert_matches_reference(BM25Index(store), QUERIES)


def test_a_previous_revisions_writer_stays_correct_on_merged_entries(make_store: Callable[..., Store]) -> None:
    # A writer that knows nothing of blocks deletes and rewrites entries by their rows only:
    # the triggers on entries retire the merged ones (tombstone, document frequencies).
    store = make_store(merge_after_entries=10**9)
    store.add_all(generated_entries(random.Random(4), 60))
    store.merge_postings()
    with store.session.transaction() as conn:
        c = {"c": store.corpus}
        first, second, third, fourth = conn.execute(
            "SELECT entry_id FROM bm25_docs WHERE corpus = :c ORDER BY docno LIMIT 4", c).scalars()
        gone = {first, second, third}
        # What the previous revision's delete sends for entries (its postings' rows: none left).
        conn.execute("DELETE FROM entries WHERE corpus = :c AND id IN (:a, :b)", {**c, "a": first, "b": second})
        # Its rewrite of a text: the entry row first (the new rows and df follow as before).
        conn.execute(("UPDATE entries SET content = 'other words', content_hash = 'x', doc_len = 0, "
                             "lexemes = '{}' WHERE corpus = :c AND id = :a"), {**c, "a": third})
        # A metadata-only change retires nothing.
        conn.execute("UPDATE entries SET metadata = '{\"k\": \"v\"}' WHERE corpus = :c AND id = :a",
                     {**c, "a": fourth})
    state = layout(store)  # df agrees with the live postings
    assert state["tombstones"] == 3
    assert state["merged"] == 60 - 3 - sum(not e.content.strip() for e in generated_entries(random.Random(4), 60))
    every = {i for i, _ in BM25Index(store).search(" ".join(VOCAB), 1000)}
    assert not every & gone and fourth in every


def test_downgrade_moves_blocks_back_to_rows(make_store: Callable[..., Store], fresh_db_url: URL) -> None:
    from tnsrag_db._db import migrate
    from tnsrag_db._db.pool import Pool

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)
    try:
        migrate.upgrade(pool, schema="tnsrag")
        store = Store(pool, corpus="down", schema="tnsrag", merge_after_entries=10**9)
        store.add_all(generated_entries(random.Random(6), 80))
        store.merge_postings()
        store.delete("d007")
        before = {q: BM25Index(store).search(q, 100) for q in QUERIES}
        migrate.downgrade(pool, schema="tnsrag", revision="0010")
        with pool.begin() as conn:
            conn.execute("SET search_path TO tnsrag")
            rows = conn.execute(
                "SELECT entry_id, lexeme FROM bm25_postings WHERE corpus = 'down' ORDER BY 1, 2").all()
            assert {r.entry_id for r in rows} == {f"d{i:03d}" for i in range(80) if i != 7} - {
                e.id for e in generated_entries(random.Random(6), 80) if not e.content.strip()}
        migrate.upgrade(pool, schema="tnsrag")
        store = Store(pool, corpus="down", schema="tnsrag")
        assert {q: BM25Index(store).search(q, 100) for q in QUERIES} == before
    finally:
        pool.close()


def test_drop_corpus_with_merged_postings(make_store: Callable[..., Store]) -> None:
    store = make_store(merge_after_entries=10**9)
    store.add_all(generated_entries(random.Random(8), 40))
    store.merge_postings()
    store.delete("d001")
    store.drop_corpus()
    with store.session.transaction() as conn:
        for table in ("bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state", "bm25_postings"):
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE corpus = :c",
                                {"c": store.corpus}).scalar_one() == 0, table
    store.add(MemoryEntry("again", "agent memory"))
    assert [i for i, _ in BM25Index(store).search("agent", 5)] == ["again"]


def test_cli_merges_every_corpus_or_the_one_named(make_store: Callable[..., Store], db_url: URL) -> None:
    import json

    from click.testing import CliRunner

    from tnsrag_db._cli import main_group

    first, second = make_store(merge_after_entries=10**9), make_store(merge_after_entries=10**9)
    first.add_all(generated_entries(random.Random(1), 30))
    second.add_all(generated_entries(random.Random(2), 20))
    url = db_url.render_as_string(hide_password=False)
    result = CliRunner().invoke(main_group, ["db", "merge-postings", "--url", url, "--corpus", first.corpus, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [r["corpus"] for r in report["corpora"]] == [first.corpus] and report["corpora"][0]["entries"] > 0
    assert layout(first)["rows_entries"] == 0 and layout(second)["rows_entries"] > 0
    result = CliRunner().invoke(main_group, ["db", "merge-postings", "--url", url])
    assert result.exit_code == 0, result.output
    assert f"{second.corpus}: merged" in result.stdout and layout(second)["rows_entries"] == 0
    assert_matches_reference(BM25Index(second), QUERIES)


def test_a_merge_that_fails_after_a_write_does_not_fail_the_write(fresh_db_url: URL,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # The merge runs after the write committed; on a schema without blocks (not yet
    # upgraded) it fails, and the write is still reported as written.
    from tnsrag_db._db import migrate
    from tnsrag_db._db.pool import Pool

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)
    try:
        migrate.upgrade(pool, schema="tnsrag", revision="0010")
        store = Store(pool, corpus="old", schema="tnsrag", merge_after_entries=1)
        with caplog.at_level("WARNING", logger="tnsrag_db"):
            assert store.add_all([MemoryEntry("a", "agent memory"), MemoryEntry("b", "vector index")]).inserted == 2
        # (0010 has neither the blocks nor the function that says which releases a schema serves)
        assert "not merged into blocks" in caplog.text and "tnsrag_schema_compat" in caplog.text
        # (this release's reads need its own schema, with expiry: listed here by hand)
        with pool.connect() as conn:
            assert conn.execute("SELECT id FROM tnsrag.entries WHERE corpus = 'old' ORDER BY id"
                                ).scalars() == ["a", "b"]
    finally:
        pool.close()


def test_merges_go_on_in_small_transactions_until_nothing_is_left(make_store: Callable[..., Store],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tnsrag_db._store import corpus

    monkeypatch.setattr(corpus, "MERGE_BATCH", 5)
    store = make_store(merge_after_entries=10**9)
    entries = [MemoryEntry(f"m{i:02d}", f"agent memory note {i}") for i in range(32)]
    store.add_all(entries)
    reports: list[int] = []
    total = store.merge_postings(sweep=False, progress=lambda r: reports.append(r.entries))
    assert total.entries == 32 and reports[:6] == [5] * 6 and sum(reports) == 32
    assert store.delete_many([e.id for e in entries[:17]]) == 17
    purged: list[int] = []
    assert store.merge_postings(progress=lambda r: purged.append(r.tombstones)).tombstones == 17
    assert purged[:3] == [5, 5, 5] and layout(store)["tombstones"] == 0
    assert_matches_reference(BM25Index(store), ["agent memory", "note"])
    # A cleared corpus: its blocks and tombstones go whole at the next merge.
    store.clear()
    assert layout(store)["tombstones"] == 15
    store.merge_postings()
    assert layout(store)["blocks"] == 0 and layout(store)["tombstones"] == 0


def test_a_merge_deletes_by_tid_scan_even_when_statistics_say_the_delta_is_empty(
        make_store: Callable[..., Store]) -> None:
    # After a merge had emptied the delta, an ANALYZE records it empty; the next merge's
    # deletes by ctid must still be TID scans, not an index scan of the whole corpus
    # testing every row against the array of ctids (minutes at a million postings).
    store = make_store(merge_after_entries=10**9)
    store.add_all(generated_entries(random.Random(12), 50))
    store.merge_postings()
    with store.session.transaction() as conn:
        conn.execute("ANALYZE bm25_postings, bm25_blocks")
    store.add_all(generated_entries(random.Random(13), 200, prefix="n"))
    with store.session.transaction() as conn:
        for ddl in (merge._STAGE_DDL, *merge._MOVE_STAGE_DDL):
            conn.execute(ddl)
        conn.execute(("INSERT INTO tnsrag_stage_np SELECT p.ctid, p.lexeme, p.entry_id, 1, p.tf, p.doc_len "
                             "FROM bm25_postings p WHERE p.corpus = :c"), {"c": store.corpus})
        conn.execute(("INSERT INTO tnsrag_stage_tail SELECT b.ctid, b.lexeme, b.first_docno, b.docnos, b.tfs, "
                             "b.dls FROM bm25_blocks b WHERE b.corpus = :c"), {"c": store.corpus})
        explain = [(f"EXPLAIN {sql}", {"c": store.corpus, "tids": conn.execute(staged).scalar_one()})
                   for sql, staged in ((merge._GONE_SQL, merge._STAGED_NP_SQL),
                                       (merge._TAILS_GONE_SQL, merge._STAGED_TAILS_SQL))]
        assert all(params["tids"] for _, params in explain)
        with tid_scans_only(conn):
            tid_plans = ["\n".join(conn.execute(statement, params).scalars()) for statement, params in explain]
        conn.rollback()
    # No index scan of the corpus, no scan of the whole table: a TID scan.
    assert all(plan.startswith("Delete on") and "Tid Scan" in plan and "Index" not in plan for plan in tid_plans), \
        tid_plans
    assert layout(store)["rows_entries"] > 150
    store.merge_postings()
    assert layout(store)["rows_entries"] == 0
    assert_matches_reference(BM25Index(store), QUERIES)


def _joined_away(plan: dict[str, object]) -> int:
    """The most rows one node of a JSON plan (EXPLAIN ANALYZE) compared and threw away in a
    join: a nested loop's join filter tests every pair of its two sides."""
    worst = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        removed = float(node.get("Rows Removed by Join Filter", 0)) * float(node.get("Actual Loops", 1))  # type: ignore[arg-type]
        worst = max(worst, int(removed))
        stack.extend(node.get("Plans", []))  # type: ignore[arg-type]
    return worst


@pytest.mark.parametrize("merged", [False, True], ids=["rows", "blocks"])
def test_pruned_scoring_reads_each_term_once_however_many_candidates(make_store: Callable[..., Store],
                                                                       merged: bool) -> None:
    # A long question of frequent terms: many candidates are scored in full by one pass over
    # the non-essential terms' postings (probe_cost makes probes never pay). That pass joined
    # the candidates, whose count the planner cannot know: a nested loop read every
    # non-essential posting once per candidate (seconds on an 8k-entry corpus).
    # The statistics know nothing of the corpus (analysed before it was written, as a new
    # corpus's are until the next ANALYZE): its postings are estimated at a few rows.
    store = make_store(merge_after_entries=10**9, analyze_after_rows=10**9)
    with store.session.transaction() as conn:
        conn.execute("ANALYZE bm25_postings, bm25_blocks, bm25_docs")
    store.add_all(pruning_entries(random.Random(21), 600))
    if merged:
        store.merge_postings()
    index = BM25Index(store, prune_min_df=1, probe_cost=1e9)
    query = "zzcommon zzmid zzrare zzrarest agent memory vector index"
    statement = index.ranking_statement(query, 5)
    with store.session.transaction() as conn:
        plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.sql}",
                            dict(statement.params)).scalar_one()  # parsed by the driver
    postings = sum(index.document_frequency(index.query_terms(query)).values())
    # Pairing each posting with each query term is the most a join of this statement may
    # throw away; pairing each posting with each candidate is the quadratic join.
    assert _joined_away(plan[0]["Plan"]) <= len(index.query_terms(query)) * postings
    assert [i for i, _ in index.search(query, 5)] == [i for i, _ in BM25Index(store, prune_min_df=10**9).search(query, 5)]


def _postings_scans(node: dict[str, Any]) -> list[str]:
    """Each scan of ``bm25_postings`` in a JSON plan tree, by its index condition."""
    found = [f"{node['Node Type']}: {node.get('Index Cond', '(no index condition)')}"
             for _ in [0] if node.get("Relation Name") == "bm25_postings"]
    for child in node.get("Plans", ()):
        found += _postings_scans(child)
    return found


@pytest.mark.parametrize("query", ["zzcommon zzrare", "zzcommon zzmid zzrare zzrarest agent memory vector index"])
def test_a_query_reads_only_its_terms_postings_right_after_a_merge(make_store: Callable[..., Store],
                                                                    query: str) -> None:
    # A merge moves a corpus's postings into blocks and leaves their rows dead until the next
    # vacuum, while an ANALYZE records the rows layout as nearly empty. The rows layout's
    # scan, planned as a join, then became a hash join over the corpus's whole key range,
    # dead entries included: on merged /usr/share/doc/git every query read 6,137 index
    # buffers (short questions 17 ms instead of 1.5 ms) until autovacuum ran.
    store = make_store(merge_after_entries=10**9, analyze_after_rows=10**9)
    store.add_all(pruning_entries(random.Random(22), 400))
    store.merge_postings()
    with store.session.transaction() as conn:
        conn.execute("ANALYZE bm25_postings, bm25_blocks, bm25_docs")
    index = BM25Index(store, prune_min_df=1)
    statement = index.ranking_statement(query, 5)
    with store.session.transaction() as conn:
        # Which key each index scan uses is the question. A table that other tests' merges and
        # vacuums left a few pages long may be read whole instead (harmless at that size):
        # sequential scans are off for the question.
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(f"EXPLAIN (FORMAT JSON) {statement.sql}", dict(statement.params)).scalar_one()
    scans = _postings_scans(plan[0]["Plan"])
    # Keyed by a term (a term's range) or by an entry (a candidate's probe), never by the corpus alone.
    assert scans and all(re.search(r"\((lexeme|entry_id) = ", scan) for scan in scans), scans
    assert_matches_reference(index, [query])


#: The tables keyed by corpus that a merge reads or writes.
_MERGE_TABLES = ("entries", "bm25_postings", "bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state")


def _per_row_corpus_reads(node: dict[str, Any], per_row: bool = False) -> list[str]:
    """The scans of a plan tree that run once per row of another scan (the inner side of a
    nested loop, a correlated subplan) and are keyed by nothing but the corpus, or by
    nothing: each reads the whole corpus (or table) once per row."""
    kind = node["Node Type"]
    found = []
    if per_row and kind in ("Index Scan", "Index Only Scan", "Bitmap Index Scan"):
        columns = set(re.findall(r"\((\w+) (?:=|<|>|<=|>=) ", node.get("Index Cond", "")))
        if columns <= {"corpus"}:
            found.append(f"{kind} using {node['Index Name']} on {node.get('Index Cond')}")
    elif per_row and kind == "Seq Scan":
        found.append(f"Seq Scan on {node['Relation Name']}")
    for child in node.get("Plans", ()):
        relation = child.get("Parent Relationship")
        inner = per_row or relation == "SubPlan" or (kind == "Nested Loop" and relation == "Inner")
        found += _per_row_corpus_reads(child, inner)
    return found


@contextmanager
def _merge_plans(pool: Pool) -> Iterator[dict[str, dict[str, Any]]]:
    """The plan of every statement on ``engine``'s connections in the block that reaches a
    merge's tables, each planned with EXPLAIN right before it runs (same transaction,
    same settings, same snapshot of the statistics)."""
    plans: dict[str, dict[str, Any]] = {}

    def explain(conn: Connection, statement: str, parameters: Any) -> None:
        if (statement.lstrip().startswith(("SELECT", "INSERT", "UPDATE", "DELETE", "WITH"))
                and any(table in statement for table in _MERGE_TABLES) and "set_config" not in statement):
            plans[statement] = unwatched(conn, "EXPLAIN (FORMAT JSON) " + statement, parameters).scalar_one()[0]["Plan"]

    with watch(before=explain):
        yield plans


def test_a_merge_on_statistics_that_never_saw_its_corpus_reads_no_corpus_once_per_row(fresh_db_url: URL) -> None:
    # The first merge after a bulk write of a new corpus beside a merged one: the delta was
    # last analysed empty and entries before the corpus existed, so the planner takes the
    # new corpus for one row in every table. A lookup by key planned on another index led by
    # corpus (entries has six) then reads the whole corpus once per entry: a 30,000-entry
    # merge ran for minutes. Every statement of the merge, the purge and the sweep is
    # planned here on such statistics; none may read a corpus once per row.
    from tnsrag_db._db import migrate
    from tnsrag_db._db.pool import Pool

    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)
    try:
        migrate.upgrade(pool, schema="tnsrag")
        with pool.begin() as conn:  # the statistics stay what this test makes them
            for table in _MERGE_TABLES:
                conn.execute(f"ALTER TABLE tnsrag.{table} SET (autovacuum_enabled = off)")

        def make(corpus: str) -> Store:
            return Store(pool, corpus=corpus, schema="tnsrag", merge_after_entries=10**9,
                         analyze_after_rows=10**9)

        old = make("merged")
        old.add_all(generated_entries(random.Random(21), 200))
        old.merge_postings()
        with pool.begin() as conn:
            conn.execute(f"ANALYZE {', '.join(f'tnsrag.{t}' for t in _MERGE_TABLES)}")
        new, swept = make("new"), make("swept")
        new.add_all(generated_entries(random.Random(22), 600, prefix="n"))
        swept.add_all(generated_entries(random.Random(23), 600, prefix="s"))
        with pool.begin() as conn:  # the statistics the merges plan on: both corpora look like one row
            for table, corpus_column in (("entries", "corpus"), ("bm25_postings", "corpus")):
                plan = conn.execute((f"EXPLAIN (FORMAT JSON) SELECT 1 FROM tnsrag.{table} "
                                            f"WHERE {corpus_column} = 'new'")).scalar_one()[0]["Plan"]
                assert plan["Plan Rows"] <= 1, (table, plan)

        with _merge_plans(pool) as plans:
            moved = new.merge_postings(sweep=False)
        assert new.delete_many([f"n{i:03d}" for i in range(0, 600, 3)]) > 0  # tombstones for the purge
        with _merge_plans(pool) as more:
            purged = new.merge_postings(sweep=False)
            sweep = swept.merge_postings(sweep=True)
        plans.update(more)
        assert moved.entries > 500 and purged.tombstones > 150 and sweep.entries > 500
        bad = {statement: reads for statement, plan in plans.items() if (reads := _per_row_corpus_reads(plan))}
        assert not bad, bad
        # Every statement of the merge was planned above.
        names = ("_DELTA_ENTRIES_SQL", "_LOCK_SQL", "_NP_SCAN_SQL", "_TAIL_SQL", "_GONE_SQL", "_BLOCKS_SQL",
                 "_TOMBSTONES_SQL", "_HIT_SQL", "_PURGE_SQL", "_PURGED_SQL", "_SWEEP_WINDOW_SQL", "_NUMBERED_SQL",
                 "_NP_PROBE_SQL")
        texts = {name: getattr(merge, name) for name in names}
        assert [name for name, statement in texts.items() if statement not in plans] == []
        for store in (new, swept):
            assert layout(store)["rows_entries"] == 0 and layout(store)["tombstones"] == 0
            assert_matches_reference(BM25Index(store), QUERIES)
    finally:
        pool.close()


def test_a_large_write_refreshes_the_statistics_before_its_merge(fresh_db_url: URL,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The merge after a bulk write plans on statistics that have seen the write; the delta,
    # analysed full then, is analysed again once the merge has emptied it.
    from tnsrag_db._db import migrate
    from tnsrag_db._db.pool import Pool
    from tnsrag_db._store import corpus

    events: list[tuple[str, ...]] = []
    analyze, merge_postings = corpus.Writer._analyze, corpus.merge_postings

    def analysed(self: corpus.Writer, tables: Any) -> None:
        events.append(("analyze", *tables))
        analyze(self, tables)

    def merged(conn: Connection, **options: Any) -> Any:
        events.append(("merge",))
        return merge_postings(conn, **options)

    monkeypatch.setattr(corpus.Writer, "_analyze", analysed)
    monkeypatch.setattr(corpus, "merge_postings", merged)
    pool = Pool(fresh_db_url, schema="tnsrag", pool_size=2)
    try:
        migrate.upgrade(pool, schema="tnsrag")
        store = Store(pool, corpus="bulk", schema="tnsrag", merge_after_entries=40, analyze_after_rows=60)
        store.add_all(generated_entries(random.Random(31), 100))
        first_merge = events.index(("merge",))
        assert events[0] == ("analyze", "entries", "bm25_postings") and first_merge == 1
        assert events[-1] == ("analyze", "bm25_postings", "bm25_blocks", "bm25_docs")
        events.clear()
        store.add_all(generated_entries(random.Random(32), 50, prefix="x"))  # a merge, no refresh
        assert events and all(event == ("merge",) for event in events)
        assert layout(store)["rows_entries"] == 0
    finally:
        pool.close()


def test_a_bulk_ingest_merges_once_after_its_last_batch(make_store: Callable[..., Store]) -> None:
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.embeddings import HashingEmbedding

    store = make_store(merge_after_entries=50)
    seen: list[dict[str, int]] = []

    def progress(phase: str, done: int, total: int | None) -> None:
        if phase == "write":  # after each batch's commit
            seen.append(layout(store))

    entries = generated_entries(random.Random(11), 240, prefix="b")
    counts = VectorMemoryStore(store, HashingEmbedding(16)).ingest(entries, batch_size=20, vectors=False,
                                                                  progress=progress, max_batch_size=80)
    assert counts.inserted == 240
    # Batches of 20, 40, 80, 80, 20, past merge_after_entries from the second on: none merged
    # during the load (an entry without terms has no postings).
    with_terms = _ids_with_terms(store)
    assert [s["rows_entries"] for s in seen] == [len(with_terms & {e.id for e in entries[:end]})
                                                 for end in (20, 60, 140, 220, 240)]
    assert all(s["merged"] == 0 for s in seen)
    after = layout(store)  # then one merge of everything, exact as before
    assert after["rows_entries"] == 0 and after["merged"] == len(with_terms) > 200
    assert_matches_reference(BM25Index(store), QUERIES)
    # A plain write of the same size still merges as it commits.
    store.add_all(generated_entries(random.Random(12), 60, prefix="p"))
    assert layout(store)["rows_entries"] == 0


def test_an_interrupted_bulk_ingest_leaves_its_postings_as_rows(make_store: Callable[..., Store]) -> None:
    from tnsrag_db._errors import IngestInterrupted
    from tnsrag_db._indexes.vector import VectorMemoryStore
    from tnsrag_db.embeddings import HashingEmbedding

    store = make_store(merge_after_entries=50)
    entries = generated_entries(random.Random(13), 120, prefix="i")

    def fail_late(phase: str, done: int, total: int | None) -> None:
        if phase == "write" and done >= 100:
            raise KeyboardInterrupt

    with pytest.raises(IngestInterrupted):
        VectorMemoryStore(store, HashingEmbedding(16)).ingest(entries, batch_size=50, vectors=False,
                                                              progress=fail_late)
    state = layout(store)
    assert state["merged"] == 0 and state["rows_entries"] == len(_ids_with_terms(store)) > 80
    assert store.count() == 100
    assert_matches_reference(BM25Index(store), QUERIES)
    store.add_all(generated_entries(random.Random(14), 10, prefix="n"))  # the next write merges what was left
    assert layout(store)["rows_entries"] == 0


def _ids_with_terms(store: Store) -> set[str]:
    return {r.id for r in store.read("SELECT id FROM entries WHERE corpus = :c AND cardinality(lexemes) > 0",
                                     {"c": store.corpus})}
