"""``tnsrag ingest`` answers before embedding ends: every entry is written (keyword-searchable)
before the first vector; vector queries meanwhile search what is embedded and say how much
(notes, ``--explain``, ``stats``); an interrupted ingest's rerun fills only the missing
vectors and writes nothing else.

The ingest runs in a child process with a provider (an entry-point plugin) that embeds
like the 32-slot hash and waits for the test at two gates: before its first batch and
before every later one. So the states the test looks at are exact, not timed. The plugin
carries the hash's name: the test's own queries embed with the hash, as the child did.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db._cli import main_group
from tnsrag_db._cli.ingest import WRITE_BATCH_MAX
from tnsrag_db._indexes.vector.ingest import batch_sizes
from tnsrag_db._store.store import Store

FILES = 40
BATCH = 5

GATED_PROVIDER = '''
import os, time
from pathlib import Path
from tnsrag_db.embeddings import HashingEmbedding

class Gated:
    """The 32-slot hash, under its name, waiting for GATE_DIR/gate0 before its first batch
    and GATE_DIR/gate1 before every later one; logs each batch's size to GATE_DIR/embedded."""
    dimension = 32

    def __init__(self):
        self._hash = HashingEmbedding(32)
        self.name = self._hash.name
        self._dir = Path(os.environ["GATE_DIR"])
        self._calls = 0

    def __call__(self, text):
        return self._hash(text)

    def embed_batch(self, texts):
        gate = self._dir / ("gate0" if self._calls == 0 else "gate1")
        self._calls += 1
        while not gate.exists():
            time.sleep(0.01)
        with open(self._dir / "embedded", "a") as log:
            log.write(f"{len(texts)}\\n")
        return [self._hash(t) for t in texts]

def provider():
    return Gated()
'''


@pytest.fixture
def plugin(tmp_path: Path) -> dict[str, str]:
    """The environment of a child process that has the ``gated`` provider installed."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "gated_provider.py").write_text(GATED_PROVIDER)
    info = plugins / "gated_provider-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gated-provider\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tnsrag_db.embedding_functions]\ngated = gated_provider:provider\n")
    gates = tmp_path / "gates"
    gates.mkdir()
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")]),
            "GATE_DIR": str(gates)}


def _folder(root: Path) -> Path:
    root.mkdir()
    for i in range(FILES):
        (root / f"n{i:03d}.txt").write_text(f"note {i} about lighthouse keeper {i % 7} and subject {i}\n")
    return root


def _cli(args: list[str]) -> Any:
    res = CliRunner().invoke(main_group, args)
    assert res.exit_code == 0, res.output
    return res


def _vectors(store: Store) -> int:
    return int(store.read("SELECT count(*) AS n FROM embeddings WHERE corpus = :c", {"c": store.corpus})[0].n)


def _wait(what: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not what():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the ingest did not get there"
        time.sleep(0.05)


def _ingest(docs: Path, db: list[str], env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", "from tnsrag_db._cli import main; main()", "ingest", str(docs), *db,
           "--batch-size", str(BATCH), "--embedding", "gated", *extra]
    # SIGINT must reach the child as Python's KeyboardInterrupt even when this runner ignores it.
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _db(db_url: URL, store: Store) -> list[str]:
    return ["--url", db_url.render_as_string(hide_password=False), "--schema", SCHEMA, "--corpus", store.corpus]


def test_entries_answer_keyword_queries_before_any_vector_and_vector_queries_say_how_much(
        tmp_path: Path, db_url: URL, make_store: Callable[..., Store], plugin: dict[str, str]) -> None:
    store = make_store()
    db = _db(db_url, store)
    gates = Path(plugin["GATE_DIR"])
    proc = _ingest(_folder(tmp_path / "docs"), db, plugin, "--json")
    try:
        _wait(lambda: store.count() == FILES, proc)
        # Every entry is written, none embedded (the provider has not passed its first gate).
        keyword = json.loads(_cli(["query", "lighthouse keeper 3", *db, "--strategy", "keyword", "--json"]).stdout)
        assert keyword["results"] and all(r["id"].startswith("n0") for r in keyword["results"])
        assert _vectors(store) == 0
        hybrid = json.loads(_cli(["query", "lighthouse keeper 3", *db, "--json"]).stdout)
        assert hybrid["results"]  # BM25's half answers
        assert any(f"holds no vectors yet for its {FILES} entries" in n for n in hybrid["notes"]), hybrid["notes"]

        (gates / "gate0").touch()  # one batch embeds; the next waits at gate1
        _wait(lambda: _vectors(store) == BATCH, proc)
        vector = json.loads(_cli(["query", "lighthouse keeper", *db, "--strategy", "vector", "--top-k", "10",
                                  "--json"]).stdout)
        embedded = {r[0] for r in store.read(
            "SELECT entry_id FROM embeddings WHERE corpus = :c", {"c": store.corpus})}
        assert {r["id"] for r in vector["results"]} == embedded  # only what is embedded, all of it
        note = f"holds vectors for {BATCH} of {FILES} entries of corpus {store.corpus!r}"
        assert any(note in n for n in vector["notes"]), vector["notes"]
        plain = CliRunner().invoke(main_group, ["query", "lighthouse keeper", *db, "--strategy", "hybrid"])
        assert plain.exit_code == 0 and note in plain.stderr
        explained = json.loads(_cli(["query", "lighthouse", *db, "--explain", "--json"]).stdout)
        assert any(note in n for n in explained["notes"]), explained["notes"]
        text = CliRunner().invoke(main_group, ["query", "lighthouse", *db, "--explain"])
        assert text.exit_code == 0 and note in text.stderr
        assert json.loads(_cli(["stats", *db, "--json"]).stdout)["spaces"][0]["missing"] == FILES - BATCH
        assert (f"{FILES - BATCH} entries without a vector: embedding in progress or interrupted"
                in _cli(["stats", *db]).stdout)
        (gates / "gate1").touch()
        out, err = proc.communicate(timeout=120)
    finally:
        (gates / "gate0").touch()
        (gates / "gate1").touch()
        proc.wait(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["inserted"] == FILES and 0 < summary["searchable_seconds"] <= summary["seconds"]
    assert _vectors(store) == FILES
    done = json.loads(_cli(["query", "lighthouse keeper", *db, "--strategy", "vector", "--json"]).stdout)
    assert done["notes"] == []
    assert json.loads(_cli(["stats", *db, "--json"]).stdout)["spaces"][0]["missing"] == 0


_LINE = re.compile(r"interrupted: (\d+) entries committed, (\d+) with vectors of tnsrag-hash-32, the batch in "
                   r"progress was rolled back; the same ingest run again \(or tnsrag embed --corpus \S+ "
                   r"--embedding tnsrag-hash-32\) embeds the rest")


def _rows(store: Store, table: str, key: str) -> dict[str, str]:
    """Each row's id and xmin (the transaction that last wrote it)."""
    sql = f"SELECT {key} AS id, xmin::text AS x FROM {table} WHERE corpus = :c"
    return {r.id: r.x for r in store.read(sql, {"c": store.corpus})}


def test_an_interrupted_ingest_rerun_embeds_only_the_missing_vectors_and_writes_nothing_else(
        tmp_path: Path, db_url: URL, make_store: Callable[..., Store], plugin: dict[str, str]) -> None:
    store = make_store()
    db = _db(db_url, store)
    gates = Path(plugin["GATE_DIR"])
    docs = _folder(tmp_path / "docs")
    proc = _ingest(docs, db, plugin)
    try:
        (gates / "gate0").touch()
        _wait(lambda: _vectors(store) == BATCH, proc)  # the second batch waits at gate1
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)  # let the signal land first; opening the gate only lets the worker finish
        (gates / "gate1").touch()
        _out, err = proc.communicate(timeout=120)
    finally:
        (gates / "gate1").touch()
        proc.wait(timeout=120)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and [line for line in lines if line.startswith("interrupted")] == lines[-1:]
    match = _LINE.fullmatch(lines[-1])
    assert match is not None, lines[-1]
    have = _vectors(store)
    assert int(match.group(1)) == FILES and int(match.group(2)) == have and BATCH <= have < FILES
    entries_before = _rows(store, "entries", "id")
    vectors_before = _rows(store, "embeddings", "entry_id")
    postings_before = store.read("SELECT count(*) AS n, max(xmin::text::bigint) AS x FROM bm25_postings "
                                 "WHERE corpus = :c", {"c": store.corpus})[0]
    (gates / "embedded").unlink()
    rerun = _ingest(docs, db, plugin, "--json")
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    res = json.loads(out)
    assert (res["inserted"], res["updated"], res["unchanged"]) == (0, 0, FILES)
    # Only the missing vectors were embedded and written; entries, postings and the
    # vectors already there were not touched.
    assert sum(int(n) for n in (gates / "embedded").read_text().split()) == FILES - have
    assert _rows(store, "entries", "id") == entries_before
    after = _rows(store, "embeddings", "entry_id")
    assert len(after) == FILES and {i: after[i] for i in vectors_before} == vectors_before
    postings_after = store.read("SELECT count(*) AS n, max(xmin::text::bigint) AS x FROM bm25_postings "
                                "WHERE corpus = :c", {"c": store.corpus})[0]
    assert tuple(postings_after) == tuple(postings_before)


READ_GATED_PROVIDER = '''
import os, time
from pathlib import Path
from tnsrag_db.embeddings import HashingEmbedding

class ReadGated:
    """The 32-slot hash, under its name, measuring texts in characters; measuring a text
    that holds "gatekeeper" (the chunker does so while the file is read) marks
    GATE_DIR/reading and waits for GATE_DIR/read."""
    dimension = 32
    max_tokens = 1000

    def __init__(self):
        self._hash = HashingEmbedding(32)
        self.name = self._hash.name
        self._dir = Path(os.environ["GATE_DIR"])

    def count_tokens(self, text):
        if "gatekeeper" in text:
            (self._dir / "reading").touch()
            while not (self._dir / "read").exists():
                time.sleep(0.01)
        return len(text)

    def __call__(self, text):
        return self._hash(text)

    def embed_batch(self, texts):
        return [self._hash(t) for t in texts]

def provider():
    return ReadGated()
'''


def test_entries_are_written_while_later_files_are_still_being_read(
        tmp_path: Path, db_url: URL, make_store: Callable[..., Store], plugin: dict[str, str]) -> None:
    store = make_store()
    db = _db(db_url, store)
    gates = Path(plugin["GATE_DIR"])
    plugins = Path(plugin["PYTHONPATH"].split(os.pathsep)[0])
    (plugins / "read_gated_provider.py").write_text(READ_GATED_PROVIDER)
    (plugins / "gated_provider-1.0.dist-info" / "entry_points.txt").write_text(
        "[tnsrag_db.embedding_functions]\nreadgated = read_gated_provider:provider\n")
    docs = _folder(tmp_path / "docs")
    (docs / "z_last.txt").write_text("the gatekeeper file, read last\n")  # path order: after n000..n039
    cmd = [sys.executable, "-c", "from tnsrag_db._cli import main; main()", "ingest", str(docs), *db,
           "--batch-size", str(BATCH), "--embedding", "readgated", "--json"]
    proc = subprocess.Popen(cmd, env=plugin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: (gates / "reading").exists(), proc)
        # The last file is being read: the batches read before it are committed already (the
        # ingest reads one batch ahead of its writes) and answer keyword queries. The batches
        # grow from --batch-size (5, 10, 20, ...): the one read holds the last file, the one
        # before waits for that read.
        ends = list(itertools.accumulate(itertools.islice(batch_sizes(BATCH, WRITE_BATCH_MAX), 8)))
        reading = next(i for i, end in enumerate(ends) if end > FILES)
        assert store.count() == ends[reading - 2] == 15
        keyword = json.loads(_cli(["query", "lighthouse keeper 3", *db, "--strategy", "keyword", "--json"]).stdout)
        assert keyword["results"]
        assert proc.poll() is None
        (gates / "read").touch()
        out, err = proc.communicate(timeout=120)
    finally:
        (gates / "read").touch()
        proc.wait(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["inserted"] == FILES + 1 and summary["files"] == FILES + 1
    assert 0 < summary["first_searchable_seconds"] < summary["read_seconds"] <= summary["searchable_seconds"]
    assert store.count() == FILES + 1 and _vectors(store) == FILES + 1
