"""The package type-checks under ``mypy --strict`` (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # about a minute: the whole package, no cache in a fresh checkout
def test_package_passes_mypy_strict() -> None:
    run = subprocess.run([sys.executable, "-m", "mypy", "tnsrag_db"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
