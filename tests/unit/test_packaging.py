"""The wheel ships every package and the alembic revisions."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_and_the_migrations_are_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {p for p in find_packages(str(ROOT), include=["tnsrag_db*"])}
    found |= {"tnsrag_db._migrations"} | {
        "tnsrag_db._migrations." + p for p in find_packages(str(ROOT / "migrations"))}
    assert listed == found


def test_migrations_are_a_package_with_revisions() -> None:
    assert (ROOT / "migrations" / "__init__.py").exists()
    assert (ROOT / "migrations" / "versions" / "__init__.py").exists()
    assert list((ROOT / "migrations" / "versions").glob("0001_*.py"))
