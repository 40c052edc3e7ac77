"""The URL ``connect()`` uses when it is given none: the embedded server, held by this
process through the wheel (stopped at its exit unless another process holds it) or, after
:func:`keep_running` (what the CLI does), the kept-running one of
:mod:`tnsrag_db._store.embedded.keeper`."""

from __future__ import annotations

from pathlib import Path

from tnsrag_db._store.embedded.keeper import DEFAULT_IDLE_TIMEOUT, ensure_running
from tnsrag_db._store.embedded.server import default_data_dir, start_with_wheel

__all__ = ["embedded_url", "keep_running", "kept_running_timeout"]

_keep_running_timeout: float | None = None


def keep_running(idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT) -> None:
    """Make ``connect()``/:func:`embedded_url` without a URL use a kept-running server in this
    process (what the CLI does); ``None`` restores the default (the process's own handle,
    stopped at its exit unless another process holds one). ``idle_timeout`` in seconds,
    0 never stops. Raises ValueError for a negative ``idle_timeout``."""
    global _keep_running_timeout
    if idle_timeout is not None and idle_timeout < 0:
        raise ValueError(f"idle_timeout must be >= 0 seconds, got {idle_timeout}")
    _keep_running_timeout = idle_timeout


def kept_running_timeout() -> float | None:
    """The idle timeout set by :func:`keep_running`, or None when not in that mode."""
    return _keep_running_timeout


def embedded_url(data_dir: Path | None = None) -> str:
    """Start (or reuse) the embedded server in ``data_dir`` (default: the user data
    directory's ``tnsrag_db/pg18``) and return a libpq URL of its ``tnsrag`` database: the wheel's
    server, held by this process, or after :func:`keep_running` the kept-running one.
    Raises :class:`~tnsrag_db._errors.DatabaseError` when it cannot start."""
    if _keep_running_timeout is not None:
        return ensure_running(data_dir, idle_timeout=_keep_running_timeout)
    target = (data_dir or default_data_dir()).expanduser().resolve()
    _handle, url = start_with_wheel(target)
    return url
