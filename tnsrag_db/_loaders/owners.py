"""Which root a file's ids belong to, and the check that keeps two roots from sharing them.

Ids read relative to a root (``copyright#0`` of ``/usr/share/doc/python3-six``) are the
same for every root holding a file of that relative path: a second folder with a
``copyright`` would silently replace the first one's entries. So each entry read relative
to its pattern records that root (metadata :data:`ROOT_KEY`: the absolute directory or
file, or the absolute glob, see :func:`pattern_root`), and a file path (the part of its
ids before ``#``) belongs to the root that first wrote it in a corpus: :func:`check_owners`
refuses, before anything is written, files whose paths hold entries another root wrote.
The same root read again (yesterday's command) owns its ids and updates them in place;
entries without a recorded root (JSONL records, older ingests) belong to no root.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tnsrag_db._errors import IdCollisionError
from tnsrag_db._loaders.walk import _GLOB_CHARS

__all__ = ["ROOT_KEY", "check_owners", "claims_of", "pattern_root"]

#: The metadata key holding the root an entry was read from.
ROOT_KEY = "root"

#: The colliding paths of a run: ``claims`` are the run's (id path, root) pairs, matched
#: to the corpus's entries by the metadata ``path`` each file entry carries (the GIN index
#: over (corpus, metadata) finds them per path; the equality lets the planner hash-join
#: one scan of the corpus instead when that is cheaper). One row per path met: its first
#: stored id and the root that wrote it.
_OWNERS_SQL = """
SELECT min(o.id) AS id, c.root AS root, min(o.metadata->>'root') AS owner
FROM unnest(CAST(:paths AS text[]), CAST(:roots AS text[])) AS c(path, root)
JOIN entries o ON o.corpus = :c AND o.metadata @> jsonb_build_object('path', c.path)
                  AND o.metadata->>'path' = c.path
WHERE o.metadata->>'root' <> c.root
GROUP BY c.path, c.root
ORDER BY 1
"""

#: Paths a refusal names in its message (the error's ``collisions`` holds them all).
_SHOWN = 5


def pattern_root(pattern: str | os.PathLike[str], base_dir: str | os.PathLike[str] | None = None) -> str:
    """The root of ``pattern`` as entries record it: an existing directory or file as its
    absolute path with symlinks resolved, a glob as the absolute glob (relative ones
    against ``base_dir``, default the current directory)."""
    given = os.fspath(pattern)
    full = given if os.path.isabs(given) else os.path.join(os.fspath(base_dir) if base_dir is not None
                                                           else os.getcwd(), given)
    absolute = os.path.abspath(full)
    if os.path.exists(absolute) or not _GLOB_CHARS.search(given):
        return str(Path(absolute).resolve())
    return absolute


def claims_of(selected: Iterable[tuple[Any, str, str | None]]) -> dict[str, str]:
    """The claims of ``(file, id path, root)`` triples (:meth:`FileLoader.selected_roots`):
    id path -> root, for the files that record one."""
    return {rel: root for _, rel, root in selected if root is not None}


def check_owners(store: Any, claims: Mapping[str, str],
                 advice: Callable[[str, str], str] | None = None) -> None:
    """Raise :class:`IdCollisionError` when the corpus of ``store`` holds entries that another
    root wrote at any of ``claims`` (id path -> the root it is read from now), naming the
    first stored ids and both roots, followed by ``advice(root, owner)`` (how to keep the
    two apart); one statement, nothing written. Entries without a recorded root are no one's."""
    if not claims:
        return
    paths = sorted(claims)
    rows = store.read(_OWNERS_SQL, {"c": store.corpus, "paths": paths, "roots": [claims[p] for p in paths]})
    if not rows:
        return
    collisions = tuple((row.id, row.root, row.owner) for row in rows)
    _, root, owner = collisions[0]
    pair = [c for c in collisions if c[1:] == (root, owner)]
    shown = ", ".join(repr(c[0]) for c in pair[:_SHOWN]) + (f" and {len(pair) - _SHOWN} more"
                                                           if len(pair) > _SHOWN else "")
    others = len(collisions) - len(pair)
    message = (f"corpus {store.corpus!r} holds entries read from {owner} at {len(pair)} of the file paths "
               f"read now from {root} ({shown})" + (f", and {others} more paths of other roots" if others else "")
               + ": the same relative paths give the same ids, so they would replace that root's entries; "
               "nothing was written" + (f"; {advice(root, owner)}" if advice is not None else ""))
    raise IdCollisionError(message, collisions=collisions)
