"""``tnsrag server``: the embedded server outlives a CLI call and stops after an idle time.

Every test runs the CLI in child processes whose user data directory (``XDG_DATA_HOME``)
is a temporary one, so a server started here never touches the developer's data; the
module fixture stops whatever is left (keeper and server) at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tnsrag_db.store import server

pytestmark = pytest.mark.slow  # child processes starting embedded servers

_CLI = "from tnsrag_db.cli import main; main()"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("xdg-data")
    yield path
    server.stop(_data_dir(path), force=True)
    st = server.status(_data_dir(path))
    assert not st.running and st.keeper_pid is None


@pytest.fixture
def stopped(home: Path) -> Iterator[Path]:
    """``home`` with no server running before and after the test."""
    server.stop(_data_dir(home), force=True)
    yield home
    server.stop(_data_dir(home), force=True)


def _data_dir(home: Path) -> Path:
    return home / "tnsrag_db" / "pg18"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TNSRAG_")}
    env["XDG_DATA_HOME"] = str(home)
    return env


def _tnsrag(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    run = subprocess.run([sys.executable, "-c", _CLI, *args], env=_env(home), capture_output=True, text=True,
                         timeout=300)
    if check:
        assert run.returncode == 0, f"tnsrag {' '.join(args)}: {run.stdout}\n{run.stderr}"
    return run


def _status(home: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_tnsrag(home, "server", "status", "--json").stdout)
    return data


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _keepers(data_dir: Path) -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and "tnsrag_db.store.server" in p.info["cmdline"]
            and str(data_dir) in p.info["cmdline"]]


def test_the_cli_starts_the_server_on_first_use_and_leaves_it_running(stopped: Path) -> None:
    home = stopped
    before = _status(home)
    assert before["running"] is False and before["data_dir"] == str(_data_dir(home))
    # Two first uses at once: both succeed on one server with one keeper.
    args = [sys.executable, "-c", _CLI, "query", "agents", "--strategy", "keyword", "--json"]
    procs = [subprocess.Popen(args, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert json.loads(out)["results"] == []
    first = _status(home)
    assert first["running"] is True and first["kept_running"] is True
    assert first["idle_timeout"] == 900.0 and first["tnsrag_version"]
    assert _alive(first["pid"]) and _alive(first["keeper_pid"])
    # A second keeper may have been spawned by the race; it finds the lock taken and exits.
    deadline = time.monotonic() + 60
    while _keepers(_data_dir(home)) != [first["keeper_pid"]] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _keepers(_data_dir(home)) == [first["keeper_pid"]]
    assert f"host={first['socket_dir']}" in first["url"]

    _tnsrag(home, "ingest", "--sample", "--json")
    hits = json.loads(_tnsrag(home, "query", "agents share memory", "--strategy", "keyword", "--json").stdout)
    assert hits["results"]
    assert _status(home)["pid"] == first["pid"]  # the same server served every call

    text = _tnsrag(home, "server", "status").stdout
    assert "running" in text and str(_data_dir(home)) in text and "stops after 900 s idle" in text

    stopped_now = json.loads(_tnsrag(home, "server", "stop", "--json").stdout)
    assert stopped_now["running"] is False
    assert not _alive(first["keeper_pid"]) and not _alive(first["pid"])
    # The data stays: the next call starts the server again and finds the sample corpus.
    again = json.loads(_tnsrag(home, "query", "agents share memory", "--strategy", "keyword", "--json").stdout)
    assert [r["metadata"]["entryId"] for r in again["results"]] == [r["metadata"]["entryId"]
                                                                      for r in hits["results"]]


def test_the_server_stops_after_the_idle_timeout(stopped: Path) -> None:
    home = stopped
    started = json.loads(_tnsrag(home, "server", "start", "--idle-timeout", "1", "--json").stdout)
    assert started["running"] is True and started["idle_timeout"] == 1.0
    deadline = time.monotonic() + 120
    while (_alive(started["pid"]) or _alive(started["keeper_pid"])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(started["pid"]), "the idle server did not stop"
    assert not _alive(started["keeper_pid"])
    assert _status(home)["running"] is False


def test_a_plain_script_stops_its_own_server_but_not_a_kept_one(stopped: Path) -> None:
    home = stopped
    script = ("import tnsrag_db\n"
              "with tnsrag_db.connect(corpus='script') as store:\n"
              "    print(store.count())\n")

    def run_script() -> None:
        run = subprocess.run([sys.executable, "-c", script], env=_env(home), capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0 and run.stdout.split() == ["0"], run.stderr

    run_script()  # no keeper: the script starts the server and stops it at exit, as before
    st = _status(home)
    assert st["running"] is False and st["kept_running"] is False
    assert _keepers(_data_dir(home)) == []

    kept = json.loads(_tnsrag(home, "server", "start", "--idle-timeout", "0", "--json").stdout)
    run_script()  # joins the kept server; its exit leaves the server running
    after = _status(home)
    assert after["running"] is True and after["pid"] == kept["pid"]
    assert after["idle_timeout"] == 0.0 and "no idle timeout" in _tnsrag(home, "server", "status").stdout


def test_server_stop_and_status_when_nothing_runs(stopped: Path) -> None:
    out = json.loads(_tnsrag(stopped, "server", "stop", "--json").stdout)
    assert out["running"] is False and out["keeper_pid"] is None
    assert "not running" in _tnsrag(stopped, "server", "status").stdout
