"""Markdown (one entry per heading section, nested by heading level) and plain text (chunks).

The section machinery is shared with HTML (:mod:`.html`): a format splits its text into
:class:`Section` records (level, heading, text), and :func:`_sections` turns them into
entries, the same way for every format.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from tnsrag_db.chunking import Chunker
from tnsrag_db.types import MemoryEntry, MemoryTier

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")


class Section(NamedTuple):
    """One section of a document: heading ``level`` (1-6; 0 for the text before the first
    heading), its heading ``title`` ("" for section 0) and its ``content`` (heading included)."""

    level: int
    title: str
    content: str


def _entry(tier: MemoryTier, entry_id: str, content: str, rel: str, metadata: dict[str, str],
           parent: str | None = None) -> MemoryEntry:
    return MemoryEntry(entry_id, content, tier, source=rel, parent_id=parent, metadata=metadata)


def _markdown_sections(text: str) -> list[Section]:
    """``text`` split at its ATX headings (``#`` to ``######``, not inside code fences);
    section 0 is the text before the first heading (possibly empty)."""
    sections: list[tuple[int, str, list[str]]] = [(0, "", [])]
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            sections.append((len(heading.group(1)), heading.group(2).strip(), [line]))
        else:
            sections[-1][2].append(line)
    return [Section(level, title, "\n".join(lines).strip()) for level, title, lines in sections]


def _sections(rel: str, sections: Iterable[Section], chunker: Chunker, tier: MemoryTier, fmt: str,
              extra: dict[str, str] | None = None) -> Iterator[MemoryEntry]:
    """One entry per section (id ``rel#n``, ``n`` its position, section 0 the text before the
    first heading, skipped when empty), whose parent is the enclosing section (the nearest
    earlier one of a lower level); metadata ``section`` and ``headingPath`` (``A > B``). A
    section larger than a chunk keeps its first chunk and gets the rest as child entries
    ``rel#n.1``, ... (metadata ``part``)."""
    stack: list[tuple[int, str, str]] = []  # (level, id, title) of the open sections
    for index, (level, title, content) in enumerate(sections):
        if index == 0 and not content:
            continue
        while stack and stack[-1][0] >= level:
            stack.pop()
        entry_id = f"{rel}#{index}"
        parent = stack[-1][1] if stack else None
        path_titles = [t for _, _, t in stack if t] + ([title] if title else [])
        metadata = {"path": rel, "format": fmt, **(extra or {})}
        if title:
            metadata["section"] = title
            metadata["headingPath"] = " > ".join(path_titles)
        parts = chunker.chunks(content) if not chunker.fits(content) else [content]
        yield _entry(tier, entry_id, parts[0], rel, metadata, parent)
        for n, part in enumerate(parts[1:], start=1):
            yield _entry(tier, f"{entry_id}.{n}", part, rel, {**metadata, "part": str(n)}, entry_id)
        stack.append((level, entry_id, title))


def _markdown(rel: str, text: str, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
    yield from _sections(rel, _markdown_sections(text), chunker, tier, "markdown")


def _text(rel: str, text: str, chunker: Chunker, tier: MemoryTier, fmt: str = "text",
          extra: dict[str, str] | None = None, start: int = 0) -> Iterator[MemoryEntry]:
    for index, chunk in enumerate(chunker.chunks(text), start=start):
        yield _entry(tier, f"{rel}#{index}", chunk, rel, {"path": rel, "format": fmt, **(extra or {})})
