"""JSONL: one entry per line in the export format of :mod:`tnsrag_db.admin`, read back
exactly, with the outgoing edges and the vectors each record carries."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tnsrag_db._errors import InvalidEntryError
from tnsrag_db._indexes import graph
from tnsrag_db._types import MemoryEntry, MemoryTier, parse_instant

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from tnsrag_db._indexes.graph import Edge


#: Vectors of JSONL records by embedding space (provider name, dimension), then entry id.
SpaceVectors = dict[tuple[str, int], dict[str, "npt.NDArray[np.float32]"]]


def _jsonl(rel: str, text: str, tier: MemoryTier, edges_out: list[Edge],
           vectors_out: SpaceVectors | None = None) -> Iterator[MemoryEntry]:
    # The record format is the export format of tnsrag_db.admin (see its docstring):
    # a present "source": null stays None, "timestamp" is the entry's timestamp,
    # "expiresAt" (an instant) or "ttlSeconds" (a number) its expiry, "validFrom" and
    # "validUntil" (instants) its validity,
    # "edges" (outgoing, {"dst", "relation", "weight", "source"}, and "validFrom" and
    # "validUntil" for an edge that states its validity) are collected for
    # the caller in edges_out, and "vectors" ([{"provider", "vector"}]) in vectors_out.
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
        except (InvalidEntryError, ValueError) as exc:
            raise InvalidEntryError(f"{where}: {exc}") from None
        edges_out.extend(edges)
        if vectors_out is not None:
            for space, vector in vectors.items():
                vectors_out.setdefault(space, {})[entry.id] = vector
        yield entry


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
