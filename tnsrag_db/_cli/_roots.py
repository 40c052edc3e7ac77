"""The roots of one ``tnsrag ingest``: what each PATH argument is, the id namespace it gets,
its entries (tagged with the root they came from) and the entries ``--prune`` may remove.

One root (a directory, a file, or a glob, which may name several directories) keeps the
ids it always had: paths relative to it (``guide/install.md#3``), behind ``--id-prefix``.
With several roots each directory and glob root is namespaced by its folder's name
(``python3-six/copyright#0``, behind ``--id-prefix`` when given), and a file root by its
own name (``README.md#0``), so that several folders go in one command. Every entry read
from a file records its root (metadata ``root``: the absolute path of the directory or
file, or the absolute glob), so ``--prune`` removes only entries of the roots it read,
and a root's ids stay its own: a run whose files would take ids another root's entries
hold in the corpus (a second folder holding a ``copyright`` too) is refused before
anything is written (:func:`check_roots`), while the same root read again updates its
entries in place.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tnsrag_db._errors import ConfigurationError, InvalidEntryError
from tnsrag_db._loaders.jsonl import Recorded
from tnsrag_db._loaders.owners import ROOT_KEY, check_owners, pattern_root
from tnsrag_db._loaders.walk import _GLOB_CHARS, _glob_root
from tnsrag_db._types import MemoryEntry

__all__ = ["ROOT_KEY", "Root", "Reading", "check_roots", "find_roots", "iter_roots", "normalize_prefix", "read_roots",
           "stale_ids"]


@dataclass(frozen=True)
class Root:
    """One PATH argument: ``given`` as typed, ``kind`` ``"dir"``, ``"file"`` or ``"glob"``,
    ``key`` its identity (absolute path, or absolute glob), ``anchor`` the absolute directory
    its ids are relative to, ``prefix`` the id namespace of its entries (``""`` or ``"a/b/"``)."""

    given: str
    kind: str
    key: str
    anchor: Path
    prefix: str

    def origin(self, path: str) -> str:
        """The absolute file of an entry's metadata ``path`` (for messages)."""
        if self.kind == "file":
            return self.key
        return str(self.anchor / path[len(self.prefix):])


def normalize_prefix(prefix: str) -> str:
    """``--id-prefix`` as the loader applies it: ``"docs"`` and ``"docs/"`` give ``"docs/"``, ``""`` gives ``""``."""
    return prefix.strip("/") + "/" if prefix.strip("/") else ""


def find_roots(paths: Sequence[str], id_prefix: str) -> list[Root]:
    """The roots of ``paths`` (existing files and directories, or globs; a path that exists is
    never read as a glob) with their namespaces (see the module docstring).

    Raises :class:`ConfigurationError` naming the path for one that neither exists nor is a
    glob, for a root inside another root (its files would be read twice, under two ids),
    and for two roots that would share a namespace (two folders of the same name).
    """
    base = normalize_prefix(id_prefix)
    several = len(paths) > 1
    roots: list[Root] = []
    for given in paths:
        absolute = os.path.abspath(given)
        if os.path.isdir(given):
            kind, key, anchor = "dir", pattern_root(given), Path(absolute)
            name = Path(key).name
        elif os.path.exists(given):
            kind, key, anchor = "file", pattern_root(given), Path(absolute).parent
            name = ""
        elif _GLOB_CHARS.search(given):
            kind, key, anchor = "glob", pattern_root(given), Path(_glob_root(absolute))
            name = anchor.resolve().name
        else:
            raise ConfigurationError(f"path {given!r} does not exist")
        prefix = base + (name + "/" if several and name else "")
        roots.append(Root(given, kind, key, anchor, prefix))
    for i, a in enumerate(roots):
        for b in roots[i + 1:]:
            if a.kind != "glob" and b.kind != "glob":
                if a.key == b.key:
                    raise ConfigurationError(f"roots {a.given!r} and {b.given!r} are the same ({a.key}); give it once")
                inner, outer = (a, b) if _inside(a.key, b.key) else (b, a) if _inside(b.key, a.key) else (None, None)
                if inner is not None and outer is not None:
                    raise ConfigurationError(f"root {inner.given!r} lies inside root {outer.given!r} ({inner.key}); "
                                             "give only one of them")
            if a.kind != "file" and b.kind != "file" and a.prefix == b.prefix:
                raise ConfigurationError(
                    f"roots {a.key} and {b.key} would share the id namespace {a.prefix!r}; ingest them in "
                    "separate commands with different --id-prefix values")
    return roots


def _inside(path: str, folder: str) -> bool:
    return Path(folder) in Path(path).parents


@dataclass
class Reading:
    """What reading every root gave: entries (file entries tagged with their root), skips,
    JSONL edges and vectors, the number of files read, the root of each entry id, and the
    history JSONL exports carried (:attr:`FileLoader.recorded <tnsrag_db._loaders.FileLoader.recorded>`)."""

    entries: list[MemoryEntry]
    skipped: list[dict[str, Any]]
    edges: list[Any]
    vectors: dict[Any, dict[str, Any]]
    files_read: int
    root_of: dict[str, Root]
    recorded: Recorded = field(default_factory=Recorded)


#: ``progress(files_done, files_known, bytes_done, bytes_known)`` of a read, over all roots.
ReadProgress = Callable[[int, int, int, int], None]


def read_roots(roots: Sequence[Root], make_loader: Callable[[Root], Any],
               progress: ReadProgress | None = None) -> Reading:
    """Read every root with the loader ``make_loader(root)`` returns (one
    :class:`~tnsrag_db._loaders.FileLoader` each), ``progress(files_done, files_known,
    bytes_done, bytes_known)`` counting files and their bytes over all roots (those of a
    root are known once its reading begins): :func:`iter_roots` read to its end, the entries kept.

    Raises :class:`InvalidEntryError` when two files give one id, naming both absolute paths.
    """
    reading = Reading([], [], [], {}, 0, {})
    reading.entries.extend(iter_roots(roots, make_loader, reading, progress))
    return reading


def iter_roots(roots: Sequence[Root], make_loader: Callable[[Root], Any], reading: Reading,
               progress: ReadProgress | None = None) -> Iterator[MemoryEntry]:
    """The entries of every root, yielded as each file is read (so a caller can write them
    while later files are still being read); ``reading`` collects the rest as each root
    ends: skips, JSONL edges and vectors, files read and each entry's root
    (``reading.entries`` is left to the caller). ``progress`` as in :func:`read_roots`.

    An entry read from a file carries its root's :data:`ROOT_KEY` (the loader, reading
    relative to the pattern, records it); JSONL records keep their metadata as written (a
    restore is exact).
    Raises :class:`InvalidEntryError` when two files give one id, naming both absolute paths
    (when it is met: entries yielded before stay yielded).
    """
    done_before = known_before = bytes_before = 0
    first: dict[str, str] = {}
    for root in roots:
        loader = make_loader(root)
        files = [0, 0]  # done, total of this root
        sizes = [0, 0]

        def step(done: int, total: int) -> None:
            files[:] = [done, total]

        def step_bytes(done: int, total: int) -> None:
            sizes[:] = [done, total]
            if progress is not None:  # after step, for the same file
                progress(done_before + files[0], known_before + files[1], bytes_before + done, bytes_before + total)

        for entry in loader.load(progress=step, byte_progress=step_bytes):
            path = entry.metadata.get("path")
            origin = root.origin(path) if path is not None else root.key
            seen = first.setdefault(entry.id, origin)
            if entry.id in reading.root_of:
                raise InvalidEntryError(
                    f"entry id {entry.id!r} comes from both {seen} and {origin}; ingest them in separate commands "
                    "with different --id-prefix values", entry_id=entry.id)
            reading.root_of[entry.id] = root
            yield entry
        done_before += files[1]
        known_before += files[1]
        bytes_before += sizes[1]
        reading.skipped += [{"path": s.path, "reason": s.reason, "files": s.files} for s in loader.skipped]
        reading.edges += list(loader.edges)
        for space, vectors in loader.vectors.items():
            reading.vectors.setdefault(space, {}).update(vectors)
        reading.recorded.rows += loader.recorded.rows
        reading.recorded.since.update(loader.recorded.since)
        reading.files_read += loader.files_read


_STALE_SQL = "SELECT id FROM entries WHERE corpus = :c AND metadata->>'root' = ANY(CAST(:roots AS text[]))"


def stale_ids(store: Any, roots: Sequence[Root], kept: set[str]) -> list[str]:
    """Ids ``--prune`` removes: entries read earlier from one of ``roots`` (their recorded
    root, whatever ``--id-prefix`` they were read under) that this run did not produce
    (``kept``): entries of deleted files, chunks a changed file no longer has, ids of an
    earlier namespace. Entries of other roots and entries without a recorded root (JSONL
    records, entries written before roots were recorded) are never among them."""
    rows = store.read(_STALE_SQL, {"c": store.corpus, "roots": sorted({r.key for r in roots})})
    return sorted(row.id for row in rows if row.id not in kept)


def check_roots(store: Any, roots: Sequence[Root], claims: Mapping[str, str]) -> None:
    """Raise :class:`~tnsrag_db._errors.IdCollisionError` before anything is written when the
    corpus holds entries another root wrote at the file paths of ``claims`` (id path -> the
    key of the root reading it now; :meth:`FileLoader.claims`), naming the first stored ids
    and both roots and saying how to keep them apart: ``--id-prefix``, or deleting the
    other root's entries when that folder moved or is gone."""
    by_key = {r.key: r for r in roots}

    def advice(key: str, owner: str) -> str:
        root = by_key.get(key)
        name = (root.anchor.resolve().name if root is not None and root.kind != "file" else Path(key).name) or "x"
        return (f"ingest {key} under ids of its own with --id-prefix (e.g. --id-prefix {shlex.quote(name)}), or, "
                f"if {owner} moved or is gone, delete its entries first: tnsrag delete --corpus "
                f"{shlex.quote(store.corpus)} --filter {shlex.quote(f'{ROOT_KEY}={owner}')}")

    check_owners(store, claims, advice)
