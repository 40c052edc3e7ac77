"""The test plugin keeps every run away from the developer's own user data directory: HOME
and XDG_DATA_HOME point at temporary directories from the start, and a run that reaches the
real one anyway fails. Checked on inner pytest runs whose "real" directories are temporary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_INNER = '''
import os
from pathlib import Path

import tests.fix_db as fix_db


def test_the_run_sees_a_temporary_user_data_dir():
    assert os.environ["HOME"] != {home!r} and os.environ["XDG_DATA_HOME"] != {data!r}
    from tnsrag_db._store.embedded.server import default_data_dir

    assert not str(default_data_dir()).startswith({data!r})
    assert fix_db.REAL_DATA_DIR == Path({data!r}) / "tnsrag_db"


def test_reaching_the_real_one():
    if os.environ.get("REACH_REAL") == "1":  # as a child process given the developer's own environment would
        (fix_db.REAL_DATA_DIR / "pg18").mkdir(parents=True)
'''


def _inner_run(tmp_path: Path, reach: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    home, data = tmp_path / "real-home", tmp_path / "real-data"
    home.mkdir()
    data.mkdir()
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(_INNER.format(home=str(home), data=str(data)))
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(data), "REACH_REAL": "1" if reach else "0"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                          str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), f"--basetemp={tmp_path / 'bt'}",
                          str(test_file)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return run, data


def test_a_run_that_stays_away_passes(tmp_path: Path) -> None:
    run, data = _inner_run(tmp_path, reach=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert not (data / "tnsrag_db").exists()


def test_a_run_that_reaches_the_real_user_data_dir_fails(tmp_path: Path) -> None:
    run, data = _inner_run(tmp_path, reach=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"the real user data directory was reached: the tests created {data / 'tnsrag_db'}" in run.stdout
