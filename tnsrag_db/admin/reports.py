"""What the corpus functions report: frozen dataclasses whose ``to_dict()`` is the JSON
that ``tnsrag ... --json`` prints (datetimes as ISO-8601 strings)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = ["CorpusInfo", "CorpusStats", "ExportCounts", "RestoreCounts", "SpaceInfo"]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat()


@dataclass(frozen=True, slots=True)
class SpaceInfo:
    """One embedding space of a corpus: provider and dimension, vectors held, HNSW index state.

    ``index`` is ``"hnsw"`` (built and used), ``"building"`` (a build is running),
    ``"invalid"`` (an interrupted build; the next build replaces it) or ``"none"``
    (searches are exact scans). ``index_bytes`` is the index's size on disk (0 without one).
    """

    space_id: int
    provider: str
    dimension: int
    vectors: int
    index: str
    index_name: str | None
    index_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"space_id": self.space_id, "provider": self.provider, "dimension": self.dimension,
                "vectors": self.vectors, "index": self.index, "index_name": self.index_name,
                "index_bytes": self.index_bytes}


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    """One corpus of a schema, as :func:`list_corpora` lists it.

    ``tiers`` counts entries per tier (tiers without entries are left out);
    ``size_bytes`` is an estimate of the disk space the corpus takes: its share, by
    rows, of each shared table with its indexes and TOAST, plus its own HNSW indexes.
    """

    name: str
    entries: int
    tiers: Mapping[str, int]
    spaces: tuple[SpaceInfo, ...]
    edges: int
    size_bytes: int
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"name": self.name, "entries": self.entries, "tiers": dict(self.tiers),
                "spaces": [s.to_dict() for s in self.spaces], "edges": self.edges, "size_bytes": self.size_bytes,
                "created_at": _iso(self.created_at)}


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """What one corpus holds, as :func:`corpus_stats` reports it.

    * ``by_tier``: entries per tier; ``by_source``: entries per source, most first, at
      most ``max_sources`` of them (``sources`` is how many distinct sources there are;
      entries without a source count under ``None``, shown as ``null`` in JSON);
    * ``spaces``: the embedding spaces with their index state (:class:`SpaceInfo`); the
      JSON adds each one's ``missing``, the entries without a vector in it (:meth:`missing`);
    * ``bm25_documents``, ``bm25_average_length`` (terms per document) and
      ``bm25_terms`` (distinct terms): the BM25 corpus statistics queries score with;
    * ``edges`` and ``edges_by_relation``;
    * ``last_write``: the latest entry insert or update or edge creation (deletes leave
      no trace), None for an empty corpus;
    * ``expired``: the entries (counted in ``entries``) past their expiry, which no read
      returns and the next sweep deletes (``tnsrag db sweep``); ``expiring``: the entries
      with an expiry still ahead, the first of which is ``next_expiry`` (None: none);
      ``default_expiry``: the corpus's default time-to-live (:meth:`Store.set_expiry`), or None.
    """

    corpus: str
    entries: int
    by_tier: Mapping[str, int]
    by_source: Sequence[tuple[str | None, int]]
    sources: int
    spaces: tuple[SpaceInfo, ...]
    bm25_documents: int
    bm25_average_length: float
    bm25_terms: int
    edges: int
    edges_by_relation: Mapping[str, int]
    text_config: str
    created_at: datetime
    last_write: datetime | None
    expired: int = 0
    expiring: int = 0
    next_expiry: datetime | None = None
    default_expiry: Mapping[str, Any] | None = None

    def missing(self, space: SpaceInfo) -> int:
        """Entries of the corpus without a vector in ``space`` (0 when it is complete; more
        while an ingest or ``tnsrag embed`` is filling it, or after one was interrupted)."""
        return max(0, self.entries - space.vectors)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (``by_source`` as a list of ``{"source", "entries"}``)."""
        return {
            "corpus": self.corpus, "entries": self.entries, "by_tier": dict(self.by_tier),
            "by_source": [{"source": s, "entries": n} for s, n in self.by_source], "sources": self.sources,
            "spaces": [{**s.to_dict(), "missing": self.missing(s)} for s in self.spaces],
            "bm25": {"documents": self.bm25_documents, "average_length": self.bm25_average_length,
                     "terms": self.bm25_terms},
            "edges": self.edges, "edges_by_relation": dict(self.edges_by_relation),
            "text_config": self.text_config, "created_at": _iso(self.created_at),
            "last_write": _iso(self.last_write),
            "expiry": {"expired": self.expired, "expiring": self.expiring, "next": _iso(self.next_expiry),
                       "default": dict(self.default_expiry) if self.default_expiry else None},
        }


@dataclass(frozen=True, slots=True)
class ExportCounts:
    """What :func:`export_corpus` wrote."""

    entries: int
    edges: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"entries": self.entries, "edges": self.edges}


@dataclass(frozen=True, slots=True)
class RestoreCounts:
    """What :func:`restore_corpus` wrote: entries and edges, each inserted/updated/unchanged."""

    entries: Mapping[str, int] = field(default_factory=dict)
    edges: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"entries": dict(self.entries), "edges": dict(self.edges)}
