"""Restore: an export (or any JSONL file the loaders read) back into a corpus.

Where the time goes: an export without vectors makes the restore embed every text again,
which with a real model is nearly all of it (the entry, postings and edge writes cost what
a direct write of the same entries does). ``tnsrag export --vectors`` writes the vectors
of every embedding space with the entries; the restore then writes them as they are,
through an :class:`ExportedVectors` provider per space, and embeds nothing (only entries
the file has no vector for, with the space's own provider).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tnsrag_db import embeddings
from tnsrag_db._db.pool import Connection
from tnsrag_db._errors import ProviderConfigurationError
from tnsrag_db._indexes.graph import GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._loaders import FileLoader
from tnsrag_db._store.store import Store
from tnsrag_db._store.write import write_kept_rows
from tnsrag_db._types import MemoryEntry
from tnsrag_db.admin.reports import RestoreCounts

__all__ = ["ExportedVectors", "restore_corpus", "restore_providers"]

SpaceVectors = dict[tuple[str, int], dict[str, npt.NDArray[np.float32]]]


class ExportedVectors:
    """The embedding provider of a restored space: it answers with the vectors the file
    carried for each entry, by entry id (:meth:`embed_entries`, which the write path uses),
    and embeds the entries it has none for with ``fallback`` (the space's own provider,
    when installed).

    Its ``name`` and ``dimension`` are the exported space's, so the vectors go back into a
    space of the same provider. Called with texts alone (:meth:`embed_batch`), it answers
    a text with the vector of the first entry of that text.
    """

    def __init__(self, name: str, dimension: int, by_id: dict[str, npt.NDArray[np.float32]],
                 by_text: dict[str, npt.NDArray[np.float32]], fallback: Any = None) -> None:
        self.name = name
        self.dimension = dimension
        self._by_id = by_id
        self._by_text = by_text
        self._fallback = fallback
        #: Texts this provider had no exported vector for (embedded by ``fallback``).
        self.embedded_texts = 0

    def __repr__(self) -> str:
        return f"ExportedVectors({self.name!r}, dimension={self.dimension}, vectors={len(self._by_id)})"

    def __call__(self, text: str) -> Sequence[float]:
        return list(self.embed_batch([text])[0])

    def embed_entries(self, entries: Sequence[MemoryEntry]) -> npt.NDArray[np.float32]:
        """The exported vector of each entry (by id); the fallback's for entries without one."""
        return self._rows([self._by_id.get(e.id) for e in entries], [e.content for e in entries])

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The exported vector of each text (that of its first entry); the fallback's for texts without one."""
        return self._rows([self._by_text.get(t) for t in texts], texts)

    def _rows(self, rows: list[Any], texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = [i for i, row in enumerate(rows) if row is None]
        if missing:
            if self._fallback is None:  # restore_providers refuses this before anything is written
                raise ProviderConfigurationError(f"no exported vector of {self.name!r} for {len(missing)} {'text' if len(missing) == 1 else 'texts'}")
            embed = getattr(self._fallback, "embed_batch", None)
            extra = embed([texts[i] for i in missing]) if embed is not None else [
                self._fallback(texts[i]) for i in missing]
            for i, vector in zip(missing, extra):
                rows[i] = np.asarray(vector, dtype=np.float32)
            self.embedded_texts += len(missing)
        return np.vstack(rows) if rows else np.zeros((0, self.dimension), dtype=np.float32)


def restore_providers(entries: Sequence[MemoryEntry], vectors: SpaceVectors, requested: Any = None) -> list[Any]:
    """The embedding providers a restore of ``entries`` writes with, one pass each.

    One :class:`ExportedVectors` per space the file carried vectors of (``vectors``, as
    :attr:`FileLoader.vectors <tnsrag_db._loaders.FileLoader.vectors>` returns them), in
    file order; ``requested`` (a provider) too, unless it is one of those spaces (then it
    embeds that space's missing texts). Without exported vectors: ``[requested]`` (the
    process embedding when None). Raises :class:`ProviderConfigurationError`, before
    anything is written, when entries lack a vector of a space whose provider is not installed.
    """
    if not vectors:
        return [requested if requested is not None else embeddings.get_process_embedding()]
    wanted = None if requested is None else embeddings.provider_name(requested)
    providers: list[Any] = []
    covered = False
    for (name, dimension), by_id in vectors.items():
        lacking = [e.id for e in entries if e.id not in by_id]
        fallback = None
        if requested is not None and wanted == name and getattr(requested, "dimension", dimension) == dimension:
            fallback, covered = requested, True
        elif lacking:
            try:
                fallback = embeddings.resolve_embedding(name)
            except ProviderConfigurationError as exc:
                shown = ", ".join(repr(i) for i in lacking[:5]) + (f" and {len(lacking) - 5} more"
                                                                   if len(lacking) > 5 else "")
                raise ProviderConfigurationError(
                    f"{len(lacking)} {'entry has' if len(lacking) == 1 else 'entries have'} no vector of space {name!r} ({dimension}-d) in the file "
                    f"({shown}), and it cannot embed them: {exc}") from None
        by_text: dict[str, npt.NDArray[np.float32]] = {}
        for e in entries:
            vector = by_id.get(e.id)
            if vector is not None:
                by_text.setdefault(e.content, vector)
        providers.append(ExportedVectors(name, dimension, by_id, by_text, fallback))
    if requested is not None and not covered:
        providers.append(requested)
    return providers


def restore_corpus(store: Store, path: str | os.PathLike[str], *, embedding: Any = None) -> RestoreCounts:
    """Read an export (or any JSONL file :class:`~tnsrag_db._loaders.FileLoader` reads) into
    the store's corpus: entries with their vectors, then their edges, in one transaction.

    Vectors the file carries (``export_corpus(..., vectors=True)``) are written as they
    are, into spaces of the same providers, without embedding anything; each further
    space of the file is written in a transaction of its own after the first.
    ``embedding`` (default: the process embedding provider when the file has no vectors,
    else none) embeds the entries into its own space as well. Entries are upserted by id,
    so restoring into a corpus that holds other entries keeps them. Raises
    :class:`InvalidEntryError` naming the line of a bad record,
    :class:`DanglingReferenceError` when an edge names an entry that is neither in the
    file nor in the corpus (nothing is written then), :class:`DatabaseError`.
    """
    loader = FileLoader(Path(path))
    entries = list(loader.load())
    edges = loader.edges
    recorded = loader.recorded
    kept = [r.row() for r in recorded.rows]
    providers = restore_providers([*entries, *kept], loader.vectors, embedding)
    graph = GraphStore(store)
    edge_counts: list[Any] = []

    def write_rest(conn: Connection) -> None:
        # The closed rows first: an edge may leave an entry a delete closed.
        write_kept_rows(conn, store.writer.corpus, recorded.rows, recorded.since)
        if edges:
            edge_counts[:] = [graph.write_edges(conn, edges)]

    first, *others = providers
    counts = VectorMemoryStore(store, first).add_all(entries, check=write_rest if edges or recorded else None)
    for provider in others:
        VectorMemoryStore(store, provider).add_all(entries)
    for provider in providers if kept else ():
        VectorMemoryStore(store, provider).fill_kept_vectors(kept)
    e = edge_counts[0] if edge_counts else None
    return RestoreCounts(
        {"inserted": counts.inserted, "updated": counts.updated, "unchanged": counts.unchanged},
        {"inserted": e.inserted if e else 0, "updated": e.updated if e else 0, "unchanged": e.unchanged if e else 0})
