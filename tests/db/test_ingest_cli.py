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
from tnsrag_db._cli import main_group
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry


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
    assert "skipped 4 files" in text.output
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
    assert strict.output.startswith("error: --strict: 4 files would be skipped:")
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
    # A reserved key is a usage error naming the option, met before any file is read: with
    # a PATH that does not exist the option is still what the error names.
    for key, by in (("tier", "--tier"), ("source", "--source"), ("entryId", "--id-prefix")):
        reserved = run([str(tmp_path / "nope"), *args, "--meta", f"{key}=X"])
        assert reserved.exit_code == 2, reserved.output
        assert "Invalid value for '--meta'" in reserved.output and f"'{key}' is reserved" in reserved.output
        assert by in reserved.output and "rolled back" not in reserved.output and "nope" not in reserved.output
    small = run([str(root), *args, "--chunk-tokens", "3"])
    assert small.exit_code == 2 and "--chunk-tokens" in small.output
    # Two file roots of the same name give the same id: refused before writing, both named in full.
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "README").write_text("another readme\n")
    clash = run([str(root / "README"), str(tmp_path / "copy" / "README"), *args])
    assert clash.exit_code == 1 and "'README#0'" in clash.output and "--id-prefix" in clash.output
    assert f"{root / 'README'} and {tmp_path / 'copy' / 'README'}" in clash.output
    assert store.count() == 0
    # Only empty files: a summary, not a failure.
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "e.txt").write_text("")
    empty = run([str(tmp_path / "only"), *args, "--json"])
    assert empty.exit_code == 0 and json.loads(empty.output)["skipped"] == [
        {"path": str(tmp_path / "only" / "e.txt"), "reason": "empty", "files": 1}]


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
    cmd = [sys.executable, "-c", "from tnsrag_db._cli import main; main()", "ingest", str(docs), *args,
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
    # Stopped while writing the entries (they come first, embedded afterwards), or while
    # embedding them once all were written.
    assert err.strip().splitlines()[-1] in (
        f"interrupted: {committed} entries committed, the batch in progress was rolled back",
        f"interrupted: 120 entries committed, {_vectors(store)} with vectors of slow-hash, the batch in progress "
        f"was rolled back; the same ingest run again (or tnsrag embed --corpus {store.corpus} --embedding "
        "slow-hash) embeds the rest")
    assert "Traceback" not in err and 10 <= committed <= 120 and committed % 5 == 0
    rerun = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    res = json.loads(rerun.stdout)
    assert res["unchanged"] == committed and res["inserted"] == 120 - committed
    assert store.count() == 120 and _vectors(store) == 120


def _vectors(store: Store) -> int:
    return int(store.read("SELECT count(*) AS n FROM embeddings WHERE corpus = :c", {"c": store.corpus})[0].n)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_prune_deletes_only_entries_of_the_roots_it_read(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    args, store = target
    data = _tree(tmp_path / "data", {"json/a.txt": "alpha json\n", "json/b.txt": "beta json\n",
                                     "json/c.txt": "gamma json\n", "email/m1.txt": "hello mail\n",
                                     "email/m2.txt": "second mail\n"})
    assert run([str(data / "json"), *args, "--id-prefix", "json"]).exit_code == 0
    assert run([str(data / "email"), *args, "--id-prefix", "email"]).exit_code == 0
    # The prefix forgotten: the json root is read again under new ids; the email root stays whole.
    res = run([str(data / "json"), *args, "--prune", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["inserted"] == 3 and out["pruned"] == 3 and out["duplicates"] == 0
    assert ids(store) == ["a.txt#0", "b.txt#0", "c.txt#0", "email/m1.txt#0", "email/m2.txt#0"]
    assert {e.metadata["root"] for e in store.iter_entries()} == {str(data / "json"), str(data / "email")}
    # Two files deleted: pruning 2 entries for the 1 written asks first; off a terminal it needs --yes.
    (data / "json" / "a.txt").unlink()
    (data / "json" / "b.txt").unlink()
    refused = run([str(data / "json"), *args, "--prune"])
    assert refused.exit_code == 1, refused.output
    assert refused.stderr.startswith(f"error: refusing to prune 2 entries of corpus {store.corpus!r} read earlier "
                                     f"from {data / 'json'}: more than the 1 this run writes")
    assert "--yes" in refused.stderr and len(ids(store)) == 5
    # --dry-run lists them and changes nothing.
    dry = run([str(data / "json"), *args, "--prune", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines() == [
        f"dry run: 1 entry from 1 file for corpus {store.corpus!r} would be 0 inserted, 0 updated, "
        "1 unchanged, 2 pruned; nothing was written", "  would prune a.txt#0", "  would prune b.txt#0"]
    assert json.loads(run([str(data / "json"), *args, "--prune", "--dry-run", "--json"]).stdout)["prune_ids"] == [
        "a.txt#0", "b.txt#0"]
    assert len(ids(store)) == 5
    done = json.loads(run([str(data / "json"), *args, "--prune", "--yes", "--json"]).stdout)
    assert done["pruned"] == 2 and ids(store) == ["c.txt#0", "email/m1.txt#0", "email/m2.txt#0"]
    # Ingest's own key: not settable by --meta.
    assert run([str(data / "json"), *args, "--meta", "root=x"]).exit_code == 2


def test_several_roots_and_globs_in_one_command(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    args, store = target
    doc = tmp_path / "doc"
    for name in ("python3-six", "python3-toml"):
        _tree(doc / name, {"README": f"{name} readme\n", "copyright": f"{name} licence\n"})
    (doc / "other").mkdir()
    (doc / "other" / "NEWS").write_text("news\n")
    res = run([str(doc / "python3-six"), str(doc / "python3-toml"), *args, "--json"])
    assert res.exit_code == 0, res.output
    assert ids(store) == ["python3-six/README#0", "python3-six/copyright#0", "python3-toml/README#0",
                          "python3-toml/copyright#0"]
    assert [r["prefix"] for r in json.loads(res.stdout)["roots"]] == ["python3-six/", "python3-toml/"]
    # --id-prefix goes in front; a quoted glob names the folders it matches, ids below its fixed part.
    store.clear()
    res = run([str(doc / "python3*"), *args, "--id-prefix", "pkgs", "--json"])
    assert res.exit_code == 0, res.output
    assert ids(store) == ["pkgs/python3-six/README#0", "pkgs/python3-six/copyright#0",
                          "pkgs/python3-toml/README#0", "pkgs/python3-toml/copyright#0"]
    missing = run([str(doc / "nothing*"), *args])
    assert missing.exit_code == 2 and "matched no files" in missing.output
    # Two folders of one name, and a root inside another: refused before reading, named in full.
    _tree(tmp_path / "b" / "python3-six", {"README": "other six\n"})
    same = run([str(doc / "python3-six"), str(tmp_path / "b" / "python3-six"), *args])
    assert same.exit_code == 2 and str(tmp_path / "b" / "python3-six") in same.output
    assert "--id-prefix" in same.output
    inside = run([str(doc), str(doc / "other"), *args])
    assert inside.exit_code == 2 and "lies inside root" in inside.output


def test_duplicates_get_a_note_and_delete_by_prefix_undoes_them(tmp_path: Path,
                                                               target: tuple[list[str], Store]) -> None:
    args, store = target
    docs = _tree(tmp_path / "docs", {"a.md": "# A\n\nalpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"})
    first = run([str(docs), *args, "--id-prefix", "kb"])
    assert first.exit_code == 0 and "note:" not in first.output
    again = run([str(docs), *args, "--id-prefix", "kb2", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["duplicates"] == 3
    assert again.stderr == ("note: 3 of 3 entries inserted duplicate contents already stored under other ids "
                            "(re-ingested under another prefix?)\n")
    assert run([str(docs), *args, "--id-prefix", "kb2"]).stderr == ""  # nothing new, no note
    dry = CliRunner().invoke(main_group, ["delete", "--id-prefix", "kb2", "--dry-run", *args])
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines() == [
        f"dry run: would delete 3 entries under 'kb2/' from corpus {store.corpus!r}",
        "  kb2/a.md#1", "  kb2/b.txt#0", "  kb2/c.txt#0"]
    assert store.count() == 6
    gone = CliRunner().invoke(main_group, ["delete", "--id-prefix", "kb2/", "--json", *args])
    assert json.loads(gone.stdout) == {"corpus": store.corpus, "deleted": 3, "id_prefix": "kb2/"}
    assert ids(store) == ["kb/a.md#1", "kb/b.txt#0", "kb/c.txt#0"]
    assert CliRunner().invoke(main_group, ["delete", "--id-prefix", "kb", "x", *args]).exit_code == 2


def test_cache_directories_are_one_skip_line(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    args, store = target
    root = tmp_path / "lib"
    for n in range(4):
        (root / f"p{n}" / "__pycache__").mkdir(parents=True)
        (root / f"p{n}" / "mod.py").write_text(f"def f{n}():\n    return {n}\n")
        for m in range(5):
            (root / f"p{n}" / "__pycache__" / f"m{m}.cpython-311.pyc").write_bytes(b"\x00compiled")
    (root / "blob.bin").write_bytes(b"\x00\x01")
    text = run([str(root), *args])
    assert text.exit_code == 0, text.output
    assert "skipped 21 files: 20 in cache directories, 1 binary" in text.output
    skip_lines = [line for line in text.output.splitlines() if line.startswith("  ")]
    assert skip_lines == [f"  {root}: 20 files in 4 cache directories (__pycache__)", f"  {root}/blob.bin: binary"]
    out = json.loads(run([str(root), *args, "--json"]).output)
    assert {"path": str(root), "reason": "20 files in 4 cache directories (__pycache__)", "files": 20} in out["skipped"]
    assert sorted(i.split("#")[0] for i in ids(store)) == [f"p{n}/mod.py" for n in range(4)]


def _snapshot(store: Store) -> list[tuple[str, str, dict[str, str]]]:
    return [(e.id, e.content, dict(e.metadata)) for e in store.iter_entries()]


def test_a_second_root_at_the_same_paths_is_refused_before_anything_is_written(
        tmp_path: Path, target: tuple[list[str], Store]) -> None:
    args, store = target
    six = _tree(tmp_path / "doc" / "python3-six", {"README": "six readme\n", "copyright": "six licence\n",
                                                   "pkg/__init__.py": "import six\n", "NEWS": "six news\n"})
    toml = _tree(tmp_path / "doc" / "python3-toml", {"README": "toml readme\n", "copyright": "toml licence\n",
                                                     "pkg/__init__.py": "import toml\n", "TODO": "toml todo\n"})
    assert run([str(six), *args]).exit_code == 0
    first = _snapshot(store)
    assert [i for i, _, _ in first] == ["NEWS#0", "README#0", "copyright#0", "pkg/__init__.py#0"]
    # The second folder's README, copyright and pkg/__init__.py would take six's ids: refused,
    # naming the first stored ids and both roots, whether the run streams its writes or
    # reads everything first (--prune, --dry-run), and with nothing written or pruned.
    for extra in ([], ["--prune", "--yes"], ["--dry-run"], ["--strict"]):
        res = run([str(toml), *args, *extra])
        assert res.exit_code == 1, (extra, res.output)
        assert res.stderr.startswith(
            f"error: corpus {store.corpus!r} holds entries read from {six} at 3 of the file paths read now from "
            f"{toml} ('README#0', 'copyright#0', 'pkg/__init__.py#0'): "), res.stderr
        assert "nothing was written" in res.stderr and "--id-prefix python3-toml" in res.stderr
        assert f"tnsrag delete --corpus {store.corpus} --filter root={six}" in res.stderr
        assert _snapshot(store) == first
    res = run([str(toml), *args, "--json"])
    assert res.exit_code == 1 and "error: " in res.stderr
    out = json.loads(res.stdout)
    assert out["error"] == "IdCollisionError" and out["corpus"] == store.corpus
    assert out["collisions"] == [{"id": i, "root": str(toml), "owner": str(six)}
                                 for i in ("README#0", "copyright#0", "pkg/__init__.py#0")]
    assert _snapshot(store) == first
    # The same folder again (yesterday's command): its own ids, updated in place.
    (six / "README").write_text("six readme, revised\n")
    again = json.loads(run([str(six), *args, "--json"]).stdout)
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 1, 3)
    assert [i for i, _, _ in _snapshot(store)] == [i for i, _, _ in first]
    # Under a prefix of its own the second folder is kept apart, and its --prune stays in its root.
    kept = json.loads(run([str(toml), *args, "--id-prefix", "python3-toml", "--prune", "--json"]).stdout)
    assert kept["inserted"] == 4 and kept["pruned"] == 0
    assert ids(store) == ["NEWS#0", "README#0", "copyright#0", "pkg/__init__.py#0", "python3-toml/README#0",
                          "python3-toml/TODO#0", "python3-toml/copyright#0", "python3-toml/pkg/__init__.py#0"]
    assert store.get("README#0").content == "six readme, revised"  # type: ignore[union-attr]
    # Several roots in one command are apart by their folder names already.
    both = run([str(six), str(toml), *args])
    assert both.exit_code == 0, both.output
    # A folder that moved: once the entries of its old place are deleted, the new place takes the ids.
    moved = tmp_path / "elsewhere" / "python3-six"
    moved.parent.mkdir()
    six.rename(moved)
    assert run([str(moved), *args]).exit_code == 1
    gone = CliRunner().invoke(main_group, ["delete", "--filter", f"root={six}", *args])
    assert gone.exit_code == 0 and "deleted 8 entries" in gone.stdout, gone.output
    res = json.loads(run([str(moved), *args, "--json"]).stdout)
    assert res["inserted"] == 4 and {store.get("README#0").metadata["root"]} == {str(moved)}  # type: ignore[union-attr]


def test_files_of_one_unknown_type_are_one_skip_line(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    # A tree like linux's scripts/coccinelle: 18 .cocci files are one line, not 18; a lone
    # unknown file keeps its own line; --json still lists every file.
    args, store = target
    root = tmp_path / "doc"
    for n in range(18):
        (root / "coccinelle" / ("api" if n % 2 else "misc")).mkdir(parents=True, exist_ok=True)
        (root / "coccinelle" / ("api" if n % 2 else "misc") / f"rule{n}.cocci").write_text(f"@r{n}@\nexpression E;\n")
    (root / "one.xyz").write_text("a lone file of its type\n")
    (root / "README").write_text("read me\n")
    text = run([str(root), *args])
    assert text.exit_code == 0, text.output
    assert "skipped 19 files: 18 unknown file type '.cocci', 1 unknown file type '.xyz'" in text.output
    skip_lines = [line for line in text.output.splitlines() if line.startswith("  ")]
    assert sorted(skip_lines) == sorted([f"  {root}/coccinelle: 18 files of unknown type '.cocci'",
                                         f"  {root}/one.xyz: unknown file type '.xyz'"]), text.output
    out = json.loads(run([str(root), *args, "--json"]).output)
    assert len(out["skipped"]) == 19 and ids(store) == ["README#0"]


def test_dry_runs_list_chunk_numbers_in_numeric_order(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    # Dozens of chunks of one file: #2 comes before #10 in what delete and prune would remove.
    args, store = target
    docs = _tree(tmp_path / "docs", {"long.txt": "\n\n".join(f"paragraph {n} " + "word " * 40 for n in range(30))})
    assert run([str(docs), *args, "--chunk-tokens", "200", "--id-prefix", "kb"]).exit_code == 0
    numeric = sorted(ids(store), key=lambda i: int(i.split("#")[1]))
    assert len(numeric) > 10 and all(i.startswith("kb/long.txt#") for i in numeric)
    for how in (["--id-prefix", "kb"],):
        dry = CliRunner().invoke(main_group, ["delete", *how, "--dry-run", *args])
        assert dry.exit_code == 0, dry.output
        assert [line.strip() for line in dry.stdout.splitlines()[1:]] == numeric, dry.stdout
        as_json = CliRunner().invoke(main_group, ["delete", *how, "--dry-run", "--json", *args])
        assert json.loads(as_json.stdout)["ids"] == numeric
    (docs / "long.txt").write_text("short now\n")
    pruned = run([str(docs), *args, "--prune", "--dry-run", "--chunk-tokens", "200", "--id-prefix", "kb"])
    assert pruned.exit_code == 0, pruned.output
    would = [line.removeprefix("  would prune ") for line in pruned.stdout.splitlines() if "would prune" in line]
    assert would == numeric[1:], pruned.stdout


def test_a_second_folder_without_embedding_fills_the_corpus_s_own_space(tmp_path: Path,
                                                                         target: tuple[list[str], Store]) -> None:
    # The first folder went in with a provider of its own; the second, written without
    # --embedding, is embedded by the same one: one space, every entry in it, none missing
    # (before, the default provider started a second space, and each space missed the
    # other folder's entries).
    args, store = target
    first = _tree(tmp_path / "first", {"a.md": "# A\n\nalpha notes about memory\n", "b.md": "# B\n\nbeta notes\n"})
    second = _tree(tmp_path / "second", {"c.md": "# C\n\ngamma notes about retrieval\n"})
    assert run([str(first), *args, "--embedding", "hash-16", "--quiet"]).exit_code == 0
    res = CliRunner().invoke(main_group, ["ingest", str(second), *args, "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["embedding"] == "tnsrag-hash-16"
    stats = json.loads(CliRunner().invoke(main_group, ["stats", *args, "--json"]).stdout)
    assert [(s["provider"], s["vectors"], s["missing"]) for s in stats["spaces"]] == [("tnsrag-hash-16", 3, 0)]


def test_record_edges_end_at_entries_of_the_files_or_the_corpus(tmp_path: Path, target: tuple[list[str], Store]) -> None:
    # Batches commit one by one, so the edges' ends are checked before any is written: an end
    # in the files or already in the corpus is fine, any other refuses the whole run.
    args, store = target
    store.add(MemoryEntry("stored", "already in the corpus"))
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "a.jsonl").write_text(json.dumps({"id": "a", "content": "alpha", "edges": [{"dst": "stored"}, {"dst": "b"}]})
                                  + "\n" + json.dumps({"id": "b", "content": "beta"}) + "\n")
    (bad / "c.jsonl").write_text(json.dumps({"id": "c", "content": "gamma",
                                             "edges": [{"dst": "ghost"}, {"dst": "stored"}]}) + "\n")
    ok = run([str(good), *args, "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["edges"] == 2
    refused = run([str(bad), *args])
    assert refused.exit_code != 0
    assert "edges end at entries that are neither in the files nor in corpus" in refused.stderr
    assert "'ghost'" in refused.stderr and "'stored'" not in refused.stderr
    assert sorted(ids(store)) == ["a", "b", "stored"]
