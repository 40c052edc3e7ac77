"""Source code: chunks that begin at top-level definitions and break at blank lines, lines kept."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tnsrag_db._chunking import Chunker
from tnsrag_db._loaders.text import _entry
from tnsrag_db._types import MemoryEntry, MemoryTier

# A line that starts a definition at the top level, in the common languages: code chunks
# begin there when they can.
_DEFINITION = re.compile(
    r"^(?:@\w|(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function|func|fn|interface|struct|enum|"
    r"trait|impl|module|type|const|let|var|package|namespace|object|sub|proc)\b|"
    r"(?:pub(?:\([^)]*\))?|public|private|protected|internal|static|abstract|final)\s)")


#: A top-level line that opens a scope a later chunk may sit inside (decorators, comments
#: and plain statements do not).
_SCOPE = re.compile(r"^(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function|func|fn|interface|struct|"
                    r"enum|trait|impl|module|namespace|object|sub|proc)\b")


def _code(rel: str, text: str, language: str, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
    metadata = {"path": rel, "format": "code", "language": language}
    lines = text.splitlines()
    search = 0  # the line the search for the next chunk's first line starts at: the last one's last line
    scanned = 0  # the lines above this one are read for ``scope``
    scope = ""  # the last top-level definition line above ``scanned``
    for index, chunk in enumerate(_code_chunks(text, chunker)):
        first = chunk.split("\n", 1)[0]
        start = next((n for n in range(search, len(lines)) if first in lines[n]), search)
        for line in lines[scanned:start]:
            if _SCOPE.match(line):
                scope = line
            elif line.strip() and not line[0].isspace() and not line.lstrip().startswith(("#", "//", "/*", "*", "@")):
                scope = ""  # top-level code after the definition ended it
        scanned = max(scanned, start)
        search = start + chunk.count("\n")
        inside = bool(scope) and start < len(lines) and lines[start][:1].isspace()
        extra = {"definition": " ".join(scope.split())[:200]} if inside else {}
        yield _entry(tier, f"{rel}#{index}", chunk, rel, {**metadata, **extra})


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
    pack = _Packer("\n\n", chunker.max_tokens)
    half = chunker.max_tokens // 2
    for block, is_def in blocks:
        pieces = [block] if chunker.fits(block) else _split_lines(block, chunker)
        for n, piece in enumerate(pieces):
            # A definition starts a chunk of its own once the current one is half full.
            pack.add(piece, chunker.count(piece + "\n\n"), fresh=is_def and n == 0 and pack.size >= half)
    pack.flush()
    return [c.strip("\n") for c in pack.chunks if c.strip()]


def _split_lines(block: str, chunker: Chunker) -> list[str]:
    """An oversized block cut between lines (a line too long for a chunk: between words)."""
    pack = _Packer("\n", chunker.max_tokens)
    for line in block.split("\n"):
        cost = chunker.count(line + "\n")
        if cost > chunker.max_tokens:
            pack.flush()
            pack.chunks.extend(chunker.chunks(line))
        else:
            pack.add(line, cost)
    pack.flush()
    return pack.chunks


class _Packer:
    """Pieces gathered into chunks of at most ``limit`` tokens (a piece larger than that
    stands alone), each chunk its pieces joined with ``sep``; :attr:`chunks` so far."""

    def __init__(self, sep: str, limit: int) -> None:
        self._sep = sep
        self._limit = limit
        self._pending: list[str] = []
        self.size = 0  # tokens in the chunk being gathered
        self.chunks: list[str] = []

    def add(self, piece: str, cost: int, *, fresh: bool = False) -> None:
        """Add ``piece`` (``cost`` tokens), ending the current chunk first when the piece
        would overflow it or ``fresh`` asks for a new one."""
        if self._pending and (fresh or self.size + cost > self._limit):
            self.flush()
        self._pending.append(piece)
        self.size += cost

    def flush(self) -> None:
        """End the current chunk (if it has any piece)."""
        if self._pending:
            self.chunks.append(self._sep.join(self._pending))
            self._pending, self.size = [], 0
