"""Corpus administration: which corpora a schema holds, and what one corpus contains.

A minimal stand-in with the interface the MCP server's ``stats`` and ``corpora`` tools
call (``list_corpora(store)``, ``corpus_stats(store)``, frozen dataclasses with
``to_dict()``); the full module with the CLI commands replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from tnsrag_db.store.store import Store

__all__ = ["CorpusInfo", "CorpusStats", "corpus_stats", "list_corpora"]


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    """One corpus of a schema: its name, number of entries, text configuration and creation time."""

    corpus: str
    entries: int
    text_config: str
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the time as ISO-8601)."""
        return {"corpus": self.corpus, "entries": self.entries, "text_config": self.text_config,
                "created_at": self.created_at.isoformat()}


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """What one corpus holds: entries (in all and per tier), edges, and vectors per embedding space."""

    corpus: str
    entries: int
    tiers: dict[str, int] = field(default_factory=dict)
    edges: int = 0
    spaces: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"corpus": self.corpus, "entries": self.entries, "tiers": dict(self.tiers), "edges": self.edges,
                "spaces": [dict(s) for s in self.spaces]}


def list_corpora(store: Store) -> list[CorpusInfo]:
    """Every corpus in ``store``'s schema (the store's own corpus or not), by name."""
    with store.transaction() as conn:
        rows = conn.execute(sa.text(
            # Lists every corpus on purpose (a multi-shard read when distributed by corpus).
            "/* tnsrag:all-corpora */ SELECT c.corpus, c.text_config, c.created_at, "
            "(SELECT count(*) FROM entries e WHERE e.corpus = c.corpus) AS entries "
            "FROM corpora c ORDER BY c.corpus")).all()
    return [CorpusInfo(r.corpus, int(r.entries), r.text_config, r.created_at) for r in rows]


def corpus_stats(store: Store) -> CorpusStats:
    """The contents of ``store``'s corpus (zeros for a corpus never written)."""
    c = {"c": store.corpus}
    with store.transaction() as conn:
        tiers = {r.tier: int(r.n) for r in conn.execute(sa.text(
            "SELECT tier, count(*) AS n FROM entries WHERE corpus = :c GROUP BY tier ORDER BY tier"), c)}
        edges = int(conn.execute(sa.text("SELECT count(*) FROM edges WHERE corpus = :c"), c).scalar_one())
        spaces = tuple({"provider": r.provider, "dimension": int(r.dimension), "vectors": int(r.vectors),
                        "hnsw_index": r.index_name} for r in conn.execute(sa.text(
            "SELECT s.provider, s.dimension, s.index_name, "
            "(SELECT count(*) FROM embeddings x WHERE x.corpus = s.corpus AND x.space_id = s.space_id) AS vectors "
            "FROM embedding_spaces s WHERE s.corpus = :c ORDER BY s.provider, s.dimension"), c))
    return CorpusStats(store.corpus, sum(tiers.values()), tiers, edges, spaces)
