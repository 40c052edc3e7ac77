"""Turn files into memory entries, for the CLI and for declarative knowledge sources.

:class:`FileLoader` reads paths, directories and globs of Markdown, plain text and reST,
JSONL, HTML, PDF and source code (by file name suffix; ``.gz`` files by the name inside).
Text encodings are detected (``charset-normalizer``); binary, empty and unreadable files
and, in directory walks, files of unknown type are skipped and listed in
:attr:`FileLoader.skipped` with the reason. Anything with ``load() ->
Iterable[MemoryEntry]`` is a :class:`SourceLoader`.

The modules: :mod:`.base` (the loader protocol and skip records), :mod:`.formats` (which
format a file name is read as), :mod:`.encodings` (bytes to text), :mod:`.walk` (patterns
to files), one module per format (:mod:`.text` for Markdown and plain text, :mod:`.html`,
:mod:`.pdf`, :mod:`.code`, :mod:`.jsonl`) and :mod:`.files` (:class:`FileLoader`).
"""

from __future__ import annotations

from tnsrag_db._loaders.base import (
    MAX_FILE_BYTES as MAX_FILE_BYTES,  # public, though not in __all__
    SkippedFile,
    SourceLoader,
)
from tnsrag_db._loaders.files import FileLoader
from tnsrag_db._loaders.formats import file_format

__all__ = ["FileLoader", "SkippedFile", "SourceLoader", "file_format"]
