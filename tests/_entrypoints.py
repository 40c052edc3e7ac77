"""Fake installed distributions with entry points, for tests of embedding-provider discovery.

Not collected by pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tnsrag_db.embeddings import ENTRY_POINT_GROUP, reset_process_embedding

__all__ = ["Installer", "installer"]

#: ``install(dist, source, {name: attr}, group=ENTRY_POINT_GROUP)`` -> the imported module.
Installer = Callable[..., ModuleType]


def installer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str) -> Iterator[Installer]:
    """Body of an ``install`` fixture: install fake distributions into ``tmp_path``, put on ``sys.path``.

    ``install(dist, source, entry_points)`` writes ``source`` (dedented) as a fresh module
    named ``<prefix>_<dist>_<8 hex>`` and a ``<dist>-1.0.dist-info`` whose
    ``entry_points.txt`` declares ``entry_points`` (name -> attribute of that module) in the
    embedding group, or in the group ``group=`` names (for example tree navigators or query
    expanders); it returns the imported module. The process embedding is reset before and
    after, and the modules are removed from ``sys.modules`` afterwards. Use it as
    ``yield from installer(tmp_path, monkeypatch, "prefix")``.
    """
    monkeypatch.syspath_prepend(str(tmp_path))
    modules: list[str] = []

    def _install(dist: str, source: str, entry_points: dict[str, str],
                 group: str = ENTRY_POINT_GROUP) -> ModuleType:
        module = f"{prefix}_{dist.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        info = tmp_path / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = [f"[{group}]"] + [f"{name} = {module}:{attr}" for name, attr in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        importlib.invalidate_caches()
        modules.append(module)
        return importlib.import_module(module)

    reset_process_embedding()
    yield _install
    reset_process_embedding()
    for module in modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
