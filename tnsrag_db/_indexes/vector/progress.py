"""The progress callbacks of a vector view's long operations, a module of their own so that
the modules running those operations (:mod:`.hnsw`, :mod:`.ingest`) and the view
(:mod:`.index`) that hands the callbacks down all import them from below."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["IndexProgress", "IngestProgress"]

#: ``progress(phase, blocks_done, blocks_total)`` of an HNSW build (see :meth:`VectorMemoryStore.build_index`).
IndexProgress = Callable[[str, int, int], None]
#: ``progress(phase, done, total)`` of :meth:`VectorMemoryStore.ingest`: phase ``"read"``,
#: ``"embed"``, ``"write"`` or ``"index"``; ``total`` None when the input has no length.
IngestProgress = Callable[[str, int, "int | None"], None]
