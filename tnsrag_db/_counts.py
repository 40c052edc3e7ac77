"""The counts a write reports: a value type with no imports of the library, so that the
error tree (:class:`~tnsrag_db._errors.IngestInterrupted` carries one) and the value types
can both use it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IngestCounts"]


@dataclass(frozen=True, slots=True)
class IngestCounts:
    """How a write classified its entries: new, changed, or identical to what was stored."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        """All entries of the write."""
        return self.inserted + self.updated + self.unchanged

    def __add__(self, other: IngestCounts) -> IngestCounts:
        return IngestCounts(self.inserted + other.inserted, self.updated + other.updated,
                            self.unchanged + other.unchanged)
