"""Export: a corpus's entries with their outgoing edges as JSONL, from one snapshot
(the format is described in :mod:`tnsrag_db.admin`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import ConfigurationError, ConnectionLostError
from tnsrag_db._store.reads import (
    EntryVersion,
    entries_after_plan,
    holds_history_plan,
    kept_versions_plan,
    recorded_after_plan,
)
from tnsrag_db._store.store import Store
from tnsrag_db._store.validity import VERSION_SEPARATOR
from tnsrag_db._types import MemoryEntry
from tnsrag_db._validate import is_int
from tnsrag_db.admin.corpora import _not_found
from tnsrag_db.admin.reports import ExportCounts

__all__ = ["entry_record", "export_corpus", "lost_mid_export", "version_record"]


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


def version_record(version: EntryVersion, number: int | None,
                   vectors: Iterable[tuple[str, Sequence[float]]] = ()) -> dict[str, Any]:
    """The export record of a closed row of an entry, an item of its record's ``"versions"``:
    the fields of :func:`entry_record` but ``id`` and ``edges``, then ``"recordedAt"`` and
    ``"recordedUntil"`` (the interval the corpus recorded it) and ``"version"`` (``number``,
    the ``n`` of a kept version's row id) or, for the entry's own row a delete closed
    (``number`` None), ``"current": true``."""
    record = entry_record(version.entry, (), vectors)
    del record["id"], record["edges"]
    record["recordedAt"] = version.recorded_at.isoformat()
    record["recordedUntil"] = None if version.recorded_until is None else version.recorded_until.isoformat()
    if number is None:
        record["current"] = True
    else:
        record["version"] = number
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
# The vectors of a page's kept versions, by their ids.
_VERSION_VECTORS_SQL = (
    "SELECT x.entry_id, s.provider, CAST(x.embedding AS real[]) AS vector FROM embeddings x "
    "JOIN embedding_spaces s ON s.corpus = x.corpus AND s.space_id = x.space_id "
    "WHERE x.corpus = :c AND x.entry_id = ANY(:ids) ORDER BY x.entry_id, s.space_id")


def _export_plan(corpus: str, out: IO[str], batch_size: int, vectors: bool) -> Plan[ExportCounts]:
    """The export as a plan: the corpus check, then pages of entries (the store's own keyset
    pages) each with its entries' outgoing edges (and vectors), written to ``out`` as they
    arrive; in a corpus that keeps history, each with its kept versions and the interval
    each row was recorded."""
    found = yield Statement("SELECT 1 AS one FROM corpora WHERE corpus = :c", {"c": corpus}, ("one",))
    if not found:
        names = yield Statement("SELECT corpus FROM corpora ORDER BY corpus", {}, ("corpus",))
        raise _not_found(corpus, [r.corpus for r in names])
    recorded = yield from holds_history_plan(corpus)
    entries = edges = 0
    last = ""
    while True:
        if recorded:
            rows: list[EntryVersion] = yield from recorded_after_plan(corpus, last, batch_size)
            page = [r.entry for r in rows]
        else:
            page = yield from entries_after_plan(corpus, last, batch_size)
            rows = []
        if not page:
            break
        ids = [e.id for e in page]
        outgoing: dict[str, list[dict[str, Any]]] = {}
        # Every edge, whatever its validity: the restored graph answers an as_of as this one.
        found_edges = yield Statement(f"SELECT {', '.join(_EDGE_FIELDS)} FROM edges WHERE corpus = :c "
                                      "AND src = ANY(:ids) ORDER BY src, relation, dst", {"c": corpus, "ids": ids},
                                      _EDGE_FIELDS)
        for e in found_edges:
            outgoing.setdefault(e.src, []).append(dict(zip(_EDGE_FIELDS, e, strict=True)))
        kept: dict[str, list[tuple[int, EntryVersion]]] = {}
        if recorded:
            kept = yield from kept_versions_plan(corpus, ids)
        stored: dict[str, list[tuple[str, list[float]]]] = {}
        if vectors:
            found_vectors = yield Statement(_PAGE_VECTORS_SQL, {"c": corpus, "first": ids[0], "last": ids[-1]},
                                            ("entry_id", "provider", "vector"))
            for v in found_vectors:
                stored.setdefault(v.entry_id, []).append((v.provider, v.vector))
            # The versions' own ids (the range above may hold them, by the ids' collation).
            version_ids = [i for key, versions in kept.items() for n, _ in versions
                           if (i := f"{key}{VERSION_SEPARATOR}{n}") not in stored]
            if version_ids:
                found_vectors = yield Statement(_VERSION_VECTORS_SQL, {"c": corpus, "ids": version_ids},
                                                ("entry_id", "provider", "vector"))
                for v in found_vectors:
                    stored.setdefault(v.entry_id, []).append((v.provider, v.vector))
        for n, entry in enumerate(page):
            mine = outgoing.get(entry.id, [])
            versions = [version_record(v, number, stored.get(f"{entry.id}{VERSION_SEPARATOR}{number}", ()))
                        for number, v in kept.get(entry.id, [])]
            if rows and rows[n].recorded_until is not None:
                # Closed by a delete: the entry's own row is its last version, and the record
                # has no text of its own (a release that cannot restore versions refuses it).
                versions.append(version_record(rows[n], None, stored.get(entry.id, ())))
                record: dict[str, Any] = {"id": entry.id, "edges": [_edge_record(e) for e in mine]}
            else:
                record = entry_record(entry, mine, stored.get(entry.id, ()))
                entries += 1
                if rows:
                    record["recordedAt"] = rows[n].recorded_at.isoformat()
            if versions:
                record["versions"] = versions
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            edges += len(mine)
        last = ids[-1]
    return ExportCounts(entries, edges)
