"""The keeper: one small detached process per data directory that keeps the embedded
server running across short ``tnsrag`` calls, and the calls that start, inspect and stop it.

``connect()`` in a plain script holds a handle of the wheel's server, which stops when the
last process holding one exits. The command line instead wants one server that outlives
each call: :func:`ensure_running` starts the keeper (``python -m
tnsrag_db._store.embedded.keeper``), which holds a handle of its own and exits once the
server has been idle for ``idle_timeout`` seconds (no client connected and no
:func:`ensure_running` call); the server then stops unless a script still holds a handle.
:func:`stop` ends the keeper at once.

The server must run on this installation's binaries: when :func:`ensure_running` finds it
running on binaries that are gone (the virtual environment that started it was deleted,
or the wheel upgraded in place), it ends that server and its keeper and starts both again
here; when they are another installation's, it does so once no client is connected.

Files next to the data directory ``D``: ``D.keeper.json`` (the keeper's pid and settings;
its mtime is the last use), ``D.keeper.lock`` (one keeper per data directory),
``D.keeper.log`` and ``D.keeper.sock`` (the warm embedding model,
:mod:`tnsrag_db._store.embedded.warm_model`).

Nothing here imports the wheel, the memory sizing (psutil) or the warm model (numpy) on the
path that finds a running server, so a CLI call pays for none of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from tnsrag_db._errors import DatabaseError
from tnsrag_db._store.embedded.server import (
    EMBEDDED_DATABASE,
    Postmaster,
    default_data_dir,
    foreign_binaries,
    pid_alive,
    postmaster,
    running_binaries,
    server_url,
    shut_down,
    start_with_wheel,
)

if TYPE_CHECKING:
    from fasteners import InterProcessLock

__all__ = ["DEFAULT_IDLE_TIMEOUT", "ServerStatus", "ensure_running", "keeper_files", "serve", "status", "stop",
           "use_keeper_model"]

#: Seconds without a client or a CLI call after which the keeper lets the server stop.
DEFAULT_IDLE_TIMEOUT = 900.0
_START_TIMEOUT = 60.0


@dataclass(frozen=True)
class KeeperFiles:
    """The keeper's files next to data directory ``D``."""

    state: Path
    lock: Path
    log: Path
    socket: Path


def keeper_files(data_dir: Path) -> KeeperFiles:
    """The keeper's files of ``data_dir`` (``D.keeper.json``, ``.lock``, ``.log``, ``.sock``)."""
    return KeeperFiles(*(data_dir.with_name(f"{data_dir.name}.keeper.{ext}") for ext in ("json", "lock", "log", "sock")))


def _resolved(data_dir: Path | None) -> Path:
    return (data_dir or default_data_dir()).expanduser().resolve()


def _read_state(state_file: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pid"), int):
        return None
    return state if pid_alive(state["pid"]) else None


@dataclass(frozen=True)
class ServerStatus:
    """What :func:`status` found; ``as_dict()`` is the ``tnsrag server status --json`` form.

    ``binaries`` is the ``postgres`` executable the running server runs; ``installation``
    says whose it is: ``"this"``, ``"other"`` (another installation's) or ``"gone"``
    (deleted since the server started: the next command restarts the server); None when
    nothing runs or it cannot be told.

    ``memory`` is what ``tnsrag.conf`` was written from (budget in bytes, its origin, the
    machine's RAM and CPUs), ``settings`` the running server's memory and WAL settings with
    where each came from (:func:`tnsrag_db._store.embedded.memory.effective`; only when
    asked for, and only of a running server).
    """

    running: bool
    data_dir: Path
    pid: int | None = None
    socket_dir: str | None = None
    port: int | None = None
    url: str | None = None
    postgres_version: str | None = None
    keeper_pid: int | None = None
    idle_timeout: float | None = None
    last_use: datetime | None = None
    binaries: str | None = None
    installation: str | None = None
    memory: dict[str, Any] | None = None
    settings: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (paths and times as strings)."""
        return {"running": self.running, "data_dir": str(self.data_dir), "pid": self.pid,
                "socket_dir": self.socket_dir, "port": self.port, "url": self.url,
                "postgres_version": self.postgres_version, "kept_running": self.keeper_pid is not None,
                "keeper_pid": self.keeper_pid, "idle_timeout": self.idle_timeout,
                "last_use": self.last_use.isoformat() if self.last_use else None,
                "binaries": self.binaries, "installation": self.installation, "memory": self.memory,
                "settings": self.settings,
                "restart_needed": [s["name"] for s in self.settings or () if s["restart_needed"]]}


def status(data_dir: Path | None = None, *, settings: bool = False) -> ServerStatus:
    """The embedded server's state in ``data_dir`` (default: the user data directory); starts
    nothing. ``settings``: also read the running server's memory settings (a connection).
    Raises :class:`DatabaseError` when those cannot be read."""
    from tnsrag_db._store.embedded import memory as sizing  # psutil and the sizing rules: not on every command's path

    target = _resolved(data_dir)
    try:
        version: str | None = (target / "PG_VERSION").read_text().strip()
    except OSError:
        version = None
    pm = postmaster(target)
    state_file = keeper_files(target).state
    state = _read_state(state_file)
    keeper: dict[str, Any] = dict(
        keeper_pid=int(state["pid"]), idle_timeout=float(state["idle_timeout"]),
        last_use=datetime.fromtimestamp(state_file.stat().st_mtime, timezone.utc)) if state else {}
    budget = sizing.configured(target)
    if pm is None or not pm.ready:
        return ServerStatus(False, target, postgres_version=version, memory=budget, **keeper)
    running = running_binaries(pm.pid)
    foreign = foreign_binaries(pm)
    installation = None if running is None else "this" if foreign is None else "gone" if foreign[1] else "other"
    effective = sizing.effective(server_url(pm, "postgres")) if settings else None
    return ServerStatus(True, target, pm.pid, pm.socket_dir, pm.port, server_url(pm, EMBEDDED_DATABASE), version,
                        binaries=running[0] if running else None, installation=installation, memory=budget,
                        settings=effective, **keeper)


def ensure_running(data_dir: Path | None = None, *, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                   timeout: float = _START_TIMEOUT, memory: str | None = None) -> str:
    """Return a libpq URL of the ``tnsrag`` database on the kept-running server, starting the
    server and its keeper first if needed, and count this call as a use (it resets the idle clock).

    A keeper already running keeps its own ``idle_timeout``. A server running on binaries
    that are gone is ended with its keeper and started again on this installation's; one
    on another installation's binaries too, once no client is connected (while one is, it
    is used as it is). Raises :class:`DatabaseError` when the server does not become ready
    within ``timeout`` seconds (naming the keeper log).

    ``memory`` (a size such as ``"4GB"``, or ``"auto"``) sets the budget the server's memory
    settings are sized from and is remembered for later starts
    (:mod:`~tnsrag_db._store.embedded.memory`); a running server rereads them at once, but
    keeps its ``shared_buffers`` until it restarts. Raises
    :class:`~tnsrag_db._errors.ValidationError` for a malformed ``memory``.
    """
    target = _resolved(data_dir)
    if memory is not None:
        from tnsrag_db._store.embedded import memory as sizing  # psutil and the sizing rules: only with a budget

        sizing.plan(target, memory)  # a malformed budget fails before anything starts
    files = keeper_files(target)
    deadline = time.monotonic() + timeout
    keeper: subprocess.Popen[bytes] | None = None
    checked = False
    while True:
        pm = postmaster(target)
        state = _read_state(files.state)
        if pm is not None and pm.ready and state is not None:
            if not checked:
                checked = True
                if _replace_foreign(target, pm, state, files.log):
                    continue
            with contextlib.suppress(OSError):
                os.utime(files.state)  # this use resets the keeper's idle clock
            if memory is not None:  # unchanged when the keeper just started the server with it
                sizing.apply(target, server_url(pm, "postgres"), sizing.plan(target, memory))
            return server_url(pm, EMBEDDED_DATABASE)
        if keeper is None or (keeper.poll() is not None and _read_state(files.state) is None
                              and not _lock_held(files.lock)):
            if keeper is not None and keeper.returncode != 0:
                raise DatabaseError(f"could not start the embedded PostgreSQL server in {target} "
                                    f"(exit status {keeper.returncode}); see {files.log}:\n{_tail(files.log)}")
            keeper = _spawn_keeper(target, idle_timeout, files.log, memory)
        if time.monotonic() > deadline:
            raise DatabaseError(f"the embedded PostgreSQL server in {target} did not become ready within "
                                f"{timeout:g} s; see {files.log}")
        time.sleep(0.05)


def _replace_foreign(target: Path, pm: Postmaster, state: dict[str, Any], log_file: Path) -> bool:
    """End the server ``pm`` and its keeper when the server does not run on this
    installation's binaries (see :func:`ensure_running`); True when it did."""
    foreign = foreign_binaries(pm)
    if foreign is None:
        return False
    path, gone = foreign
    if not gone and _client_connections(target) > 0:
        return False  # another installation's server, busy: use it as it is rather than break its clients
    why = "are gone" if gone else "belong to another installation"
    with contextlib.suppress(OSError), log_file.open("a") as log:
        log.write(f"{_now()} [{os.getpid()}] the server's binaries {path} {why}: restarting it on this "
                  "installation's\n")
    _end_process(int(state["pid"]))  # the keeper first: it stops the server itself when it can
    if not shut_down(target):
        raise DatabaseError(f"the embedded PostgreSQL server in {target} (pid {pm.pid}) runs on binaries that "
                            f"{why} ({path}) and did not stop; stop it with: kill -INT {pm.pid}")
    return True


def _end_process(pid: int, timeout: float = 30.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _keeper_lock(lock_file: Path) -> InterProcessLock:
    """The lock a keeper holds on its data directory (one keeper per data directory)."""
    import fasteners  # only the keeper process and the check of a keeper that went away need it

    return fasteners.InterProcessLock(str(lock_file))


def _lock_held(lock_file: Path) -> bool:
    lock = _keeper_lock(lock_file)
    if lock.acquire(blocking=False):
        lock.release()
        return False
    return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _spawn_keeper(target: Path, idle_timeout: float, log_file: Path,
                  memory: str | None = None) -> subprocess.Popen[bytes]:
    target.parent.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {}
    if sys.platform == "win32":
        options["creationflags"] = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP
    else:
        options["start_new_session"] = True  # a Ctrl-C in the terminal does not reach it
    with log_file.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "tnsrag_db._store.embedded.keeper", str(target),
                                 str(idle_timeout), *([memory] if memory is not None else [])],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True, **options)


def stop(data_dir: Path | None = None, *, force: bool = False, timeout: float = 120.0) -> ServerStatus:
    """End the keeper and return the status afterwards. The server stops unless a script's
    ``connect()`` still holds it; with ``force`` it stops anyway (a fast shutdown: sessions
    end, open transactions roll back), and so does a server whose binaries are gone (no
    script can use it). Waits up to ``timeout`` seconds for the keeper and the server."""
    target = _resolved(data_dir)
    state = _read_state(keeper_files(target).state)
    started = time.monotonic()
    if state is not None:
        _end_process(int(state["pid"]), timeout)
    pm = postmaster(target)
    if pm is not None:
        foreign = foreign_binaries(pm)
        if force or (foreign is not None and foreign[1]):
            shut_down(target, timeout=max(1.0, timeout - (time.monotonic() - started)))
    return status(target)


def serve(data_dir: Path, idle_timeout: float, memory: str | None = None) -> int:
    """The keeper's main loop (``python -m tnsrag_db._store.embedded.keeper DATA_DIR IDLE_TIMEOUT
    [MEMORY]``; ``memory`` as for :func:`ensure_running`).

    Holds one handle of the wheel's server (starting it if needed), writes the state file,
    serves the warm embedding model, and returns once the server has been idle for
    ``idle_timeout`` seconds (0: never), on SIGTERM, or when the server went away or was
    replaced; the server is then stopped if this was the last handle, with a signal when
    this installation's ``pg_ctl`` is gone. Exit status 0, also when another keeper
    already serves ``data_dir``.
    """
    files = keeper_files(data_dir)
    lock = _keeper_lock(files.lock)
    if not lock.acquire(blocking=False):
        return 0  # another keeper serves this data directory

    stopping: list[int] = []

    def _terminate(signum: int, _frame: object) -> None:
        # Noted as well as raised: a SystemExit raised while a C extension initialises (numpy's,
        # under the warm model's imports) comes back as an ImportError, or not at all.
        stopping.append(signum)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    handle: Any = None
    service: Any = None
    try:
        handle, _url = start_with_wheel(data_dir, memory)  # starts or joins the server, creates the tnsrag database
        kept = postmaster(data_dir)
        files.state.write_text(json.dumps({"pid": os.getpid(), "idle_timeout": idle_timeout,
                                           "data_dir": str(data_dir),
                                           "started": datetime.now(timezone.utc).isoformat()}))
        _log_line(f"keeping the server in {data_dir} running (idle timeout {idle_timeout:g} s)")
        from tnsrag_db._store.embedded import warm_model  # numpy and the model: only the keeper process serves it

        service = warm_model.start_service(files.socket, _log_line)
        if not stopping:
            _wait_until_idle(data_dir, files.state, idle_timeout, kept.pid if kept else None, stopping)
        return 0
    finally:
        if service is not None:
            service.close()
        try:
            state = json.loads(files.state.read_text())
            if state.get("pid") == os.getpid():
                files.state.unlink()
        except (OSError, ValueError):
            pass
        if handle is not None:
            _release(handle, data_dir)
        lock.release()
        _log_line("keeper exiting")


def _release(handle: Any, data_dir: Path) -> None:
    """Give back this process's handle: the wheel stops the server when it was the last one.
    Its ``pg_ctl`` is gone when this installation was deleted meanwhile; the signal that
    ``pg_ctl stop`` would send does the same."""
    try:
        handle.cleanup()
    except OSError as exc:  # the wheel only runs pg_ctl when this was the last handle
        _log_line(f"pg_ctl failed ({exc}); stopping the server with a signal")
        shut_down(data_dir)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _log_line(message: str) -> None:
    print(f"{_now()} [{os.getpid()}] {message}", flush=True)


def _client_connections(data_dir: Path) -> int:
    """Client sessions on the server of ``data_dir`` besides this one's; -1 when none runs."""
    pm = postmaster(data_dir)
    if pm is None:
        return -1
    try:
        with psycopg.connect(server_url(pm, "postgres"), connect_timeout=5, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                               "AND pid <> pg_backend_pid()").fetchone()
    except psycopg.Error:
        return 0
    return int(row[0]) if row else 0


def _wait_until_idle(data_dir: Path, state_file: Path, idle_timeout: float, kept_pid: int | None,
                     stopping: list[int]) -> None:
    interval = min(max(idle_timeout / 5, 0.2), 30.0) if idle_timeout > 0 else 30.0
    tick = min(interval, 1.0)  # postmaster.pid is read every tick: a replaced server is noticed soon
    last_active = last_count = time.time()
    while not stopping:  # a stop whose SystemExit something swallowed is still a stop
        time.sleep(tick)
        pm = postmaster(data_dir)
        if pm is None or (kept_pid is not None and pm.pid != kept_pid):
            _log_line("the server is no longer running" if pm is None else
                      f"the server was restarted by another process (pid {pm.pid})")
            return
        now = time.time()
        if now - last_count < interval:
            continue
        last_count = now
        clients = _client_connections(data_dir)
        if clients < 0:
            _log_line("the server is no longer running")
            return
        if clients > 0:
            last_active = now
        with contextlib.suppress(OSError):
            last_active = max(last_active, state_file.stat().st_mtime)
        if idle_timeout > 0 and now - last_active >= idle_timeout:
            _log_line(f"idle for {now - last_active:.0f} s, letting the server stop")
            return


if __name__ == "__main__":  # pragma: no cover - run as the keeper process
    sys.exit(serve(Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))


def use_keeper_model(data_dir: Path | None = None,
                     notify: Callable[[str], None] | None = None) -> Callable[[], None]:
    """In this process, let the shipped model be the keeper's warm one (of ``data_dir``,
    default the user data directory's server) whenever that keeper answers, until the
    function returned is called. What ``tnsrag query`` does on the embedded server; a model
    already loaded here stays in use.

    The keeper must answer within about a second (it may answer that it is still loading
    the model, and is then waited for a while): one that does not is passed by for the rest
    of the process, which loads the model itself, and ``notify`` gets one line saying so
    (:class:`~tnsrag_db._store.embedded.warm_model.KeeperLink`)."""
    from tnsrag_db._store.embedded import warm_model  # numpy: only a query that embeds asks the keeper

    files = keeper_files(_resolved(data_dir))

    def who() -> str:
        state = _read_state(files.state)
        return f" (pid {state['pid']})" if state else ""

    return warm_model.use_served_model(warm_model.KeeperLink(files.socket, notify, who))
