"""Looking after corpora: list them, describe one, export and restore one.

The functions take a :class:`~tnsrag_db._store.store.Store`; :func:`list_corpora`
covers every corpus of the store's schema, the others the store's own corpus. The
value types are frozen dataclasses whose ``to_dict()`` returns plain JSON-able dicts
(datetimes as ISO-8601 strings), the shape ``tnsrag ... --json`` prints.

Export format (JSONL, UTF-8, one entry per line, in id order)::

    {"id": "guide.md#1", "content": "...", "tier": "SEMANTIC", "source": "guide.md",
     "parentId": "guide.md#0", "timestamp": "2025-01-02T03:04:05+00:00",
     "metadata": {"topic": "install"},
     "edges": [{"dst": "faq.md#0", "relation": "cites", "weight": 2.0, "source": null}]}

``edges`` are the entry's outgoing edges, whatever their validity; an edge with a bound
of validity has it as a ``"validFrom"`` or ``"validUntil"`` instant. ``tnsrag ingest file.jsonl`` (and
:func:`restore_corpus`) read it back exactly: ids, contents, tiers, sources (``null``
stays ``None``), parents, timestamps, metadata and edges; an entry that expires has an
``"expiresAt"`` instant too (expired entries are not exported), and one that states its
validity ``"validFrom"`` and ``"validUntil"`` (the export holds every entry whatever its
validity, as it holds every edge, so that the restored corpus answers an ``as_of`` as this
one). The export of a corpus that keeps history (or holds versions it kept) carries it: each
record has ``"recordedAt"`` (since when its current version is recorded) and, when the entry
has kept versions, ``"versions"`` (oldest first, each ``{<the fields of a record but id and
edges>, "recordedAt", "recordedUntil", "version": n}``); an entry a delete closed is a record
with ``id``, ``edges`` and ``versions`` but no ``content``, its last version its closed row
(``"current": true`` instead of a number). Restored, every row is written back with its
interval, so ``history(id)`` and ``as_of`` answers equal the exported corpus's; expired rows
are not exported. Vectors are exported only
with ``export_corpus(..., vectors=True)`` (``tnsrag export --vectors``): a ``"vectors"``
list of ``{"provider": name, "float32": base64 of the little-endian float32 values}``,
one per embedding space holding the entry, which the restore writes as they are into
spaces of the same providers. Without them the restore embeds every text again with the
embedding provider in use (with a real model, nearly all of its time).

The modules: :mod:`.reports` (the value types), :mod:`.corpora` (listing and describing
corpora), :mod:`.filter_notes` (why a filter matched nothing), :mod:`.export` and
:mod:`.restore`; :mod:`.server` (keeping the embedded server running after a script).
The names below are imported on first use, so
that a process importing only the plans of :mod:`.corpora` and :mod:`.filter_notes`
(the command line's keyword query) does not import the full store that export and
restore need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tnsrag_db._lazy import lazy_names

if TYPE_CHECKING:
    from tnsrag_db.admin.corpora import (
        corpus_exists,
        corpus_names,
        corpus_stats,
        list_corpora,
        require_corpus,
    )
    from tnsrag_db.admin.export import entry_record, export_corpus
    from tnsrag_db.admin.filter_notes import empty_filter_notes
    from tnsrag_db.admin.reports import (
        CorpusInfo,
        CorpusStats,
        ExportCounts,
        RestoreCounts,
        SpaceInfo,
    )
    from tnsrag_db.admin.restore import restore_corpus
    from tnsrag_db.admin.server import keep_running

#: Each public name and the module of this package that defines it (loaded on first use).
_HOMES = {
    "CorpusInfo": "tnsrag_db.admin.reports",
    "CorpusStats": "tnsrag_db.admin.reports",
    "ExportCounts": "tnsrag_db.admin.reports",
    "RestoreCounts": "tnsrag_db.admin.reports",
    "SpaceInfo": "tnsrag_db.admin.reports",
    "corpus_exists": "tnsrag_db.admin.corpora",
    "corpus_names": "tnsrag_db.admin.corpora",
    "corpus_stats": "tnsrag_db.admin.corpora",
    "list_corpora": "tnsrag_db.admin.corpora",
    "require_corpus": "tnsrag_db.admin.corpora",
    "empty_filter_notes": "tnsrag_db.admin.filter_notes",
    "entry_record": "tnsrag_db.admin.export",
    "export_corpus": "tnsrag_db.admin.export",
    "restore_corpus": "tnsrag_db.admin.restore",
    "keep_running": "tnsrag_db.admin.server",
}

if not TYPE_CHECKING:  # type checkers see the imports above
    __getattr__, __dir__ = lazy_names(__name__, _HOMES)

__all__ = [
    "CorpusInfo",
    "CorpusStats",
    "ExportCounts",
    "RestoreCounts",
    "SpaceInfo",
    "corpus_exists",
    "corpus_names",
    "corpus_stats",
    "empty_filter_notes",
    "entry_record",
    "export_corpus",
    "keep_running",
    "list_corpora",
    "require_corpus",
    "restore_corpus",
]
