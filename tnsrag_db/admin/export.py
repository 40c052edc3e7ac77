"""Export: a corpus's entries with their outgoing edges as JSONL, from one snapshot
(the format is described in :mod:`tnsrag_db.admin`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import ConfigurationError, ConnectionLostError
from tnsrag_db._store.reads import entries_after_plan
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry
from tnsrag_db._validate import is_int
from tnsrag_db.admin.corpora import _not_found
from tnsrag_db.admin.reports import ExportCounts

__all__ = ["entry_record", "export_corpus", "lost_mid_export"]


def entry_record(entry: MemoryEntry, edges: Iterable[Mapping[str, Any]] = (),
                 vectors: Iterable[tuple[str, Sequence[float]]] = ()) -> dict[str, Any]:
    """The export record of ``entry`` and its outgoing ``edges`` (dicts with ``dst``,
    ``relation``, ``weight``, ``source`` and optionally ``valid_from``/``valid_until``,
    datetimes or None), as a JSON-able dict; ``vectors`` (pairs of a
    space's provider name and the entry's vector in it), when any, go to ``"vectors"``
    as ``{"provider": name, "float32": base64 of the little-endian float32 values}``
    (exact, and a quarter of the size of decimals)."""
    record = {"id": entry.id, "content": entry.content, "tier": entry.tier.name, "source": entry.source,
            "parentId": entry.parent_id,
            "timestamp": None if entry.timestamp is None else entry.timestamp.isoformat(),
            "metadata": dict(entry.metadata),
            "edges": [_edge_record(e) for e in edges]}
    if entry.expires_at is not None:  # only then: files of corpora without expiry stay as they were
        record["expiresAt"] = entry.expires_at.isoformat()
    for key, bound in (("validFrom", entry.valid_from), ("validUntil", entry.valid_until)):
        if bound is not None:  # likewise
            record[key] = bound.isoformat()
    shown = [{"provider": provider, "float32": _float32_base64(vector)} for provider, vector in vectors]
    if shown:
        record["vectors"] = shown
    return record


def _edge_record(edge: Mapping[str, Any]) -> dict[str, Any]:
    record = {"dst": edge["dst"], "relation": edge["relation"], "weight": edge["weight"], "source": edge["source"]}
    for key, name in (("validFrom", "valid_from"), ("validUntil", "valid_until")):
        bound = edge.get(name)
        if bound is not None:  # only then: files of graphs without validity stay as they were
            record[key] = bound.isoformat()
    return record


def _float32_base64(values: Sequence[float]) -> str:
    import numpy as np  # only for --vectors: tnsrag corpora, stats, delete and drop load this module too

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
    when the database fails, and :class:`ConnectionLostError` saying the corpus and that
    the output is incomplete when the connection breaks mid-export (the server restarted,
    the backend was terminated).
    """
    if not is_int(batch_size) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be an int >= 1, got {batch_size!r}")
    try:
        return store.run(_export_plan(store.corpus, out, batch_size, vectors), snapshot=True)  # one snapshot
    except ConnectionLostError as exc:
        raise lost_mid_export(exc, store.corpus, None) from exc


def lost_mid_export(exc: ConnectionLostError, corpus: str, target: str | None) -> ConnectionLostError:
    """The error of an export of ``corpus`` (to the file ``target``, None: to a stream
    whose output is then incomplete) whose connection ``exc`` broke after it was
    established: what was lost, and the server's reason (the first line of the driver's
    message, without the statement it quotes)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    driver = getattr(cause, "orig", None) or cause
    reason = (str(driver).strip().splitlines() or [""])[0]
    where = f"export of corpus {corpus!r}" + (f" to {target}" if target is not None else "")
    outcome = f"{target} was not written" if target is not None else "the output is incomplete"
    error = ConnectionLostError(f"{where}: the connection to the server was lost mid-export; {outcome} "
                                f"(run the export again): {reason}")
    error.sqlstate = exc.sqlstate
    return error


_EDGE_FIELDS = ("src", "dst", "relation", "weight", "source", "valid_from", "valid_until")

# The vectors of one page of entries: every space's, by the page's id range (an index range
# scan of (corpus, entry_id)), with the space's provider name.
_PAGE_VECTORS_SQL = (
    "SELECT x.entry_id, s.provider, CAST(x.embedding AS real[]) AS vector FROM embeddings x "
    "JOIN embedding_spaces s ON s.corpus = x.corpus AND s.space_id = x.space_id "
    "WHERE x.corpus = :c AND x.entry_id BETWEEN :first AND :last ORDER BY x.entry_id, s.space_id")


def _export_plan(corpus: str, out: IO[str], batch_size: int, vectors: bool) -> Plan[ExportCounts]:
    """The export as a plan: the corpus check, then pages of entries (the store's own keyset
    pages) each with its entries' outgoing edges (and vectors), written to ``out`` as they arrive."""
    found = yield Statement("SELECT 1 AS one FROM corpora WHERE corpus = :c", {"c": corpus}, ("one",))
    if not found:
        names = yield Statement("SELECT corpus FROM corpora ORDER BY corpus", {}, ("corpus",))
        raise _not_found(corpus, [r.corpus for r in names])
    entries = edges = 0
    last = ""
    while page := (yield from entries_after_plan(corpus, last, batch_size)):
        ids = [e.id for e in page]
        outgoing: dict[str, list[dict[str, Any]]] = {}
        # Every edge, whatever its validity: the restored graph answers an as_of as this one.
        rows = yield Statement(f"SELECT {', '.join(_EDGE_FIELDS)} FROM edges WHERE corpus = :c "
                               "AND src = ANY(:ids) ORDER BY src, relation, dst", {"c": corpus, "ids": ids},
                               _EDGE_FIELDS)
        for e in rows:
            outgoing.setdefault(e.src, []).append(dict(zip(_EDGE_FIELDS, e, strict=True)))
        stored: dict[str, list[tuple[str, list[float]]]] = {}
        if vectors:
            found_vectors = yield Statement(_PAGE_VECTORS_SQL, {"c": corpus, "first": ids[0], "last": ids[-1]},
                                            ("entry_id", "provider", "vector"))
            for v in found_vectors:
                stored.setdefault(v.entry_id, []).append((v.provider, v.vector))
        for entry in page:
            mine = outgoing.get(entry.id, [])
            out.write(json.dumps(entry_record(entry, mine, stored.get(entry.id, ())), ensure_ascii=False) + "\n")
            entries += 1
            edges += len(mine)
        last = ids[-1]
    return ExportCounts(entries, edges)
