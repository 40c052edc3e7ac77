"""Docs that run: every ```python block of README.md and of each page of docs/, and the examples.

Each file is one script (the convention its first Python block states): its blocks run in
order in one namespace, from the repository root, with ``connect()`` on the embedded
server. The test runs each file so in a child process whose user data directory
(``XDG_DATA_HOME``) is a fresh temporary one, so ``connect()`` without a URL starts a
throw-away embedded server there, exactly as a user's script would, and never sees the
developer's own data. Each block is compiled with its file's line numbers, so a failure
points at the line of the page. Afterwards no server may still run in that directory: a
plain script's ``connect()`` stops the server it started.

The ```bash blocks are checked without running them (they need real folders, shared
servers or a terminal): every ``tnsrag`` command line in them must name a real command and
only options that command (or the root group) has, and the README's test command must be
exactly what CI runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from tests._docs import README, ROOT, blocks, doc_files

_RUNNER = """
import json, sys
name, blocks = sys.argv[1], json.load(open(sys.argv[2]))
exec(sys.argv[3] if len(sys.argv) > 3 else "")
namespace = {"__name__": "__main__"}
for line, code in blocks:
    print(f"--- {name}:{line}", flush=True)
    # Blank lines in front keep the page's line numbers in tracebacks.
    exec(compile("\\n" * (line - 1) + code, name, "exec"), namespace)
print("--- all blocks ran", flush=True)
"""

pytestmark = pytest.mark.slow  # child processes, each starting an embedded server

_SCRIPTS = [p for p in doc_files() if blocks(p.read_text())]


def readme_blocks(text: str) -> list[tuple[int, str]]:
    """Every ```python block of ``text`` as (line of its first code line, code)."""
    return blocks(text)


@pytest.fixture(scope="module")
def data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A user data directory of its own; any server left in it is stopped afterwards."""
    home = tmp_path_factory.mktemp("xdg-data")
    yield home
    from tnsrag_db._store.embedded import keeper

    keeper.stop(home / "tnsrag_db" / "pg18", force=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TNSRAG_")}
    env["XDG_DATA_HOME"] = str(home)
    return env


def _assert_no_server_left(home: Path) -> None:
    from tnsrag_db._store.embedded import keeper

    st = keeper.status(home / "tnsrag_db" / "pg18")
    assert not st.running, f"a plain script left the embedded server running: {st}"
    assert st.keeper_pid is None, "a plain script started a keeper process"


def test_readme_block_parser_finds_blocks_with_their_lines() -> None:
    text = "intro\n```python\nx = 1\n```\ntext\n```bash\nls\n```\n```python\ny = x + 1\nprint(y)\n```\n"
    assert readme_blocks(text) == [(3, "x = 1\n"), (10, "y = x + 1\nprint(y)\n")]
    assert blocks(text, "bash") == [(7, "ls\n")]


def test_the_readme_and_every_guide_have_python_blocks_to_run() -> None:
    names = {p.name for p in _SCRIPTS}
    assert {"README.md", "strategies.md", "python.md", "ingest-and-cli.md", "integrations.md",
            "evaluation.md"} <= names, names


#: The corpora of the embedded database of a user data directory (run in a child with it).
_CORPORA = """
import json, tnsrag_db
from tnsrag_db.admin import list_corpora
with tnsrag_db.connect(corpus="docs-check") as store:
    print(json.dumps(sorted(i.name for i in list_corpora(store) if i.name != "docs-check")))
"""


def _run_page(page: Path, home: Path, tmp_path: Path, prelude: str = "") -> str:
    """Run every ```python block of ``page`` as one script in a child process (``prelude``
    first) with ``home`` as its user data directory; its output, once every block ran."""
    page_blocks = blocks(page.read_text())
    script = tmp_path / "blocks.json"
    script.write_text(json.dumps(page_blocks))
    name = str(page.relative_to(ROOT))
    run = subprocess.run([sys.executable, "-c", _RUNNER, name, str(script), prelude], cwd=ROOT, env=_env(home),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    ran = [line for line in run.stdout.splitlines() if line.startswith(f"--- {name}:")]
    assert len(ran) == len(page_blocks) and run.stdout.rstrip().endswith("--- all blocks ran")
    _assert_no_server_left(home)
    return run.stdout


def _corpora(home: Path) -> list[str]:
    run = subprocess.run([sys.executable, "-c", _CORPORA], cwd=ROOT, env=_env(home), capture_output=True, text=True,
                         timeout=600, check=True)
    return list(json.loads(run.stdout.splitlines()[-1]))


@pytest.mark.parametrize("page", _SCRIPTS, ids=lambda p: p.name)
def test_every_python_block_of_the_page_runs(page: Path, data_home: Path, tmp_path: Path) -> None:
    out = _run_page(page, data_home, tmp_path)
    if page.name == "python.md":  # the async example runs
        assert "[['a1'], ['a2']]" in out and "pip install" not in out, out
        # Traces and metrics: the example prints what its comments say.
        assert ("{'tnsrag.operation': 'retrieve', 'tnsrag.strategy': 'keyword', 'tnsrag.k': 2, "
                "'tnsrag.corpus': 'readme', 'tnsrag.results': 2}") in out, out
        assert "['SELECT', 'tnsrag.retrieve']" in out, out
        assert "['db.client.operation.duration', 'tnsrag.operation.duration', 'tnsrag.operation.entries']" in out


# --- bash blocks -------------------------------------------------------------------------

def _command_lines(code: str) -> list[list[str]]:
    """The ``tnsrag ...`` commands of a bash block as argument lists, without comments."""
    out: list[list[str]] = []
    for line in code.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote in prose-like lines is not a command
            continue
        for start, word in enumerate(words):
            if word == "tnsrag" and (start == 0 or words[start - 1] in {"&&", ";", "|", "||"}):
                end = next((i for i in range(start + 1, len(words)) if words[i] in {"&&", ";", "|", "||", ">"}),
                           len(words))
                out.append(words[start + 1:end])
    return out


def _options(cmd: click.Command) -> set[str]:
    return {opt for p in cmd.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)} | {
        "--help", "-h"}


_LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _check_command_line(args: list[str]) -> None:
    from tnsrag_db._cli import main_group

    root_opts = _options(main_group) | {"--version"}
    cmd: click.Command = main_group
    path: list[str] = []
    words = list(args)
    while isinstance(cmd, click.Group) and words:
        word = words[0]
        if word.startswith("-"):
            assert word.split("=")[0] in _options(cmd) | root_opts, f"`tnsrag {' '.join(args)}`: unknown {word}"
            words.pop(0)
            if "=" not in word and words and not words[0].startswith("-") and cmd.get_command(
                    click.Context(cmd), words[0]) is None:
                words.pop(0)  # the option's value
            continue
        if "|" in word:  # a synopsis line: `tnsrag server start|stop|status`
            names = word.split("|")
        else:
            names = [word]
        subs = [cmd.get_command(click.Context(cmd), n) for n in names]
        assert all(s is not None for s in subs), f"`tnsrag {' '.join(args)}`: no command {word!r} in {path}"
        words.pop(0)
        path.append(word)
        cmd = subs[0]  # type: ignore[assignment]
        if len(subs) > 1:
            return  # options of a synopsis over several commands are checked on the commands' pages
    if isinstance(cmd, click.Group):
        return
    known = _options(cmd) | root_opts
    for word in words:
        if word.startswith("-") or word.startswith("["):  # an option, or one in a synopsis: [--prune [--yes]]
            for option in _LONG_OPTION.findall(word):
                assert option in known, f"`tnsrag {' '.join(args)}`: `tnsrag {' '.join(path)}` has no {option}"


def _bash_commands() -> list[tuple[str, list[str]]]:
    out = []
    for page in doc_files():
        for line, code in blocks(page.read_text(), "bash"):
            for args in _command_lines(code):
                out.append((f"{page.relative_to(ROOT)}:{line}", args))
    return out


def test_every_tnsrag_command_line_in_a_bash_block_names_real_commands_and_options() -> None:
    commands = _bash_commands()
    assert len(commands) > 50, "the bash blocks were not found"
    for where, args in commands:
        try:
            _check_command_line(args)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None


def test_the_command_line_check_refuses_unknown_commands_and_options() -> None:
    _check_command_line(["query", "text", "--strategy", "hybrid", "--top-k", "3"])
    _check_command_line(["server", "start|stop|status", "--json"])
    _check_command_line(["ingest", "PATH", "[--prune", "[--yes]]", "[--dry-run]"])
    for bad in (["quarry", "text"], ["query", "text", "--topk", "3"], ["db", "upgarde"],
                ["ingest", "PATH", "[--prune", "[--yse]]"]):
        with pytest.raises(AssertionError):
            _check_command_line(bad)


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    ci_command = [line for line in ci.splitlines() if "pytest" in line and not line.startswith("#")]
    assert ci_command == ["pip install -e '.[test]' && pytest -q -n auto"], ci_command
    quickstart = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [code.strip() for _line, code in blocks(quickstart, "bash")]
    assert len(commands) == 2, "the Quickstart has exactly two commands: the main job and the tests"
    assert commands[1].endswith("&& " + ci_command[0]) and "\n" not in commands[1]
    assert "tnsrag ingest --sample" in commands[0] and "tnsrag query" in commands[0] and "\n" not in commands[0]


def test_the_readme_is_a_front_door_that_maps_every_guide() -> None:
    text = README.read_text()
    assert text.count("\n") <= 300, f"README.md has {text.count(chr(10))} lines; details belong in docs/"
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in text, f"the README's map of the docs does not link docs/{page.name}"


def test_every_relative_link_of_the_docs_reaches_a_file_and_heading() -> None:
    link = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)")
    for page in doc_files():
        text = page.read_text()
        for target, anchor in link.findall(text):
            if target.startswith(("http://", "https://")):
                continue
            dest = (page.parent / target).resolve() if target else page
            assert dest.exists(), f"{page.relative_to(ROOT)}: link to missing {target}"
            if anchor and dest.suffix == ".md":
                headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
                assert anchor in headings, f"{page.relative_to(ROOT)}: no heading #{anchor} in {dest.name}"


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation dropped."""
    return "".join(ch for ch in title.strip().lower().replace(" ", "-") if ch.isalnum() or ch in "-_")


# --- the runnable example ---------------------------------------------------------------

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
