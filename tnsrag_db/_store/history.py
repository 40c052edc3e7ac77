"""Versions kept by a corpus that keeps history.

In such a corpus (:meth:`tnsrag_db.Store.set_history`) a write of an id whose entry
differs (any stored field) or was deleted first keeps the entry's current row as a version
of its own, then writes over the current row as any write does:

* the version is an entry row with the id ``<id>\\x1e<n>`` (``n`` counts the versions of
  the id from 1; the separator, U+001E, is refused in the ids applications write), its
  ``version_of`` the id, its metadata the old one plus ``versionOf`` (so a result of an
  ``as_of`` search names the entry it was a version of), its postings written as any
  entry's and its vectors copied from the current row (no embedding is computed again);
* it is recorded from the current row's ``recorded_at`` (or ``created_at``) until the
  write (``recorded_until``, or the instant of the delete that closed it earlier);
* the current row is then recorded from the write (``recorded_at``), open again.

A delete closes the current row (``recorded_until``) instead of removing it. Edges are not
copied: a graph walk at an earlier instant follows the edges of the current rows that were
valid then (an edge states its own validity, :mod:`tnsrag_db._store.edges`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tnsrag_db._db.pool import Connection
from tnsrag_db._store.validity import VERSION_KEY, VERSION_SEPARATOR
from tnsrag_db._types import MemoryEntry

__all__ = ["VERSION_KEY", "VERSION_SEPARATOR", "KeptRow", "close_matching", "keep_versions", "reopen", "restore_rows"]


_LOCK_CURRENT_SQL = """\
SELECT e.id, e.content_hash, e.content, e.tier, e.source, e.parent_id, e.ts, e.metadata, e.expires_at,
       e.valid_from, e.valid_until, coalesce(e.recorded_at, e.created_at) AS recorded_at, e.recorded_until
FROM entries e WHERE e.corpus = :c AND e.id = ANY(CAST(:ids AS text[])) AND e.version_of IS NULL
ORDER BY e.id FOR NO KEY UPDATE"""

_LAST_VERSION_SQL = """\
SELECT v.version_of AS id, max(CAST(split_part(v.id, E'\\x1e', 2) AS int)) AS n FROM entries v
WHERE v.corpus = :c AND v.version_of = ANY(CAST(:ids AS text[])) GROUP BY v.version_of"""

# The rows are named by key arrays (primary-key and entry-id index conditions) besides the
# join: a corpus the planner statistics do not know yet is estimated at one row, and a join
# alone may be planned as a scan of it per target.
_MARK_VERSIONS_SQL = """\
UPDATE entries e SET version_of = v.key, recorded_at = v.since, recorded_until = coalesce(v.until, now())
FROM unnest(CAST(:vids AS text[]), CAST(:keys AS text[]), CAST(:since AS timestamptz[]),
            CAST(:until AS timestamptz[])) AS v(id, key, since, until)
WHERE e.corpus = :c AND e.id = ANY(CAST(:vids AS text[])) AND e.id = v.id"""

_COPY_VECTORS_SQL = """\
INSERT INTO embeddings (corpus, space_id, entry_id, embedding)
SELECT x.corpus, x.space_id, v.id, x.embedding
FROM unnest(CAST(:vids AS text[]), CAST(:keys AS text[])) AS v(id, key)
JOIN embeddings x ON x.corpus = :c AND x.entry_id = ANY(CAST(:keys AS text[])) AND x.entry_id = v.key"""

_REOPEN_SQL = """\
UPDATE entries e SET recorded_at = now(), recorded_until = NULL
WHERE e.corpus = :c AND e.id = ANY(CAST(:ids AS text[]))"""


def keep_versions(conn: Connection, corpus: str, batch: Sequence[MemoryEntry], hashes: Sequence[bytes],
                  write: Callable[[Connection, Sequence[MemoryEntry]], object]) -> list[str]:
    """Lock the current rows of ``batch``'s ids (in id order, as every writer) and keep as a
    version each that differs from its new entry (``hashes``: the batch's content hashes)
    or was closed by a delete; ``write`` writes the versions as entries. Returns the ids
    whose current row is to be recorded anew (:func:`reopen`, after the write)."""
    new = {e.id: h for e, h in zip(batch, hashes, strict=True)}
    rows = conn.execute(_LOCK_CURRENT_SQL, {"c": corpus, "ids": sorted(new)}).all()
    changed = [r for r in rows if r.recorded_until is not None or bytes(r.content_hash) != new[r.id]]
    if not changed:
        return []
    keys = [r.id for r in changed]
    last = {r.id: int(r.n) for r in conn.execute(_LAST_VERSION_SQL, {"c": corpus, "ids": keys})}
    versions: list[MemoryEntry] = []
    for r in changed:
        version = MemoryEntry(id=r.id, content=r.content, tier=r.tier, source=r.source, parent_id=r.parent_id,
                              timestamp=r.ts, metadata={**(r.metadata or {}), VERSION_KEY: r.id},
                              expires_at=r.expires_at, valid_from=r.valid_from, valid_until=r.valid_until)
        object.__setattr__(version, "id", f"{r.id}{VERSION_SEPARATOR}{last.get(r.id, 0) + 1}")
        versions.append(version)
    write(conn, versions)
    params: dict[str, Any] = {"c": corpus, "vids": [v.id for v in versions], "keys": keys,
                              "since": [r.recorded_at for r in changed], "until": [r.recorded_until for r in changed]}
    conn.execute(_MARK_VERSIONS_SQL, params)
    conn.execute(_COPY_VECTORS_SQL, {"c": corpus, "vids": params["vids"], "keys": keys})
    return keys


def reopen(conn: Connection, corpus: str, ids: Sequence[str]) -> None:
    """Record the current rows of ``ids`` from this transaction on, open (a new version)."""
    if ids:
        conn.execute(_REOPEN_SQL, {"c": corpus, "ids": list(ids)})


def close_matching(conn: Connection, corpus: str, predicate: str, params: dict[str, Any]) -> int:
    """Close the current rows matching ``predicate`` (filter SQL over ``e``) at this
    transaction's instant, in id order; returns how many (a delete that keeps history)."""
    sql = (f"WITH t AS (SELECT e.id FROM entries e WHERE e.corpus = :c AND e.version_of IS NULL "
           f"AND e.recorded_until IS NULL AND ({predicate}) ORDER BY e.id FOR NO KEY UPDATE) "
           "UPDATE entries e SET recorded_until = now() FROM t WHERE e.corpus = :c AND e.id = t.id")
    return int(conn.execute(sql, {"c": corpus, **params}).rowcount)


@dataclass(frozen=True, slots=True)
class KeptRow:
    """A closed row of an entry as an export carries it, to be written back as it was: a kept
    version (``number``: the ``n`` of its id ``<id>\\x1e<n>``) or, with ``number`` None,
    the entry's own row a delete closed. ``entry`` holds the row's fields under the
    entry's id; ``recorded_at`` and ``recorded_until`` the interval the corpus recorded it."""

    entry: MemoryEntry
    recorded_at: datetime
    recorded_until: datetime
    number: int | None = None

    @property
    def row_id(self) -> str:
        """The id of the row: the entry's for its own row, ``<id>\\x1e<n>`` for a version."""
        return self.entry.id if self.number is None else f"{self.entry.id}{VERSION_SEPARATOR}{self.number}"

    def row(self) -> MemoryEntry:
        """The entry the row is written as: a version under its own id, its metadata marked
        with the id it was a version of (as :func:`keep_versions` writes it)."""
        if self.number is None:
            return self.entry
        e = self.entry
        version = MemoryEntry(id=e.id, content=e.content, tier=e.tier, source=e.source, parent_id=e.parent_id,
                              timestamp=e.timestamp, metadata={**e.metadata, VERSION_KEY: e.id},
                              expires_at=e.expires_at, valid_from=e.valid_from, valid_until=e.valid_until)
        object.__setattr__(version, "id", self.row_id)  # the reserved separator: no application id has it
        return version


_RECORD_SQL = """\
UPDATE entries e SET version_of = v.key, recorded_at = v.since, recorded_until = v.until
FROM unnest(CAST(:ids AS text[]), CAST(:keys AS text[]), CAST(:since AS timestamptz[]),
            CAST(:until AS timestamptz[])) AS v(id, key, since, until)
WHERE e.corpus = :c AND e.id = ANY(CAST(:ids AS text[])) AND e.id = v.id"""


def restore_rows(conn: Connection, corpus: str, rows: Sequence[KeptRow], recorded: Mapping[str, datetime],
                 write: Callable[[Connection, Sequence[MemoryEntry]], object]) -> None:
    """Write back the closed ``rows`` of an export (``write`` writes entries, as for
    :func:`keep_versions`) and record every row as the export did: the kept versions and
    the closed rows with their intervals, the current rows of ``recorded`` (id: the instant
    from which they are recorded) open from it. In the restore's transaction, after its
    current entries."""
    if rows:
        write(conn, [r.row() for r in rows])
    ids = [r.row_id for r in rows] + list(recorded)
    if not ids:
        return
    conn.execute(_RECORD_SQL, {
        "c": corpus, "ids": ids,
        "keys": [None if r.number is None else r.entry.id for r in rows] + [None] * len(recorded),
        "since": [r.recorded_at for r in rows] + list(recorded.values()),
        "until": [r.recorded_until for r in rows] + [None] * len(recorded)})
