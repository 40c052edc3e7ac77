"""Typed, weighted, directed edges between the entries of a corpus, and the bounded walk over them.

:mod:`.index` holds :class:`GraphStore` (edge writes, reads and the statements it hands
out) and :class:`Edge` with its rules; :mod:`.walk` builds the statements of a bounded
walk and of the edges a path took (how one statement carries a whole level is described
there); :mod:`.sql` is the statements' text.
"""

from tnsrag_db._indexes.graph.index import DEFAULT_RELATION, Edge, GraphStore

__all__ = ["DEFAULT_RELATION", "Edge", "GraphStore"]
