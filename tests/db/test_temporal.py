"""TemporalIndex write checks and TemporalRAGStrategy freshness re-ranking on a real database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.db._helpers import FixedScores, ids_of
from tnsrag_db._counts import IngestCounts
from tnsrag_db._errors import ConfigurationError, TemporalValidationError
from tnsrag_db._indexes.temporal import TemporalIndex
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.temporal import TemporalRAGStrategy
from tnsrag_db._types import MemoryEntry, RAGContext, TemporalMetadata

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAY = timedelta(days=1)


def clock() -> datetime:
    return NOW


def entry(eid: str, ts: datetime | None = None, source: str | None = None, **metadata: str) -> MemoryEntry:
    return MemoryEntry(eid, f"text of {eid}", source=source, timestamp=ts, metadata=metadata)


@pytest.fixture
def dated(store: Store) -> TemporalIndex:
    index = TemporalIndex(store)
    index.add_all([
        entry("fresh", NOW), entry("future", NOW + timedelta(minutes=4)), entry("one_hl", NOW - 30 * DAY),
        entry("ten_hl", NOW - 300 * DAY), entry("undated"),
    ], clock=clock)
    return index


# -- TemporalIndex ------------------------------------------------------------------------

def test_invalid_and_zoneless_timestamps_are_rejected_at_construction() -> None:
    for bad in ("2025-01-01T00:00:00", "yesterday", "2025-13-01T00:00:00Z"):
        with pytest.raises(TemporalValidationError):
            MemoryEntry("e", "x", metadata={TemporalMetadata.TIMESTAMP: bad})
    with pytest.raises(TemporalValidationError, match="no time zone"):
        MemoryEntry("e", "x", timestamp=datetime(2025, 1, 1))


def test_future_beyond_skew_is_rejected_at_write_and_nothing_is_written(store: Store) -> None:
    index = TemporalIndex(store)
    assert index.max_future_skew == timedelta(minutes=5)
    with pytest.raises(TemporalValidationError, match="'late'") as info:
        index.add_all([entry("ok", NOW), entry("late", NOW + timedelta(minutes=5, seconds=1))], clock=clock)
    assert isinstance(info.value, ValueError)
    assert store.count() == 0
    # Exactly at the skew is accepted; a later clock accepts what was too far ahead.
    assert index.add(entry("edge", NOW + timedelta(minutes=5)), clock=clock) == IngestCounts(inserted=1)
    later = NOW + timedelta(minutes=1)
    assert index.add(entry("late", NOW + timedelta(minutes=5, seconds=1)), clock=lambda: later).inserted == 1
    strict = TemporalIndex(store, max_future_skew=timedelta(0), clock=clock)
    with pytest.raises(TemporalValidationError):
        strict.add(entry("s", NOW + timedelta(microseconds=1)))
    # The default clock is the real one: something dated next year is refused.
    with pytest.raises(TemporalValidationError):
        index.add(entry("next_year", datetime.now(timezone.utc) + 365 * DAY))


def test_timestamps_from_column_and_metadata_key(store: Store) -> None:
    index = TemporalIndex(store)
    index.add_all([entry("a", NOW - DAY), MemoryEntry("b", "x", metadata={TemporalMetadata.TIMESTAMP:
                                                                              "2025-12-31T01:00:00+01:00"}),
                   entry("c")], clock=clock)
    stamps = index.timestamps(["a", "b", "c", "missing"])
    assert stamps == {"a": NOW - DAY, "b": NOW - DAY, "c": None}
    assert index.timestamps([]) == {}


def test_bad_index_configuration(store: Store) -> None:
    for kwargs in ({"max_future_skew": timedelta(seconds=-1)}, {"max_future_skew": 300}, {"clock": "now"}):
        with pytest.raises(ConfigurationError):
            TemporalIndex(store, **kwargs)
    with pytest.raises(ConfigurationError, match="aware"):
        TemporalIndex(store).add(entry("a"), clock=lambda: datetime(2026, 1, 1))


# -- TemporalRAGStrategy ---------------------------------------------------------------------

def test_multiplier_at_known_ages(dated: TemporalIndex) -> None:
    names = ["fresh", "future", "one_hl", "ten_hl", "undated"]
    strategy = TemporalRAGStrategy(FixedScores(dated.store, dict.fromkeys(names, 1.0)), dated, clock=clock)
    assert strategy.name == "temporal"
    assert (strategy.half_life, strategy.relevance_floor, strategy.max_future_skew) == (
        timedelta(days=30), 0.8, timedelta(minutes=5))
    docs = strategy.retrieve("q")
    assert ids_of(docs) == ["fresh", "future", "one_hl", "ten_hl", "undated"]
    got = {d.metadata["entryId"]: d for d in docs}
    assert got["fresh"].score == 1.0
    assert got["future"].score == 1.0  # within the skew: age 0
    assert got["one_hl"].score == pytest.approx(0.9, abs=1e-12)
    assert got["ten_hl"].score == pytest.approx(0.8 + 0.2 / 1024, abs=1e-12)
    assert got["undated"].score == 0.8
    assert {k: (d.metadata.get("ageSeconds"), d.metadata["freshness"]) for k, d in got.items()} == {
        "fresh": ("0", "1.0"), "future": ("0", "1.0"), "one_hl": ("2592000", "0.9"),
        "ten_hl": ("25920000", "0.800195"), "undated": (None, "0.8")}
    assert dict(got["one_hl"].metadata) == {"tier": "SEMANTIC", "entryId": "one_hl", "ageSeconds": "2592000",
                                            "freshness": "0.9"}
    assert strategy.multiplier(NOW - 60 * DAY, NOW) == pytest.approx(0.85, abs=1e-12)


def test_child_scores_are_multiplied_and_reranked(dated: TemporalIndex) -> None:
    child = FixedScores(dated.store, {"ten_hl": 1.0, "one_hl": 0.95, "fresh": 0.5})
    strategy = TemporalRAGStrategy(child, dated, clock=clock, half_life=timedelta(days=300), relevance_floor=0.5)
    docs = strategy.retrieve("q")
    # one_hl: 0.95 × (0.5 + 0.5 × 0.5 ** 0.1); ten_hl: 1.0 × 0.75; fresh: 0.5 × 1.0.
    assert ids_of(docs) == ["one_hl", "ten_hl", "fresh"]
    assert [d.score for d in docs] == pytest.approx([0.95 * (0.5 + 0.5 * 0.5 ** 0.1), 0.75, 0.5], abs=1e-12)


def test_future_beyond_skew_fails_at_retrieval(store: Store) -> None:
    index = TemporalIndex(store)
    # Written through the plain store, which does not know the clock.
    store.add_all([entry("ok", NOW - DAY), entry("ahead", NOW + timedelta(minutes=6))])
    child = FixedScores(store, {"ok": 1.0, "ahead": 0.1})
    with pytest.raises(TemporalValidationError, match="'ahead'"):
        TemporalRAGStrategy(child, index, clock=clock).retrieve("q")
    # A wider skew accepts it as age 0.
    docs = TemporalRAGStrategy(child, index, clock=clock, max_future_skew=timedelta(minutes=10)).retrieve("q")
    assert [(d.metadata["entryId"], d.metadata["ageSeconds"]) for d in docs] == [("ok", "86400"), ("ahead", "0")]


def test_filter_is_passed_down_and_applied_before_top_k(store: Store) -> None:
    index = TemporalIndex(store)
    index.add_all([entry("new_b", NOW, team="b"), entry("old_a", NOW - 300 * DAY, team="a"),
                   entry("mid_a", NOW - 30 * DAY, team="a")], clock=clock)
    child = FixedScores(store, {"new_b": 1.0, "old_a": 1.0, "mid_a": 0.9})
    strategy = TemporalRAGStrategy(child, index, clock=clock)
    docs = strategy.retrieve("q", RAGContext(max_results=1, metadata_filters={"team": "a"}))
    # old_a: 1.0 × 0.8002; mid_a: 0.9 × 0.9 = 0.81.
    assert ids_of(docs) == ["mid_a"] and docs[0].score == pytest.approx(0.81, abs=1e-12)
    assert child.calls[-1].metadata_filters == {"team": "a"}
    assert child.calls[-1].max_results == 50
    strategy.retrieve("q", RAGContext(max_results=20))
    assert child.calls[-1].max_results == 80 and child.calls[-1].metadata_filters == {}


def test_min_score_is_inclusive_after_reranking(dated: TemporalIndex) -> None:
    child = FixedScores(dated.store, dict.fromkeys(["fresh", "one_hl", "ten_hl", "undated"], 1.0))
    strategy = TemporalRAGStrategy(child, dated, clock=clock)
    assert ids_of(strategy.retrieve("q", RAGContext(min_score=0.9))) == ["fresh", "one_hl"]
    assert child.calls[-1].min_score == 0.9


def test_source_fence(store: Store) -> None:
    index = TemporalIndex(store)
    index.add_all([entry("a1", NOW, source="a"), entry("b1", NOW, source="b"), entry("none", NOW)], clock=clock)
    child = FixedScores(store, {"a1": 0.5, "b1": 1.0, "none": 0.9})
    fenced = TemporalRAGStrategy(child, index, allowed_sources={"a"}, clock=clock)
    assert fenced.allowed_sources == {"a"}
    assert ids_of(fenced.retrieve("q")) == ["a1"]
    assert ids_of(TemporalRAGStrategy(child, index, allowed_sources=[], clock=clock).retrieve("q")) == [
        "b1", "none", "a1"]


def test_overfetch_grows_until_the_reranked_top_k_is_final(store: Store) -> None:
    index = TemporalIndex(store)
    # 119 undated entries the child ranks first, and one fresh entry it ranks last.
    index.add_all([entry(f"u{i:03}") for i in range(119)] + [entry("new", NOW)], clock=clock)
    child = FixedScores(store, {**{f"u{i:03}": 1.0 - i / 1000 for i in range(119)}, "new": 0.85})
    strategy = TemporalRAGStrategy(child, index, clock=clock)
    docs = strategy.retrieve("q", RAGContext(max_results=1))
    assert ids_of(docs) == ["new"] and docs[0].score == 0.85
    assert [c.max_results for c in child.calls] == [50, 100, 200]
    # When the first page decides the top-K (0.85 beats anything an unfetched candidate,
    # at most 0.0951, could reach), one call suffices.
    child.scores = {**{f"u{i:03}": 0.1 - i / 10000 for i in range(119)}, "new": 0.85}
    child.calls.clear()
    assert ids_of(strategy.retrieve("q", RAGContext(max_results=1))) == ["new"]
    assert [c.max_results for c in child.calls] == [50]


def test_default_clock_is_now_in_utc(store: Store) -> None:
    index = TemporalIndex(store)
    index.add(entry("recent", datetime.now(timezone.utc) - timedelta(hours=1)))
    docs = TemporalRAGStrategy(FixedScores(store, {"recent": 1.0}), index).retrieve("q")
    assert 3000 <= int(docs[0].metadata["ageSeconds"]) < 4000
    assert 0.99 < docs[0].score < 1.0


def test_bad_strategy_configuration(dated: TemporalIndex) -> None:
    child = FixedScores(dated.store, {"fresh": 1.0})
    for kwargs in ({"half_life": timedelta(0)}, {"half_life": 30}, {"relevance_floor": -0.1},
                   {"relevance_floor": 1.1}, {"relevance_floor": float("nan")},
                   {"max_future_skew": timedelta(seconds=-1)}, {"clock": "now"}, {"allowed_sources": "a"}):
        with pytest.raises(ConfigurationError):
            TemporalRAGStrategy(child, dated, **kwargs)
    with pytest.raises(ConfigurationError):
        TemporalRAGStrategy(object(), dated)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        TemporalRAGStrategy(child, dated.store)  # type: ignore[arg-type]
    naive = TemporalRAGStrategy(child, dated, clock=lambda: datetime(2026, 1, 1))
    with pytest.raises(ConfigurationError, match="aware"):
        naive.retrieve("q")


def test_with_the_real_keyword_strategy(store: Store) -> None:
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy

    index = TemporalIndex(store)
    index.add_all([
        MemoryEntry("old", "Incident report: database failover completed.", timestamp=NOW - 30 * DAY,
                    metadata={"team": "db"}),
        MemoryEntry("new", "Incident report: database failover completed.", timestamp=NOW - DAY,
                    metadata={"team": "db"}),
        MemoryEntry("other", "Incident report: database failover completed.", timestamp=NOW,
                    metadata={"team": "web"}),
        MemoryEntry("noise", "Lunch menu for Friday."),
    ], clock=clock)
    keyword = KeywordRAGStrategy(BM25Index(store))
    base = {d.metadata["entryId"]: d.score for d in keyword.retrieve("database failover")}
    assert set(base) == {"old", "new", "other"} and base["old"] == base["new"]
    strategy = TemporalRAGStrategy(keyword, index, clock=clock)
    docs = strategy.retrieve("database failover", RAGContext(metadata_filters={"team": "db"}))
    assert ids_of(docs) == ["new", "old"]
    assert [d.score for d in docs] == pytest.approx([base["new"] * (0.8 + 0.2 * 0.5 ** (1 / 30)), base["old"] * 0.9])


def test_plan_driven_by_run_plan_is_retrieve(store: Store) -> None:
    from tests.db._plans import drive
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy

    index = TemporalIndex(store)
    index.add_all([MemoryEntry("old", "database failover", timestamp=NOW - 30 * DAY),
                   MemoryEntry("new", "database failover", timestamp=NOW - DAY),
                   MemoryEntry("undated", "database failover notes")], clock=clock)
    strategy = TemporalRAGStrategy(KeywordRAGStrategy(BM25Index(store)), index, clock=clock)
    expected = strategy.retrieve("database failover")
    assert ids_of(expected) == ["new", "old", "undated"]
    docs, yielded = drive(store, strategy.plan("database failover"))
    assert docs == expected and len(yielded) == 2  # the keyword child's statement, the timestamps
