"""Export and restore of a corpus that keeps history: the kept versions, the entries a
delete closed and when each row was recorded travel with the file, so the restored corpus
lists the same history and answers every ``as_of`` as the exported one; an export file of
the release before (no history fields) still restores."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

import tnsrag_db
from tnsrag_db._cli import main_group
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import InvalidEntryError
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._loaders import FileLoader
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import MemoryEntry, RAGContext
from tnsrag_db.admin import export_corpus, restore_corpus

PAST = datetime(2020, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2999, 1, 1, tzinfo=timezone.utc)
WORDS = ("zebra", "horse", "stripes", "stable", "plains", "river")
KEYS = ("pref", "note", "gone", "back", "plain", "bounded", "stale")


def _embed(text: str) -> list[float]:
    words = text.split()
    return [1.0, *(float(words.count(w)) for w in WORDS)]


def _clock(store: Store) -> datetime:
    return store.read("SELECT clock_timestamp() AS t", {})[0].t  # type: ignore[no-any-return]


def _found(store: Store, name: str, query: str, as_of: datetime | None) -> list[tuple[str, str]]:
    """The results' entry ids (a kept version's own row id) and texts, in order."""
    docs = build_strategy(name, store, embedding=_embed).retrieve(query, RAGContext(100, as_of=as_of))
    return sorted((d.metadata["entryId"], d.content) for d in docs)


def _history_corpus(store: Store) -> list[datetime]:
    """Supersessions, deletes that close, a rewrite after a delete, validity, an edge from an
    entry a delete closed, an expired entry; the instants between the steps."""
    store.set_history()
    vectors = VectorMemoryStore(store, _embed)
    instants = [_clock(store)]

    def step(*entries: MemoryEntry) -> None:
        if entries:
            vectors.add_all(list(entries))
        instants.append(_clock(store))

    step(MemoryEntry("pref", "zebra light", metadata={"user": "7"}), MemoryEntry("note", "horse stable"),
         MemoryEntry("gone", "zebra river"), MemoryEntry("back", "plains river"), MemoryEntry("plain", "river"),
         MemoryEntry("bounded", "zebra stripes", valid_from=PAST, valid_until=FUTURE),
         MemoryEntry("stale", "zebra stable", expires_at=PAST))
    GraphStore(store).add_edges([Edge("gone", "note", "cites"), Edge("note", "pref", "cites")])
    step(MemoryEntry("pref", "horse dark", metadata={"user": "7"}),
         MemoryEntry("bounded", "zebra stripes later", valid_from=FUTURE))
    store.delete("gone")
    store.delete("back")
    step()
    step(MemoryEntry("back", "plains river again"), MemoryEntry("pref", "zebra dark stripes", metadata={"user": "8"}))
    store.delete("note")
    step()
    return instants


def _answers(store: Store, instant: datetime | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("keyword", "vector", "hybrid"):
        for query in ("zebra", "horse stable", "plains river"):
            out[f"{name}:{query}"] = _found(store, name, query, instant)
    with tnsrag_db.as_of(instant):
        out["count"] = store.count()
        out["get"] = {k: store.get(k) for k in KEYS}
    return out


@pytest.mark.parametrize("vectors", [False, True])
def test_a_restore_keeps_the_history_and_answers_every_instant_alike(
        make_store: Callable[..., Store], tmp_path: Path, vectors: bool) -> None:
    original, copy = make_store(), make_store()
    instants = _history_corpus(original)
    dump = tmp_path / "dump.jsonl"
    with dump.open("w", encoding="utf-8") as fh:
        export_corpus(original, fh, batch_size=3, vectors=vectors)
    records = {r["id"]: r for r in map(json.loads, dump.read_text(encoding="utf-8").splitlines())}
    assert "stale" not in records  # expired: found by nothing, export included
    assert "content" not in records["gone"]  # closed by a delete: a release without versions refuses it
    assert [v.get("version") for v in records["pref"]["versions"]] == [1, 2]
    restore_corpus(copy, dump, embedding=None if vectors else _embed)
    original.sweep()  # the expired entry the export left out
    for key in KEYS:
        assert copy.history(key) == original.history(key), key
    assert [v.current for v in copy.history("gone")] == [True]
    for instant in [*instants, None]:
        assert _answers(copy, instant) == _answers(original, instant), instant
    assert list(copy.iter_entries()) == list(original.iter_entries())
    edges = "SELECT src, dst, relation FROM edges WHERE corpus = :c ORDER BY src, dst"
    assert copy.read(edges, {"c": copy.corpus}) == original.read(edges, {"c": original.corpus})


def test_a_restore_writes_the_versions_vectors_from_the_file(make_store: Callable[..., Store], tmp_path: Path,
                                                              pool: Pool) -> None:
    original, copy = make_store(), make_store()
    _history_corpus(original)
    dump = tmp_path / "dump.jsonl"
    with dump.open("w", encoding="utf-8") as fh:
        export_corpus(original, fh, vectors=True)

    def stored(corpus: str) -> list[tuple[Any, ...]]:
        with pool.connect() as conn:
            return [tuple(r) for r in conn.execute(
                "SELECT x.entry_id, CAST(x.embedding AS real[]) FROM embeddings x WHERE x.corpus = :c "
                "AND x.entry_id <> 'stale' ORDER BY x.entry_id", {"c": corpus})]

    restore_corpus(copy, dump)  # no provider: every vector from the file
    assert stored(copy.corpus) == stored(original.corpus)
    assert any("\x1e" in row[0] for row in stored(copy.corpus))


def test_an_export_of_the_release_before_still_restores(make_store: Callable[..., Store], tmp_path: Path) -> None:
    copy = make_store()
    dump = tmp_path / "old.jsonl"
    dump.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "content": "zebra stripes", "tier": "SEMANTIC", "source": None, "parentId": None,
         "timestamp": None, "metadata": {"k": "v"}, "edges": [{"dst": "b", "relation": "cites", "weight": 1.0,
                                                               "source": None}]},
        {"id": "b", "content": "horse stable", "tier": "EPISODIC", "source": "s", "parentId": "a",
         "timestamp": "2025-01-02T03:04:05+00:00", "metadata": {}, "edges": [], "validFrom": PAST.isoformat()},
    ]) + "\n", encoding="utf-8")
    counts = restore_corpus(copy, dump, embedding=_embed)
    assert counts.to_dict()["entries"]["inserted"] == 2
    assert [v.current for v in copy.history("a")] == [True] and copy.get("b").valid_from == PAST  # type: ignore[union-attr]
    with tnsrag_db.as_of(datetime.now(timezone.utc) + timedelta(days=1)):
        assert copy.count() == 2


@pytest.mark.parametrize(("record", "message"), [
    ({"id": "k", "versions": []}, "versions"),
    ({"id": "k", "versions": [{"content": "x", "recordedAt": "2024-01-01T00:00:00+00:00",
                                "recordedUntil": "2024-01-02T00:00:00+00:00", "version": 1}]}, "current"),
    ({"id": "k", "content": "y", "versions": [{"content": "x", "recordedAt": "2024-01-01T00:00:00+00:00",
                                               "recordedUntil": "2024-01-02T00:00:00+00:00"}]}, "version"),
    ({"id": "k", "content": "y", "versions": [{"content": "x", "recordedAt": "2024-01-01T00:00:00+00:00",
                                               "version": 1}]}, "recordedUntil"),
    ({"id": "k", "content": "y", "recordedAt": 5}, "recordedAt"),
])
def test_bad_history_fields_name_the_line(tmp_path: Path, record: dict[str, Any], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "ok", "content": "fine"}) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InvalidEntryError, match=rf"bad.jsonl:2: .*{message}"):
        list(FileLoader(path).load())


def test_the_command_line_exports_and_ingests_the_history(make_store: Callable[..., Store], tmp_path: Path,
                                                          db_url: URL) -> None:
    original, copy = make_store(), make_store()
    instants = _history_corpus(original)
    url = db_url.render_as_string(hide_password=False)
    dump = tmp_path / "dump.jsonl"
    res = CliRunner().invoke(main_group, ["export", "--corpus", original.corpus, "--vectors", "-o", str(dump),
                                          "--url", url, "--json"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main_group, ["ingest", str(dump), "--corpus", copy.corpus, "--url", url, "--json", "-q"])
    assert res.exit_code == 0, res.output
    original.sweep()
    for key in KEYS:
        assert copy.history(key) == original.history(key), key
    for instant in [*instants, None]:
        assert _answers(copy, instant) == _answers(original, instant), instant
