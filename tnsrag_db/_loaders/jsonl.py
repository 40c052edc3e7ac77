"""JSONL: one entry per line in the export format of :mod:`tnsrag_db.admin`, read back
exactly, with the outgoing edges and the vectors each record carries."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tnsrag_db._errors import InvalidEntryError
from tnsrag_db._indexes import graph
from tnsrag_db._store.history import KeptRow
from tnsrag_db._types import MemoryEntry, MemoryTier, parse_instant

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from tnsrag_db._indexes.graph import Edge


#: Vectors of JSONL records by embedding space (provider name, dimension), then entry id.
SpaceVectors = dict[tuple[str, int], dict[str, "npt.NDArray[np.float32]"]]


class Recorded:
    """What the JSONL records of an export of a corpus that keeps history carried besides the
    entries (:attr:`FileLoader.recorded <tnsrag_db._loaders.FileLoader.recorded>`): the
    closed ``rows`` (kept versions, entries a delete closed) and the instant from which each
    current entry was recorded (``since``, by id)."""

    __slots__ = ("rows", "since")

    def __init__(self) -> None:
        self.rows: list[KeptRow] = []
        self.since: dict[str, datetime] = {}

    def __bool__(self) -> bool:
        return bool(self.rows or self.since)


def _jsonl(rel: str, text: str, tier: MemoryTier, edges_out: list[Edge],
           vectors_out: SpaceVectors | None = None, recorded_out: Recorded | None = None) -> Iterator[MemoryEntry]:
    # The record format is the export format of tnsrag_db.admin (see its docstring):
    # a present "source": null stays None, "timestamp" is the entry's timestamp,
    # "expiresAt" (an instant) or "ttlSeconds" (a number) its expiry, "validFrom" and
    # "validUntil" (instants) its validity,
    # "edges" (outgoing, {"dst", "relation", "weight", "source"}, and "validFrom" and
    # "validUntil" for an edge that states its validity) are collected for
    # the caller in edges_out, and "vectors" ([{"provider", "vector"}]) in vectors_out;
    # "recordedAt" (an instant: since when the entry is recorded) and "versions" (its closed
    # rows, oldest first) in recorded_out. A record with "versions" and no text is an entry
    # a delete closed: its last version ("current": true) is its own row.
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{rel}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidEntryError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise InvalidEntryError(f"{where}: each line must be a JSON object")
        content = obj.get("content", obj.get("text"))
        if content is None and "versions" in obj and "id" in obj:
            try:
                rows = _record_versions(str(obj["id"]), obj["versions"], closed=True, tier=tier)
                edges = _record_edges(str(obj["id"]), obj.get("edges"))
            except (InvalidEntryError, ValueError) as exc:
                raise InvalidEntryError(f"{where}: {exc}") from None
            _keep(rows, recorded_out, vectors_out)
            edges_out.extend(edges)
            continue
        if not isinstance(content, str):
            raise InvalidEntryError(f"{where}: needs a string 'content' (or 'text') field")
        metadata = obj.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InvalidEntryError(f"{where}: 'metadata' must be an object of strings")
        stamp = obj.get("timestamp")
        expires = obj.get("expiresAt")
        bounds = {"validFrom": obj.get("validFrom"), "validUntil": obj.get("validUntil")}
        try:
            for key, value in bounds.items():
                if value is not None and not isinstance(value, str):
                    raise InvalidEntryError(f"{key!r} must be an ISO-8601 string, got {value!r}")
            if stamp is not None and not isinstance(stamp, str):
                raise InvalidEntryError(f"'timestamp' must be an ISO-8601 string, got {stamp!r}")
            if expires is not None and not isinstance(expires, str):
                raise InvalidEntryError(f"'expiresAt' must be an ISO-8601 string, got {expires!r}")
            entry = MemoryEntry(
                str(obj.get("id") or f"{rel}#{lineno}"), content, obj.get("tier") or tier,
                source=None if "source" in obj and obj["source"] is None else (obj.get("source") or rel),
                parent_id=obj.get("parentId", obj.get("parent_id")),
                timestamp=parse_instant(stamp) if stamp else None, metadata=metadata,
                expires_at=parse_instant(expires) if expires else None, ttl=obj.get("ttlSeconds"),
                valid_from=parse_instant(bounds["validFrom"]) if bounds["validFrom"] else None,
                valid_until=parse_instant(bounds["validUntil"]) if bounds["validUntil"] else None,
            )
            edges = _record_edges(entry.id, obj.get("edges"))
            vectors = _record_vectors(obj.get("vectors"))
            since = _instant(obj, "recordedAt")
            rows = _record_versions(entry.id, obj["versions"], closed=False, tier=tier) if "versions" in obj else []
        except (InvalidEntryError, ValueError) as exc:
            raise InvalidEntryError(f"{where}: {exc}") from None
        if (since is not None or rows) and recorded_out is not None:
            if since is not None:
                recorded_out.since[entry.id] = since
        _keep(rows, recorded_out, vectors_out)
        edges_out.extend(edges)
        if vectors_out is not None:
            for space, vector in vectors.items():
                vectors_out.setdefault(space, {})[entry.id] = vector
        yield entry


def _instant(obj: dict[str, Any], key: str, *, required: bool = False) -> datetime | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise InvalidEntryError(f"{key!r} must be an ISO-8601 string, got {value!r}")
    return parse_instant(value)


def _keep(rows: list[tuple[KeptRow, dict[tuple[str, int], Any]]], recorded_out: Recorded | None,
          vectors_out: SpaceVectors | None) -> None:
    """The closed rows of a record (with their vectors) to the caller's collections."""
    for row, vectors in rows:
        if recorded_out is not None:
            recorded_out.rows.append(row)
        if vectors_out is not None:
            for space, vector in vectors.items():
                vectors_out.setdefault(space, {})[row.row_id] = vector


#: The fields of an item of "versions" besides an entry record's.
_VERSION_FIELDS = {"content", "tier", "source", "parentId", "timestamp", "metadata", "expiresAt", "validFrom",
                   "validUntil", "vectors", "recordedAt", "recordedUntil", "version", "current"}


def _record_versions(key: str, raw: object, *, closed: bool,
                     tier: MemoryTier) -> list[tuple[KeptRow, dict[tuple[str, int], Any]]]:
    """The ``"versions"`` of the record of entry ``key``: its closed rows, oldest first, each
    ``{<the fields of an entry record but id and edges>, "recordedAt", "recordedUntil",
    "version": n}``, the last one ``"current": true`` instead of a number when the entry
    was closed by a delete (``closed``: the record has no text of its own)."""
    if not isinstance(raw, list) or (closed and not raw):
        raise InvalidEntryError("'versions' must be a list of objects" + (", the last one 'current'" if closed else ""))
    out: list[tuple[KeptRow, dict[tuple[str, int], Any]]] = []
    numbers: set[int] = set()
    for n, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise InvalidEntryError(f"version {n} must be an object with a string 'content'")
        unknown = sorted(set(item) - _VERSION_FIELDS)
        if unknown:
            raise InvalidEntryError(f"version {n}: unknown field(s) {', '.join(unknown)}")
        current = item.get("current", False)
        number = item.get("version")
        last = closed and n == len(raw) - 1
        if last != (current is True) or (current not in (True, False)):
            raise InvalidEntryError(f"version {n}: 'current': true marks the last version of an entry closed by a "
                                    "delete (a record without 'content'), and only it")
        if not last and (type(number) is not int or number < 1 or number in numbers):
            raise InvalidEntryError(f"version {n}: 'version' must be a distinct int >= 1, got {number!r}")
        if last and number is not None:
            raise InvalidEntryError(f"version {n}: a 'current' version has no 'version' number")
        stamp, expires = _instant(item, "timestamp"), _instant(item, "expiresAt")
        entry = MemoryEntry(key, item["content"], item.get("tier") or tier, source=item.get("source"),
                            parent_id=item.get("parentId"), timestamp=stamp, metadata=item.get("metadata") or {},
                            expires_at=expires, valid_from=_instant(item, "validFrom"),
                            valid_until=_instant(item, "validUntil"))
        since, until = _instant(item, "recordedAt", required=True), _instant(item, "recordedUntil", required=True)
        assert since is not None and until is not None
        if not last:
            assert isinstance(number, int)  # checked above
            numbers.add(number)
        out.append((KeptRow(entry, since, until, None if last else number), _record_vectors(item.get("vectors"))))
    return out


def _record_vectors(raw: object) -> dict[tuple[str, int], npt.NDArray[np.float32]]:
    """The ``"vectors"`` of a record: ``[{"provider": name, "float32": base64 of the
    little-endian float32 values}]`` (what ``tnsrag export --vectors`` writes)."""
    if raw is None:
        return {}
    import numpy as np  # only for records with vectors: FileLoader does not load numpy otherwise

    if not isinstance(raw, list):
        raise InvalidEntryError(f"'vectors' must be a list of objects, got {type(raw).__name__}")
    out: dict[tuple[str, int], npt.NDArray[np.float32]] = {}
    for n, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != {"provider", "float32"}:
            raise InvalidEntryError(f"vector {n} must be an object with exactly 'provider' and 'float32'")
        provider, encoded = item["provider"], item["float32"]
        if not isinstance(provider, str) or not provider.strip():
            raise InvalidEntryError(f"vector {n}: 'provider' must be a non-blank string, got {provider!r}")
        try:
            data = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except (ValueError, binascii.Error):
            data = b""
        if not data or len(data) % 4:
            raise InvalidEntryError(f"vector {n} ({provider}): 'float32' must be the base64 of float32 values")
        vector = np.frombuffer(data, dtype="<f4").astype(np.float32)
        if not np.isfinite(vector).all():
            raise InvalidEntryError(f"vector {n} ({provider}): the values must be finite")
        space = (provider, len(vector))
        if space in out:
            raise InvalidEntryError(f"vector {n}: a second {len(vector)}-dimensional vector of {provider!r}")
        out[space] = vector
    return out


def _record_edges(src: str, raw: object) -> list[Edge]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidEntryError(f"'edges' must be a list of objects, got {type(raw).__name__}")
    out: list[Edge] = []
    for n, item in enumerate(raw):
        if not isinstance(item, dict):
            raise InvalidEntryError(f"edge {n} must be an object with 'dst'")
        unknown = sorted(set(item) - {"dst", "relation", "weight", "source", "validFrom", "validUntil"})
        if unknown:
            raise InvalidEntryError(f"edge {n}: unknown field(s) {', '.join(unknown)}; "
                                    "expected dst, relation, weight, source, validFrom, validUntil")
        bounds = {}
        for key in ("validFrom", "validUntil"):
            value = item.get(key)
            if value is not None and not isinstance(value, str):
                raise InvalidEntryError(f"edge {n}: {key!r} must be an ISO-8601 string, got {value!r}")
            bounds[key] = parse_instant(value) if value else None
        relation = item.get("relation")
        weight = item.get("weight")
        dst: Any = item.get("dst")  # Edge checks every field
        out.append(graph.Edge(src, dst, graph.DEFAULT_RELATION if relation is None else relation,
                        1.0 if weight is None else weight, item.get("source"),
                        bounds["validFrom"], bounds["validUntil"]))
    return out
