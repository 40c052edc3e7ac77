"""Export: a corpus's entries with their outgoing edges as JSONL, from one snapshot
(the format is described in :mod:`tnsrag_db.admin`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import IO, Any

from tnsrag_db._validate import is_int
from tnsrag_db.admin.corpora import _not_found
from tnsrag_db.admin.reports import ExportCounts
from tnsrag_db.db.statement import Plan, Statement
from tnsrag_db.errors import ConfigurationError
from tnsrag_db.store.reads import entries_after_plan
from tnsrag_db.store.store import Store
from tnsrag_db.types import MemoryEntry

__all__ = ["entry_record", "export_corpus"]


def entry_record(entry: MemoryEntry, edges: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The export record of ``entry`` and its outgoing ``edges`` (dicts with ``dst``,
    ``relation``, ``weight``, ``source``), as a JSON-able dict."""
    return {"id": entry.id, "content": entry.content, "tier": entry.tier.name, "source": entry.source,
            "parentId": entry.parent_id,
            "timestamp": None if entry.timestamp is None else entry.timestamp.isoformat(),
            "metadata": dict(entry.metadata),
            "edges": [{"dst": e["dst"], "relation": e["relation"], "weight": e["weight"], "source": e["source"]}
                      for e in edges]}


def export_corpus(store: Store, out: IO[str], *, batch_size: int = 1000) -> ExportCounts:
    """Write every entry of the store's corpus, with its outgoing edges, to ``out`` as
    JSONL (see the :mod:`tnsrag_db.admin` docstring), in id order.

    Everything is read in one REPEATABLE READ transaction, so the file is one consistent
    snapshot even while other processes write (an HNSW build started meanwhile waits
    for it to finish). Raises :class:`CorpusNotFoundError` when the corpus does not
    exist, :class:`ConfigurationError` for a bad ``batch_size``, :class:`DatabaseError`
    when the database fails.
    """
    if not is_int(batch_size) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be an int >= 1, got {batch_size!r}")
    return store.run(_export_plan(store.corpus, out, batch_size), snapshot=True)  # one REPEATABLE READ snapshot


_EDGE_FIELDS = ("src", "dst", "relation", "weight", "source")


def _export_plan(corpus: str, out: IO[str], batch_size: int) -> Plan[ExportCounts]:
    """The export as a plan: the corpus check, then pages of entries (the store's own keyset
    pages) each with its entries' outgoing edges, written to ``out`` as they arrive."""
    found = yield Statement("SELECT 1 AS one FROM corpora WHERE corpus = :c", {"c": corpus}, ("one",))
    if not found:
        names = yield Statement("SELECT corpus FROM corpora ORDER BY corpus", {}, ("corpus",))
        raise _not_found(corpus, [r.corpus for r in names])
    entries = edges = 0
    last = ""
    while page := (yield from entries_after_plan(corpus, last, batch_size)):
        ids = [e.id for e in page]
        outgoing: dict[str, list[dict[str, Any]]] = {}
        rows = yield Statement("SELECT src, dst, relation, weight, source FROM edges WHERE corpus = :c "
                               "AND src = ANY(:ids) ORDER BY src, relation, dst", {"c": corpus, "ids": ids},
                               _EDGE_FIELDS)
        for e in rows:
            outgoing.setdefault(e.src, []).append(dict(zip(_EDGE_FIELDS, e, strict=True)))
        for entry in page:
            mine = outgoing.get(entry.id, [])
            out.write(json.dumps(entry_record(entry, mine), ensure_ascii=False) + "\n")
            entries += 1
            edges += len(mine)
        last = ids[-1]
    return ExportCounts(entries, edges)
