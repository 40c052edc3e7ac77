"""Typed, weighted, directed edges between the entries of a corpus, and the bounded walk over them.

:mod:`.index` holds :class:`GraphStore` (edge writes, reads and the statements it hands
out) and :class:`Edge` with its rules; :mod:`.walk` builds the statements of a bounded
walk and of the edges a path took (how one statement carries a whole level is described
there); :mod:`.sql` is the statements' text. The names below load on first use, so the
statement text (:mod:`.sql`) is importable without the write side's SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tnsrag_db._indexes.graph.index import DEFAULT_RELATION, Edge, GraphStore

__all__ = ["DEFAULT_RELATION", "Edge", "GraphStore"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.index"), name)
    globals()[name] = value
    return value
