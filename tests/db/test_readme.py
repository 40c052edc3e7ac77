"""Docs that run: every ```python block of README.md, and the examples.

The README states the convention at its first Python section: the blocks run in order
in one namespace, as one script, from the repository root, with ``connect()`` on the
embedded server. The test runs them so in a child process whose user data directory
(``XDG_DATA_HOME``) is a fresh temporary one, so ``connect()`` without a URL starts a
throw-away embedded server there, exactly as a user's script would, and never sees the
developer's own data. Each block is compiled with its README line numbers, so a failure
points at the README line. Afterwards no server may still run in that directory: a plain
script's ``connect()`` stops the server it started.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)

_RUNNER = """
import json, sys
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for line, code in blocks:
    print(f"--- README.md:{line}", flush=True)
    # Blank lines in front keep the README's line numbers in tracebacks.
    exec(compile("\\n" * (line - 1) + code, "README.md", "exec"), namespace)
print("--- all blocks ran", flush=True)
"""

pytestmark = pytest.mark.slow  # child processes, each starting an embedded server


def readme_blocks(text: str) -> list[tuple[int, str]]:
    """Every ```python block of ``text`` as (line of its first code line, code)."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _FENCE.finditer(text)]


@pytest.fixture(scope="module")
def data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A user data directory of its own; any server left in it is stopped afterwards."""
    home = tmp_path_factory.mktemp("xdg-data")
    yield home
    from tnsrag_db.store.embedded import keeper

    keeper.stop(home / "tnsrag_db" / "pg18", force=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TNSRAG_")}
    env["XDG_DATA_HOME"] = str(home)
    return env


def _assert_no_server_left(home: Path) -> None:
    from tnsrag_db.store.embedded import keeper

    st = keeper.status(home / "tnsrag_db" / "pg18")
    assert not st.running, f"a plain script left the embedded server running: {st}"
    assert st.keeper_pid is None, "a plain script started a keeper process"


def test_readme_block_parser_finds_blocks_with_their_lines() -> None:
    text = "intro\n```python\nx = 1\n```\ntext\n```bash\nls\n```\n```python\ny = x + 1\nprint(y)\n```\n"
    assert readme_blocks(text) == [(3, "x = 1\n"), (10, "y = x + 1\nprint(y)\n")]


def test_every_python_block_of_the_readme_runs(data_home: Path, tmp_path: Path) -> None:
    blocks = readme_blocks(README.read_text())
    assert blocks, "README.md has no ```python blocks"
    script = tmp_path / "blocks.json"
    script.write_text(json.dumps(blocks))
    run = subprocess.run([sys.executable, "-c", _RUNNER, str(script)], cwd=ROOT, env=_env(data_home),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    ran = [line for line in run.stdout.splitlines() if line.startswith("--- README.md:")]
    assert len(ran) == len(blocks) and run.stdout.rstrip().endswith("--- all blocks ran")
    _assert_no_server_left(data_home)


def _corpus_sizes(home: Path) -> list[str]:
    check = ("import tnsrag_db\n"
             "with tnsrag_db.connect(corpus='support-agent-example') as store:\n"
             "    print(store.count(), store.with_corpus('default').count())\n")
    run = subprocess.run([sys.executable, "-c", check], env=_env(home), capture_output=True, text=True,
                         timeout=600, check=True)
    return run.stdout.split()


def _run_example(home: Path, *args: str) -> str:
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "support_agent.py"), *args],
                         cwd=ROOT / "examples", env=_env(home), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


def test_support_agent_example_runs_in_its_own_corpus_and_cleans_up(data_home: Path) -> None:
    out = _run_example(data_home, "--keep")
    assert "AUTH-401" in out and "customer FAQ: ['faq-" in out, out
    kept, default = _corpus_sizes(data_home)
    assert int(kept) > 0 and default == "0"   # its own corpus, not the user's default one
    _run_example(data_home)                    # without --keep it drops its corpus at the end
    assert _corpus_sizes(data_home) == ["0", "0"]
    _assert_no_server_left(data_home)
