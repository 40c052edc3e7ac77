"""The store's entry reads as I/O-free statements (``get``, ``get_many``, ``count``), for the
sync and the async driver alike."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import ValidationError
from tnsrag_db._store.expiry import expired_ids, live
from tnsrag_db._store.filters import filter_sql
from tnsrag_db._store.validity import ASKED, INSTANT, VERSION_KEY, VERSION_SEPARATOR
from tnsrag_db._types import MemoryEntry, MemoryTier, RetrievedDocument, is_unicode_text, name_form

__all__ = ["ENTRY_COLUMNS", "EntryVersion", "history_plan", "ENTRY_COLUMN_NAMES", "ENTRY_FIELDS", "document_from_row", "check_ids", "content_hashes_plan", "count_plan", "existing_ids_plan", "entries_after_plan", "get_many_plan", "get_plan", "holds_history_plan", "kept_versions_plan", "recorded_after_plan", "row_to_entry"]

#: The entry columns (alias ``e``) that :func:`document_from_row` needs.
ENTRY_COLUMNS = "e.id AS entry_id, e.content, e.tier, e.source, e.metadata"
#: The names of the :data:`ENTRY_COLUMNS`, in order (a :class:`Statement`'s ``columns``).
ENTRY_COLUMN_NAMES = ("entry_id", "content", "tier", "source", "metadata")

#: The columns of an entry as :func:`row_to_entry` reads them.
ENTRY_FIELDS = ("id", "content", "tier", "source", "parent_id", "ts", "metadata", "expires_at", "valid_from",
                "valid_until")
_SELECT = f"SELECT {', '.join(ENTRY_FIELDS)} FROM entries e"
#: The same, a kept version named by the id of its entry.
_SELECT_VERSION = f"SELECT coalesce(e.version_of, e.id) AS {', '.join(ENTRY_FIELDS)} FROM entries e"
#: Entries that have not expired (every read below leaves the expired out).
_LIVE = live("e")


def check_ids(entry_ids: Iterable[object]) -> list[str]:
    """The ids in the form they are stored in (NFC, :func:`~tnsrag_db._types.name_form`).

    :class:`ValidationError` for an id holding NUL: the driver refuses NUL in any text
    parameter with a DataError of its own (nothing is sent); this names the argument."""
    out: list[str] = []
    for entry_id in entry_ids:
        if isinstance(entry_id, str) and "\x00" in entry_id:
            raise ValidationError(f"entry id {entry_id!r} contains a NUL character (PostgreSQL text cannot "
                                  "hold it); nothing was read or written")
        out.append(name_form(entry_id) if isinstance(entry_id, str) and is_unicode_text(entry_id) else entry_id)  # type: ignore[arg-type]
    return out


def row_to_entry(row: Any) -> MemoryEntry:
    """The :class:`MemoryEntry` of a row with the :data:`ENTRY_FIELDS` columns (a kept version's
    id read as ``coalesce(version_of, id)``: the mark of its metadata is left out)."""
    metadata = dict(row.metadata or {})
    if metadata.get(VERSION_KEY) == row.id:
        del metadata[VERSION_KEY]
    return MemoryEntry(id=row.id, content=row.content, tier=MemoryTier[row.tier], source=row.source,
                       parent_id=row.parent_id, timestamp=row.ts, metadata=metadata,
                       expires_at=row.expires_at, valid_from=row.valid_from, valid_until=row.valid_until)


#: An entry by its id, else by an alias of it (revision 0016: the id of an entry merged into
#: it). The branches run in order under the LIMIT: the alias branch is not read when the
#: first finds the entry.
_GET_SQL = (f"({_SELECT_VERSION} WHERE e.corpus = :c AND (e.id = :id OR ({ASKED} IS NOT NULL AND "
            f"e.version_of = :id)) AND {_LIVE} ORDER BY e.version_of NULLS FIRST LIMIT 1) "
            f"UNION ALL (SELECT {', '.join(f'e.{f}' for f in ENTRY_FIELDS)} FROM entry_aliases a "
            f"JOIN entries e ON e.corpus = a.corpus AND e.id = a.entry_id "
            f"WHERE a.corpus = :c AND a.alias = :id AND {_LIVE}) LIMIT 1")
#: The entries some aliases stand for (``asked``: the alias).
_ALIASED_SQL = (f"SELECT a.alias AS asked, {', '.join(f'e.{f}' for f in ENTRY_FIELDS)} FROM entry_aliases a "
                f"JOIN entries e ON e.corpus = a.corpus AND e.id = a.entry_id "
                f"WHERE a.corpus = :c AND a.alias = ANY(:ids) AND {_LIVE}")


def get_plan(corpus: str, entry_id: str) -> Plan[MemoryEntry | None]:
    """The entry ``entry_id`` of ``corpus``, or the entry it was merged into (an alias), or None
    (one statement: a second round trip for the alias would cost a missing id more than
    the alias branch costs every call; docs/performance.md, "Consolidation"). At an earlier
    instant (an as_of) the entry may be one of its kept versions."""
    rows = yield Statement(_GET_SQL, {"c": corpus, "id": entry_id}, ENTRY_FIELDS)
    return row_to_entry(rows[0]) if rows else None


def get_many_plan(corpus: str, entry_ids: Sequence[str]) -> Plan[dict[str, MemoryEntry]]:
    """The entries of ``corpus`` with these ids that exist, by id; an id that is an alias (of
    an entry merged into another) maps to the entry it was merged into. The aliases are
    read only for ids not found as entries."""
    rows = yield Statement(f"{_SELECT} WHERE corpus = :c AND id = ANY(:ids) AND {_LIVE}",
                           {"c": corpus, "ids": list(entry_ids)},
                           ENTRY_FIELDS)
    found = {r.id: row_to_entry(r) for r in rows}
    missing = [i for i in dict.fromkeys(entry_ids) if i not in found]
    if missing:
        aliased = yield Statement(_ALIASED_SQL, {"c": corpus, "ids": missing}, ("asked", *ENTRY_FIELDS))
        found.update((r.asked, row_to_entry(r)) for r in aliased)
    return found


def count_plan(corpus: str, filters: Mapping[str, str] | None = None) -> Plan[int]:
    """How many entries of ``corpus`` match ``filters`` (exact-match, as in retrieval; checked
    when the plan starts)."""
    predicate, params = filter_sql(filters)
    # All matches less the expired ones (found through the partial expiry index): the count
    # stays the index-only scan it was, whatever the corpus's expiry.
    rows = yield Statement(f"SELECT (SELECT count(*) FROM entries e WHERE e.corpus = :c AND {predicate}) - "
                           f"(SELECT count(*) FROM entries e WHERE e.corpus = :c AND {predicate} "
                           f"AND e.id IN ({expired_ids(':c')})) AS n",
                           {"c": corpus, **params}, ("n",))
    return int(rows[0].n)


#: Entries that the corpus holds now, whatever their validity: not expired, not a version a
#: write or a delete closed (an export and a re-embedding carry an entry true only in the
#: past or from a later instant too, which an ``as_of`` read still finds).
_CURRENT = f"(e.expires_at IS NULL OR e.expires_at > {INSTANT}) AND e.recorded_until IS NULL"


def entries_after_plan(corpus: str, last: str, limit: int) -> Plan[list[MemoryEntry]]:
    """Up to ``limit`` current entries of ``corpus`` (:data:`_CURRENT`) with ids after
    ``last``, in id order (keyset pages)."""
    rows = yield Statement(f"{_SELECT} WHERE corpus = :c AND id > :last AND {_CURRENT} ORDER BY id LIMIT :n",
                           {"c": corpus, "last": last, "n": limit}, ENTRY_FIELDS)
    return [row_to_entry(r) for r in rows]


#: The recording columns of an export's rows (the entry columns, then these).
_RECORDING = ("recorded_at", "recorded_until", "row_id")
_SELECT_RECORDED = (f"SELECT coalesce(e.version_of, e.id) AS {', '.join(ENTRY_FIELDS)}, "
                    "coalesce(e.recorded_at, e.created_at) AS recorded_at, e.recorded_until, e.id AS row_id "
                    "FROM entries e")
#: Not expired (an export leaves an expired row out, whatever it is a row of).
_UNEXPIRED = f"(e.expires_at IS NULL OR e.expires_at > {INSTANT})"


def holds_history_plan(corpus: str) -> Plan[bool]:
    """Whether ``corpus`` keeps history or holds rows it closed (kept versions, entries a
    delete closed): then an export carries when each row was recorded. Two probes (the
    corpus row, the partial index of ``recorded_until``)."""
    rows = yield Statement("SELECT coalesce((SELECT to_jsonb(c) -> 'history' = 'true'::jsonb FROM corpora c "
                           "WHERE c.corpus = :c), false) OR EXISTS (SELECT 1 FROM entries e WHERE e.corpus = :c "
                           "AND e.recorded_until IS NOT NULL) AS h", {"c": corpus}, ("h",))
    return bool(rows and rows[0].h)


def recorded_after_plan(corpus: str, last: str, limit: int) -> Plan[list[EntryVersion]]:
    """Up to ``limit`` entries' own rows of ``corpus`` with ids after ``last``, in id order
    (keyset pages): the current ones and those a delete closed, not expired, each with the
    interval the corpus recorded it (what an export of a corpus that keeps history pages)."""
    rows = yield Statement(f"{_SELECT_RECORDED} WHERE e.corpus = :c AND e.id > :last AND e.version_of IS NULL "
                           f"AND {_UNEXPIRED} ORDER BY e.id LIMIT :n",
                           {"c": corpus, "last": last, "n": limit}, (*ENTRY_FIELDS, *_RECORDING))
    return [EntryVersion(row_to_entry(r), r.recorded_at, r.recorded_until, True) for r in rows]


def kept_versions_plan(corpus: str, entry_ids: Sequence[str]) -> Plan[dict[str, list[tuple[int, EntryVersion]]]]:
    """The kept versions of these entries of ``corpus`` that have not expired, by entry id,
    oldest first, each with its number (the ``n`` of its row id ``<id>\x1e<n>``)."""
    rows = yield Statement(f"{_SELECT_RECORDED} WHERE e.corpus = :c AND e.version_of = ANY(:ids) AND {_UNEXPIRED} "
                           "ORDER BY e.version_of, coalesce(e.recorded_at, e.created_at), e.id",
                           {"c": corpus, "ids": list(entry_ids)}, (*ENTRY_FIELDS, *_RECORDING))
    out: dict[str, list[tuple[int, EntryVersion]]] = {}
    for r in rows:
        number = int(r.row_id.rpartition(VERSION_SEPARATOR)[2])
        out.setdefault(r.id, []).append((number, EntryVersion(row_to_entry(r), r.recorded_at, r.recorded_until,
                                                               False)))
    return out


def existing_ids_plan(corpus: str, entry_ids: Sequence[str]) -> Plan[set[str]]:
    """Which of these ids are rows of ``corpus`` (a row of any state: expired, or closed by
    a delete in a corpus that keeps history, it is still there)."""
    rows = yield Statement("SELECT id FROM entries WHERE corpus = :c AND id = ANY(:ids)",
                           {"c": corpus, "ids": list(entry_ids)}, ("id",))
    return {r.id for r in rows}


def content_hashes_plan(corpus: str, entry_ids: Sequence[str]) -> Plan[dict[str, bytes]]:
    """The stored change hash (see :func:`~tnsrag_db._store.write.content_hash`) of each of
    these ids that exists in ``corpus``, by id."""
    # A row a delete closed (a corpus that keeps history) is no entry: writing it is not skipped.
    rows = yield Statement("SELECT id, content_hash FROM entries WHERE corpus = :c AND id = ANY(:ids) "
                           "AND recorded_until IS NULL",
                           {"c": corpus, "ids": list(entry_ids)}, ("id", "content_hash"))
    return {r.id: bytes(r.content_hash) for r in rows}


def document_from_row(row: Any, score: float, extra: Mapping[str, str] | None = None) -> RetrievedDocument:
    """Build a result from a row with ``entry_id, content, tier, source, metadata`` columns."""
    raw = row.metadata
    metadata: dict[str, str] = dict(json.loads(raw) if isinstance(raw, str) else (raw or {}))
    metadata["tier"] = row.tier
    metadata["entryId"] = row.entry_id
    if row.source is not None:
        metadata["source"] = row.source
    if extra:
        metadata.update(extra)
    return RetrievedDocument._of_row(row.content, row.source, score, metadata)


@dataclass(frozen=True, slots=True)
class EntryVersion:
    """One version of an entry (:meth:`tnsrag_db.Store.history`): the ``entry`` as it was
    written, the interval in which the corpus recorded it (``recorded_at``, inclusive, to
    ``recorded_until``, exclusive; None: it is the current version), and whether it is the
    ``current`` row (the entry's own, not a kept version). Its stated validity is the
    entry's ``valid_from`` and ``valid_until``."""

    entry: MemoryEntry
    recorded_at: datetime
    recorded_until: datetime | None
    current: bool


def history_plan(corpus: str, entry_id: str) -> Plan[list[EntryVersion]]:
    """The versions of the entry ``entry_id`` of ``corpus``, oldest first (see :class:`EntryVersion`)."""
    columns = ", ".join(ENTRY_FIELDS[1:])
    rows = yield Statement(f"SELECT coalesce(e.version_of, e.id) AS id, {columns}, "
                           "coalesce(e.recorded_at, e.created_at) AS recorded_at, e.recorded_until, "
                           "e.version_of IS NULL AS current FROM entries e "
                           "WHERE e.corpus = :c AND (e.id = :id OR e.version_of = :id) "
                           "ORDER BY e.version_of IS NULL, coalesce(e.recorded_at, e.created_at), e.id",
                           {"c": corpus, "id": entry_id},
                           (*ENTRY_FIELDS, "recorded_at", "recorded_until", "current"))
    return [EntryVersion(row_to_entry(r), r.recorded_at, r.recorded_until, bool(r.current)) for r in rows]
