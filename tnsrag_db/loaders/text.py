"""Markdown (one entry per heading section, nested by heading level) and plain text (chunks)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tnsrag_db.chunking import Chunker
from tnsrag_db.types import MemoryEntry, MemoryTier

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")


def _entry(tier: MemoryTier, entry_id: str, content: str, rel: str, metadata: dict[str, str],
           parent: str | None = None) -> MemoryEntry:
    return MemoryEntry(entry_id, content, tier, source=rel, parent_id=parent, metadata=metadata)


def _markdown(rel: str, text: str, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
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
    stack: list[tuple[int, str, str]] = []  # (level, id, title) of the open sections
    for index, (level, title, lines) in enumerate(sections):
        content = "\n".join(lines).strip()
        if index == 0 and not content:
            continue
        while stack and stack[-1][0] >= level:
            stack.pop()
        entry_id = f"{rel}#{index}"
        parent = stack[-1][1] if stack else None
        path_titles = [t for _, _, t in stack if t] + ([title] if title else [])
        metadata = {"path": rel, "format": "markdown"}
        if title:
            metadata["section"] = title
            metadata["headingPath"] = " > ".join(path_titles)
        parts = chunker.chunks(content) if not chunker.fits(content) else [content]
        yield _entry(tier, entry_id, parts[0], rel, metadata, parent)
        for n, part in enumerate(parts[1:], start=1):
            yield _entry(tier, f"{entry_id}.{n}", part, rel, {**metadata, "part": str(n)}, entry_id)
        stack.append((level, entry_id, title))


def _text(rel: str, text: str, chunker: Chunker, tier: MemoryTier, fmt: str = "text",
          extra: dict[str, str] | None = None, start: int = 0) -> Iterator[MemoryEntry]:
    for index, chunk in enumerate(chunker.chunks(text), start=start):
        yield _entry(tier, f"{rel}#{index}", chunk, rel, {"path": rel, "format": fmt, **(extra or {})})
