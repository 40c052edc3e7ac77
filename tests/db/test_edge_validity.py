"""Validity in time of graph edges: an edge is followed, listed and explained only at the
instants it is valid (the read's ``as_of``, else now); a bad interval writes nothing; a
write replaces the validity; exports, restores, merges, the command line and the MCP tool
carry it."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

import tnsrag_db
from tnsrag_db._errors import InvalidEntryError, ValidationError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.graph import GraphRAGStrategy
from tnsrag_db._strategies.hybrid import HybridRAGStrategy
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext
from tnsrag_db.admin import export_corpus

PAST = datetime(2020, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2999, 1, 1, tzinfo=timezone.utc)
WORDS = ["agent", "memory", "vector", "keyword", "graph", "time", "tree", "query"]


def _embedding(text: str) -> list[float]:
    lowered = text.lower()
    return [float(lowered.count(w)) + 0.01 * i for i, w in enumerate(WORDS)]


def _clock(store: Store) -> datetime:
    return store.read("SELECT clock_timestamp() AS t", {})[0].t  # type: ignore[no-any-return]


class _Corpus:
    """Entries a..f; ``a`` is a seed of "agent memory", ``e`` ("graph graph tree") is no seed
    and is reached only through the edge ``a -cites-> e``, valid until ``ended`` (between
    ``during``, after the entries were written, and now)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.vectors = VectorMemoryStore(store, _embedding)
        self.vectors.add_all([
            MemoryEntry("a", "agent memory agent", MemoryTier.SEMANTIC),
            MemoryEntry("b", "memory vector graph", MemoryTier.WORKING),
            MemoryEntry("c", "agent keyword query", MemoryTier.SEMANTIC),
            MemoryEntry("d", "time tree memory memory", MemoryTier.EPISODIC),
            MemoryEntry("e", "graph graph tree", MemoryTier.SEMANTIC),
            MemoryEntry("f", "agent memory vector keyword", MemoryTier.WORKING),
        ])
        self.graph = GraphStore(store)
        time.sleep(0.01)
        self.during = _clock(store)
        time.sleep(0.01)
        self.ended = _clock(store)
        self.graph.add_edge("a", "e", "cites", valid_until=self.ended)

    def walker(self, **kw: object) -> GraphRAGStrategy:
        G = GraphRAGStrategy
        return G("test", self.graph, None, G.DEFAULT_MAX_DEPTH, G.DEFAULT_DEPTH_DECAY,  # type: ignore[arg-type]
                 G.DEFAULT_MAX_VISITED_NODES, **kw)

    def hybrid(self) -> HybridRAGStrategy:
        return HybridRAGStrategy(BM25Index(self.store), self.vectors, self.walker())


@pytest.fixture
def corpus(store: Store) -> _Corpus:
    return _Corpus(store)


def _ids(docs: list) -> list[str]:  # type: ignore[type-arg]
    return [d.metadata["entryId"] for d in docs]


def test_edges_state_their_validity_and_refuse_a_bad_one() -> None:
    edge = Edge("a", "b", valid_from=PAST, valid_until=FUTURE)
    assert (edge.valid_from, edge.valid_until) == (PAST, FUTURE)
    assert Edge("a", "b").valid_from is None and Edge("a", "b").valid_until is None
    with pytest.raises(ValidationError, match="valid_from .* has no time zone"):
        Edge("a", "b", valid_from=datetime(2030, 1, 1))
    with pytest.raises(ValidationError, match="valid_until must be a datetime"):
        Edge("a", "b", valid_until="2030-01-01")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="is not before valid_until"):
        Edge("a", "b", valid_from=FUTURE, valid_until=PAST)
    with pytest.raises(ValidationError, match="is not before valid_until"):
        Edge("a", "b", valid_from=PAST, valid_until=PAST)  # the interval is half-open: empty


def test_the_graph_strategy_follows_an_edge_only_while_it_is_valid(corpus: _Corpus) -> None:
    walker = corpus.walker(include_seeds=False)
    assert "e" not in _ids(walker.retrieve("agent memory", RAGContext(20)))
    past = _ids(walker.retrieve("agent memory", RAGContext(20, as_of=corpus.during)))
    assert "e" in past
    with tnsrag_db.as_of(corpus.during):
        assert "e" in _ids(walker.retrieve("agent memory", RAGContext(20)))
        assert "e" in _ids(walker.traverse({"a": 1.0}, RAGContext(20)))
    assert _ids(walker.traverse({"a": 1.0}, RAGContext(20))) == []
    # Its explanation walks the same edges, and names the edge a hop took.
    assert "e" not in _ids(walker.explain("agent memory", RAGContext(20)).documents)
    explained = walker.explain("agent memory", RAGContext(20, as_of=corpus.during))
    [reached] = [r for r in explained.results if r.document.metadata["entryId"] == "e"]
    assert [(h.src, h.dst, h.relation) for h in reached.explanation.hops] == [("a", "e", "cites")]  # type: ignore[attr-defined]


def test_an_explanation_names_the_edge_valid_at_the_instant(corpus: _Corpus) -> None:
    corpus.graph.add_edge("a", "e", "now", weight=0.5)  # lighter than "cites", valid at every instant
    walker = corpus.walker(include_seeds=False)

    def hops(context: RAGContext) -> list[tuple[str, str, str | None, float | None]]:
        [reached] = [r for r in walker.explain("agent memory", context).results
                     if r.document.metadata["entryId"] == "e"]
        return [(h.src, h.dst, h.relation, h.weight) for h in reached.explanation.hops]  # type: ignore[attr-defined]

    assert hops(RAGContext(20)) == [("a", "e", "now", 0.5)]
    assert hops(RAGContext(20, as_of=corpus.during)) == [("a", "e", "cites", 1.0)]


def test_an_edge_valid_from_a_later_instant_is_followed_from_then_on(corpus: _Corpus) -> None:
    corpus.graph.add_edge("c", "e", "later", valid_from=FUTURE)
    walker = corpus.walker(include_seeds=False)
    assert _ids(walker.traverse({"c": 1.0}, RAGContext(20))) == []
    with tnsrag_db.as_of(FUTURE):
        assert _ids(walker.traverse({"c": 1.0}, RAGContext(20))) == ["e"]
    with tnsrag_db.as_of(FUTURE - timedelta(microseconds=1)):
        assert _ids(walker.traverse({"c": 1.0}, RAGContext(20))) == []


def test_hybrids_graph_stream_and_its_explanation_follow_only_valid_edges(corpus: _Corpus) -> None:
    hybrid = corpus.hybrid()
    now = {d.metadata["entryId"]: d.score for d in hybrid.retrieve("agent memory", RAGContext(10))}
    then = {d.metadata["entryId"]: d.score for d in hybrid.retrieve("agent memory",
                                                                    RAGContext(10, as_of=corpus.during))}
    # The keyword and vector streams rank alike at both instants; only then does the graph
    # stream reach e, whose fused score gains the graph's share.
    assert then["e"] > now.get("e", 0.0)

    def streams_of_e(context: RAGContext) -> set[str]:
        explained = hybrid.explain("agent memory", context)
        return {s.stream for r in explained.results if r.document.metadata["entryId"] == "e"
                for s in r.explanation.streams}  # type: ignore[attr-defined]

    assert "graph" not in streams_of_e(RAGContext(10))
    assert "graph" in streams_of_e(RAGContext(10, as_of=corpus.during))


def test_neighbours_list_the_edges_valid_at_the_instant(corpus: _Corpus) -> None:
    corpus.graph.add_edge("a", "b", weight=0.5)
    assert [(e.dst, e.valid_until) for e in corpus.graph.neighbours("a")] == [("b", None)]
    with tnsrag_db.as_of(corpus.during):
        assert [(e.dst, e.valid_until) for e in corpus.graph.neighbours("a")] == [("e", corpus.ended), ("b", None)]
    assert corpus.graph.count() == 2  # every edge, whatever its validity


def test_a_write_replaces_the_validity_and_a_bad_interval_writes_nothing(corpus: _Corpus) -> None:
    graph = corpus.graph
    with pytest.raises(ValidationError, match="is not before valid_until"):
        graph.add_edge("a", "e", "cites", valid_from=FUTURE, valid_until=PAST)
    with pytest.raises(ValidationError, match="has no time zone"):
        graph.add_edge("b", "c", valid_until=datetime(2030, 1, 1))
    with pytest.raises(ValidationError, match="batch item 1"):
        graph.add_edges([Edge("b", "c"), "not an edge"])  # type: ignore[list-item]
    assert graph.count() == 1
    with tnsrag_db.as_of(corpus.during):
        assert [e.valid_until for e in graph.neighbours("a")] == [corpus.ended]
    # Written again without a bound: valid at every instant; then bounded again.
    assert graph.add_edge("a", "e", "cites").updated == 1
    assert [(e.valid_from, e.valid_until) for e in graph.neighbours("a")] == [(None, None)]
    assert graph.add_edge("a", "e", "cites").unchanged == 1
    assert graph.add_edges([Edge("a", "e", "cites", valid_from=PAST)]).updated == 1
    assert [(e.valid_from, e.valid_until) for e in graph.neighbours("a")] == [(PAST, None)]


def test_export_and_restore_keep_edge_validity(corpus: _Corpus, make_store: Callable[..., Store],
                                               tmp_path: Path) -> None:
    from tnsrag_db.admin import restore_corpus

    corpus.graph.add_edge("a", "b")
    out = io.StringIO()
    export_corpus(corpus.store, out)
    records = {r["id"]: r for r in map(json.loads, out.getvalue().splitlines())}
    edges = {e["dst"]: e for e in records["a"]["edges"]}
    assert edges["e"]["validUntil"] == corpus.ended.isoformat() and "validFrom" not in edges["e"]
    assert set(edges["b"]) == {"dst", "relation", "weight", "source"}  # files without validity as they were
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue())
    target = make_store()
    assert restore_corpus(target, path, embedding=_embedding).edges["inserted"] == 2
    restored = GraphStore(target)
    assert [e.dst for e in restored.neighbours("a")] == ["b"]
    with tnsrag_db.as_of(corpus.ended - timedelta(microseconds=1)):
        assert {(e.dst, e.valid_until) for e in restored.neighbours("a")} == {("e", corpus.ended), ("b", None)}


def test_a_bad_edge_validity_in_a_jsonl_record_is_refused(tmp_path: Path) -> None:
    from tnsrag_db._loaders import FileLoader

    path = tmp_path / "memory.jsonl"
    for bad, message in (({"validFrom": 5}, "'validFrom' must be an ISO-8601 string"),
                         ({"validUntil": "2030-01-01"}, "has no zone offset"),
                         ({"validFrom": "2030-01-01T00:00:00Z", "validUntil": "2020-01-01T00:00:00Z"},
                          "is not before valid_until")):
        path.write_text(json.dumps({"id": "x", "content": "x", "edges": [{"dst": "y", **bad}]}) + "\n")
        with pytest.raises(InvalidEntryError, match=message):
            list(FileLoader(path).load())


def test_a_merge_moves_edges_with_their_validity(store: Store) -> None:
    store.add_all([MemoryEntry("d1", "the same text", MemoryTier.WORKING),
                   MemoryEntry("d2", "the same text", MemoryTier.WORKING),
                   MemoryEntry("x", "another", MemoryTier.WORKING), MemoryEntry("y", "a third", MemoryTier.WORKING)])
    graph = GraphStore(store)
    graph.add_edges([Edge("d2", "x", valid_from=PAST, valid_until=FUTURE),
                     # The same key from both copies: the moved edge covers both intervals.
                     Edge("d1", "y", valid_from=PAST, valid_until=PAST + timedelta(days=1)),
                     Edge("d2", "y", valid_from=PAST + timedelta(days=2), valid_until=FUTURE)])
    assert store.consolidate("WORKING").merged == 1
    with tnsrag_db.as_of(PAST + timedelta(days=3)):
        moved = {e.dst: (e.valid_from, e.valid_until) for e in graph.neighbours("d1")}
    assert moved == {"x": (PAST, FUTURE), "y": (PAST, FUTURE)}


def test_the_command_line_adds_and_imports_edges_with_validity(corpus: _Corpus, db_url: URL,
                                                               tmp_path: Path) -> None:
    from tnsrag_db._cli.graph import graph

    base = ["--url", db_url.render_as_string(hide_password=False), "--corpus", corpus.store.corpus]
    result = CliRunner().invoke(graph, [*base, "add-edge", "b", "c", "--valid-from", "2999-01-01T00:00:00Z"])
    assert result.exit_code == 0, result.output
    assert corpus.graph.neighbours("b") == []
    with tnsrag_db.as_of(FUTURE):
        assert [(e.dst, e.valid_from) for e in corpus.graph.neighbours("b")] == [("c", FUTURE)]
    result = CliRunner().invoke(graph, [*base, "add-edge", "b", "d", "--valid-until", "2020-01-01"])
    assert result.exit_code != 0 and "--valid-until" in result.output and "zone" in result.output
    links = tmp_path / "links.csv"
    links.write_text("src,dst,valid_from,valid_until\nc,d,,2020-01-01T00:00:00Z\nd,f,2020-01-01T00:00:00Z,\n")
    result = CliRunner().invoke(graph, [*base, "import", str(links)])
    assert result.exit_code == 0, result.output
    assert corpus.graph.neighbours("c") == [] and [(e.dst, e.valid_from) for e in corpus.graph.neighbours("d")] \
        == [("f", PAST)]
    links.write_text("src,dst,valid_from,valid_until\nc,f,2030-01-01T00:00:00Z,2020-01-01T00:00:00Z\n")
    result = CliRunner().invoke(graph, [*base, "import", str(links)])
    assert result.exit_code != 0 and "links.csv:2" in result.output and "not before" in result.output
    assert corpus.graph.count() == 4  # a->e, b->c, c->d, d->f: nothing of the bad file
