""":class:`FileLoader`: patterns to files (:mod:`.walk`), files to text, text to entries by format."""

from __future__ import annotations

import dataclasses
import gzip
import io
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tnsrag_db._chunking import Chunker
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._loaders.base import MAX_FILE_BYTES, MAX_JSONL_BYTES, SkippedFile, _Skip
from tnsrag_db._loaders.code import _code
from tnsrag_db._loaders.encodings import _decode_text
from tnsrag_db._loaders.formats import _language, file_format
from tnsrag_db._loaders.html import _html
from tnsrag_db._loaders.jsonl import Recorded, SpaceVectors, _jsonl
from tnsrag_db._loaders.owners import ROOT_KEY, check_owners, claims_of, pattern_root
from tnsrag_db._loaders.pdf import _pdf
from tnsrag_db._loaders.text import _markdown, _text
from tnsrag_db._loaders.walk import _scan, _unknown_reason
from tnsrag_db._types import MemoryEntry, MemoryTier

if TYPE_CHECKING:
    from tnsrag_db._indexes.graph import Edge

__all__ = ["FileLoader"]


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
    several roots apart in one corpus. Metadata ``path`` is that path, ``format`` the format;
    with ``relative_to="pattern"`` metadata ``root`` is the pattern the file was read from
    (its absolute path, symlinks resolved, or the absolute glob), as ``tnsrag ingest``
    records it: ids relative to two folders meet when both hold a file of one relative
    path, and :meth:`check_ids` refuses to let one root's files replace another's entries.

    * Markdown (``.md``): one entry per heading section (id ``path#n``), the text before
      the first heading as section 0; ``parent_id`` is the enclosing section; metadata
      ``section`` (the heading text) and ``headingPath`` (``A > B``). A section larger than
      a chunk keeps its first chunk and gets the rest as child entries ``path#n.1``, ...
    * Text (``.txt``, ``.rst``, ``.adoc``, files without a suffix, ``README``...):
      chunks of at most one chunk's size (id ``path#n``).
    * HTML: the main text (``<main>``, ``<article>`` or the body, without scripts, styles
      and navigation) in chunks; metadata ``title``. Parsed with selectolax (lexbor).
    * PDF: each page's text in chunks (pypdf); metadata ``page`` (1-based).
    * Source code (``.py``, ``.js``, ``.go``, ... see ``loaders.formats._LANGUAGES``): chunks that begin at
      top-level definitions and break at blank lines, lines kept; metadata ``language``.
    * JSONL: one object per non-blank line with ``content`` (or ``text``) and optional
      ``id`` (default ``path#line``), ``tier``, ``source`` (default the path; ``null``
      means none), ``parentId``, ``timestamp`` (ISO-8601 with a zone), ``expiresAt`` (ISO-8601
      with a zone) or ``ttlSeconds`` (the entry's expiry), ``validFrom`` and ``validUntil``
      (ISO-8601 with a zone: its validity), ``metadata`` (str to
      str), ``edges`` (outgoing: ``[{"dst", "relation", "weight", "source"}]``, returned
      by :attr:`edges`) and ``vectors`` (``[{"provider", "float32"}]``, returned by
      :attr:`vectors`), ``recordedAt`` and ``versions`` (a corpus's history, returned by
      :attr:`recorded`): the export format of ``tnsrag export``, read back exactly.
      JSONL files may be up to 1 GiB (:data:`MAX_JSONL_BYTES`), other files 64 MiB.

    ``chunker`` sizes the chunks (default: :class:`~tnsrag_db._chunking.Chunker` of 1,000
    characters). ``encoding`` forces one text encoding instead of detecting it.
    ``timestamp`` dates the entries of every file but JSONL (whose lines carry their own
    timestamps or none, as an export wrote them, so an export reads back exactly):
    ``"mtime"`` (the default) is the file's modification time, in UTC, clamped to the
    moment of reading (a file dated in the future counts as new, so the temporal
    strategy never meets a future entry); an aware :class:`~datetime.datetime` dates them
    all alike; None leaves them undated. Files that
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
                 id_prefix: str = "", timestamp: Literal["mtime"] | datetime | None = "mtime") -> None:
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
        if not (timestamp is None or timestamp == "mtime"
                or (isinstance(timestamp, datetime) and timestamp.utcoffset() is not None)):
            raise ConfigurationError(f"timestamp must be 'mtime', an aware datetime or None, got {timestamp!r}")
        if chunker is not None and not isinstance(chunker, Chunker):
            raise ConfigurationError(f"chunker must be a Chunker, got {type(chunker).__name__}")
        self._patterns = tuple(os.fspath(p) for p in patterns)
        self._base = Path(base_dir) if base_dir is not None else None
        self._encoding = encoding
        self._chunker = chunker if chunker is not None else Chunker()
        self._relative_to = relative_to
        self._prefix = id_prefix.strip("/") + "/" if id_prefix.strip("/") else ""
        self._timestamp = timestamp
        self.skipped: list[SkippedFile] = []
        #: Number of files the last :meth:`load` read entries from.
        self.files_read = 0
        self._edges: list[Edge] = []
        self._vectors: SpaceVectors = {}
        self._recorded = Recorded()

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
    def vectors(self) -> SpaceVectors:
        """The vectors the JSONL records of the last :meth:`load` carried (``"vectors"``
        field, written by ``tnsrag export --vectors``), by embedding space (provider name,
        dimension), then entry id; complete once that load has been consumed."""
        return self._vectors

    @property
    def recorded(self) -> Recorded:
        """What the JSONL records of the last :meth:`load` carried of a corpus's history
        (``"recordedAt"``, ``"versions"``: an export of a corpus that keeps history): the
        closed rows to write back and the instant from which each current entry was
        recorded; complete once that load has been consumed."""
        return self._recorded

    @property
    def id_prefix(self) -> str:
        """The prefix of every id and path (``"docs/"``), or ``""``."""
        return self._prefix

    def __repr__(self) -> str:
        return f"FileLoader({', '.join(map(repr, self._patterns))}, base_dir={str(self._base)!r})"

    def _scan(self) -> tuple[list[tuple[Path, str, bool, str, str]], list[SkippedFile]]:
        return _scan(self._patterns, self._base, self._relative_to, self._prefix)

    def files(self) -> list[Path]:
        """The files the patterns select, each once, in pattern order then path order."""
        found, _ = self._scan()
        return [path for path, _, explicit, _, _ in found if explicit or file_format(path.name) is not None]

    def selected(self) -> list[tuple[Path, str]]:
        """``(file, id path)`` of each file of :meth:`files`: the path its entries' ids
        begin with (``docs/guide/install.md``, behind the id prefix). Raises
        :class:`ConfigurationError` for a pattern that matches nothing."""
        return [(path, rel) for path, rel, _ in self.selected_roots()]

    def selected_roots(self) -> list[tuple[Path, str, str | None]]:
        """:meth:`selected` with the root each file's entries record (metadata ``root``; see
        :func:`~tnsrag_db._loaders.owners.pattern_root`): ``(file, id path, root)``, the
        root None with ``relative_to="base"`` and for JSONL files, whose records keep the
        ids and metadata they carry."""
        found, _ = self._scan()
        roots = ({pattern: pattern_root(pattern, self._base) for pattern in self._patterns}
                 if self._relative_to == "pattern" else {})
        return [(path, rel, roots.get(pattern) if file_format(path.name) != "jsonl" else None)
                for path, rel, explicit, _, pattern in found if explicit or file_format(path.name) is not None]

    def claims(self) -> dict[str, str]:
        """The id paths this loader's files would write, each with the root recorded in their
        entries (:meth:`selected_roots`): what :meth:`check_ids` checks. Empty with
        ``relative_to="base"``, whose ids are relative to ``base_dir`` and record no root."""
        return claims_of(self.selected_roots())

    def check_ids(self, store: Any) -> None:
        """Before an ingest into ``store``'s corpus: raise :class:`IdCollisionError` (nothing is
        written) when entries read earlier from another root hold ids at this loader's file
        paths (:meth:`claims`), naming the first of them and both roots. Entries of the same
        root (the same folder read again) are updated in place and pass, as do entries with
        no recorded root. One statement, however many files."""
        check_owners(store, self.claims(), lambda root, owner: (
            "give this loader ids of its own with id_prefix=..., or, if that root moved or is gone, delete "
            f"its entries first (store.delete_where({{{ROOT_KEY!r}: {owner!r}}}))"))

    def load(self, *, progress: Callable[[int, int], None] | None = None,
             byte_progress: Callable[[int, int], None] | None = None) -> Iterable[MemoryEntry]:
        """Read every selected file into entries (see the class docstring); skips go to :attr:`skipped`.

        ``progress(files_done, files_total)`` is called after each file (read or skipped),
        ``byte_progress(bytes_done, bytes_total)`` too, counting the files' sizes on disk
        (a file that cannot be measured counts 0).
        """
        found, skipped = self._scan()
        self.skipped = skipped
        self.files_read = 0
        self._edges = []
        self._vectors = {}
        self._recorded = Recorded()
        roots = ({pattern: pattern_root(pattern, self._base) for pattern in self._patterns}
                 if self._relative_to == "pattern" else {})
        sizes = [_size(path) for path, *_ in found] if byte_progress is not None else []
        total_bytes = sum(sizes)
        bytes_done = 0
        for number, (path, rel, explicit, shown, pattern) in enumerate(found, start=1):
            if number > 1:
                if progress is not None:
                    progress(number - 1, len(found))
                if byte_progress is not None:
                    bytes_done += sizes[number - 2]
                    byte_progress(bytes_done, total_bytes)
            fmt = file_format(path.name)
            if fmt is None:
                if not explicit:
                    self.skipped.append(SkippedFile(shown, _unknown_reason(path)))
                    continue
                fmt = "text"
            try:
                read = self._read(path, rel, fmt)
                # Plain text comes out chunk by chunk (a large file's first entries can be
                # written while the rest is still chunked): once its first entry exists,
                # nothing can skip the file any more. Other formats are read whole first.
                entries = [next(read, None)] if fmt == "text" else list(read)
            except _Skip as skip:
                self.skipped.append(SkippedFile(shown, str(skip)))
                continue
            if not entries or entries[0] is None:
                self.skipped.append(SkippedFile(shown, "no text"))
                continue
            self.files_read += 1
            stamp = self._stamp(path) if fmt != "jsonl" else None
            root = roots.get(pattern) if fmt != "jsonl" else None
            within = 0  # of this file's bytes, estimated by the text given out (a large file moves too)
            for entry in itertools.chain(entries, read if fmt == "text" else ()):
                assert entry is not None
                changes: dict[str, Any] = {}
                if stamp is not None and entry.timestamp is None:
                    changes["timestamp"] = stamp
                if root is not None:
                    changes["metadata"] = {**entry.metadata, ROOT_KEY: root}
                yield dataclasses.replace(entry, **changes) if changes else entry
                if byte_progress is not None and within < sizes[number - 1]:
                    within = min(within + len(entry.content), sizes[number - 1])
                    byte_progress(bytes_done + within, total_bytes)
        if progress is not None:
            progress(len(found), len(found))
        if byte_progress is not None:
            byte_progress(total_bytes, total_bytes)

    # -- reading ------------------------------------------------------------------
    def _stamp(self, path: Path) -> datetime | None:
        """The timestamp the entries of ``path`` get where they carry none (see the class
        docstring): None when the loader dates nothing or the file's time is unknown."""
        if self._timestamp is None or isinstance(self._timestamp, datetime):
            return self._timestamp
        now = datetime.now(timezone.utc)
        try:
            return min(datetime.fromtimestamp(path.stat().st_mtime, timezone.utc), now)
        except (OSError, OverflowError, ValueError):  # vanished, or a date the platform cannot hold
            return None

    def _read(self, path: Path, rel: str, fmt: str) -> Iterator[MemoryEntry]:
        limit = MAX_JSONL_BYTES if fmt == "jsonl" else MAX_FILE_BYTES
        try:
            size = path.stat().st_size
            if size > limit:
                raise _Skip(f"larger than {limit // (1024 * 1024)} MiB")
            data = path.read_bytes()
        except OSError as exc:
            raise _Skip(f"unreadable ({exc.strerror or exc})") from None
        if path.name.lower().endswith(".gz"):
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
                    data = unzipped.read(limit + 1)
            except (OSError, EOFError) as exc:
                raise _Skip(f"not a readable gzip file ({exc})") from None
            if len(data) > limit:
                raise _Skip(f"larger than {limit // (1024 * 1024)} MiB uncompressed")
        if not data.strip():
            raise _Skip("empty")
        if fmt == "pdf":
            yield from _pdf(rel, data, self._chunker, self._tier)
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
            yield from _markdown(rel, text, self._chunker, self._tier)
        elif fmt == "jsonl":
            yield from _jsonl(rel, text, self._tier, self._edges, self._vectors, self._recorded)
        elif fmt == "html":
            yield from _html(rel, text, self._chunker, self._tier)
        elif fmt == "code":
            yield from _code(rel, text, _language(path.name), self._chunker, self._tier)
        else:
            yield from _text(rel, text, self._chunker, self._tier)


def _size(path: Path) -> int:
    """``path``'s size in bytes, of its text once uncompressed for a ``.gz`` file (the
    gzip trailer's size, modulo 4 GiB); 0 when it cannot be read (the read will say why)."""
    try:
        size = path.stat().st_size
        if path.name.endswith(".gz") and size >= 18:
            with path.open("rb") as f:
                f.seek(-4, os.SEEK_END)
                return int.from_bytes(f.read(4), "little") or size
        return size
    except OSError:
        return 0
