"""Markdown (one entry per heading section, nested by heading level) and plain text (chunks).

The section machinery is shared with HTML (:mod:`.html`): a format splits its text into
:class:`Section` records (level, heading, text), and :func:`_sections` turns them into
entries, the same way for every format.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from tnsrag_db._chunking import Chunker
from tnsrag_db._types import MemoryEntry, MemoryTier

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
#: A MyST target line, ``(requirements-file-format)=``: an anchor for cross-references
#: (Sphinx docs written in Markdown put one before a heading), no text of its own.
_MYST_LABEL = re.compile(r"^[ \t]{0,3}\([^()\s][^()]*\)=[ \t]*$")


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
    section 0 is the text before the first heading (possibly empty). MyST target lines
    (``(label)=``) outside code fences are left out: an entry of one would be a label
    that ranks for its words."""
    sections: list[tuple[int, str, list[str]]] = [(0, "", [])]
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _MYST_LABEL.match(line):
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            sections.append((len(heading.group(1)), heading.group(2).strip(), [line]))
        else:
            sections[-1][2].append(line)
    return [Section(level, title, "\n".join(lines).strip()) for level, title, lines in sections]


def _has_body(section: Section) -> bool:
    """Whether ``section`` holds text besides its heading (its first line, for a heading)."""
    if section.level == 0:
        return bool(section.content)
    return bool(section.content.partition("\n")[2].strip())


def _sections(rel: str, sections: Sequence[Section], chunker: Chunker, tier: MemoryTier, fmt: str,
              extra: dict[str, str] | None = None) -> Iterator[MemoryEntry]:
    """One entry per section (id ``rel#n``, ``n`` its position, section 0 the text before the
    first heading, skipped when empty), whose parent is the enclosing section (the nearest
    earlier one of a lower level); metadata ``section`` and ``headingPath`` (``A > B``). A
    section larger than a chunk keeps its first chunk and gets the rest as child entries
    ``rel#n.1``, ... (metadata ``part``).

    A heading with no text of its own is no entry: when subsections follow it, its heading
    goes in front of the first one's text (so it stays searchable, in reading order) and
    its subsections are children of its own parent (every ``parent_id`` names an entry
    that exists; the heading still appears in their ``headingPath``); a heading with
    neither text nor subsections heads nothing and is left out."""
    stack: list[tuple[int, str | None, str]] = []  # (level, id children take as parent, title)
    waiting: list[tuple[int, str]] = []  # (level, heading) of text-less headings not yet folded in
    for index, section in enumerate(sections):
        level, title, content = section
        if index == 0 and not content:
            continue
        while stack and stack[-1][0] >= level:
            stack.pop()
        waiting = [(lvl, heading) for lvl, heading in waiting if lvl < level]
        parent = stack[-1][1] if stack else None
        path_titles = [t for _, _, t in stack if t] + ([title] if title else [])
        if index > 0 and not _has_body(section):
            if index + 1 < len(sections) and sections[index + 1].level > level:
                waiting.append((level, content))
                stack.append((level, parent, title))
            continue
        entry_id = f"{rel}#{index}"
        if waiting:
            content = "\n\n".join([*(heading for _, heading in waiting), content])
            waiting = []
        metadata = {"path": rel, "format": fmt, **(extra or {})}
        if title:
            metadata["section"] = title
            metadata["headingPath"] = " > ".join(path_titles)
        parts = chunker.chunks(content)  # [content] when it fits (it is stripped and not blank)
        yield _entry(tier, entry_id, parts[0], rel, metadata, parent)
        for n, part in enumerate(parts[1:], start=1):
            yield _entry(tier, f"{entry_id}.{n}", part, rel, {**metadata, "part": str(n)}, entry_id)
        stack.append((level, entry_id, title))


def _markdown(rel: str, text: str, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
    yield from _sections(rel, _markdown_sections(text), chunker, tier, "markdown")


def _text(rel: str, text: str, chunker: Chunker, tier: MemoryTier, fmt: str = "text",
          extra: dict[str, str] | None = None, start: int = 0) -> Iterator[MemoryEntry]:
    for index, chunk in enumerate(chunker.iter_chunks(text), start=start):
        yield _entry(tier, f"{rel}#{index}", chunk, rel, {"path": rel, "format": fmt, **(extra or {})})
