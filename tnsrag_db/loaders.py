"""Turn files into memory entries, for the CLI and for declarative knowledge sources.

:class:`FileLoader` reads paths, directories and globs of Markdown, plain text and reST,
JSONL, HTML, PDF and source code (by file name suffix; ``.gz`` files by the name inside).
Text encodings are detected (``charset-normalizer``); binary, empty and unreadable files
and, in directory walks, files of unknown type are skipped and listed in
:attr:`FileLoader.skipped` with the reason. Anything with ``load() ->
Iterable[MemoryEntry]`` is a :class:`SourceLoader`.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from tnsrag_db.chunking import Chunker
from tnsrag_db.errors import ConfigurationError, InvalidEntryError
from tnsrag_db.types import MemoryEntry, MemoryTier, parse_instant

if TYPE_CHECKING:
    from tnsrag_db.indexes.graph import Edge

__all__ = ["FileLoader", "SkippedFile", "SourceLoader", "file_format"]

#: File name suffixes :class:`FileLoader` reads when it walks a directory, by format.
_FORMATS = {".md": "markdown", ".markdown": "markdown", ".mdown": "markdown", ".mkd": "markdown",
            ".txt": "text", ".text": "text", ".rst": "text", ".rest": "text", ".adoc": "text",
            ".asciidoc": "text", ".org": "text", ".jsonl": "jsonl", ".ndjson": "jsonl",
            ".html": "html", ".htm": "html", ".xhtml": "html", ".pdf": "pdf"}
#: Source code suffixes and the ``language`` metadata they get.
_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript", ".java": "java", ".kt": "kotlin",
    ".kts": "kotlin", ".scala": "scala", ".groovy": "groovy", ".go": "go", ".rs": "rust", ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp", ".cs": "csharp",
    ".fs": "fsharp", ".swift": "swift", ".m": "objective-c", ".mm": "objective-c", ".rb": "ruby",
    ".php": "php", ".pl": "perl", ".pm": "perl", ".lua": "lua", ".r": "r", ".jl": "julia", ".hs": "haskell",
    ".ml": "ocaml", ".mli": "ocaml", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang", ".clj": "clojure",
    ".el": "emacs-lisp", ".lisp": "lisp", ".scm": "scheme", ".dart": "dart", ".zig": "zig", ".nim": "nim",
    ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".fish": "shell", ".ps1": "powershell",
    ".sql": "sql", ".vue": "vue", ".svelte": "svelte", ".css": "css", ".scss": "scss", ".less": "less",
    ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".cfg": "ini", ".json": "json",
    ".xml": "xml", ".proto": "protobuf", ".tf": "terraform", ".cmake": "cmake", ".mk": "make",
}
#: Files named like this (before the first dot, any case) are plain text whatever their suffix.
_TEXT_NAMES = {"readme", "changelog", "changes", "news", "history", "copying", "copyright", "license",
               "licence", "authors", "contributors", "credits", "thanks", "todo", "install", "notice",
               "bugs", "faq", "hacking", "contributing", "makefile", "dockerfile"}
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_GLOB_CHARS = re.compile(r"[*?\[]")
# A line that starts a definition at the top level, in the common languages: code chunks
# begin there when they can.
_DEFINITION = re.compile(
    r"^(?:@\w|(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function|func|fn|interface|struct|enum|"
    r"trait|impl|module|type|const|let|var|package|namespace|object|sub|proc)\b|"
    r"(?:pub(?:\([^)]*\))?|public|private|protected|internal|static|abstract|final)\s)")
#: Files larger than this are skipped (a document tree's huge files are data, not prose).
MAX_FILE_BYTES = 64 * 1024 * 1024
_HTML_DROP = ["script", "style", "noscript", "template", "svg", "iframe", "nav", "object", "canvas"]
_HTML_BLOCKS = ("p, div, li, dt, dd, tr, br, pre, blockquote, section, article, header, footer, aside, "
                "table, ul, ol, dl, h1, h2, h3, h4, h5, h6, hr, figure, figcaption, address, main, form")


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file a :class:`FileLoader` did not read: its path (as found from the pattern) and why."""

    path: str
    reason: str


class _Skip(Exception):
    """Raised while reading a file that is skipped, with the reason."""


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


def file_format(name: str) -> str | None:
    """The format :class:`FileLoader` reads a file named ``name`` as (``markdown``, ``text``,
    ``jsonl``, ``html``, ``pdf``, ``code``), or None for an unknown type. ``x.gz`` is read
    as ``x``."""
    lower = name.lower()
    if lower.endswith(".gz"):
        lower = lower[:-3]
    stem, dot, suffix = lower.rpartition(".")
    if not dot or not stem:  # no suffix (or a dot file): plain text
        return "text"
    ext = "." + suffix
    if ext in _FORMATS:
        return _FORMATS[ext]
    if ext in _LANGUAGES:
        return "code"
    if lower.split(".", 1)[0] in _TEXT_NAMES:
        return "text"
    return None


def _language(name: str) -> str:
    lower = name.lower().removesuffix(".gz")
    return _LANGUAGES.get(os.path.splitext(lower)[1], "text")


def _decode_text(data: bytes) -> str:
    """``data`` as text: UTF-8 (with or without BOM), a BOM-marked UTF-16/32, else the
    encoding ``charset-normalizer`` finds. Raises :class:`_Skip` for binary data."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        boms = {b"\xff\xfe\x00\x00": "utf-32", b"\x00\x00\xfe\xff": "utf-32"}
        encoding = boms.get(data[:4], "utf-16")
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            raise _Skip(f"binary (not valid {encoding} despite its byte-order mark)") from None
    if b"\x00" in data[:8192]:
        raise _Skip("binary")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    results = from_bytes(data)
    best = results.best()
    if best is not None:
        # On short Western European texts the detector ranks cp1250 and other code pages
        # level with cp1252 (chaos 0 for all) and picks the first, turning "è" into "č":
        # among equally plausible decodings take cp1252, the most common legacy one
        # (what browsers read "latin-1" labels as).
        tied = {m.encoding for m in results if m.chaos <= best.chaos + 0.02} | set(best.could_be_from_charset)
        return data.decode("cp1252", errors="replace") if "cp1252" in tied else str(best)
    # No code page fits without "chaos": read it as cp1252 (it maps all but five byte
    # values) unless it is full of control characters, the mark of binary data.
    text = data.decode("cp1252", errors="replace")
    controls = sum(1 for ch in text if (ord(ch) < 32 and ch not in "\t\n\r\f\v") or ch == "\ufffd")
    if controls > len(text) // 100:
        raise _Skip("binary")
    return text


class FileLoader:
    """Reads text, Markdown, JSONL, HTML, PDF and source code files into entries.

    ``patterns`` are file paths, directories (walked recursively; hidden files and
    directories and symlinked directories are skipped) or globs (``**`` recurses);
    relative ones resolve against ``base_dir`` (default: the current directory). Ids and
    sources are paths in posix form: relative to ``base_dir`` (``relative_to="base"``, the
    default), or relative to the pattern itself (``relative_to="pattern"``: a directory
    ``docs/`` gives ``guide/install.md``, a file gives its name, a glob the path below its
    fixed leading directories), so they are the same from any working directory.
    ``id_prefix`` (e.g. ``"docs"``) is put in front as ``docs/guide/install.md``, to keep
    several roots apart in one corpus. Metadata ``path`` is that path, ``format`` the format.

    * Markdown (``.md``): one entry per heading section (id ``path#n``), the text before
      the first heading as section 0; ``parent_id`` is the enclosing section; metadata
      ``section`` (the heading text) and ``headingPath`` (``A > B``). A section larger than
      a chunk keeps its first chunk and gets the rest as child entries ``path#n.1``, ...
    * Text (``.txt``, ``.rst``, ``.adoc``, files without a suffix, ``README``...):
      chunks of at most one chunk's size (id ``path#n``).
    * HTML: the main text (``<main>``, ``<article>`` or the body, without scripts, styles
      and navigation) in chunks; metadata ``title``. Parsed with selectolax (lexbor).
    * PDF: each page's text in chunks (pypdf); metadata ``page`` (1-based).
    * Source code (``.py``, ``.js``, ``.go``, ... see ``_LANGUAGES``): chunks that begin at
      top-level definitions and break at blank lines, lines kept; metadata ``language``.
    * JSONL: one object per non-blank line with ``content`` (or ``text``) and optional
      ``id`` (default ``path#line``), ``tier``, ``source`` (default the path; ``null``
      means none), ``parentId``, ``timestamp`` (ISO-8601 with a zone), ``metadata`` (str to
      str) and ``edges`` (outgoing: ``[{"dst", "relation", "weight", "source"}]``, returned
      by :attr:`edges`): the export format of ``tnsrag export``, read back exactly.

    ``chunker`` sizes the chunks (default: :class:`~tnsrag_db.chunking.Chunker` of 1,000
    characters). ``encoding`` forces one text encoding instead of detecting it. Files that
    are not read are listed in :attr:`skipped` after :meth:`load`: binary, empty or
    unreadable files, and, in directory walks, unknown types (a file named explicitly or
    by a glob is read as text when it has an unknown suffix). ``tier`` (default SEMANTIC)
    is the tier of every entry but JSONL lines that set one. Raises
    :class:`ConfigurationError` at load time for a pattern that matches nothing and
    :class:`InvalidEntryError` for a bad JSONL line.
    """

    def __init__(self, *patterns: str | os.PathLike[str], base_dir: str | os.PathLike[str] | None = None,
                 tier: MemoryTier | str = MemoryTier.SEMANTIC, encoding: str | None = None,
                 chunker: Chunker | None = None, relative_to: Literal["base", "pattern"] = "base",
                 id_prefix: str = "") -> None:
        if not patterns:
            raise ConfigurationError("FileLoader needs at least one path, directory or glob")
        for pattern in patterns:
            if not isinstance(pattern, (str, os.PathLike)) or not str(pattern).strip():
                raise ConfigurationError(f"file patterns must be non-blank paths, got {pattern!r}")
        try:
            self._tier = MemoryTier.parse(tier)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        if relative_to not in ("base", "pattern"):
            raise ConfigurationError(f"relative_to must be 'base' or 'pattern', got {relative_to!r}")
        if not isinstance(id_prefix, str) or id_prefix.strip() != id_prefix or "#" in id_prefix:
            raise ConfigurationError(f"id_prefix must be a string without '#' or surrounding blanks, "
                                     f"got {id_prefix!r}")
        if chunker is not None and not isinstance(chunker, Chunker):
            raise ConfigurationError(f"chunker must be a Chunker, got {type(chunker).__name__}")
        self._patterns = tuple(os.fspath(p) for p in patterns)
        self._base = Path(base_dir) if base_dir is not None else None
        self._encoding = encoding
        self._chunker = chunker if chunker is not None else Chunker()
        self._relative_to = relative_to
        self._prefix = id_prefix.strip("/") + "/" if id_prefix.strip("/") else ""
        self.skipped: list[SkippedFile] = []
        #: Number of files the last :meth:`load` read entries from.
        self.files_read = 0
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

    @property
    def id_prefix(self) -> str:
        """The prefix of every id and path (``"docs/"``), or ``""``."""
        return self._prefix

    def __repr__(self) -> str:
        return f"FileLoader({', '.join(map(repr, self._patterns))}, base_dir={str(self._base)!r})"

    def _scan(self) -> tuple[list[tuple[Path, str, bool, str]], list[SkippedFile]]:
        """``(path, rel, explicit, shown)`` of every candidate file (``shown``: the path as
        reached from its pattern, for messages) and the files skipped while walking."""
        base = (self._base if self._base is not None else Path.cwd()).resolve()
        found: list[tuple[Path, str, bool, str]] = []
        skipped: list[SkippedFile] = []
        seen: dict[Path, str] = {}
        for pattern in self._patterns:
            walk_skips = len(skipped)
            full = pattern if os.path.isabs(pattern) else str(base / pattern)
            matches: list[tuple[Path, Path, bool]] = []  # (file, root, explicit)
            shown_root = pattern  # what stands for the root in messages
            if _GLOB_CHARS.search(pattern):
                root = Path(_glob_root(full))
                shown_root = _glob_root(pattern)
                matches = [(Path(m), root, True) for m in sorted(glob.glob(full, recursive=True))
                           if os.path.isfile(m)]
            elif os.path.isdir(full):
                root = Path(full)
                for path, reason in _walk(root):
                    if reason is None:
                        matches.append((path, root, False))
                    else:
                        skipped.append(SkippedFile(_shown(shown_root, root, path), reason))
            elif os.path.isfile(full):
                matches = [(Path(full), Path(full), True)]
            if not matches and len(skipped) == walk_skips:
                raise ConfigurationError(f"knowledge source pattern {pattern!r} matched no files (looked in {base})")
            for path, root, explicit in matches:
                resolved = path.resolve()
                shown = _shown(shown_root, root, path)
                if resolved in seen:
                    skipped.append(SkippedFile(shown, f"same file as {seen[resolved]}"))
                    continue
                seen[resolved] = shown
                anchor = base if self._relative_to == "base" else (
                    root.parent if root == path else root).resolve()
                try:
                    rel = resolved.relative_to(anchor).as_posix()
                except ValueError:
                    try:  # a symlink pointing out of the root: named by its own place
                        rel = path.absolute().relative_to(anchor.absolute()).as_posix()
                    except ValueError:
                        rel = resolved.as_posix()
                found.append((path, self._prefix + rel, explicit, shown))
        return found, skipped

    def files(self) -> list[Path]:
        """The files the patterns select, each once, in pattern order then path order."""
        found, _ = self._scan()
        return [path for path, _, explicit, _ in found if explicit or file_format(path.name) is not None]

    def load(self, *, progress: Callable[[int, int], None] | None = None) -> Iterable[MemoryEntry]:
        """Read every selected file into entries (see the class docstring); skips go to :attr:`skipped`.

        ``progress(files_done, files_total)`` is called after each file (read or skipped).
        """
        found, skipped = self._scan()
        self.skipped = skipped
        self.files_read = 0
        self._edges = []
        for number, (path, rel, explicit, shown) in enumerate(found, start=1):
            if progress is not None and number > 1:
                progress(number - 1, len(found))
            fmt = file_format(path.name)
            if fmt is None:
                if not explicit:
                    self.skipped.append(SkippedFile(shown, _unknown_reason(path)))
                    continue
                fmt = "text"
            try:
                entries = list(self._read(path, rel, fmt))
            except _Skip as skip:
                self.skipped.append(SkippedFile(shown, str(skip)))
                continue
            if not entries:
                self.skipped.append(SkippedFile(shown, "no text"))
                continue
            self.files_read += 1
            yield from entries
        if progress is not None:
            progress(len(found), len(found))

    # -- reading ------------------------------------------------------------------
    def _read(self, path: Path, rel: str, fmt: str) -> Iterator[MemoryEntry]:
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                raise _Skip(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
            data = path.read_bytes()
        except OSError as exc:
            raise _Skip(f"unreadable ({exc.strerror or exc})") from None
        if path.name.lower().endswith(".gz"):
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
                    data = unzipped.read(MAX_FILE_BYTES + 1)
            except (OSError, EOFError) as exc:
                raise _Skip(f"not a readable gzip file ({exc})") from None
            if len(data) > MAX_FILE_BYTES:
                raise _Skip(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB uncompressed")
        if not data.strip():
            raise _Skip("empty")
        if fmt == "pdf":
            yield from self._pdf(rel, data)
            return
        if self._encoding is not None:
            try:
                text = data.decode(self._encoding)
            except (UnicodeDecodeError, LookupError) as exc:
                raise _Skip(f"not {self._encoding} text ({exc})") from None
        else:
            text = _decode_text(data)
        if not text.strip():
            raise _Skip("empty")
        if fmt == "markdown":
            yield from self._markdown(rel, text)
        elif fmt == "jsonl":
            yield from self._jsonl(rel, text)
        elif fmt == "html":
            yield from self._html(rel, text)
        elif fmt == "code":
            yield from self._code(rel, text, _language(path.name))
        else:
            yield from self._text(rel, text)

    def _entry(self, entry_id: str, content: str, rel: str, metadata: dict[str, str],
               parent: str | None = None) -> MemoryEntry:
        return MemoryEntry(entry_id, content, self._tier, source=rel, parent_id=parent, metadata=metadata)

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
            parts = self._chunker.chunks(content) if not self._chunker.fits(content) else [content]
            yield self._entry(entry_id, parts[0], rel, metadata, parent)
            for n, part in enumerate(parts[1:], start=1):
                yield self._entry(f"{entry_id}.{n}", part, rel, {**metadata, "part": str(n)}, entry_id)
            stack.append((level, entry_id, title))

    def _text(self, rel: str, text: str, fmt: str = "text",
              extra: dict[str, str] | None = None, start: int = 0) -> Iterator[MemoryEntry]:
        for index, chunk in enumerate(self._chunker.chunks(text), start=start):
            yield self._entry(f"{rel}#{index}", chunk, rel, {"path": rel, "format": fmt, **(extra or {})})

    def _html(self, rel: str, text: str) -> Iterator[MemoryEntry]:
        from selectolax.lexbor import LexborHTMLParser

        tree = LexborHTMLParser(text)
        title_node = tree.css_first("title")
        title = " ".join(title_node.text().split()) if title_node is not None else ""
        tree.strip_tags(_HTML_DROP)
        root = (tree.css_first("main") or tree.css_first("article") or tree.css_first("[role=main]")
                or tree.body or tree.root)
        if root is None:
            return
        for node in root.css(_HTML_BLOCKS):
            node.insert_after("\n\n")
        raw = root.text(separator="")
        paragraphs = (" ".join(p.split()) for p in re.split(r"\n[ \t\r\f\v]*\n", raw))
        body = "\n\n".join(p for p in paragraphs if p)
        yield from self._text(rel, body, "html", {"title": title} if title else None)

    def _pdf(self, rel: str, data: bytes) -> Iterator[MemoryEntry]:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        pypdf_log = logging.getLogger("pypdf")
        level = pypdf_log.level
        pypdf_log.setLevel(logging.ERROR)  # malformed-but-readable files warn per object
        try:
            try:
                reader = PdfReader(io.BytesIO(data))
                if reader.is_encrypted and not reader.decrypt(""):
                    raise _Skip("encrypted PDF")
                pages = [page.extract_text() or "" for page in reader.pages]
            except _Skip:
                raise
            except (PdfReadError, ValueError, KeyError, TypeError, OSError, RecursionError) as exc:
                raise _Skip(f"unreadable PDF ({type(exc).__name__}: {exc})") from None
        finally:
            pypdf_log.setLevel(level)
        index = 0
        for number, page_text in enumerate(pages, start=1):
            for chunk in self._chunker.chunks(page_text):
                yield self._entry(f"{rel}#{index}", chunk, rel, {"path": rel, "format": "pdf", "page": str(number)})
                index += 1

    def _code(self, rel: str, text: str, language: str) -> Iterator[MemoryEntry]:
        metadata = {"path": rel, "format": "code", "language": language}
        for index, chunk in enumerate(_code_chunks(text, self._chunker)):
            yield self._entry(f"{rel}#{index}", chunk, rel, metadata)

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


def _glob_root(pattern: str) -> str:
    """The fixed leading directories of a glob (the part before its first wildcard)."""
    parts = Path(pattern).parts
    fixed: list[str] = []
    for part in parts:
        if _GLOB_CHARS.search(part):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "."


def _walk(root: Path) -> Iterator[tuple[Path, str | None]]:
    """Files under ``root`` in path order with None, or a path and why it is skipped
    (hidden files and directories, symlinked directories: named once, not entered;
    directories that cannot be listed)."""
    errors: list[OSError] = []
    for current, dirs, files in os.walk(root, onerror=errors.append):
        while errors:
            failed = errors.pop()
            yield Path(failed.filename or current), f"unreadable directory ({failed.strerror or failed})"
        here = Path(current)
        kept = []
        for name in sorted(dirs):
            if name.startswith("."):
                yield here / name, "hidden directory"
            elif os.path.islink(here / name):
                yield here / name, "symlinked directory (not followed)"
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            path = here / name
            if name.startswith("."):
                yield path, "hidden file"
            elif not path.is_file():
                yield path, "not a regular file" if path.exists() else "broken symlink"
            else:
                yield path, None
    for failed in errors:
        yield Path(failed.filename or root), f"unreadable directory ({failed.strerror or failed})"


def _shown(shown_root: str, root: Path, path: Path) -> str:
    """``path`` for messages, as reached from the pattern given (``docs/guide/a.md`` for the
    directory ``docs``): ``shown_root`` stands for ``root``."""
    try:
        return (Path(shown_root) / path.relative_to(root)).as_posix()
    except ValueError:
        return path.as_posix()


def _unknown_reason(path: Path) -> str:
    """Why a file of unknown type is skipped: "binary" when it looks so, else its suffix."""
    try:
        with path.open("rb") as handle:
            head = handle.read(8192)
    except OSError:
        head = b""
    return "binary" if b"\x00" in head else f"unknown file type {_suffix(path.name)!r}"


def _suffix(name: str) -> str:
    lower = name.lower().removesuffix(".gz")
    return os.path.splitext(lower)[1] or lower


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
