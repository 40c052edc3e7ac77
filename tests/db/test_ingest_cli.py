"""``tnsrag ingest`` on a messy tree: skips, ids, idempotence, --prune, --strict, bad input, Ctrl-C."""

from __future__ import annotations

import json
import os
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

from tests._trees import messy_tree
from tests.fix_db import SCHEMA
from tnsrag_db.cli import main_group
from tnsrag_db.store.store import Store


def run(args: list[str], cwd: Path | None = None) -> Any:
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        # These tests are about reading trees: the hash fallback keeps them fast and its
        # chunks in characters (the shipped model's default is tested in test_embedding_spaces).
        embedding = [] if "--embedding" in args else ["--embedding", "hash"]
        return CliRunner().invoke(main_group, ["ingest", *args, *embedding])
    finally:
        os.chdir(old)


@pytest.fixture
def target(db_url: URL, make_store: Callable[..., Store]) -> tuple[list[str], Store]:
    """CLI arguments for a fresh corpus (dropped after the test) and a store on it."""
    store = make_store()
    url = db_url.render_as_string(hide_password=False)
    return ["--url", url, "--schema", SCHEMA, "--corpus", store.corpus], store


def ids(store: Store) -> list[str]:
    return [e.id for e in store.iter_entries()]


def test_ingest_messy_tree_from_anywhere_then_prune(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    args, store = target
    root = messy_tree(tmp_path / "docs")
    first = run([str(root), *args, "--json"])
    assert first.exit_code == 0, first.output
    out = json.loads(first.output)
    assert {(Path(s["path"]).name, s["reason"]) for s in out["skipped"]} == {
        (".hidden", "hidden directory"), ("blob.bin", "binary"), ("data.xyz", "unknown file type '.xyz'"),
        ("empty.txt", "empty")}
    assert out["files"] == 9 and out["inserted"] == out["entries"] == 12 and out["chunk"]["unit"] == "characters"
    stored = ids(store)
    assert "guide/install.md#2" in stored and "manual.pdf#1" in stored and "notes/latin1.txt#0" in stored
    # The same root from another directory: the same ids, nothing new.
    again = run(["docs", *args, "--json"], cwd=tmp_path)
    assert json.loads(again.output)["unchanged"] == 12 and ids(store) == stored
    # Text summary names every skip.
    text = run(["docs", *args], cwd=tmp_path)
    assert "12 unchanged" in text.output and "docs/blob.bin: binary" in text.output
    assert "skipped 4 file(s)" in text.output
    # A deleted file and a shrunk one: --prune removes their entries in the same run.
    (root / "manual.pdf").unlink()
    (root / "guide" / "install.md").write_text("# Install\n\nGet the package.\n")
    pruned = json.loads(run([str(root), *args, "--json", "--prune"]).output)
    # the rewritten file's kept section has its text but the file's new modification time
    assert pruned["pruned"] == 4 and pruned["unchanged"] == 7 and pruned["updated"] == 1
    left = ids(store)
    assert not any(i.startswith("manual.pdf") for i in left)
    assert [i for i in left if i.startswith("guide/")] == ["guide/install.md#1"]
    # A prefixed root is its own namespace: pruning it leaves the unprefixed entries alone.
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.md").write_text("# A\n\nalpha\n")
    res = json.loads(run([str(other), *args, "--json", "--prune", "--id-prefix", "kb"]).output)
    assert res["inserted"] == 1 and res["pruned"] == 0
    assert "kb/a.md#1" in ids(store) and len(ids(store)) == len(left) + 1


def test_strict_and_bad_input_write_nothing(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    args, store = target
    root = messy_tree(tmp_path / "docs")
    strict = run([str(root), *args, "--strict"])
    assert strict.exit_code == 1 and store.count() == 0
    assert strict.output.startswith("error: --strict: 4 file(s) would be skipped:")
    assert "blob.bin (binary)" in strict.output and "Traceback" not in strict.output
    # A bad JSONL line names the file and line; nothing of the other files is written.
    (root / "bad.jsonl").write_text('{"content": "ok"}\n{not json\n')
    bad = run([str(root), *args])
    assert bad.exit_code == 1 and "bad.jsonl:2: not valid JSON" in bad.output and store.count() == 0
    (root / "bad.jsonl").unlink()
    missing = run([str(tmp_path / "nope"), *args])
    assert missing.exit_code == 2 and "nope" in missing.output
    usage = run([str(root), *args, "--meta", "novalue"])
    assert usage.exit_code == 2 and "--meta" in usage.output
    small = run([str(root), *args, "--chunk-tokens", "3"])
    assert small.exit_code == 2 and "--chunk-tokens" in small.output
    # Two roots without a prefix that give the same id: refused before writing.
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "README").write_text("another readme\n")
    clash = run([str(root), str(tmp_path / "copy"), *args])
    assert clash.exit_code == 1 and "'README#0'" in clash.output and "--id-prefix" in clash.output
    assert store.count() == 0
    # Only empty files: a summary, not a failure.
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "e.txt").write_text("")
    empty = run([str(tmp_path / "only"), *args, "--json"])
    assert empty.exit_code == 0 and json.loads(empty.output)["skipped"] == [
        {"path": str(tmp_path / "only" / "e.txt"), "reason": "empty"}]


def test_chunk_tokens_sets_the_chunk_size(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    args, store = target
    (tmp_path / "long.txt").write_text(" ".join(f"word{i}" for i in range(400)))
    res = json.loads(run([str(tmp_path / "long.txt"), *args, "--json", "--chunk-tokens", "200"]).output)
    assert res["chunk"] == {"size": 200, "unit": "characters"} and res["entries"] > 10
    assert all(len(e.content) <= 200 for e in store.iter_entries())


SLOW_PROVIDER = '''
import os, time
from tnsrag_db.embeddings import HashingEmbedding

class Slow:
    name = "slow-hash"
    def __init__(self):
        self._hash = HashingEmbedding(32)
    def __call__(self, text):
        return self._hash(text)
    def embed_batch(self, texts):
        time.sleep(0.05)
        return [self._hash(t) for t in texts]

def provider():
    return Slow()
'''


@pytest.mark.slow
def test_ctrl_c_rolls_back_the_open_batch_and_a_rerun_continues(tmp_path: Path,
                                                               target: tuple[list[str], Store]) -> None:
    args, store = target
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "slow_provider.py").write_text(SLOW_PROVIDER)
    info = plugins / "slow_provider-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: slow-provider\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tnsrag_db.embedding_functions]\nslow = slow_provider:provider\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(120):
        (docs / f"n{i:03d}.txt").write_text(f"note {i} about subject {i % 9}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", "from tnsrag_db.cli import main; main()", "ingest", str(docs), *args,
           "--batch-size", "5", "--embedding", "slow"]
    # The child must take SIGINT as Python's KeyboardInterrupt even when this runner ignores
    # it (a runner in the background of a non-interactive shell): Python installs its own
    # handler at start-up only when SIGINT is not ignored.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while store.count() < 10 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    committed = store.count()
    assert err.strip().splitlines()[-1] == (f"interrupted: {committed} entries committed, "
                                            "the batch in progress was rolled back")
    assert "Traceback" not in err and 10 <= committed < 120 and committed % 5 == 0
    rerun = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    res = json.loads(rerun.stdout)
    assert res["unchanged"] == committed and res["inserted"] == 120 - committed
    assert store.count() == 120
