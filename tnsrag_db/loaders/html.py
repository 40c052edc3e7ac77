"""HTML: the main text (``<main>``, ``<article>`` or the body, without scripts, styles and
navigation) in chunks, with the page title; parsed with selectolax (lexbor)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tnsrag_db.chunking import Chunker
from tnsrag_db.loaders.text import _text
from tnsrag_db.types import MemoryEntry, MemoryTier

_HTML_DROP = ["script", "style", "noscript", "template", "svg", "iframe", "nav", "object", "canvas"]
_HTML_BLOCKS = ("p, div, li, dt, dd, tr, br, pre, blockquote, section, article, header, footer, aside, "
                "table, ul, ol, dl, h1, h2, h3, h4, h5, h6, hr, figure, figcaption, address, main, form")


def _html(rel: str, text: str, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
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
    yield from _text(rel, body, chunker, tier, "html", {"title": title} if title else None)
