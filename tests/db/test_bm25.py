"""BM25Index and KeywordRAGStrategy on a real database, checked against a plain in-memory BM25."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from sqlalchemy.engine import URL

from tests.db._helpers import run_processes
from tnsrag_db._counts import IngestCounts
from tnsrag_db._db.statement import AS_OF_PARAM
from tnsrag_db._errors import ConfigurationError, InvalidFilterError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.bm25.analysis import analyze
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.keyword import KeywordRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext

# -- an independent BM25 ------------------------------------------------------------------

_TERMS_SQL = (
    "SELECT t.lexeme, cardinality(t.positions) AS n FROM unnest(CAST(:chunks AS text[])) AS c(chunk) "
    "CROSS JOIN LATERAL unnest(to_tsvector(CAST(:cfg AS regconfig), c.chunk)) AS t")


def analysed_counts(store: Store, texts: Iterable[str], cfg: str = "english") -> list[Counter[str]]:
    """Term counts of each text, recomputed from the analysis rules (not read from the postings)."""
    out: list[Counter[str]] = []
    with store.session.transaction() as conn:
        for text in texts:
            analysed = analyze(text)
            counts: Counter[str] = Counter(analysed.extra_terms)
            for lexeme, n in conn.execute(_TERMS_SQL, {"chunks": analysed.chunks, "cfg": cfg}):
                counts[lexeme] += n
            out.append(counts)
    return out


class ReferenceBM25:
    """Okapi BM25 in plain Python over given term counts."""

    def __init__(self, docs: Mapping[str, Counter[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.docs = docs
        self.k1, self.b = k1, b
        self.n = len(docs)
        self.avgdl = sum(sum(c.values()) for c in docs.values()) / self.n if self.n else 0.0
        self.df: Counter[str] = Counter()
        for counts in docs.values():
            self.df.update(counts.keys())

    def scores(self, terms: Iterable[str]) -> dict[str, float]:
        out: dict[str, float] = {}
        for term in set(terms):
            df = self.df.get(term, 0)
            if df == 0:
                continue
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            for doc_id, counts in self.docs.items():
                tf = counts.get(term, 0)
                if tf:
                    dl = sum(counts.values())
                    norm = tf + self.k1 * (1 - self.b + self.b * dl / self.avgdl)
                    out[doc_id] = out.get(doc_id, 0.0) + idf * tf * (self.k1 + 1) / norm
        return out


def query_terms_independently(store: Store, query: str) -> set[str]:
    return set(analysed_counts(store, [query])[0])


def assert_matches_reference(index: BM25Index, queries: Iterable[str]) -> None:
    store = index.store
    entries = list(store.iter_entries())
    docs = dict(zip([e.id for e in entries], analysed_counts(store, [e.content for e in entries])))
    reference = ReferenceBM25(docs, index.k1, index.b)
    n, avg = index.corpus_statistics()
    assert n == len(docs)
    assert avg == pytest.approx(reference.avgdl, rel=1e-12)
    assert index.document_terms(list(docs)) == {i: dict(c) for i, c in docs.items()}
    checked = 0
    for query in queries:
        terms = query_terms_independently(store, query)
        assert set(index.query_terms(query)) == terms
        expected = reference.scores(terms)
        got = index.search(query, max(1, len(docs)))
        assert {i for i, _ in got} == set(expected), query
        for entry_id, score in got:
            assert abs(score - expected[entry_id]) <= 1e-9, (query, entry_id, score, expected[entry_id])
        assert got == sorted(got, key=lambda r: (-r[1], r[0]))
        checked += len(got)
    assert checked > 0


# -- a generated corpus -------------------------------------------------------------------

VOCAB = ["agent", "memory", "vector", "index", "postgres", "query", "rank", "score", "token", "graph",
         "shard", "tier", "cache", "fusion", "lexeme", "parser", "router", "planner", "buffer", "writer",
         "TAN-5326", "snake_case_name", "HttpClient.get", "getHTTPResponse", "v2.1", "retrieval", "semantic"]


def random_text(rng: random.Random, length: int) -> str:
    # Zipf-ish draws so that some terms repeat within and across documents.
    words = rng.choices(VOCAB, weights=[1 / (i + 1) for i in range(len(VOCAB))], k=length)
    return " ".join(words)


def generated_entries(rng: random.Random, n: int, prefix: str = "d") -> list[MemoryEntry]:
    tiers = list(MemoryTier)
    return [MemoryEntry(f"{prefix}{i:03d}", random_text(rng, rng.randint(0, 40)), rng.choice(tiers),
                        metadata={"group": f"g{i % 3}"}) for i in range(n)]


QUERIES = ["agent memory", "vector index postgres", "rank", "TAN-5326", "5326", "snake_case_name", "HttpClient",
           "getHTTPResponse", "HttpClient.get shard", "alpha", "zzz-not-there", "the of and", "v2.1 fusion fusion",
           "retrieval semantic planner buffer writer"]


def test_scores_equal_reference_bm25_with_long_documents_updates_and_deletes(store: Store) -> None:
    rng = random.Random(7)
    index = BM25Index(store)
    batch = generated_entries(rng, 60)
    # Long documents: > 16,383 words (tsvector merges positions beyond) and a term
    # repeated > 255 times (tsvector caps a count at 255): true tf must be kept.
    filler = [f"filler{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(17_000)]
    long_text = " ".join(["alpha"] * 300 + filler + ["memory"] * 3)
    batch.append(MemoryEntry("long1", long_text))
    batch.append(MemoryEntry("long2", " ".join(["agent alpha"] * 700)))
    assert index.add_all(batch) == IngestCounts(inserted=len(batch))
    terms = index.document_terms(["long1", "long2"])
    assert terms["long1"]["alpha"] == 300 and terms["long2"]["alpha"] == 700 and terms["long2"]["agent"] == 700
    assert sum(terms["long1"].values()) == 17_303
    with store.session.transaction() as conn:  # what a single tsvector would have kept
        capped = conn.execute(("SELECT cardinality(positions) FROM unnest(to_tsvector('english', :t)) "
                                      "WHERE lexeme = 'alpha'"), {"t": long_text}).scalar_one()
    assert capped < 300
    assert_matches_reference(index, QUERIES)

    # Updates (text changed, metadata only, unchanged), an insert and deletes.
    updated = [MemoryEntry("d000", "alpha alpha rank"), MemoryEntry("long1", "now a short memory text"),
               MemoryEntry("d001", batch[1].content, MemoryTier.WORKING, metadata={"group": "moved"}),
               batch[2], MemoryEntry("new", "TAN-5326 TAN-5326 fusion")]
    assert index.add_all(updated) == IngestCounts(inserted=1, updated=3, unchanged=1)
    assert store.delete("d003") and store.delete("long2")
    assert store.delete_where({"group": "g2"}) > 0
    assert_matches_reference(index, QUERIES)


def test_custom_parameters_and_validation(store: Store) -> None:
    rng = random.Random(3)
    store.add_all(generated_entries(rng, 30))
    for k1, b in ((0.0, 0.0), (2.0, 1.0), (0.9, 0.4)):
        assert_matches_reference(BM25Index(store, k1=k1, b=b), QUERIES[:6])
    for bad in ({"k1": -0.1}, {"k1": math.inf}, {"k1": math.nan}, {"b": 1.5}, {"b": -0.01}, {"b": math.nan}):
        with pytest.raises(ConfigurationError):
            BM25Index(store, **bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        BM25Index("not a store")  # type: ignore[arg-type]
    index = BM25Index(store)
    assert (index.k1, index.b, index.store) == (1.2, 0.75, store)
    for bad_k in (0, -1, True, 1.5):
        with pytest.raises(ValidationError):
            index.search("agent", bad_k)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        index.search("agent", 3, min_score=math.nan)
    with pytest.raises(ValidationError):
        index.search("a\x00b", 3)
    with pytest.raises(InvalidFilterError):
        index.search("agent", 3, filters={" ": "x"})
    assert index.search("", 5) == [] and index.search("   ", 5) == []


def test_statistics_for_feedback(store: Store) -> None:
    index = BM25Index(store)
    assert index.corpus_statistics() == (0, 0.0)
    assert index.search("agent", 5) == []
    index.add_all([MemoryEntry("a", "Agents run agents."), MemoryEntry("b", "Memory of an agent."),
                   MemoryEntry("c", "")])
    assert index.query_terms("The agents' MEMORY, agent!") == ["agent", "memori"]
    assert index.document_terms(["a", "c", "missing"]) == {"a": {"agent": 2, "run": 1}, "c": {}}
    assert index.document_frequency(["agent", "memori", "nothing"]) == {"agent": 2, "memori": 1, "nothing": 0}
    assert index.corpus_statistics() == (3, pytest.approx(5 / 3))


# -- concurrent writers -------------------------------------------------------------------

def _writer(url: str, corpus: str, seed: int, ops: int) -> None:
    from tnsrag_db._db.pool import Pool

    pool = Pool(url, schema="tnsrag", pool_size=1)
    store = Store(pool, corpus=corpus)
    rng = random.Random(seed)

    def op(roll: float, arg: int, batch: list[MemoryEntry]) -> None:
        if roll < 0.2:
            store.delete(f"c{arg % 40:02d}")
        elif roll < 0.3:
            store.delete_where({"group": f"g{arg % 8}"})
        else:
            store.add_all(batch)

    try:
        for _ in range(ops):
            ids = rng.sample(range(40), rng.randint(1, 4))
            batch = [MemoryEntry(f"c{i:02d}", random_text(rng, rng.randint(1, 30)),
                                 metadata={"group": f"g{rng.randrange(8)}"}) for i in ids]
            args = (rng.random(), rng.randrange(40), batch)
            # No retry: writers and deletes lock entries in id order, so none may deadlock.
            op(*args)
    finally:
        pool.close()


@pytest.mark.slow
def test_scores_equal_reference_after_concurrent_writers(make_store: Callable[..., Store], db_url: URL) -> None:
    store = make_store()
    store.add_all(generated_entries(random.Random(11), 40, prefix="c"))
    url = db_url.render_as_string(hide_password=False)
    assert run_processes(_writer, [(url, store.corpus, seed, 80) for seed in range(4)], 120) == [0, 0, 0, 0]
    index = BM25Index(store)
    with store.session.transaction() as conn:
        rows = conn.execute(("SELECT count(*) AS n, coalesce(sum(doc_len), 0) AS tl FROM entries "
                                    "WHERE corpus = :c"), {"c": store.corpus}).one()
        shards = conn.execute("SELECT count(*) FROM bm25_stats WHERE corpus = :c",
                              {"c": store.corpus}).scalar_one()
    assert shards > 1  # the writers spread over several counter rows
    n, avg = index.corpus_statistics()
    assert n == rows.n and avg == pytest.approx(rows.tl / rows.n if rows.n else 0.0, rel=1e-12)
    assert_matches_reference(index, QUERIES)


# -- identifiers --------------------------------------------------------------------------

IDENTIFIER_DOCS = [
    MemoryEntry("ticket", "Fixed TAN-5326 in the release notes."),
    MemoryEntry("ticket-parts", "The tan colour and 5326 items, unrelated."),
    MemoryEntry("snake", "Call snake_case_name before anything else."),
    MemoryEntry("snake-parts", "A snake in case of a name."),
    MemoryEntry("method", "Use HttpClient.get for simple requests."),
    MemoryEntry("method-parts", "An http client can get things too."),
    MemoryEntry("camel", "getHTTPResponse returns the raw response."),
    MemoryEntry("other", "Nothing relevant here at all."),
]


@pytest.mark.parametrize(("query", "first"), [
    ("TAN-5326", "ticket"), ("tan-5326", "ticket"), ("5326", None), ("snake_case_name", "snake"),
    ("HttpClient.get", "method"), ("HttpClient", "method"), ("getHTTPResponse", "camel"),
])
def test_identifiers_match_whole_and_by_parts(store: Store, query: str, first: str | None) -> None:
    index = BM25Index(store)
    index.add_all(IDENTIFIER_DOCS)
    ranked = [i for i, _ in index.search(query, 10)]
    if first is None:  # a part alone: both documents carrying it match
        assert set(ranked) == {"ticket", "ticket-parts"}
    else:
        assert ranked[0] == first
        scores = dict(index.search(query, 10))
        if f"{first}-parts" in scores:
            assert scores[first] > scores[f"{first}-parts"]
    assert "other" not in ranked


def test_identifier_parts_find_the_identifier(store: Store) -> None:
    index = BM25Index(store)
    index.add_all(IDENTIFIER_DOCS)
    assert "camel" in [i for i, _ in index.search("HTTP response", 10)]
    assert "method" in [i for i, _ in index.search("client", 10)]
    assert "snake" in [i for i, _ in index.search("case", 10)]


ABBREVIATION_DOCS = [
    MemoryEntry("abbrev", "Turbines, e.g. the U.S. designs, run hot; i.e. they need cooling."),
    MemoryEntry("vitamin", "Vitamin E deficiency and vitamin U."),
    MemoryEntry("jet", "The x-15 flew fast."),
    MemoryEntry("other", "Nothing relevant here at all."),
]


def test_abbreviations_add_no_one_letter_terms(store: Store) -> None:
    index = BM25Index(store)
    index.add_all(ABBREVIATION_DOCS)
    with store.session.transaction() as conn:
        lexemes = dict(conn.execute("SELECT id, lexemes FROM entries WHERE corpus = :c",
                                    {"c": store.corpus}).all())
    assert {"e.g", "u.s", "i.e"} <= set(lexemes["abbrev"])
    assert not [t for t in lexemes["abbrev"] if len(t) < 2]
    assert "15" in lexemes["jet"] and "x-15" in lexemes["jet"] and "x" not in lexemes["jet"]
    # A one-letter query word finds the text that has the word, not the abbreviations.
    assert [i for i, _ in index.search("e", 10)] == ["vitamin"]
    assert [i for i, _ in index.search("vitamin U", 10)] == ["vitamin"]
    assert [i for i, _ in index.search("x", 10)] == []
    # The abbreviations and identifiers themselves still match whole and by their long parts.
    assert [i for i, _ in index.search("e.g.", 10)] == ["abbrev"]
    assert [i for i, _ in index.search("U.S.", 10)] == ["abbrev"]
    assert [i for i, _ in index.search("X-15", 10)] == ["jet"]
    assert [i for i, _ in index.search("15", 10)] == ["jet"]


# -- the strategy ---------------------------------------------------------------------------

def test_keyword_strategy_spec_filter_examples(store: Store) -> None:
    index = BM25Index(store)
    index.add(MemoryEntry("memory-guide", "Agents can persist semantic memory. Memory memory.", MemoryTier.SEMANTIC))
    index.add(MemoryEntry("working-note", "Agents use memory while running.", MemoryTier.WORKING,
                          source="notes.md", metadata={"team": "core"}))
    index.add(MemoryEntry("unrelated", "Nothing to see.", MemoryTier.WORKING))
    keyword = KeywordRAGStrategy(index)
    assert keyword.name == "keyword" and keyword.keywords is index

    unfiltered = keyword.retrieve("agent memory")
    assert [d.metadata["entryId"] for d in unfiltered] == ["memory-guide", "working-note"]
    assert unfiltered[0].metadata == {"tier": "SEMANTIC", "entryId": "memory-guide"}
    assert unfiltered[1].metadata == {"tier": "WORKING", "entryId": "working-note", "source": "notes.md",
                                      "team": "core"}
    assert unfiltered[1].source == "notes.md" and unfiltered[1].content == "Agents use memory while running."
    assert [d.score for d in unfiltered] == [s for _, s in index.search("agent memory", 10)]

    working = keyword.retrieve("agent memory", RAGContext(max_results=1, metadata_filters={"tier": "WORKING"}))
    assert [d.metadata["entryId"] for d in working] == ["working-note"]
    assert working[0].score == unfiltered[1].score
    assert keyword.retrieve("agent memory", RAGContext(metadata_filters={"tenant": "acme"})) == []
    assert [d.metadata["entryId"] for d in keyword.retrieve(
        "agent memory", RAGContext(metadata_filters={"team": "core", "tier": "WORKING"}))] == ["working-note"]
    assert keyword.retrieve("agent memory", RAGContext(metadata_filters={"team": "Core"})) == []
    assert [d.metadata["entryId"] for d in keyword.retrieve(
        "agent memory", RAGContext(metadata_filters={"source": "notes.md"}))] == ["working-note"]
    assert [d.metadata["entryId"] for d in keyword.retrieve(
        "agent memory", RAGContext(metadata_filters={"entryId": "memory-guide"}))] == ["memory-guide"]

    with pytest.raises(ConfigurationError):
        KeywordRAGStrategy(store)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        keyword.retrieve(42)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        keyword.retrieve("agent", {"max_results": 1})  # type: ignore[arg-type]


def test_filter_applies_before_top_k(store: Store) -> None:
    # Many strong SEMANTIC matches, weak WORKING ones: a post-filter of the top-k would return nothing.
    index = BM25Index(store)
    index.add_all([MemoryEntry(f"s{i:02d}", "agent agent memory memory", MemoryTier.SEMANTIC) for i in range(30)]
                  + [MemoryEntry(f"w{i}", "an agent and lots of other unrelated words " * (i + 1), MemoryTier.WORKING)
                     for i in range(3)])
    everything = index.search("agent memory", 100)
    assert [i[0] for i, _ in everything[:30]] == ["s"] * 30
    got = index.search("agent memory", 2, filters={"tier": "WORKING"})
    assert got == [r for r in everything if r[0].startswith("w")][:2]
    docs = KeywordRAGStrategy(index).retrieve("agent memory", RAGContext(2, 0.0, {"tier": "WORKING"}))
    assert [d.metadata["entryId"] for d in docs] == [i for i, _ in got]
    assert [d.score for d in docs] == [s for _, s in got]


def test_min_score_is_inclusive_and_ties_break_by_id(store: Store) -> None:
    index = BM25Index(store)
    index.add_all([MemoryEntry("b", "agent memory"), MemoryEntry("a", "agent memory"),
                   MemoryEntry("c", "agent"), MemoryEntry("d", "unrelated words only")])
    ranked = index.search("agent memory", 10)
    assert [i for i, _ in ranked] == ["a", "b", "c"]
    assert ranked[0][1] == ranked[1][1] > ranked[2][1] > 0
    threshold = ranked[2][1]
    assert [i for i, _ in index.search("agent memory", 10, min_score=threshold)] == ["a", "b", "c"]
    assert [i for i, _ in index.search("agent memory", 10, min_score=math.nextafter(threshold, math.inf))] == ["a", "b"]
    keyword = KeywordRAGStrategy(index)
    docs = keyword.retrieve("agent memory", RAGContext(min_score=threshold))
    assert [d.metadata["entryId"] for d in docs] == ["a", "b", "c"]
    assert keyword.retrieve("agent memory", RAGContext(min_score=ranked[0][1] + 1)) == []
    assert [i for i, _ in index.search("agent memory", 1)] == ["a"]


def test_candidates_sql_embeds_as_a_cte(store: Store) -> None:
    index = BM25Index(store)
    index.add_all([MemoryEntry("a", "agent memory"), MemoryEntry("b", "agent"),
                   MemoryEntry("c", "memory", MemoryTier.WORKING)])
    one, p1 = index.candidates_sql("agent memory", 5, prefix="k")
    two, p2 = index.candidates_sql("memory", 5, filters={"tier": "WORKING"}, prefix="k2")
    assert set(p1) & set(p2) == {AS_OF_PARAM}  # one instant for the whole statement
    sql = (f"WITH k AS ({one}), k2 AS ({two}) SELECT 'k' AS s, entry_id, score FROM k "
           "UNION ALL SELECT 'k2', entry_id, score FROM k2 ORDER BY s, score DESC, entry_id")
    with store.session.transaction() as conn:
        rows = [(r.s, r.entry_id, r.score) for r in conn.execute(sql, {**p1, **p2})]
    assert rows == [("k", i, s) for i, s in index.search("agent memory", 5)] + \
        [("k2", i, s) for i, s in index.search("memory", 5, filters={"tier": "WORKING"})]
    with pytest.raises(ConfigurationError):
        index.candidates_sql("agent", 5, prefix="k; DROP")


def test_corpora_are_isolated(make_store: Callable[..., Store]) -> None:
    one, two = make_store(), make_store()
    one.add(MemoryEntry("x", "agent memory"))
    two.add_all([MemoryEntry("y", "agent"), MemoryEntry("z", "other")])
    assert [i for i, _ in BM25Index(one).search("agent", 5)] == ["x"]
    assert [i for i, _ in BM25Index(two).search("agent", 5)] == ["y"]
    assert BM25Index(one).corpus_statistics()[0] == 1 and BM25Index(two).corpus_statistics()[0] == 2


# -- pruning of frequent terms (exact top k) ----------------------------------------------------

PRUNE_WORDS = [("zzcommon", 0.95), ("zzmid", 0.45), ("zzrare", 0.06), ("zzrarest", 0.02)]
PRUNE_QUERIES = ["zzcommon zzrare", "zzcommon zzrarest", "zzcommon zzmid", "zzcommon zzmid zzrare",
                 "zzcommon zzmid zzrare zzrarest", "zzcommon", "zzmid zzrare agent"]


def pruning_entries(rng: random.Random, n: int) -> list[MemoryEntry]:
    tiers = list(MemoryTier)
    out = []
    for i in range(n):
        words = random_text(rng, rng.randint(1, 12)).split()
        for word, share in PRUNE_WORDS:
            if rng.random() < share:
                words += [word] * rng.choice((1, 1, 1, 2, 3))
        rng.shuffle(words)
        # Duplicated texts make exact score ties, broken by id.
        text = " ".join(words) if i % 7 else "zzcommon zzrare agent"
        out.append(MemoryEntry(f"p{i:03d}", text, tiers[i % 4], metadata={"group": f"g{i % 3}"}))
    return out


def expected_top(reference: ReferenceBM25, entries: Mapping[str, MemoryEntry], terms: set[str], k: int,
                 filters: Mapping[str, str], floor: float) -> list[tuple[str, float]]:
    def keep(entry: MemoryEntry) -> bool:
        return all(entry.tier.value == v if key == "tier" else entry.metadata.get(key) == v
                   for key, v in filters.items())

    scored = [(i, s) for i, s in reference.scores(terms).items() if s >= floor and keep(entries[i])]
    return sorted(scored, key=lambda r: (-r[1], r[0]))[:k]


@pytest.mark.parametrize(("probe_cost", "filter_probe_max"), [(0.0, 1e12), (1e12, 0.0)])
def test_pruned_search_is_exact(store: Store, probe_cost: float, filter_probe_max: float) -> None:
    # Frequent terms are pruned (scored only for entries holding a rarer term) when the
    # bounds allow, and the full scoring runs otherwise: k beyond the candidates, only
    # frequent terms, filters and min_score. Both ways of scoring the pruned terms
    # (primary-key probes, one pass) and of filtering are forced in turn.
    index = BM25Index(store, prune_min_df=10**9)  # the unpruned statement first
    index.add_all(pruning_entries(random.Random(5), 160))
    entries = {e.id: e for e in store.iter_entries()}
    docs = dict(zip(entries, analysed_counts(store, [e.content for e in entries.values()])))
    reference = ReferenceBM25(docs)
    full = {}  # the unpruned statement: the same ranking
    cases = [(q, k, f, m) for q in PRUNE_QUERIES for k in (1, 3, 10, 200)
             for f in ({}, {"tier": "WORKING"}, {"group": "g1", "tier": "SEMANTIC"}) for m in (0.0, 2.5)]
    for q, k, f, m in cases:
        full[q, k, str(f), m] = index.search(q, k, filters=f or None, min_score=m)
    index = BM25Index(store, prune_min_df=1, probe_cost=probe_cost, filter_probe_max=filter_probe_max)
    nonempty = 0
    for q, k, f, m in cases:
        got = index.search(q, k, filters=f or None, min_score=m)
        # The same ranking; the scores to the last bits only: the pruned statement adds
        # the same contributions grouped differently, and float addition is not associative.
        assert [i for i, _ in got] == [i for i, _ in full[q, k, str(f), m]], (q, k, f, m)
        assert all(a == pytest.approx(b, rel=1e-12) for (_, a), (_, b) in zip(got, full[q, k, str(f), m]))
        expected = expected_top(reference, entries, query_terms_independently(store, q), k, f, m)
        assert [i for i, _ in got] == [i for i, _ in expected], (q, k, f, m)
        for (_, score), (_, want) in zip(got, expected):
            assert abs(score - want) <= 1e-9
        nonempty += bool(got)
    assert nonempty > len(cases) // 2
    # An exact tie (the duplicated texts) is ordered by id in both paths.
    ties = [s for _, s in index.search("zzcommon zzrare agent", 200)]
    assert len(ties) != len(set(ties))


def test_pruning_options_are_checked(store: Store) -> None:
    index = BM25Index(store)
    assert (index.prune_min_df, index.prune_ratio, index.probe_cost, index.filter_probe_max) == (1000, 0.5, 20.0, 2000.0)
    tuned = BM25Index(store, prune_min_df=5, prune_ratio=0.25, probe_cost=0, filter_probe_max=1e6)
    assert (tuned.prune_min_df, tuned.prune_ratio, tuned.probe_cost, tuned.filter_probe_max) == (5, 0.25, 0.0, 1e6)
    for option, bad in (("prune_min_df", 0), ("prune_min_df", 2.5), ("prune_min_df", True), ("prune_ratio", -0.1),
                        ("prune_ratio", math.nan), ("probe_cost", -1.0), ("probe_cost", math.inf),
                        ("filter_probe_max", -1.0), ("filter_probe_max", "10")):
        with pytest.raises(ConfigurationError, match=option):
            BM25Index(store, **{option: bad})  # type: ignore[arg-type]


def _probe_loops(store: Store, index: BM25Index, query: str, k: int) -> int:
    """How many times the ranking statement probed the postings per candidate: the
    executions (loops) of its correlated subplans reading them (rows or blocks), executed with EXPLAIN
    ANALYZE. A subplan runs once per row of the candidates it scores whatever the planner
    chooses inside it (an index or a sequential scan), so the count depends on the data and
    the options, not on the table's statistics."""
    import json

    statement = index.ranking_statement(query, k)
    with store.session.transaction() as conn:
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql,
                            dict(statement.params)).scalar_one()
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def reads(node: dict[str, Any]) -> bool:
        return node.get("Relation Name") in ("bm25_postings", "bm25_blocks") or any(reads(c) for c in node.get("Plans", ()))

    def loops(node: dict[str, Any]) -> int:
        if node.get("Parent Relationship") == "SubPlan" and reads(node):
            return int(node.get("Actual Loops", 0))
        return sum(loops(child) for child in node.get("Plans", ()))

    return loops(plan[0]["Plan"])


def test_probe_cost_and_filter_probe_max_choose_the_way_of_scanning(store: Store) -> None:
    # The options change how the pruned statement reads postings (one primary-key probe per
    # candidate, or one pass), never what it returns. The way is chosen by the statement
    # from the candidates it counts, so the probes are counted the same before and after the
    # table's statistics change (ANALYZE here, as autovacuum may at any time).
    store.add_all(pruning_entries(random.Random(5), 160))
    query = "zzcommon zzmid zzrare"
    probing = BM25Index(store, prune_min_df=1, probe_cost=0.0)
    one_pass = BM25Index(store, prune_min_df=1, probe_cost=1e12)
    assert probing.search(query, 3) == one_pass.search(query, 3)
    counts = []
    for analyse in (False, True):
        if analyse:
            with store.session.transaction() as conn:
                conn.execute("ANALYZE bm25_postings")
        counts.append((_probe_loops(store, probing, query, 3), _probe_loops(store, one_pass, query, 3)))
    assert counts[0] == counts[1], counts
    (probes, one_pass_probes), _ = counts
    # The 3 best partial scores are scored by probes either way; only the probing
    # statement probes the other candidates too.
    assert probes > one_pass_probes >= 3, counts
    # A filter checked per scanned posting, or by reading the filtered entries once.
    per_posting = BM25Index(store, filter_probe_max=1e12)
    read_once = BM25Index(store, filter_probe_max=0.0)
    filters = {"group": "g1"}
    # (Both ways read the 53 filtered entries once here: the planner hashes the per-posting
    # check too, so only the rows are compared.)
    assert per_posting.search(query, 3, filters=filters) == read_once.search(query, 3, filters=filters)


def test_text_in_either_unicode_form_is_found_by_the_other(store: Store) -> None:
    import unicodedata

    nfd = unicodedata.normalize("NFD", "Le café de la gare sert un crème brûlée.")
    nfc = unicodedata.normalize("NFC", "Un café serré au comptoir.")
    assert nfd != unicodedata.normalize("NFC", nfd)
    store.add_all([MemoryEntry("nfd", nfd), MemoryEntry("nfc", nfc),
                   MemoryEntry("pdf", "The con\ufb01guration \ufb01le of the engine."),
                   MemoryEntry("other", "Tea and biscuits.")])
    index = BM25Index(store)
    for query in (unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")):
        assert {d[0] for d in index.search(query, 10)} == {"nfd", "nfc"}, query
    assert [d[0] for d in index.search(unicodedata.normalize("NFC", "brûlée"), 10)] == ["nfd"]
    # compatibility forms meet their plain letters: the PDF ligature, full-width letters
    assert [d[0] for d in index.search("configuration file", 10)] == ["pdf"]
    assert [d[0] for d in index.search("\uff45\uff4e\uff47\uff49\uff4e\uff45", 10)] == ["pdf"]
    # the content is stored as given
    assert store.get("nfd").content == nfd  # type: ignore[union-attr]
