"""Export: a corpus's entries with their outgoing edges as JSONL, from one snapshot
(the format is described in :mod:`tnsrag_db.admin`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

import sqlalchemy as sa

from tnsrag_db._validate import is_int
from tnsrag_db.admin.corpora import _not_found
from tnsrag_db.admin.reports import ExportCounts
from tnsrag_db.errors import ConfigurationError
from tnsrag_db.store.store import Store
from tnsrag_db.strategies.explain.transaction import snapshot
from tnsrag_db.types import MemoryEntry

__all__ = ["entry_record", "export_corpus"]


def entry_record(entry: MemoryEntry, edges: Iterable[Mapping[str, Any]] = (),
                 vectors: Iterable[tuple[str, Sequence[float]]] = ()) -> dict[str, Any]:
    """The export record of ``entry`` and its outgoing ``edges`` (dicts with ``dst``,
    ``relation``, ``weight``, ``source``), as a JSON-able dict; ``vectors`` (pairs of a
    space's provider name and the entry's vector in it), when any, go to ``"vectors"``
    as ``{"provider": name, "float32": base64 of the little-endian float32 values}``
    (exact, and a quarter of the size of decimals)."""
    record = {"id": entry.id, "content": entry.content, "tier": entry.tier.name, "source": entry.source,
            "parentId": entry.parent_id,
            "timestamp": None if entry.timestamp is None else entry.timestamp.isoformat(),
            "metadata": dict(entry.metadata),
            "edges": [{"dst": e["dst"], "relation": e["relation"], "weight": e["weight"], "source": e["source"]}
                      for e in edges]}
    shown = [{"provider": provider, "float32": _float32_base64(vector)} for provider, vector in vectors]
    if shown:
        record["vectors"] = shown
    return record


def _float32_base64(values: Sequence[float]) -> str:
    import numpy as np  # not at import time: the lean CLI paths import tnsrag_db.admin

    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def export_corpus(store: Store, out: IO[str], *, batch_size: int = 1000, vectors: bool = False) -> ExportCounts:
    """Write every entry of the store's corpus, with its outgoing edges, to ``out`` as
    JSONL (see the :mod:`tnsrag_db.admin` docstring), in id order.

    ``vectors=True`` adds each entry's vectors (``"vectors"``: one per embedding space,
    with the space's provider name), so that restoring the file writes them as they are
    instead of embedding every text again (the bulk of a restore's time with a real model).

    Everything is read in one REPEATABLE READ transaction, so the file is one consistent
    snapshot even while other processes write (an HNSW build started meanwhile waits
    for it to finish). Raises :class:`CorpusNotFoundError` when the corpus does not
    exist, :class:`ConfigurationError` for a bad ``batch_size``, :class:`DatabaseError`
    when the database fails.
    """
    if not is_int(batch_size) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be an int >= 1, got {batch_size!r}")
    from tnsrag_db.store.reads import row_to_entry

    entries = edges = 0
    with snapshot(store) as conn:  # one read-only REPEATABLE READ transaction
        if conn.execute(sa.text("SELECT 1 FROM corpora WHERE corpus = :c"), {"c": store.corpus}).first() is None:
            raise _not_found(store.corpus, list(conn.execute(
                sa.text("SELECT corpus FROM corpora ORDER BY corpus")).scalars()))
        last = ""
        while True:
            rows = conn.execute(sa.text(
                "SELECT id, content, tier, source, parent_id, ts, metadata FROM entries "
                "WHERE corpus = :c AND id > :last ORDER BY id LIMIT :n"),
                {"c": store.corpus, "last": last, "n": batch_size}).all()
            if not rows:
                break
            ids = [r.id for r in rows]
            outgoing: dict[str, list[dict[str, Any]]] = {}
            for e in conn.execute(sa.text(
                    "SELECT src, dst, relation, weight, source FROM edges WHERE corpus = :c AND src = ANY(:ids) "
                    "ORDER BY src, relation, dst"), {"c": store.corpus, "ids": ids}).mappings():
                outgoing.setdefault(e["src"], []).append(dict(e))
            stored: dict[str, list[tuple[str, list[float]]]] = {}
            if vectors:
                for v in conn.execute(sa.text(
                        "SELECT x.entry_id, s.provider, CAST(x.embedding AS real[]) AS vector FROM embeddings x "
                        "JOIN embedding_spaces s ON s.corpus = x.corpus AND s.space_id = x.space_id "
                        # the batch's id range (an index range scan of (corpus, entry_id))
                        "WHERE x.corpus = :c AND x.entry_id BETWEEN :first AND :last ORDER BY x.entry_id, s.space_id"),
                        {"c": store.corpus, "first": ids[0], "last": ids[-1]}):
                    stored.setdefault(v.entry_id, []).append((v.provider, v.vector))
            for r in rows:
                mine = outgoing.get(r.id, [])
                record = entry_record(row_to_entry(r), mine, stored.get(r.id, ()))
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                entries += 1
                edges += len(mine)
            last = ids[-1]
    return ExportCounts(entries, edges)
