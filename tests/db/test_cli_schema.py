"""A command that reads never creates a schema: a mistyped ``--schema`` is an error naming
the tnsrag schemas that exist, on a URL's server and on the embedded one."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tests.fix_db import SCHEMA
from tnsrag_db._cli import main_group
from tnsrag_db._db.pool import Pool
from tnsrag_db._store.embedded import keeper

READ_COMMANDS = [["stats"], ["corpora"], ["export"], ["query", "memory", "--strategy", "keyword"],
                 ["query", "memory", "--strategy", "hybrid", "--explain"], ["delete", "x"], ["drop", "--yes", "--corpus", "c"],
                 ["graph", "add-edge", "a", "b"], ["embed", "--embedding", "hash", "--corpus", "c"]]


def _schema_exists(pool: Pool, name: str) -> bool:
    with pool.connect() as conn:
        return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = :n)",
                                 {"n": name}).scalar_one())


def test_a_mistyped_schema_is_named_with_the_schemas_that_exist(db_url: URL, pool: Pool) -> None:
    url = db_url.render_as_string(hide_password=False)
    typo = f"tnsrg_{uuid.uuid4().hex[:6]}"
    for command in READ_COMMANDS:
        res = CliRunner().invoke(main_group, [*command, "--url", url, "--schema", typo])
        assert res.exit_code == 1, (command, res.output)
        assert f"schema {typo!r} does not exist" in res.stderr, (command, res.stderr)
        assert f"tnsrag schemas here: {SCHEMA}" in res.stderr and "Traceback" not in res.output
        assert not _schema_exists(pool, typo)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TNSRAG_")}
    env["XDG_DATA_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("xdg-data")
    yield path
    keeper.stop(path / "tnsrag_db" / "pg18", force=True)


@pytest.mark.slow
def test_the_embedded_server_creates_no_schema_for_a_read(home: Path) -> None:
    def tnsrag(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", "from tnsrag_db._cli import main; main()", *args],
                              env=_env(home), capture_output=True, text=True, timeout=300)

    # The default schema is set up by any first command, so a new installation answers "none yet".
    first = tnsrag("corpora")
    assert first.returncode == 0 and "no corpora in schema tnsrag yet" in first.stdout, first.stderr
    for command in (["stats"], ["query", "memory"], ["export"], ["corpora"]):
        res = tnsrag(*command, "--schema", "tnsrg")
        assert res.returncode == 1, (command, res.stdout, res.stderr)
        assert res.stderr.strip() == ("error: schema 'tnsrg' does not exist in this database (a read creates "
                                      "none); tnsrag schemas here: tnsrag"), command
    # Still none: the reads above created nothing.
    again = tnsrag("stats", "--schema", "tnsrg")
    assert "tnsrag schemas here: tnsrag" in again.stderr and "tnsrg," not in again.stderr
