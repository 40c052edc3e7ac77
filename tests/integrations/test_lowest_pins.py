"""The adapters at the low end of their supported ranges: the LangChain and LlamaIndex tests
(langchain-tests' standard suites included) run against the lowest versions pyproject.toml
allows, installed beside the test environment's newer ones and taking precedence.

The bounds are read from pyproject.toml, so a range that stops being true fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The distributions whose lowest allowed versions are tested, and where their bounds live.
PINNED = ("langchain-core", "langchain-tests", "llama-index-core")


def _lowest(requirement: str) -> tuple[str, str] | None:
    """``(name, version)`` of a ``name>=X[,<Y]`` requirement's lower bound, else None."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)\s*(,.*)?", requirement)
    if match is None:
        return None
    version = match.group(2)
    return match.group(1), version if version.count(".") >= 2 else version + ".0"


def lowest_versions() -> dict[str, str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    found: dict[str, str] = {}
    for requirements in extras.values():
        for requirement in requirements:
            parsed = _lowest(requirement)
            if parsed is not None and parsed[0] in PINNED:
                found[parsed[0]] = parsed[1]
    return found


@pytest.mark.slow
def test_the_adapter_tests_pass_at_the_lowest_allowed_versions(tmp_path: Path) -> None:
    pins = lowest_versions()
    assert set(pins) == set(PINNED), pins
    target = tmp_path / "lowest"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         *(f"{name}=={version}" for name, version in sorted(pins.items()))],
        capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    check = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; "
                               f"print({sorted(pins)!r} and [m.version(n) for n in {sorted(pins)!r}])"],
        capture_output=True, text=True, env=env, timeout=120)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == repr([pins[n] for n in sorted(pins)]), check.stdout
    suites = ["tests/integrations/test_langchain.py", "tests/integrations/test_llama_index.py",
              "tests/integrations/test_llama_index_conventions.py"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                          "--basetemp", str(tmp_path / "pytest"), *suites],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
