"""HTML headings become sections, as Markdown's do: real files through FileLoader, no database."""

from __future__ import annotations

from pathlib import Path

from tnsrag_db._chunking import Chunker
from tnsrag_db._loaders import FileLoader
from tnsrag_db._types import MemoryEntry

GUIDE = """<!doctype html>
<html><head><title>The  Guide</title><style>h1 {color: red}</style>
<script>document.title = 'scripted heading';</script></head>
<body>
<nav><h2>Menu</h2><a href="/">Home</a></nav>
<p>Read this first.</p>
<h1>Install</h1>
<p>Get the <b>package</b>.</p>
<h2>Linux</h2>
<p>Use apt.</p>
<h3>Debian</h3>
<p>Run apt-get.</p>
<h2>Windows</h2>
<h2>macOS</h2>
<ul><li>brew</li><li>port</li></ul>
<h1>Use <code>it</code></h1>
<div><p>Run the command.</p></div>
<footer>Copyright 2026, all rights reserved</footer>
</body></html>
"""

# The same outline as GUIDE, in Markdown.
GUIDE_MD = """Read this first.

# Install

Get the package.

## Linux

Use apt.

### Debian

Run apt-get.

## Windows

## macOS

- brew
- port

# Use it

Run the command.
"""


def _load(root: Path, *names: str, chunker: Chunker | None = None) -> dict[str, MemoryEntry]:
    return {e.id: e for e in FileLoader(*(root / n for n in names), relative_to="pattern", chunker=chunker).load()}


def _outline(entries: dict[str, MemoryEntry]) -> list[tuple[str, str | None, str | None, str | None]]:
    return [(i.split("#")[1], e.parent_id.split("#")[1] if e.parent_id else None,
             e.metadata.get("section"), e.metadata.get("headingPath")) for i, e in entries.items()]


def test_nested_headings_make_the_markdown_hierarchy(tmp_path: Path) -> None:
    (tmp_path / "guide.html").write_text(GUIDE, encoding="utf-8")
    (tmp_path / "guide.md").write_text(GUIDE_MD, encoding="utf-8")
    html = _load(tmp_path, "guide.html")
    assert _outline(html) == [
        ("0", None, None, None),  # the text before the first heading: the page itself
        ("1", "0", "Install", "Install"),
        ("2", "1", "Linux", "Install > Linux"),
        ("3", "2", "Debian", "Install > Linux > Debian"),
        # "Windows" (a heading with no text and no subsection) heads nothing: no entry
        ("5", "1", "macOS", "Install > macOS"),
        ("6", "0", "Use it", "Use it"),
    ]
    # The same ids, parents and heading paths as the same outline written in Markdown.
    assert _outline(html) == _outline(_load(tmp_path, "guide.md"))
    assert html["guide.html#0"].content == "Read this first."
    assert html["guide.html#2"].content == "Linux\n\nUse apt."
    assert "guide.html#4" not in html
    assert html["guide.html#5"].content == "macOS\n\nbrew\n\nport"
    assert html["guide.html#6"].content == "Use it\n\nRun the command."
    assert html["guide.html#3"].metadata == {"path": "guide.html", "format": "html", "title": "The Guide",
                                             "section": "Debian", "headingPath": "Install > Linux > Debian",
                                             "root": str((tmp_path / "guide.html").resolve())}
    assert all(e.source == "guide.html" for e in html.values())
    # Scripts, styles, navigation (with its heading) and the footer are not text of any section.
    text = "\n".join(e.content for e in html.values())
    for dropped in ("scripted", "color", "Menu", "Home", "Copyright"):
        assert dropped not in text


def test_without_text_before_the_first_heading_sections_start_at_one(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text("<html><body><main><h2>First</h2><p>one</p><h3>Sub</h3><p>two</p>"
                                     "<h2>Second</h2><p>three</p></main><aside>outside main</aside></body></html>",
                                     encoding="utf-8")
    entries = _load(tmp_path, "a.html")
    assert _outline(entries) == [("1", None, "First", "First"), ("2", "1", "Sub", "First > Sub"),
                                 ("3", None, "Second", "Second")]
    assert "title" not in entries["a.html#1"].metadata  # the page has no <title>
    assert entries["a.html#3"].content == "Second\n\nthree"


def test_a_page_of_one_section_stays_flat_chunks(tmp_path: Path) -> None:
    # No heading at all, or a single heading with nothing before it: one section, its
    # text in chunks #0, #1, ... as plain text is.
    paragraphs = "".join(f"<p>{' '.join(['word'] * 30)} number {n}.</p>" for n in range(6))
    (tmp_path / "flat.html").write_text(f"<html><body><h1>Only</h1>{paragraphs}</body></html>", encoding="utf-8")
    (tmp_path / "none.html").write_text(f"<html><body>{paragraphs}</body></html>", encoding="utf-8")
    chunker = Chunker(300)
    flat = _load(tmp_path, "flat.html", chunker=chunker)
    assert len(flat) > 1 and list(flat) == [f"flat.html#{n}" for n in range(len(flat))]
    assert all(e.parent_id is None and "section" not in e.metadata for e in flat.values())
    assert flat["flat.html#0"].content.startswith("Only\n\nword word")
    assert [e.parent_id for e in _load(tmp_path, "none.html", chunker=chunker).values()] == [None] * len(flat)


def test_a_large_section_gets_child_chunks_and_empty_headings_head_nothing(tmp_path: Path) -> None:
    long = "".join(f"<p>{' '.join(['text'] * 40)} paragraph {n}.</p>" for n in range(5))
    (tmp_path / "big.html").write_text(f"<html><body><h1>Intro</h1><p>short</p><h2>Long</h2>{long}"
                                       "<h2>  </h2><p>after an empty heading</p></body></html>", encoding="utf-8")
    entries = _load(tmp_path, "big.html", chunker=Chunker(300))
    parts = sorted(i for i in entries if i.startswith("big.html#2."))
    assert parts, "the long section is split into child chunks"
    for part in parts:
        assert entries[part].parent_id == "big.html#2" and entries[part].metadata["section"] == "Long"
    assert entries["big.html#2"].parent_id == "big.html#1"
    # The blank <h2> is no heading: its text belongs to the section before it.
    assert not any(e.metadata.get("section", "x").strip() == "" for e in entries.values())
    assert "after an empty heading" in entries[parts[-1]].content


def test_private_use_marker_characters_in_the_page_are_plain_text(tmp_path: Path) -> None:
    # The loader marks headings with U+E000 internally; a page's own is dropped, never a heading.
    (tmp_path / "m.html").write_text("<html><body><p>a\ue0002\ue000b\ue000c</p><h1>H</h1><p>x</p></body></html>",
                                     encoding="utf-8")
    entries = _load(tmp_path, "m.html")
    assert _outline(entries) == [("0", None, None, None), ("1", "0", "H", "H")]
    assert entries["m.html#0"].content == "a2bc"


# How Sphinx renders a page: every heading, caption and API signature ends in a permalink.
SPHINX = """<!doctype html><html><head><title>Guide &#8212; Demo 1.0 documentation</title></head>
<body><div class="body" role="main">
<section id="guide"><h1>Guide<a class="headerlink" href="#guide" title="Link to this heading">¶</a></h1>
<p>Start here.</p>
<section id="setup"><h2><span class="section-number">1. </span>Setup<a class="headerlink" href="#setup"
 title="Link to this heading">¶</a></h2>
<p>Install it.</p>
<div class="literal-block-wrapper"><div class="code-block-caption"><span class="caption-text">conf.py</span>
<a class="headerlink" href="#id1" title="Link to this code">¶</a></div><pre>x = 1</pre></div>
<dl class="py function"><dt class="sig" id="demo.run"><span class="sig-name">run</span>()
<a class="headerlink" href="#demo.run" title="Link to this definition">¶</a></dt><dd><p>Runs.</p></dd></dl>
<h2>Bare<a href="#bare">¶</a></h2><p>A pilcrow link without the class, and a <a href="#setup">real link</a>.</p>
</section></section></div></body></html>
"""


def test_sphinx_permalinks_are_not_text(tmp_path: Path) -> None:
    (tmp_path / "guide.html").write_text(SPHINX, encoding="utf-8")
    entries = _load(tmp_path, "guide.html")
    assert [e.metadata.get("section") for e in entries.values()] == ["Guide", "1. Setup", "Bare"]
    assert entries["guide.html#2"].metadata["headingPath"] == "Guide > 1. Setup"
    text = "\n".join(e.content for e in entries.values())
    assert "¶" not in text
    assert entries["guide.html#2"].content.startswith("1. Setup\n\nInstall it.")
    assert "conf.py" in text and "run()" in text and "real link" in text  # only the permalinks go


# Headings without text of their own (Sphinx's "Contents" over numbered chapters, a chapter
# heading right above its first subsection), in Markdown and in HTML.
NESTED_MD = """# Manual

## Part one

### Chapter A

Text of A.

### Chapter B

Text of B.

## Empty leaf

## Part two

Text of two.
"""
NESTED_HTML = ("<html><body><h1>Manual</h1><h2>Part one</h2><h3>Chapter A</h3><p>Text of A.</p>"
               "<h3>Chapter B</h3><p>Text of B.</p><h2>Empty leaf</h2><h2>Part two</h2><p>Text of two.</p>"
               "</body></html>")


def test_headings_without_text_are_folded_into_their_first_subsection(tmp_path: Path) -> None:
    (tmp_path / "m.md").write_text(NESTED_MD, encoding="utf-8")
    (tmp_path / "m.html").write_text(NESTED_HTML, encoding="utf-8")
    md, html = _load(tmp_path, "m.md"), _load(tmp_path, "m.html")
    expected = [("3", None, "Chapter A", "Manual > Part one > Chapter A"),
                ("4", None, "Chapter B", "Manual > Part one > Chapter B"),
                ("6", None, "Part two", "Manual > Part two")]
    assert _outline(md) == _outline(html) == expected
    # The text-less headings lead the first subsection's text, in reading order.
    assert md["m.md#3"].content == "# Manual\n\n## Part one\n\n### Chapter A\n\nText of A."
    assert html["m.html#3"].content == "Manual\n\nPart one\n\nChapter A\n\nText of A."
    assert html["m.html#4"].content == "Chapter B\n\nText of B."
    for entries in (md, html):  # every parent is an entry of the file
        assert all(e.parent_id is None or e.parent_id in entries for e in entries.values())
        assert not any(e.content.strip() in ("Empty leaf", "## Empty leaf") for e in entries.values())


def test_a_text_less_heading_over_text_sections_parents_them_from_its_own_parent(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("# Guide\n\nIntro.\n\n## Setup\n\n### Linux\n\napt.\n\n### Mac\n\nbrew.\n",
                                   encoding="utf-8")
    entries = _load(tmp_path, "p.md")
    assert _outline(entries) == [("1", None, "Guide", "Guide"), ("3", "1", "Linux", "Guide > Setup > Linux"),
                                 ("4", "1", "Mac", "Guide > Setup > Mac")]
    assert entries["p.md#3"].content == "## Setup\n\n### Linux\n\napt."
