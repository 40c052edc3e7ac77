"""The parent/child structure of a corpus, kept valid at every write: :class:`HierarchyIndex`.

:mod:`.index` holds :class:`HierarchyIndex` (checked writes, whole-corpus validation,
reads, and the statements the hierarchical and reasoning strategies run); :mod:`.sql`
is the statements' text; :mod:`.problems` is the checks' pure part (the cycles of a
parent map, and the one error that names every problem).
"""

from tnsrag_db._indexes.hierarchy.index import HierarchyIndex

__all__ = ["HierarchyIndex"]
