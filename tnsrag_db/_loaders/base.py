"""What every loader shares: the :class:`SourceLoader` protocol, the record of a skipped
file, the internal signal that skips one, and the size limit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tnsrag_db._types import MemoryEntry

__all__ = ["MAX_FILE_BYTES", "MAX_JSONL_BYTES", "SkippedFile", "SourceLoader"]

#: Files larger than this are skipped (a document tree's huge files are data, not prose).
MAX_FILE_BYTES = 64 * 1024 * 1024
#: JSONL files (exports, data meant to be read whole) may be larger, up to this.
MAX_JSONL_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file a :class:`FileLoader` did not read: its path (as found from the pattern) and why.

    ``files`` is how many files the record stands for: 1, except for the one record of a
    root's cache directories (``__pycache__``, ``node_modules``), which are not entered:
    its ``path`` is the root and its ``reason`` says how many files in how many of them.
    """

    path: str
    reason: str
    files: int = 1


class _Skip(Exception):
    """Raised while reading a file that is skipped, with the reason."""


@runtime_checkable
class SourceLoader(Protocol):
    """Anything with ``load() -> Iterable[MemoryEntry]``; each entry carries its own metadata.

    Entries keep the ids, tiers, sources, parents, timestamps and metadata the loader
    gives them; an entry without a ``source`` gets the knowledge source's ``name``. An
    optional ``name`` attribute names the source (default: the loader's class name).
    The metadata a loader attaches is filterable with ``@retrieval(metadata_filters=...)``.
    """

    def load(self) -> Iterable[MemoryEntry]:
        """Every entry of the source (ids must be unique across the role's sources)."""
        ...
