"""HTML: the main text (``<main>``, ``<article>`` or the body, without scripts, styles and
navigation) with the page title, split at its ``<h1>``-``<h6>`` headings into sections as
Markdown is (:func:`~tnsrag_db._loaders.text._sections`); parsed with selectolax (lexbor)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tnsrag_db._chunking import Chunker
from tnsrag_db._loaders.text import Section, _has_body, _sections, _text
from tnsrag_db._types import MemoryEntry, MemoryTier

_HTML_DROP = ["script", "style", "noscript", "template", "svg", "iframe", "nav", "footer", "object", "canvas"]
_HTML_BLOCKS = ("p, div, li, dt, dd, tr, br, pre, blockquote, section, article, header, footer, aside, "
                "table, ul, ol, dl, h1, h2, h3, h4, h5, h6, hr, figure, figcaption, address, main, form")
_HEADINGS = "h1, h2, h3, h4, h5, h6"
# Permalink anchors: Sphinx and MkDocs put <a class="headerlink" href="#x">¶</a> after every
# heading, caption and API signature; other generators a bare pilcrow link. They are page
# furniture, not text: left in, every section name and text would end in "¶".
_PERMALINKS = "a.headerlink, a[href^='#']"
_PILCROWS = {"¶", ""}
# Headings are marked in the extracted text with a private-use character (removed from the
# page first, so none of the page's own can pose as one): MARK level MARK heading text MARK.
_MARK = "\ue000"
_MARKED = re.compile(f"{_MARK}([1-6]){_MARK}(.*?){_MARK}", re.DOTALL)
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


def _paragraphs(raw: str) -> list[str]:
    """The blank-line separated paragraphs of ``raw``, each with its whitespace collapsed."""
    return [p for p in (" ".join(part.replace(_MARK, " ").split()) for part in _BLANK_LINE.split(raw)) if p]


def _html(rel: str, text: str, chunker: Chunker, tier: MemoryTier) -> Iterator[MemoryEntry]:
    from selectolax.lexbor import LexborHTMLParser  # only for HTML files (see the dependencies in pyproject.toml)

    tree = LexborHTMLParser(text.replace(_MARK, ""))
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    tree.strip_tags(_HTML_DROP)
    for link in tree.css(_PERMALINKS):
        if "headerlink" in (link.attributes.get("class") or "").split() or link.text().strip() in _PILCROWS:
            link.decompose()
    root = (tree.css_first("main") or tree.css_first("article") or tree.css_first("[role=main]")
            or tree.body or tree.root)
    if root is None:
        return
    for node in root.css(_HTML_BLOCKS):
        node.insert_after("\n\n")
    for node in root.css(_HEADINGS):
        digit = (node.tag or "h1")[1]
        node.insert_before(f"\n\n{_MARK}{digit}{_MARK}")
        node.insert_after(_MARK)
    # split: [text before the first heading, level, heading, text after it, level, ...]
    pieces = _MARKED.split(root.text(separator=""))
    sections = [Section(0, "", "\n\n".join(_paragraphs(pieces[0])))]
    for at in range(1, len(pieces), 3):
        level, heading, body = int(pieces[at]), " ".join(_paragraphs(pieces[at + 1])), _paragraphs(pieces[at + 2])
        if not heading:  # an empty heading heads nothing: its text joins the section before
            last = sections[-1]
            sections[-1] = last._replace(content="\n\n".join([last.content, *body]).strip())
            continue
        sections.append(Section(level, heading, "\n\n".join([heading, *body])))
    extra = {"title": title} if title else None
    if sum(1 for s in sections if _has_body(s)) > 1:
        yield from _sections(rel, sections, chunker, tier, "html", extra)
    else:  # one section of text (no heading, or headings over a single text): its text in chunks
        yield from _text(rel, "\n\n".join(s.content for s in sections if s.content), chunker, tier, "html", extra)
