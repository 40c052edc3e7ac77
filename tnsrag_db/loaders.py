"""Turn files into memory entries: plain text, Markdown (sections under the file) and JSONL.

- ``.txt`` (and any other text file): one entry per file, id = the path as given.
- ``.md`` / ``.markdown``: one entry for the file (its title and the text before the
  first heading) and one per heading section, each section a child of the file
  entry (``parent_id``), so hierarchical and reasoning retrieval see the structure.
- ``.jsonl``: one entry per line, an object with ``id`` and ``content`` and optional
  ``tier``, ``source``, ``parent_id``, ``timestamp`` (ISO-8601 with zone), ``metadata``.

Errors name the file and line: :class:`InvalidEntryError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from tnsrag_db.errors import InvalidEntryError, TnsragError
from tnsrag_db.types import MemoryEntry, MemoryTier, parse_instant

__all__ = ["SUPPORTED_SUFFIXES", "expand_paths", "load_file", "load_paths"]

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".jsonl")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly plus supported files found (recursively) in named directories, sorted."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES))
        elif path.is_file():
            out.append(path)
        else:
            raise InvalidEntryError(f"no such file or directory: {path}")
    return out


def _entry(path: Path, line: int | None, **fields: object) -> MemoryEntry:
    where = f"{path}:{line}" if line is not None else str(path)
    try:
        return MemoryEntry(**fields)  # type: ignore[arg-type]
    except TnsragError as exc:
        raise InvalidEntryError(f"{where}: {exc}") from exc
    except TypeError as exc:
        raise InvalidEntryError(f"{where}: {exc}") from exc


def load_file(path: Path, *, tier: MemoryTier | str = MemoryTier.SEMANTIC, source: str | None = None,
              metadata: Mapping[str, str] | None = None) -> Iterator[MemoryEntry]:
    """Entries of one file; ``tier``, ``source`` (default: the path) and ``metadata`` apply to
    every entry that does not set its own."""
    meta = dict(metadata or {})
    src = source or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidEntryError(f"{path}: cannot read as UTF-8 text: {exc}") from exc
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        yield from _load_jsonl(path, text, tier, src, meta)
    elif suffix in (".md", ".markdown"):
        yield from _load_markdown(path, text, tier, src, meta)
    else:
        yield _entry(path, None, id=str(path), content=text, tier=tier, source=src, metadata=meta)


def _load_markdown(path: Path, text: str, tier: MemoryTier | str, source: str,
                   meta: dict[str, str]) -> Iterator[MemoryEntry]:
    headings = list(_HEADING.finditer(text))
    file_id = str(path)
    if not headings:
        yield _entry(path, None, id=file_id, content=text, tier=tier, source=source, metadata=meta)
        return
    if headings[0].group(1) == "#":
        # A leading "# Title": the file entry holds the title and its text up to the next heading.
        title, sections = headings[0].group(2), headings[1:]
        intro_end = sections[0].start() if sections else len(text)
        intro = text[headings[0].end():intro_end].strip()
    else:
        title, sections = path.stem, headings
        intro = text[: headings[0].start()].strip()
    yield _entry(path, None, id=file_id, content=f"{title}\n\n{intro}".strip(), tier=tier, source=source,
                 metadata=meta)
    for n, match in enumerate(sections):
        end = sections[n + 1].start() if n + 1 < len(sections) else len(text)
        body = text[match.start():end].strip()
        line = text.count("\n", 0, match.start()) + 1
        yield _entry(path, line, id=f"{file_id}#{n + 1}", content=body, tier=tier, source=source,
                     parent_id=file_id, metadata={**meta, "section": match.group(2)})


def _load_jsonl(path: Path, text: str, tier: MemoryTier | str, source: str,
                meta: dict[str, str]) -> Iterator[MemoryEntry]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidEntryError(f"{path}:{number}: invalid JSON: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise InvalidEntryError(f"{path}:{number}: expected a JSON object")
        unknown = set(obj) - {"id", "content", "tier", "source", "parent_id", "timestamp", "metadata"}
        if unknown:
            raise InvalidEntryError(f"{path}:{number}: unknown field(s) {', '.join(sorted(unknown))}")
        ts = obj.get("timestamp")
        try:
            stamp = parse_instant(ts) if isinstance(ts, str) else ts
        except TnsragError as exc:
            raise InvalidEntryError(f"{path}:{number}: {exc}") from exc
        yield _entry(path, number, id=obj.get("id"), content=obj.get("content"), tier=obj.get("tier", tier),
                     source=obj.get("source", source), parent_id=obj.get("parent_id"), timestamp=stamp,
                     metadata={**meta, **(obj.get("metadata") or {})})


def load_paths(paths: Iterable[str | Path], **options: object) -> Iterator[MemoryEntry]:
    """Entries of every file under ``paths`` (see :func:`expand_paths`); options as :func:`load_file`."""
    for path in expand_paths(paths):
        yield from load_file(path, **options)  # type: ignore[arg-type]
