"""The SPI's reference example, in Python, exactly as docs/strategies.md shows it, against the test database."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

import pytest

import tnsrag_db
from tests._docs import find_example
from tnsrag_db._store.store import Store


def _readme_example() -> tuple[Path, str]:
    return find_example("tier filter was not applied")  # the documentation shows it exactly once


def test_readme_spec_example_runs(make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store()
    monkeypatch.setattr(tnsrag_db, "connect", lambda **_: contextlib.nullcontext(store))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        page, example = _readme_example()
        exec(compile(example, str(page), "exec"), {"__name__": "readme_example"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "vector"
    assert lines[1] == "keyword"
    assert lines[2] == "1"  # the tier filter leaves only the SEMANTIC entry
    assert lines[3] == "[1] Agents can persist semantic memory."
    assert len(lines) == 4
