"""Turn files into memory entries, for the CLI and for declarative knowledge sources.

:class:`FileLoader` reads paths, directories and globs: Markdown (one entry per heading
section, each a child of its enclosing section), plain text (paragraph chunks of about
2,000 characters) and JSONL (one entry per line). Anything with ``load() ->
Iterable[MemoryEntry]`` is a :class:`SourceLoader`.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tnsrag_db.errors import ConfigurationError, InvalidEntryError
from tnsrag_db.types import MemoryEntry, MemoryTier, parse_instant

if TYPE_CHECKING:
    from tnsrag_db.indexes.graph import Edge

__all__ = ["FileLoader", "SourceLoader"]

#: File name suffixes :class:`FileLoader` reads when it walks a directory, by format.
_FORMATS = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text", ".rst": "text",
            ".jsonl": "jsonl"}
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_GLOB_CHARS = re.compile(r"[*?\[]")
_TEXT_CHUNK = 2000


@runtime_checkable
class SourceLoader(Protocol):
    """Anything with ``load() -> Iterable[MemoryEntry]``; each entry carries its own metadata.

    Entries keep the ids, tiers, sources, parents, timestamps and metadata the loader
    gives them; an entry without a ``source`` gets the knowledge source's ``name``. An
    optional ``name`` attribute names the source (default: the loader's class name).
    The metadata a loader attaches is filterable with ``@retrieval(metadata_filters=...)``.
    """

    def load(self) -> Iterable[MemoryEntry]:
        """Every entry of the source (ids must be unique across the role's sources)."""
        ...


class FileLoader:
    """Reads text (``.txt``, ``.text``, ``.rst``), Markdown (``.md``, ``.markdown``) and JSONL files.

    ``patterns`` are file paths, directories (walked recursively for the suffixes above)
    or globs (``**`` recurses); relative ones resolve against ``base_dir`` (default: the
    current directory). Entry ids and sources are the files' paths relative to
    ``base_dir`` (posix form), so they are the same on every machine.

    * Markdown: one entry per heading section (id ``path#n``), the text before the first
      heading included as section 0; ``parent_id`` is the enclosing section, so sections
      form a hierarchy; metadata ``path``, ``format``, ``section`` (the heading text) and
      ``headingPath`` (``A > B``).
    * Text: blank-line paragraphs grouped into chunks of at most ~2,000 characters (id ``path#n``).
    * JSONL: one object per non-blank line with ``content`` (or ``text``) and optional
      ``id`` (default ``path#line``), ``tier``, ``source`` (default the path; ``null``
      means none), ``parentId``, ``timestamp`` (ISO-8601 with a zone), ``metadata`` (str to
      str) and ``edges`` (outgoing: ``[{"dst", "relation", "weight", "source"}]``, returned
      by :attr:`edges`): the export format of ``tnsrag export``, read back exactly.

    ``tier`` (default SEMANTIC) is the tier of Markdown and text entries and of JSONL
    lines without one. Raises :class:`ConfigurationError` at load time for a pattern
    that matches nothing and :class:`InvalidEntryError` for a bad JSONL line.
    """

    def __init__(self, *patterns: str | os.PathLike[str], base_dir: str | os.PathLike[str] | None = None,
                 tier: MemoryTier | str = MemoryTier.SEMANTIC, encoding: str = "utf-8") -> None:
        if not patterns:
            raise ConfigurationError("FileLoader needs at least one path, directory or glob")
        for pattern in patterns:
            if not isinstance(pattern, (str, os.PathLike)) or not str(pattern).strip():
                raise ConfigurationError(f"file patterns must be non-blank paths, got {pattern!r}")
        try:
            self._tier = MemoryTier.parse(tier)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self._patterns = tuple(os.fspath(p) for p in patterns)
        self._base = Path(base_dir) if base_dir is not None else None
        self._encoding = encoding
        self._edges: list[Edge] = []

    @property
    def name(self) -> str:
        """The patterns joined with ``,`` (the default name of a knowledge source)."""
        return ",".join(self._patterns)

    @property
    def patterns(self) -> tuple[str, ...]:
        """The patterns as given."""
        return self._patterns

    @property
    def edges(self) -> tuple[Edge, ...]:
        """The edges the JSONL records of the last :meth:`load` carried (``"edges"`` field),
        complete once that load has been consumed."""
        return tuple(self._edges)

    def __repr__(self) -> str:
        return f"FileLoader({', '.join(map(repr, self._patterns))}, base_dir={str(self._base)!r})"

    def files(self) -> list[Path]:
        """The files the patterns select, each once, in pattern order then path order."""
        base = self._base if self._base is not None else Path.cwd()
        found: list[Path] = []
        seen: set[Path] = set()
        for pattern in self._patterns:
            full = pattern if os.path.isabs(pattern) else str(base / pattern)
            if _GLOB_CHARS.search(pattern):
                matches = [Path(m) for m in sorted(glob.glob(full, recursive=True)) if os.path.isfile(m)]
            elif os.path.isdir(full):
                matches = sorted(p for p in Path(full).rglob("*") if p.is_file() and p.suffix.lower() in _FORMATS)
            elif os.path.isfile(full):
                matches = [Path(full)]
            else:
                matches = []
            if not matches:
                raise ConfigurationError(f"knowledge source pattern {pattern!r} matched no files (looked in {base})")
            for match in matches:
                resolved = match.resolve()
                if resolved not in seen:
                    seen.add(resolved)
                    found.append(match)
        return found

    def load(self) -> Iterable[MemoryEntry]:
        """Read every selected file into entries (see the class docstring)."""
        base = (self._base if self._base is not None else Path.cwd()).resolve()
        self._edges = []
        for path in self.files():
            resolved = path.resolve()
            try:
                rel = resolved.relative_to(base).as_posix()
            except ValueError:
                rel = resolved.as_posix()
            fmt = _FORMATS.get(path.suffix.lower(), "text")
            text = path.read_text(encoding=self._encoding)
            if fmt == "markdown":
                yield from self._markdown(rel, text)
            elif fmt == "jsonl":
                yield from self._jsonl(rel, text)
            else:
                yield from self._text(rel, text)

    def _markdown(self, rel: str, text: str) -> Iterator[MemoryEntry]:
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
            yield MemoryEntry(entry_id, content, self._tier, source=rel, parent_id=parent, metadata=metadata)
            stack.append((level, entry_id, title))

    def _text(self, rel: str, text: str) -> Iterator[MemoryEntry]:
        paragraphs = [p.strip() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
        chunks: list[str] = []
        for paragraph in paragraphs:
            if chunks and len(chunks[-1]) + 2 + len(paragraph) <= _TEXT_CHUNK:
                chunks[-1] += "\n\n" + paragraph
            else:
                chunks.append(paragraph)
        for index, chunk in enumerate(chunks):
            yield MemoryEntry(f"{rel}#{index}", chunk, self._tier, source=rel,
                              metadata={"path": rel, "format": "text"})

    def _jsonl(self, rel: str, text: str) -> Iterator[MemoryEntry]:
        # The record format is the export format of tnsrag_db.admin (see its docstring):
        # a present "source": null stays None, "timestamp" is the entry's timestamp, and
        # "edges" (outgoing, {"dst", "relation", "weight", "source"}) are collected for
        # the caller in self.edges.
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{rel}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidEntryError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise InvalidEntryError(f"{where}: each line must be a JSON object")
            content = obj.get("content", obj.get("text"))
            if not isinstance(content, str):
                raise InvalidEntryError(f"{where}: needs a string 'content' (or 'text') field")
            metadata = obj.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise InvalidEntryError(f"{where}: 'metadata' must be an object of strings")
            stamp = obj.get("timestamp")
            try:
                if stamp is not None and not isinstance(stamp, str):
                    raise InvalidEntryError(f"'timestamp' must be an ISO-8601 string, got {stamp!r}")
                entry = MemoryEntry(
                    str(obj.get("id") or f"{rel}#{lineno}"), content, obj.get("tier") or self._tier,
                    source=None if "source" in obj and obj["source"] is None else (obj.get("source") or rel),
                    parent_id=obj.get("parentId", obj.get("parent_id")),
                    timestamp=parse_instant(stamp) if stamp else None, metadata=metadata,
                )
                edges = self._record_edges(entry.id, obj.get("edges"))
            except (InvalidEntryError, ValueError) as exc:
                raise InvalidEntryError(f"{where}: {exc}") from None
            self._edges.extend(edges)
            yield entry

    @staticmethod
    def _record_edges(src: str, raw: object) -> list[Edge]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise InvalidEntryError(f"'edges' must be a list of objects, got {type(raw).__name__}")
        from tnsrag_db.indexes.graph import DEFAULT_RELATION, Edge

        out: list[Edge] = []
        for n, item in enumerate(raw):
            if not isinstance(item, dict):
                raise InvalidEntryError(f"edge {n} must be an object with 'dst'")
            unknown = sorted(set(item) - {"dst", "relation", "weight", "source"})
            if unknown:
                raise InvalidEntryError(f"edge {n}: unknown field(s) {', '.join(unknown)}; "
                                        "expected dst, relation, weight, source")
            relation = item.get("relation")
            weight = item.get("weight")
            dst: Any = item.get("dst")  # Edge checks every field
            out.append(Edge(src, dst, DEFAULT_RELATION if relation is None else relation,
                            1.0 if weight is None else weight, item.get("source")))
        return out
