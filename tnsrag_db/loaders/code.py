"""Source code: chunks that begin at top-level definitions and break at blank lines, lines kept."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tnsrag_db.chunking import Chunker
from tnsrag_db.loaders.text import _entry
from tnsrag_db.types import MemoryEntry, MemoryTier

# A line that starts a definition at the top level, in the common languages: code chunks
# begin there when they can.
_DEFINITION = re.compile(
    r"^(?:@\w|(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function|func|fn|interface|struct|enum|"
    r"trait|impl|module|type|const|let|var|package|namespace|object|sub|proc)\b|"
    r"(?:pub(?:\([^)]*\))?|public|private|protected|internal|static|abstract|final)\s)")


def _code(rel: str, text: str, language: str, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
    metadata = {"path": rel, "format": "code", "language": language}
    for index, chunk in enumerate(_code_chunks(text, chunker)):
        yield _entry(tier, f"{rel}#{index}", chunk, rel, metadata)


def _code_chunks(text: str, chunker: Chunker) -> list[str]:
    """Source code in chunks that keep its lines: a chunk begins at a top-level definition
    when it can and breaks at blank lines; oversized blocks break between lines."""
    lines = text.splitlines()
    # Blocks: runs of lines separated by blank lines, a top-level definition (after a
    # blank line, or the decorators/comments right before it) starting a new one.
    blocks: list[tuple[str, bool]] = []  # (text, starts a definition)
    current: list[str] = []
    starts_def = False
    for line in lines:
        if not line.strip():
            if current:
                blocks.append(("\n".join(current), starts_def))
                current, starts_def = [], False
            continue
        if _DEFINITION.match(line) and current and not _DEFINITION.match(current[-1]) \
                and not current[-1].lstrip().startswith(("#", "//", "/*", "*", "@")):
            blocks.append(("\n".join(current), starts_def))
            current, starts_def = [], False
        if not current:
            starts_def = bool(_DEFINITION.match(line))
        current.append(line)
    if current:
        blocks.append(("\n".join(current), starts_def))
    chunks: list[str] = []
    pending: list[str] = []
    size = 0
    half = chunker.max_tokens // 2
    for block, is_def in blocks:
        pieces = [block] if chunker.fits(block) else _split_lines(block, chunker)
        for n, piece in enumerate(pieces):
            cost = chunker.count(piece + "\n\n")
            # A definition starts a chunk of its own once the current one is half full.
            if pending and (size + cost > chunker.max_tokens or (is_def and n == 0 and size >= half)):
                chunks.append("\n\n".join(pending))
                pending, size = [], 0
            pending.append(piece)
            size += cost
    if pending:
        chunks.append("\n\n".join(pending))
    return [c.strip("\n") for c in chunks if c.strip()]


def _split_lines(block: str, chunker: Chunker) -> list[str]:
    """An oversized block cut between lines (a line too long for a chunk: between words)."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for line in block.split("\n"):
        cost = chunker.count(line + "\n")
        if cost > chunker.max_tokens:
            if current:
                out.append("\n".join(current))
                current, size = [], 0
            out.extend(chunker.chunks(line))
            continue
        if current and size + cost > chunker.max_tokens:
            out.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += cost
    if current:
        out.append("\n".join(current))
    return out
