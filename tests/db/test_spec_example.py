"""The spec's Java example, in Python, exactly as the README shows it, against the test database."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import tnsrag_db
from tnsrag_db.store.store import Store

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    matches = [b for b in blocks if "tier filter was not applied" in b]
    assert len(matches) == 1, "the README must show the spec example once"
    return matches[0]


def test_readme_spec_example_runs(make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store()
    monkeypatch.setattr(tnsrag_db, "connect", lambda **_: contextlib.nullcontext(store))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_readme_example(), str(README), "exec"), {"__name__": "readme_example"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "vector"
    assert lines[1] == "keyword"
    assert lines[2] == "1"  # the tier filter leaves only the SEMANTIC entry
    assert lines[3] == "[1] Agents can persist semantic memory."
    assert len(lines) == 4
