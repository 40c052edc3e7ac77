"""A real previous release of the library, run beside this one: the tree of the last commit
before revision 0011 (schema head 0010), unpacked from the repository's history and
driven in a child process whose ``tnsrag_db`` is that tree's.

The child reads one JSON command per line and answers one JSON line:
``{"op": "connect"}`` (``connect(url, corpus=...)``; the answer carries the error's class
and message when it is refused), ``{"op": "add", "entries": [[id, content], ...]}``,
``{"op": "delete", "ids": [...]}``, ``{"op": "search", "queries": [...], "k": K}`` (each
query's BM25 ranking as ``[id, score]`` pairs) and ``{"op": "quit"}``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

#: The last commit whose schema head is 0010: the release before postings in blocks.
PREVIOUS_RELEASE = "7b040783cfeea7fba307feab692a9ec8cd83c397"
PREVIOUS_HEAD = "0010"

_REPO = Path(__file__).resolve().parents[2]

_CHILD = r'''
import json, sys
# This release is installed in the environment (editable or not): its import hooks must not
# hand the previous release's package this release's migrations.
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path.insert(0, sys.argv[1])
import tnsrag_db
from tnsrag_db._db.revisions import shipped_head
from tnsrag_db._indexes.bm25 import BM25Index
assert tnsrag_db.__file__.startswith(sys.argv[1]), tnsrag_db.__file__
url, corpus = sys.argv[2], sys.argv[3]
store = None
print(json.dumps({"ready": True, "head": shipped_head()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    try:
        if cmd["op"] == "connect":
            store = tnsrag_db.connect(url, corpus=corpus, auto_migrate=cmd.get("auto_migrate", False))
            out = {"ok": True}
        elif cmd["op"] == "add":
            report = store.add_all([tnsrag_db.MemoryEntry(i, c) for i, c in cmd["entries"]])
            out = {"ok": True, "inserted": report.inserted, "updated": report.updated}
        elif cmd["op"] == "delete":
            out = {"ok": True, "deleted": sum(bool(store.delete(i)) for i in cmd["ids"])}
        elif cmd["op"] == "search":
            index = BM25Index(store)
            out = {"ok": True, "results": [[[i, s] for i, s in index.search(q, cmd["k"])] for q in cmd["queries"]]}
        elif cmd["op"] == "quit":
            break
        else:
            out = {"ok": False, "error": "unknown op"}
    except Exception as exc:
        out = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
    print(json.dumps(out), flush=True)
'''


def previous_release_tree(dest: Path) -> Path:
    """Unpack the previous release's ``tnsrag_db`` and ``migrations`` into ``dest``. Raises
    :class:`LookupError` when this checkout has no git history holding it (an unpacked
    source archive, a shallow clone)."""
    git = shutil.which("git")
    if git is None or not (_REPO / ".git").exists():
        raise LookupError("the previous release comes from the repository's git history: not a git checkout")
    found = subprocess.run([git, "-C", str(_REPO), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
                           capture_output=True)
    if found.returncode != 0:
        raise LookupError(f"commit {PREVIOUS_RELEASE[:8]} (the previous release) is not in this clone's history")
    archive = subprocess.run([git, "-C", str(_REPO), "archive", "--format=tar", PREVIOUS_RELEASE,
                              "tnsrag_db", "migrations"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(dest, filter="data")
        else:  # 3.11.0 to 3.11.3 (Debian 12's python3) have no filters; the archive is this repository's own
            tar.extractall(dest)  # noqa: S202
    return dest


class PreviousRelease:
    """One process of the previous release (see the module docstring)."""

    def __init__(self, tree: Path, url: str, corpus: str) -> None:
        self._proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tree), url, corpus],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(tree))
        hello = self._read()
        assert hello.get("head") == PREVIOUS_HEAD, hello

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the previous release's process ended (exit {self._proc.wait(timeout=10)})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def send(self, **command: Any) -> dict[str, Any]:
        """Send one command and return its answer."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(command) + "\n")
        self._proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """End the process."""
        if self._proc.poll() is None:
            try:
                self.send(op="quit")
            except (BrokenPipeError, RuntimeError):
                pass
            self._proc.wait(timeout=30)
