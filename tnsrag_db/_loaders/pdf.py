"""PDF: each page's text in chunks (pypdf), with the page number."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

from tnsrag_db._chunking import Chunker
from tnsrag_db._loaders.base import _Skip
from tnsrag_db._loaders.text import _entry
from tnsrag_db._types import MemoryEntry, MemoryTier


def _pdf(rel: str, data: bytes, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
    from pypdf import PdfReader, errors  # only for PDF files (see the dependencies in pyproject.toml)

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
        except (errors.PdfReadError, ValueError, KeyError, TypeError, OSError, RecursionError) as exc:
            raise _Skip(f"unreadable PDF ({type(exc).__name__}: {exc})") from None
    finally:
        pypdf_log.setLevel(level)
    index = 0
    for number, page_text in enumerate(pages, start=1):
        for chunk in chunker.chunks(page_text):
            yield _entry(tier, f"{rel}#{index}", chunk, rel, {"path": rel, "format": "pdf", "page": str(number)})
            index += 1
