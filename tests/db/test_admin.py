"""Looking after corpora (list, stats, delete, drop, export/restore) through the library and the CLI."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tests.db._watch import unwatched, watch
from tnsrag_db._cli import main_group
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import CorpusNotFoundError, DanglingReferenceError
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry, MemoryTier
from tnsrag_db.admin import corpus_exists, corpus_stats, empty_filter_notes, export_corpus, list_corpora, restore_corpus
from tnsrag_db.embeddings import HashingEmbedding

UTC = timezone.utc


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _cli(db_url: URL, *args: str) -> Any:
    return CliRunner().invoke(main_group, [*args, "--url", _url(db_url)])


def _entries() -> list[MemoryEntry]:
    """A small corpus exercising every stored field: parents, zoned timestamps, no source,
    metadata (one with a timestamp key), every tier, non-ASCII text."""
    t0 = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    plus2 = timezone(timedelta(hours=2))
    return [
        MemoryEntry("guide", "# Guide\n\nInstall the agent, then configure memory.", MemoryTier.SEMANTIC,
                    source="guide.md", metadata={"topic": "install", "lang": "en"}),
        MemoryEntry("guide#1", "Configure the PostgreSQL URL before the first run.", "SEMANTIC",
                    source="guide.md", parent_id="guide", timestamp=t0, metadata={"topic": "install"}),
        MemoryEntry("note", "Working note: ticket TAN-5326 reopened — naïve retry loop.", "WORKING",
                    timestamp=datetime(2025, 3, 5, 1, 0, tzinfo=plus2)),
        MemoryEntry("journal", "Yesterday the agent restarted the pool.", "EPISODIC", source="journal.md",
                    metadata={"timestamp": "2025-03-01T00:00:00Z", "topic": "journal"}),
        MemoryEntry("howto", "Step 1: run tnsrag db upgrade.", "PROCEDURAL", source="howto.md", parent_id="guide"),
        MemoryEntry("empty", "", "SEMANTIC", source="empty.md"),
    ]


def _edges() -> list[Edge]:
    return [Edge("guide", "guide#1", "contains", 2.0), Edge("guide", "howto", "see-also", 0.5, "import.csv"),
            Edge("note", "journal"), Edge("howto", "guide#1", "next", -1.25)]


def _fill(store: Store) -> None:
    vectors = VectorMemoryStore(store, HashingEmbedding())
    vectors.add_all(_entries())
    GraphStore(store).add_edges(_edges())


def _snapshot(pool: Pool, corpus: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every stored field of every entry, and every edge, of ``corpus``."""
    with pool.connect() as conn:
        entries = [tuple(r) for r in conn.execute((
            "SELECT id, content, tier, source, parent_id, ts, metadata, content_hash, doc_len FROM entries "
            "WHERE corpus = :c ORDER BY id"), {"c": corpus})]
        edges = [tuple(r) for r in conn.execute(
            "SELECT src, dst, relation, weight, source FROM edges WHERE corpus = :c ORDER BY src, relation, dst",
            {"c": corpus})]
    return entries, edges


# -- list and stats ------------------------------------------------------------------------

def test_list_corpora_and_stats_describe_what_each_corpus_holds(make_store: Callable[..., Store]) -> None:
    big, small = make_store(), make_store()
    _fill(big)
    VectorMemoryStore(big, HashingEmbedding()).build_index()
    small.add(MemoryEntry("only", "a single working note", "WORKING"))
    infos = {i.name: i for i in list_corpora(big)}
    assert {big.corpus, small.corpus} <= set(infos)
    b, s = infos[big.corpus], infos[small.corpus]
    assert b.entries == 6 and dict(b.tiers) == {"WORKING": 1, "EPISODIC": 1, "SEMANTIC": 3, "PROCEDURAL": 1}
    assert b.edges == 4 and s.edges == 0 and dict(s.tiers) == {"WORKING": 1}
    assert [(sp.provider, sp.dimension, sp.vectors, sp.index) for sp in b.spaces] == [
        (HashingEmbedding().name, 128, 6, "hnsw")]
    assert b.spaces[0].index_bytes > 0 and b.spaces[0].index_name is not None
    assert s.spaces == ()  # Store.add embeds nothing
    assert b.size_bytes > s.size_bytes > 0
    json.dumps([i.to_dict() for i in infos.values()])  # JSON-able as it stands

    st = corpus_stats(big)
    assert st.entries == 6 and dict(st.by_tier) == dict(b.tiers)
    assert list(st.by_source)[0] == ("guide.md", 2) and st.sources == 5  # four files and None
    assert (None, 1) in list(st.by_source)
    assert st.bm25_documents == 6
    with big.pool.connect() as conn:
        total = conn.execute("SELECT sum(doc_len) FROM entries WHERE corpus = :c", {"c": big.corpus}).scalar()
    assert st.bm25_average_length == pytest.approx(total / 6, abs=1e-3)
    assert st.bm25_terms > 10
    assert st.edges == 4 and dict(st.edges_by_relation) == {"contains": 1, "next": 1, "related": 1, "see-also": 1}
    assert st.spaces[0].index == "hnsw" and st.last_write is not None
    assert st.last_write <= datetime.now(UTC) + timedelta(seconds=5)
    d = st.to_dict()
    assert json.loads(json.dumps(d))["bm25"]["documents"] == 6
    assert corpus_stats(big, max_sources=1).by_source == [("guide.md", 2)]


def test_a_missing_corpus_is_named_with_the_ones_that_exist(make_store: Callable[..., Store]) -> None:
    real = make_store()
    real.add(MemoryEntry("a", "alpha"))
    ghost = make_store()
    with pytest.raises(CorpusNotFoundError, match=f"corpus '{ghost.corpus}' does not exist; corpora here: .*"
                                                  f"{real.corpus}") as info:
        corpus_stats(ghost)
    assert info.value.corpus == ghost.corpus and real.corpus in info.value.existing
    assert not corpus_exists(ghost)  # asking created nothing


def test_cli_corpora_and_stats(db_url: URL, make_store: Callable[..., Store]) -> None:
    store = make_store()
    _fill(store)
    res = _cli(db_url, "corpora", "--json")
    assert res.exit_code == 0, res.output
    listed = {c["name"]: c for c in json.loads(res.stdout)["corpora"]}
    assert listed[store.corpus]["entries"] == 6 and listed[store.corpus]["spaces"][0]["index"] == "none"
    text = _cli(db_url, "corpora")
    line = next(ln for ln in text.stdout.splitlines() if ln.startswith(store.corpus))
    assert "6" in line.split() and "SEMANTIC 3" in line
    assert f"{HashingEmbedding().name}/128" in line and "embedded" not in line  # every entry has its vector
    res = _cli(db_url, "stats", "--corpus", store.corpus)
    assert res.exit_code == 0, res.output
    assert "6 entries" in res.stdout and "SEMANTIC 3" in res.stdout and "guide.md 2" in res.stdout
    assert "edges:    4" in res.stdout and "no index, exact scans" in res.stdout
    res = _cli(db_url, "stats", "--corpus", store.corpus, "--json")
    assert json.loads(res.stdout)["edges_by_relation"]["contains"] == 1
    res = _cli(db_url, "stats", "--corpus", "no_such_corpus_x")
    assert res.exit_code == 1 and "corpus 'no_such_corpus_x' does not exist; corpora here:" in res.stderr
    assert "Traceback" not in res.output
    # Entries written without vectors (an ingest still embedding, or stopped): the space says
    # how many of the corpus's entries it holds.
    store.add_all([MemoryEntry("late", "written, not embedded"), MemoryEntry("later", "neither")])
    line = next(ln for ln in _cli(db_url, "corpora").stdout.splitlines() if ln.startswith(store.corpus))
    assert f"{HashingEmbedding().name}/128 (6 of 8 embedded)" in line and "8" in line.split()


# -- delete and drop -----------------------------------------------------------------------

def test_cli_delete_by_id_and_by_filter(db_url: URL, make_store: Callable[..., Store]) -> None:
    store = make_store()
    _fill(store)
    c = ("--corpus", store.corpus)
    res = _cli(db_url, "delete", "note", "nope", *c)
    assert res.exit_code == 1 and "'nope'" in res.stderr and "nothing was deleted" in res.stderr
    assert store.get("note") is not None
    res = _cli(db_url, "delete", "note", "nope", "--missing-ok", "--json", *c)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"corpus": store.corpus, "deleted": 1, "missing": ["nope"]}
    assert store.get("note") is None and GraphStore(store).count() == 3  # its edge went with it
    # A dry run by a metadata key lists what the delete removes (on a schema whose filter
    # pairs are not kept, tenancy never on, it listed nothing).
    res = _cli(db_url, "delete", "--filter", "topic=install", "--dry-run", "--json", *c)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ids"] == ["guide", "guide#1"] and store.count() == 5
    res = _cli(db_url, "delete", "--filter", "source=guide.md", *c)
    assert res.exit_code == 0 and "deleted 2 entries" in res.stdout
    assert store.count() == 3
    res = _cli(db_url, "delete", "--filter", "tier=semantic", *c)
    assert res.exit_code == 0 and "deleted 0 entries" in res.stdout
    assert "tier=semantic matches no entry; tiers here: EPISODIC, PROCEDURAL, SEMANTIC" in res.stderr
    # A metadata key of the entries' own (not a column): found without tenancy's filter pairs too.
    res = _cli(db_url, "delete", "--filter", "topic=journal", "--dry-run", "--json", *c)
    assert res.exit_code == 0 and json.loads(res.stdout)["ids"] == ["journal"], res.output
    res = _cli(db_url, "delete", "--filter", "topic=journal", *c)
    assert res.exit_code == 0 and "deleted 1 entry matching topic=journal" in res.stdout
    assert store.get("journal") is None
    assert _cli(db_url, "delete", *c).exit_code == 2
    assert _cli(db_url, "delete", "x", "--filter", "a=b", *c).exit_code == 2
    assert _cli(db_url, "delete", "--filter", "novalue", *c).exit_code == 2
    res = _cli(db_url, "delete", "x", "--corpus", "no_such_corpus_y")
    assert res.exit_code == 1 and "does not exist" in res.stderr


def test_cli_drop_refuses_without_yes_off_a_terminal(db_url: URL, make_store: Callable[..., Store]) -> None:
    store = make_store()
    _fill(store)
    res = _cli(db_url, "drop", "--corpus", store.corpus)  # CliRunner's stdin is no terminal
    assert res.exit_code == 1 and "refusing to drop corpus" in res.stderr and "--yes" in res.stderr
    assert store.count() == 6
    res = _cli(db_url, "drop", "--corpus", store.corpus, "--yes", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"corpus": store.corpus, "dropped": True, "entries": 6, "edges": 4}
    assert not corpus_exists(store)
    res = _cli(db_url, "drop", "--corpus", store.corpus, "--yes")
    assert res.exit_code == 1 and f"corpus '{store.corpus}' does not exist" in res.stderr
    assert _cli(db_url, "drop", "--yes").exit_code == 2  # --corpus is required


def _on_a_terminal(args: list[str], answer: str) -> tuple[int, str]:
    """Run ``tnsrag ARGS`` with a pseudo-terminal as stdin and stderr; answer the prompt."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", "from tnsrag_db._cli import main; main()", *args],
                            stdin=slave, stderr=slave, stdout=subprocess.PIPE, close_fds=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"[y/N]" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        os.write(master, answer.encode() + b"\n")
        proc.wait(60)
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        assert proc.stdout is not None
        proc.stdout.close()
    return proc.returncode, seen.decode(errors="replace")


def test_drop_asks_on_a_terminal(db_url: URL, make_store: Callable[..., Store]) -> None:
    store = make_store()
    store.add(MemoryEntry("a", "alpha"))
    args = ["drop", "--corpus", store.corpus, "--url", _url(db_url)]
    code, out = _on_a_terminal(args, "n")
    assert code == 1 and f"Drop corpus '{store.corpus}' (1 entry, 0 edges)? [y/N]" in out and "aborted" in out
    assert store.count() == 1
    code, out = _on_a_terminal(args, "y")
    assert code == 0, out
    assert not corpus_exists(store)


# -- export and restore --------------------------------------------------------------------

def test_export_then_ingest_restores_the_corpus_exactly(db_url: URL, tmp_path: Path, pool: Pool,
                                                        make_store: Callable[..., Store]) -> None:
    original, copy = make_store(), make_store()
    _fill(original)
    dump = tmp_path / "dump.jsonl"
    res = _cli(db_url, "export", "--corpus", original.corpus, "-o", str(dump), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"corpus": original.corpus, "file": str(dump), "entries": 6, "edges": 4}
    lines = [json.loads(ln) for ln in dump.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in lines] == sorted(e.id for e in _entries())
    assert set(lines[0]) == {"id", "content", "tier", "source", "parentId", "timestamp", "metadata", "edges"}
    res = _cli(db_url, "ingest", str(dump), "--corpus", copy.corpus, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["edges"] == 4
    assert _snapshot(pool, copy.corpus) == _snapshot(pool, original.corpus)
    # Every field, compared as entries too (timestamps as instants, None sources kept).
    assert list(copy.iter_entries()) == list(original.iter_entries())
    assert copy.get("note").source is None  # type: ignore[union-attr]
    # Again: nothing changes.
    res = _cli(db_url, "ingest", str(dump), "--corpus", copy.corpus, "--json")
    assert json.loads(res.stdout)["unchanged"] == 6
    # To stdout, the same lines.
    res = _cli(db_url, "export", "--corpus", original.corpus)
    assert res.stdout == dump.read_text(encoding="utf-8") and "exported 6 entries and 4 edges" in res.stderr


def test_library_export_and_restore(tmp_path: Path, pool: Pool, make_store: Callable[..., Store]) -> None:
    original, copy = make_store(), make_store()
    _fill(original)
    dump = tmp_path / "dump.jsonl"
    with dump.open("w", encoding="utf-8") as fh:
        counts = export_corpus(original, fh, batch_size=2)  # several batches
    assert counts.to_dict() == {"entries": 6, "edges": 4}
    restored = restore_corpus(copy, dump, embedding=HashingEmbedding())
    assert restored.to_dict() == {"entries": {"inserted": 6, "updated": 0, "unchanged": 0},
                                  "edges": {"inserted": 4, "updated": 0, "unchanged": 0}}
    assert _snapshot(pool, copy.corpus) == _snapshot(pool, original.corpus)
    assert VectorMemoryStore(copy, HashingEmbedding()).count() == 6
    with pytest.raises(CorpusNotFoundError):
        export_corpus(make_store(), open(os.devnull, "w"))


def test_restore_with_a_dangling_edge_writes_nothing(db_url: URL, tmp_path: Path,
                                                     make_store: Callable[..., Store]) -> None:
    store = make_store()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "content": "alpha", "edges": [{"dst": "b"}, {"dst": "ghost"}]}\n'
                   '{"id": "b", "content": "beta"}\n', encoding="utf-8")
    res = _cli(db_url, "ingest", str(bad), "--corpus", store.corpus)
    assert res.exit_code == 1 and "'ghost'" in res.stderr and "Traceback" not in res.output
    assert not corpus_exists(store) or store.count() == 0
    with pytest.raises(DanglingReferenceError):
        restore_corpus(store, bad, embedding=HashingEmbedding())
    bad.write_text('{"id": "a", "content": "alpha", "edges": [{"dst": "b", "weight": "heavy"}]}\n', encoding="utf-8")
    res = _cli(db_url, "ingest", str(bad), "--corpus", store.corpus)
    assert res.exit_code == 1 and "bad.jsonl:1" in res.stderr and "weight" in res.stderr
    bad.write_text('{"id": "a", "content": "alpha", "timestamp": "yesterday"}\n', encoding="utf-8")
    res = _cli(db_url, "ingest", str(bad), "--corpus", store.corpus)
    assert res.exit_code == 1 and "bad.jsonl:1" in res.stderr and "yesterday" in res.stderr


def test_export_of_a_missing_corpus_leaves_no_file(db_url: URL, tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    res = _cli(db_url, "export", "--corpus", f"ghost_{uuid.uuid4().hex[:6]}", "-o", str(target))
    assert res.exit_code == 1 and "does not exist" in res.stderr
    assert list(tmp_path.iterdir()) == []
    res = _cli(db_url, "export", "-o", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert res.exit_code == 1 and "dir.jsonl" in res.stderr and "No such file or directory" in res.stderr
    assert "Traceback" not in res.output


# -- empty answers -------------------------------------------------------------------------

def test_filter_notes_name_the_filter_and_the_nearest_values(make_store: Callable[..., Store]) -> None:
    store = make_store()
    _fill(store)
    assert empty_filter_notes(store, {"tier": "SEMANTIC"}) == []
    assert empty_filter_notes(store, {"tier": "semantic"}) == [
        "tier=semantic matches no entry; tiers here: EPISODIC, PROCEDURAL, SEMANTIC, WORKING"]
    assert empty_filter_notes(store, {"topic": "instal"}) == [
        "topic=instal matches no entry; values of topic here: install, journal"]
    (note,) = empty_filter_notes(store, {"tenant": "acme"})
    assert note.startswith("tenant=acme matches no entry; no entry has the metadata key 'tenant'; keys here:")
    assert "topic" in note and "lang" in note
    (note,) = empty_filter_notes(store, {"tier": "WORKING", "topic": "install"})
    assert "each of the filters tier=WORKING, topic=install matches some entry" in note


def _lock_plan(store: Store, edges: list[Edge], write: list[MemoryEntry]) -> list[dict[str, Any]]:
    """The plan nodes reading ``entries`` in the reads of an edge write (the ends' locks) of
    ``edges``, after writing ``write`` in the same transaction (rolled back): each SELECT the
    write sent is explained, with ANALYZE, in the write's own transaction."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, statement: str, parameters: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            sent.append((statement, parameters))

    class _Rollback(Exception):
        pass

    def work(conn: sa.Connection) -> None:
        if write:
            store.writer.write_in(conn, write)
        with watch(before=record):
            GraphStore(store).write_edges(conn, edges)
        # The settings the lock runs with (sorts off) do not outlive it in the transaction.
        assert conn.execute("SELECT current_setting('enable_sort')").scalar_one() == "on"
        raise _Rollback([unwatched(conn, "EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).scalar_one()
                         for text, params in sent])

    with pytest.raises(_Rollback) as caught:
        store.writer.transaction(work)

    def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node] + [n for child in node.get("Plans", []) for n in nodes(child)]

    plans = [json.loads(plan) if isinstance(plan, str) else plan for plan in caught.value.args[0]]
    return [n for plan in plans for n in nodes(plan[0]["Plan"]) if n.get("Relation Name") == "entries"]


def test_edge_writes_reach_their_ends_by_key_whatever_the_statistics(pool: Pool,
                                                                     make_store: Callable[..., Store]) -> None:
    """Locking the ends of an edge batch probes the primary key both on a corpus newer than
    the planner's statistics (a restore: entries and edges in one transaction) and on an
    analysed one; a filter over the whole corpus per end is quadratic (a 20k-entry restore
    took 12 minutes, a row-comparison-only probe 10 minutes for 20k edges).

    The statistics and sizes are the worst this test knows, made here rather than left to
    the tests before it: the rows of a deleted corpus not yet vacuumed (the primary key then
    many pages per live row, the (corpus, ts) index far fewer) and statistics of one small
    corpus only (the new one estimated at one row). Planned by cost, the lock read the new
    corpus through (corpus, ts) once per end."""
    gone = make_store()
    gone.add(MemoryEntry("g", "a corpus about to be deleted"))
    with pool.begin() as conn:
        conn.execute(("INSERT INTO entries (corpus, id, content, tier, content_hash) "
                             "SELECT :c, 'g' || lpad(i::text, 6, '0'), '', 'SEMANTIC', '\\x00'::bytea "
                             "FROM generate_series(1, 20000) i"), {"c": gone.corpus})
        conn.execute("DELETE FROM entries WHERE corpus = :c", {"c": gone.corpus})
    seed = make_store()
    seed.add_all([MemoryEntry(f"s{i}", "a few seed words") for i in range(50)])
    with pool.begin() as conn:
        conn.execute("ANALYZE entries")  # statistics without the new corpus
    store = make_store()
    n = 2000
    entries = [MemoryEntry(f"doc{i:05d}", f"text {i}") for i in range(n)]
    edges = [Edge(f"doc{i:05d}", f"doc{(i * 7 + 1) % n:05d}") for i in range(n)]
    for scans in (_lock_plan(store, edges, entries), None):
        if scans is None:  # now committed and analysed
            GraphStore(store).add_with_edges(entries, edges)
            assert GraphStore(store).count() == n
            with pool.begin() as conn:
                conn.execute("ANALYZE entries")
            scans = _lock_plan(store, edges, [])
        assert scans and all(s.get("Index Name") == "pk_entries" for s in scans), [
            (s.get("Node Type"), s.get("Index Name"), s.get("Index Cond"), s.get("Filter")) for s in scans]
        assert all(s.get("Rows Removed by Filter", 0) == 0 for s in scans)


def test_a_killed_export_leaves_a_named_temp_that_the_next_export_removes(
        db_url: URL, tmp_path: Path, pool: Pool, make_store: Callable[..., Store]) -> None:
    store = make_store()
    _fill(store)
    target = tmp_path / "dump.jsonl"
    cmd = [sys.executable, "-c", "from tnsrag_db._cli import main; main()", "export", "--corpus", store.corpus,
           "-o", str(target), "--url", _url(db_url)]
    # The export is held at its first edge read (the table locked here), after its
    # temporary file exists, and killed there with SIGKILL: no handler, no clean-up.
    with pool.connect() as locker:
        locker.execute("LOCK TABLE edges IN ACCESS EXCLUSIVE MODE")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        waiting: list[str] = []
        with pool.connect() as watcher:
            while not waiting and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
                waiting = list(watcher.execute((
                    "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND pid <> pg_backend_pid()")).scalars())
                watcher.rollback()  # pg_stat_activity is read once per transaction
        assert waiting and proc.poll() is None, (waiting, proc.poll())
        proc.kill()
        proc.wait(timeout=30)
        locker.rollback()
    left = [p.name for p in tmp_path.iterdir()]
    assert left == [f"dump.jsonl.tnsrag-export-{proc.pid}.tmp"]  # visible and named for what it is
    # A later ingest of the folder does not take it for data.
    res = _cli(db_url, "ingest", str(tmp_path), "--corpus", f"{store.corpus}_x", "--embedding", "hash", "--json")
    assert res.exit_code == 0, res.output
    assert [s["reason"].split(" (")[0] for s in json.loads(res.stdout)["skipped"]] == ["unfinished tnsrag export"]
    # The next export to the same target removes it and writes the file.
    res = _cli(db_url, "export", "--corpus", store.corpus, "-o", str(target))
    assert res.exit_code == 0, res.output
    assert [p.name for p in tmp_path.iterdir()] == ["dump.jsonl"]
    assert len(target.read_text(encoding="utf-8").splitlines()) == 6


def _export_held_then_terminated(db_url: URL, pool: Pool, table: str, corpus: str,
                                 target: Path | None) -> subprocess.CompletedProcess[str]:
    """``tnsrag export`` (to ``target``, None: to stdout) in a subprocess, held at its first
    read of ``table`` (locked here) and its server backend then terminated
    (``pg_terminate_backend``): the connection was established and is lost under the
    running command."""
    cmd = [sys.executable, "-c", "from tnsrag_db._cli import main; main()", "export", "--corpus", corpus,
           *(["-o", str(target)] if target is not None else []), "--url", _url(db_url)]
    with pool.connect() as locker:
        locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        waiting: list[int] = []
        with pool.connect() as watcher:
            while not waiting and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
                waiting = list(watcher.execute((
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND pid <> pg_backend_pid()")).scalars())
                watcher.rollback()  # pg_stat_activity is read once per transaction
            assert len(waiting) == 1 and proc.poll() is None, (waiting, proc.poll())
            assert watcher.execute("SELECT pg_terminate_backend(:p)", {"p": waiting[0]}).scalar_one()
        stdout, stderr = proc.communicate(timeout=60)
        locker.rollback()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def test_an_export_whose_connection_is_lost_says_so_and_names_the_corpus_and_the_file(
        db_url: URL, tmp_path: Path, pool: Pool, make_store: Callable[..., Store]) -> None:
    store = make_store()
    _fill(store)
    target = tmp_path / "dump.jsonl"
    # Mid-export: the corpus was found and its first entries read, the edges' read is held.
    res = _export_held_then_terminated(db_url, pool, "edges", store.corpus, target)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip()
    assert "could not connect" not in line
    assert f"export of corpus {store.corpus!r} to {target}" in line and "lost mid-export" in line, line
    assert f"{target} was not written" in line and "terminating connection due to administrator command" in line
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary file
    # To stdout (the library's export_corpus): the output is incomplete, and said so.
    res = _export_held_then_terminated(db_url, pool, "edges", store.corpus, None)
    line = res.stderr.strip()
    assert res.returncode == 1 and f"export of corpus {store.corpus!r}: " in line, line
    assert "lost mid-export; the output is incomplete" in line and "could not connect" not in line, line
    # While the store opens (the schema's revision is read): lost, not "could not connect".
    res = _export_held_then_terminated(db_url, pool, "alembic_version", store.corpus, target)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip()
    assert "could not connect" not in line and "connection to the server was lost" in line, line
    assert list(tmp_path.iterdir()) == []
    # The next export writes the file.
    res = _cli(db_url, "export", "--corpus", store.corpus, "-o", str(target))
    assert res.exit_code == 0, res.output
    assert len(target.read_text(encoding="utf-8").splitlines()) == 6
