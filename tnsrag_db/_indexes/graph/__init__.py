"""Typed, weighted, directed edges between the entries of a corpus, and the bounded walk over them.

:mod:`.index` holds :class:`GraphStore` (edge writes, reads and the statements it hands
out); :class:`Edge`, its rules and the one edge write are :mod:`tnsrag_db._store.edges`'s
(a consolidation's links go through it too); :mod:`.walk` builds the statements of a bounded
walk and of the edges a path took (how one statement carries a whole level is described
there); :mod:`.sql` is the statements' text. The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tnsrag_db._lazy import lazy_names

if TYPE_CHECKING:
    from tnsrag_db._indexes.graph.index import DEFAULT_RELATION, Edge, GraphStore

__all__ = ["DEFAULT_RELATION", "Edge", "GraphStore"]

#: Each public name and the module that defines it (loaded on first use).
_HOMES = {name: "tnsrag_db._indexes.graph.index" for name in __all__}

if not TYPE_CHECKING:  # type checkers see the imports above
    __getattr__, __dir__ = lazy_names(__name__, _HOMES)
