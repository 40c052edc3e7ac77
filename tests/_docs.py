"""The documentation's code blocks: README.md and every page of docs/, as the tests read them.

Each file is one script: its ```python blocks run in order in one namespace, from the
repository root. Helpers here find the blocks (with their line numbers, so a failure points
at the file's line) and the example a test runs on its own.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(?P<lang>[a-z]+)[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)


def doc_files() -> list[Path]:
    """README.md, then every Markdown page of docs/ in name order."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def blocks(text: str, lang: str = "python") -> list[tuple[int, str]]:
    """Every ```lang block of ``text`` as (line of its first code line, code)."""
    return [(text.count("\n", 0, m.start("code")) + 1, m.group("code"))
            for m in _FENCE.finditer(text) if m.group("lang") == lang]


def find_example(marker: str) -> tuple[Path, str]:
    """The one ```python block of the documentation containing ``marker``, with its file.

    Raises AssertionError when no block or more than one contains it, so a test that runs
    a documented example notices when the example moves or is duplicated.
    """
    found = [(path, code) for path in doc_files() for _line, code in blocks(path.read_text())
             if marker in code]
    assert len(found) == 1, f"{len(found)} documentation blocks contain {marker!r}; expected exactly one"
    return found[0]
