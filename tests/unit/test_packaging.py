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


def test_the_built_wheel_holds_the_migrations_and_data(tmp_path: Path) -> None:
    """Build the wheel from a copy of the sources (the build writes build/ and egg-info
    beside them) and look inside: an installed package must be able to migrate a database."""
    import shutil
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("tnsrag_db", "migrations"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    script = ("import sys; from setuptools import build_meta; "
              "print(build_meta.build_wheel(sys.argv[1]))")
    run = subprocess.run([sys.executable, "-c", script, str(out)], cwd=src, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    wheel = out / run.stdout.strip().splitlines()[-1]
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("tnsrag_db/_migrations/env.py", "tnsrag_db/_migrations/script.py.mako",
                     "tnsrag_db/_migrations/versions/0001_initial.py", "tnsrag_db/data/sample_corpus.jsonl",
                     "tnsrag_db/py.typed", "tnsrag_db/_store/store.py",
                     "tnsrag_db/data/models/all-MiniLM-L6-v2/tokenizer.json",
                     "tnsrag_db/data/models/all-MiniLM-L6-v2/1_Pooling/config.json",
                     "tnsrag_db/data/models/all-MiniLM-L6-v2/modules.json",
                     "tnsrag_db/data/models/all-MiniLM-L6-v2/sentence_bert_config.json",
                     "tnsrag_db/data/models/all-MiniLM-L6-v2/LICENSE"):
        assert required in names, f"{required} missing from {wheel.name}"
