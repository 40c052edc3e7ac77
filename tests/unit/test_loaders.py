"""FileLoader on a messy tree, and the Chunker: no database."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tests._trees import messy_tree
from tnsrag_db._chunking import DEFAULT_CHUNK_CHARS, Chunker, chunker_for
from tnsrag_db._cli._progress import PhaseProgress
from tnsrag_db._errors import ConfigurationError
from tnsrag_db._loaders import FileLoader, SkippedFile, file_format
from tnsrag_db.embeddings import HashingEmbedding, ValidatingEmbedding


def load(*patterns: str | Path, **options: object) -> tuple[dict[str, object], FileLoader]:
    loader = FileLoader(*patterns, relative_to="pattern", **options)  # type: ignore[arg-type]
    return {e.id: e for e in loader.load()}, loader


def test_messy_tree_reads_every_format_and_names_every_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    messy_tree(tmp_path / "docs")
    monkeypatch.chdir(tmp_path)
    entries, loader = load("docs")
    assert sorted(loader.skipped, key=lambda s: s.path) == [
        SkippedFile("docs/.hidden", "hidden directory"), SkippedFile("docs/blob.bin", "binary"),
        SkippedFile("docs/data.xyz", "unknown file type '.xyz'"), SkippedFile("docs/empty.txt", "empty")]
    assert loader.files_read == 9
    by = {k: v for k, v in entries.items()}
    latin = by["notes/latin1.txt#0"]
    assert latin.content == "Café crème à la française, naïve résumé."  # type: ignore[attr-defined]
    html = by["page.html#0"]
    # Read relative to the pattern, every file entry records that root (resolved, absolute).
    root = str((tmp_path / "docs").resolve())
    assert html.metadata == {"path": "page.html", "format": "html", "title": "The Page",  # type: ignore[attr-defined]
                             "root": root}
    assert html.content == "Welcome\n\nHybrid retrieval combines ranks.\n\nSecond paragraph."  # type: ignore[attr-defined]
    pages = [(by[f"manual.pdf#{i}"].metadata["page"], by[f"manual.pdf#{i}"].content)  # type: ignore[attr-defined]
             for i in range(2)]
    assert pages == [("1", "First page about vectors."), ("2", "Second page about graphs.")]
    assert by["src/app.py#0"].metadata["language"] == "python"  # type: ignore[attr-defined]
    assert by["src/lib.go#0"].metadata == {  # type: ignore[attr-defined]
        "path": "src/lib.go", "format": "code", "language": "go", "root": root}
    assert by["changelog.gz#0"].content == "Version 2: fixed the widget."  # type: ignore[attr-defined]
    assert by["deep/a/b/c.rst#0"].source == "deep/a/b/c.rst"  # type: ignore[attr-defined]
    assert [(i, by[i].parent_id) for i in sorted(by) if i.startswith("guide/")] == [  # type: ignore[attr-defined]
        ("guide/install.md#1", None), ("guide/install.md#2", "guide/install.md#1"),
        ("guide/install.md#3", "guide/install.md#1")]
    # The same ids from another working directory, and with a prefix.
    monkeypatch.chdir(tmp_path / "docs" / "deep")
    again, _ = load(tmp_path / "docs")
    assert sorted(again) == sorted(entries)
    assert {e.metadata["root"] for e in again.values()} == {root}  # type: ignore[attr-defined]
    prefixed, pl = load("../../docs", id_prefix="kb")
    assert sorted(prefixed) == sorted(f"kb/{i}" for i in entries)
    assert prefixed["kb/guide/install.md#2"].metadata["path"] == "kb/guide/install.md"  # type: ignore[attr-defined]
    assert {s.path for s in pl.skipped} == {"../../docs/.hidden", "../../docs/blob.bin", "../../docs/data.xyz",
                                            "../../docs/empty.txt"}


def test_named_files_of_unknown_type_are_read_and_bad_ones_skipped(tmp_path: Path) -> None:
    messy_tree(tmp_path)
    (tmp_path / "utf16.txt").write_bytes("Grüße aus UTF-16".encode("utf-16"))
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    entries, loader = load(tmp_path / "data.xyz", tmp_path / "empty.txt", tmp_path / "blob.bin",
                           tmp_path / "utf16.txt", tmp_path / "broken.pdf")
    assert {k: v.content for k, v in entries.items()} == {  # type: ignore[attr-defined]
        "data.xyz#0": "unknown format", "utf16.txt#0": "Grüße aus UTF-16"}
    reasons = {Path(s.path).name: s.reason for s in loader.skipped}
    assert reasons.keys() == {"empty.txt", "blob.bin", "broken.pdf"}
    assert reasons["empty.txt"] == "empty" and reasons["blob.bin"] == "binary"
    assert reasons["broken.pdf"].startswith("unreadable PDF")


def test_file_formats_by_name() -> None:
    assert [file_format(n) for n in ["a.md", "b.RST", "c.htm", "d.pdf", "e.tsx", "README", "NEWS.Debian.gz",
                                     "changelog.Debian", "x.jsonl", "pic.png", "Makefile"]] == [
        "markdown", "text", "html", "pdf", "code", "text", "text", "text", "jsonl", None, "text"]


def test_perl_logs_and_readme_suffixes_are_known() -> None:
    # Names met in /usr/share/doc/git and friends: Perl scripts spelled out, README-style
    # suffixes, build and test logs.
    assert [file_format(n) for n in ["fetch.perl", "git-p4.README", "README.Debian", "x.LICENSE.gz", "build.log",
                                     "sshd.conf", "perlpod.pod", "a.awk", "photo.jpeg", "lib.so"]] == [
        "code", "text", "text", "text", "text", "text", "text", "code", None, None]
    from tnsrag_db._loaders.formats import _language

    assert _language("fetch.perl") == "perl" and _language("a.awk") == "awk"


def test_graphviz_files_are_read_as_text(tmp_path: Path) -> None:
    # Diagrams beside documentation (/usr/share/doc/*/*.dot): their labels are searchable.
    assert [file_format(n) for n in ["states.dot", "deps.gv", "flow.DOT.gz"]] == ["text", "text", "text"]
    (tmp_path / "states.dot").write_text('digraph states {\n  idle -> running [label="start request"];\n}\n')
    entries, loader = load(tmp_path)
    assert loader.skipped == [] and list(entries) == ["states.dot#0"]
    assert "start request" in entries["states.dot#0"].content  # type: ignore[attr-defined]


def test_myst_label_lines_are_no_entries_and_no_text(tmp_path: Path) -> None:
    # Sphinx docs in Markdown (pip's, say) put a target line before a heading; inside a
    # code fence, and within a sentence, the same characters are text.
    (tmp_path / "reqs.md").write_text(
        "(requirements-file-format)=\n\n# Requirements File Format\n\nOne requirement per line.\n\n"
        "(per-requirement-options)=\n\n## Per-requirement options\n\nHashes and such.\n\n"
        "```text\n(kept-in-code)=\n```\n\n(end-of-file)=\n")
    entries, _ = load(tmp_path / "reqs.md")
    texts = {i: e.content for i, e in entries.items()}  # type: ignore[attr-defined]
    assert list(texts) == ["reqs.md#1", "reqs.md#2"], texts  # nothing before the first heading
    assert texts["reqs.md#1"] == "# Requirements File Format\n\nOne requirement per line."
    assert texts["reqs.md#2"] == "## Per-requirement options\n\nHashes and such.\n\n```text\n(kept-in-code)=\n```"
    (tmp_path / "only.md").write_text("(just-a-label)=\n")
    assert load(tmp_path / "only.md")[0] == {}


def test_large_markdown_section_becomes_child_chunks(tmp_path: Path) -> None:
    body = "\n\n".join(f"Paragraph {i} " + "word " * 30 for i in range(12))
    (tmp_path / "big.md").write_text(f"# Top\n\nIntro.\n\n## Big\n\n{body}\n\n## Small\n\nTiny.\n")
    entries, _ = load(tmp_path / "big.md", chunker=Chunker(400))
    ids = list(entries)
    children = [i for i in ids if i.startswith("big.md#2.")]
    assert ids[:2] == ["big.md#1", "big.md#2"] and ids[-1] == "big.md#3" and len(children) >= 3
    assert all(entries[c].parent_id == "big.md#2" for c in children)  # type: ignore[attr-defined]
    assert entries["big.md#3"].parent_id == "big.md#1"  # type: ignore[attr-defined]
    assert entries["big.md#2"].content.startswith("## Big\n\nParagraph 0")  # type: ignore[attr-defined]
    for i in ["big.md#2", *children]:
        assert len(entries[i].content) <= 400  # type: ignore[attr-defined]
    text = " ".join(entries[i].content for i in ["big.md#2", *children])  # type: ignore[attr-defined]
    assert all(f"Paragraph {i} " in text for i in range(12))


def test_code_chunks_start_at_definitions_and_keep_lines(tmp_path: Path) -> None:
    funcs = "\n\n".join(f"def f{i}(x):\n    y = x + {i}\n    return y * {i}" for i in range(30))
    (tmp_path / "mod.py").write_text("import os\nimport sys\n\n\n" + funcs + "\n")
    entries, _ = load(tmp_path / "mod.py", chunker=Chunker(200))
    chunks = [e.content for e in entries.values()]  # type: ignore[attr-defined]
    assert len(chunks) > 3 and all(len(c) <= 200 for c in chunks)
    assert all(c.startswith(("import os", "def f")) for c in chunks)
    assert all("    y = x +" in c for c in chunks[1:])  # indentation and newlines kept
    joined = "\n\n".join(chunks)
    assert all(f"def f{i}(x):\n    y = x + {i}\n    return y * {i}" in joined for i in range(30))



def test_a_code_chunk_inside_a_definition_records_its_first_line(tmp_path: Path) -> None:
    methods = "\n\n".join(f"    def m{i}(self):\n        return {i}  # one step of the walk" for i in range(12))
    (tmp_path / "walk.py").write_text(f"class Walker(Base):\n{methods}\n\n\nTOP = 1\n\n\ndef after():\n    pass\n")
    entries, _ = load(tmp_path / "walk.py", chunker=Chunker(200))
    chunks = list(entries.values())  # type: ignore[attr-defined]
    inside = [c for c in chunks if c.content.startswith("    def m")]
    assert inside and all(c.metadata["definition"] == "class Walker(Base):" for c in inside)
    # The chunk holding the class line, and what follows the class, name no definition.
    assert all("definition" not in c.metadata for c in chunks if not c.content.startswith("    "))

@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abcdefghij .!?\n", min_size=0, max_size=40), min_size=1, max_size=40),
       st.integers(min_value=20, max_value=120))
def test_chunker_never_splits_a_word_and_respects_the_size(parts: list[str], size: int) -> None:
    text = "".join(parts)
    chunks = Chunker(size).chunks(text)
    words = text.split()
    for chunk in chunks:
        assert chunk == chunk.strip() and chunk
        assert len(chunk) <= size or len(chunk.split()) == 1
        assert all(w in words for w in chunk.split())
    # Every word appears, in order, when the overlap is removed.
    seen = [w for c in Chunker(size, overlap=0).chunks(text) for w in c.split()]
    assert seen == words


def test_chunker_overlaps_and_counts_tokens_with_the_model() -> None:
    text = " ".join(f"w{i}" for i in range(200))
    chunks = Chunker(100, overlap=20).chunks(text)
    assert len(chunks) > 1
    for first, second in zip(chunks, chunks[1:]):
        words = first.split()
        repeated = [k for k in range(1, 8) if second.split()[:k] == words[-k:]]
        assert repeated and sum(len(w) + 1 for w in words[-repeated[-1]:]) <= 20  # the last words, within 20

    class Model:
        name = "model"
        max_tokens = 8

        def count_tokens(self, text: str) -> int:
            return len(text.split())

        def __call__(self, text: str) -> list[float]:
            return [1.0]

    chunker = chunker_for(ValidatingEmbedding(Model()))
    assert (chunker.max_tokens, chunker.unit) == (8, "tokens")
    assert all(len(c.split()) <= 8 for c in chunker.chunks(text))
    assert chunker_for(Model(), 5).max_tokens == 5
    fallback = chunker_for(HashingEmbedding())
    assert (fallback.max_tokens, fallback.unit) == (DEFAULT_CHUNK_CHARS, "characters")
    with pytest.raises(ConfigurationError, match="chunk size"):
        chunker_for(HashingEmbedding(), 0)


def test_phase_progress_draws_counts_rates_and_eta() -> None:
    now = [100.0]
    out = io.StringIO()
    progress = PhaseProgress(out, {"read": "files", "embed": "entries"}, enabled=True, clock=lambda: now[0])
    progress.start("read")
    progress.start("embed")
    now[0] += 2.0
    progress.update("read", 10, 10)
    progress.update("embed", 50, 200)
    lines = progress.lines()
    assert re.fullmatch(r"read   10/10 files  .*done in 0:00:02", lines[0]), lines
    assert lines[1] == "embed  50/200 entries  25.0 entries/s  ETA 0:00:06"
    now[0] += 10.0
    progress.update("embed", 200)
    now[0] += 30.0
    assert progress.lines()[1] == "embed  200/200 entries  16.7 entries/s  done in 0:00:12"  # frozen at the end
    progress.draw()
    progress.draw()
    assert out.getvalue().count("\x1b[2F") == 1  # the second draw overwrites the first
    assert not PhaseProgress(io.StringIO(), {"read": "files"}).enabled  # not a TTY


def test_file_entries_carry_the_file_modification_time(tmp_path: Path) -> None:
    import os
    from datetime import datetime, timedelta, timezone

    old = tmp_path / "old.txt"
    old.write_text("An old note about engines.\n", encoding="utf-8")
    stamp = datetime(2021, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    os.utime(old, (stamp.timestamp(), stamp.timestamp()))
    future = tmp_path / "future.md"
    future.write_text("# Later\nA note dated ahead of the clock.\n", encoding="utf-8")
    ahead = datetime.now(timezone.utc) + timedelta(days=400)
    os.utime(future, (ahead.timestamp(), ahead.timestamp()))
    (tmp_path / "own.jsonl").write_text('{"id": "j", "content": "dated itself", "timestamp": "2020-01-01T00:00:00Z"}\n'
                                        '{"id": "k", "content": "undated line"}\n', encoding="utf-8")
    before = datetime.now(timezone.utc)
    entries = {e.id: e for e in FileLoader(tmp_path, base_dir=tmp_path).load()}
    assert entries["old.txt#0"].timestamp == stamp
    # a future file counts as read now: the temporal strategy never meets a future entry
    assert before <= entries["future.md#1"].timestamp <= datetime.now(timezone.utc)  # type: ignore[operator]
    # JSONL lines keep what they say (an export reads back exactly): their own date, or none
    assert entries["j"].timestamp == datetime(2020, 1, 1, tzinfo=timezone.utc)
    assert entries["k"].timestamp is None

    fixed = datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert {e.timestamp for e in FileLoader(old, base_dir=tmp_path, timestamp=fixed).load()} == {fixed}
    assert {e.timestamp for e in FileLoader(old, base_dir=tmp_path, timestamp=None).load()} == {None}
    for bad in ("ctime", datetime(2024, 1, 1), 5):
        with pytest.raises(ConfigurationError, match="timestamp"):
            FileLoader(old, timestamp=bad)  # type: ignore[arg-type]


def test_cache_directories_are_summarised_not_listed(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    for cache in ("pkg/__pycache__", "pkg/sub/__pycache__", "web/node_modules/left-pad"):
        (root / cache).mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (root / "web" / "app.js").write_text("console.log(1)\n")
    for n in range(3):
        (root / "pkg" / "__pycache__" / f"m{n}.cpython-311.pyc").write_bytes(b"\x00\x01pyc")
    (root / "pkg" / "sub" / "__pycache__" / "s.cpython-311.pyc").write_bytes(b"\x00pyc")
    (root / "web" / "node_modules" / "left-pad" / "README.md").write_text("# left-pad\n\npads\n")
    (root / "web" / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    loader = FileLoader(root, relative_to="pattern")
    entries = list(loader.load())
    assert sorted({e.metadata["path"] for e in entries}) == ["pkg/mod.py", "web/app.js"]
    assert loader.skipped == [
        SkippedFile(str(root), "6 files in 3 cache directories (__pycache__, node_modules)", files=6)]
    # A glob's walked folders are summarised the same way, one record per pattern.
    globbed = FileLoader(str(root / "pk*"), relative_to="pattern")
    list(globbed.load())
    assert globbed.skipped == [SkippedFile(str(root), "4 files in 2 cache directories (__pycache__)", files=4)]


def test_a_symlinked_file_is_named_by_its_own_place(tmp_path: Path) -> None:
    # /usr/share/doc/python3/_static/jquery.js -> /usr/share/javascript/jquery/jquery.js, with the
    # root reached through a symlinked directory as well.
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "lib.txt").write_text("shared library notes\n")
    real = tmp_path / "real" / "pkg"
    (real / "static").mkdir(parents=True)
    (real / "static" / "lib.txt").symlink_to(tmp_path / "shared" / "lib.txt")
    (real / "own.txt").write_text("own text\n")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    for pattern, mode, prefix, expected in [
            (real, "pattern", "", {"own.txt", "static/lib.txt"}),
            (tmp_path / "alias" / "pkg", "pattern", "kb", {"kb/own.txt", "kb/static/lib.txt"}),
            # below base_dir, directories are resolved as before (ids of regular files unchanged)
            ("alias/pkg", "base", "kb", {"kb/real/pkg/own.txt", "kb/real/pkg/static/lib.txt"}),
            ("real/pkg/static/lib.txt", "base", "", {"real/pkg/static/lib.txt"})]:
        loader = FileLoader(pattern, base_dir=tmp_path, relative_to=mode, id_prefix=prefix)  # type: ignore[arg-type]
        got = {e.id.split("#")[0] for e in loader.load()}
        assert got == expected, (pattern, mode, got)
        assert not any("//" in i for i in got)


def test_a_symlink_to_a_file_also_read_directly_is_the_skipped_one(tmp_path: Path) -> None:
    # /usr/share/doc/perl: Changes.gz -> changelog.gz ("C" sorts first); libgtk2.0-bin/AUTHORS
    # -> ../libgtk2.0-common/AUTHORS across two roots.
    perl = tmp_path / "perl"
    perl.mkdir()
    (perl / "changelog").write_text("the changes\n")
    (perl / "Changes").symlink_to("changelog")
    loader = FileLoader(perl, relative_to="pattern")
    assert [e.id for e in loader.load()] == ["changelog#0"]
    assert loader.skipped == [SkippedFile(f"{perl}/Changes", f"same file as {perl}/changelog")]
    (tmp_path / "bin").mkdir()
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "AUTHORS").write_text("the authors\n")
    (tmp_path / "bin" / "AUTHORS").symlink_to("../common/AUTHORS")
    both = FileLoader("bin", "common", base_dir=tmp_path)
    assert [e.id for e in both.load()] == ["common/AUTHORS#0"]
    assert both.skipped == [SkippedFile("bin/AUTHORS", "same file as common/AUTHORS")]


class _Counting:
    """A word-piece-like measure (a token per 4 characters of each word, 2 added per call)
    that records every text it is asked about."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return 2 + sum(-(-len(w) // 4) for w in text.split())


def _changelog(lines: int) -> str:
    """A changelog-like text: one paragraph of short lines with recurring names and words."""
    names = ["Jeff King", "Junio C Hamano", "Johannes Schindelin", "Patrick Steinhardt"]
    return "Version v2.39.5; changes since v2.39.4:\n" + "\n".join(
        f"      {names[i % 4]} ({i % 7}): send-email drop hack {i} and avoid term {i % 13}" for i in range(lines))


def test_chunker_work_grows_linearly_and_counts_each_word_once() -> None:
    sizes = {}
    for lines in (500, 2000):
        measure = _Counting()
        chunker = Chunker(64, measure, unit="tokens")
        measure.texts.clear()  # the separator probes of the constructor
        chunks = chunker.chunks(_changelog(lines))
        sizes[lines] = (len(chunks), len(measure.texts), sum(len(t) for t in measure.texts))
        words = [t for t in measure.texts if len(t.split()) == 1 and t[-1:].isspace()]  # words as split
        # A word is measured once per chunker (the overlap and over-long sentences are
        # measured word by word; words recur): no repeated calls for the same word.
        assert len(words) == len(set(words)), "a word was measured twice"
    (chunks_small, calls_small, chars_small), (chunks_big, calls_big, chars_big) = sizes[500], sizes[2000]
    assert chunks_big >= 4 * chunks_small * 0.9
    # Four times the text: about four times the characters measured, not more (no
    # re-measuring of the rest of the text per chunk), and fewer calls per chunk.
    assert chars_big <= 4.4 * chars_small
    assert calls_big / chunks_big <= calls_small / chunks_small * 1.1


def test_a_large_text_files_first_entries_come_before_the_rest_is_chunked(tmp_path: Path) -> None:
    # A 2,000-chunk changelog took seconds to chunk whole, and no entry of it (so no batch
    # of an ingest) existed before the last chunk did. Chunks now come out as they are
    # complete: the first entry is read having measured a small share of the file.
    text = _changelog(4000)
    (tmp_path / "changelog").write_text(text, encoding="utf-8")
    measure = _Counting()
    loader = FileLoader(tmp_path, chunker=Chunker(64, measure, unit="tokens"))
    entries = iter(loader.load())
    measure.texts.clear()
    first = next(entries)
    # Whether the whole text fits one chunk is measured first (one call over all of it);
    # what the first entry needs beyond that is a small share of the pieces' measuring.
    pieces_first = sum(len(t) for t in measure.texts) - len(text.strip())
    rest = list(entries)
    pieces_all = sum(len(t) for t in measure.texts) - len(text.strip())
    assert first.id.endswith("#0") and len(rest) > 100
    assert 0 <= pieces_first < pieces_all / 50, (pieces_first, pieces_all)
    # The same entries as chunking the file whole.
    whole = Chunker(64, _Counting(), unit="tokens").chunks((tmp_path / "changelog").read_text(encoding="utf-8"))
    assert [first.content, *(e.content for e in rest)] == whole


def test_entries_read_relative_to_their_pattern_record_it_as_their_root(tmp_path: Path) -> None:
    doc = tmp_path / "doc"
    for name in ("python3-six", "python3-toml"):
        (doc / name).mkdir(parents=True)
        (doc / name / "copyright").write_text(f"{name} licence\n")
    (doc / "python3-six" / "export.jsonl").write_text('{"id": "x", "content": "a record", "metadata": {"k": "v"}}\n')
    # A folder (absolute, symlinks resolved), a glob (the absolute glob), a file (itself).
    cases: list[tuple[str | Path, str]] = [
        (doc / "python3-six", str(doc / "python3-six")), (str(doc / "python3*"), str(doc / "python3*")),
        (doc / "python3-toml" / "copyright", str(doc / "python3-toml" / "copyright"))]
    for pattern, root in cases:
        loader = FileLoader(pattern, relative_to="pattern")
        entries = list(loader.load())
        assert {e.metadata.get("root") for e in entries if e.id != "x"} == {root}, pattern
        assert set(loader.claims().values()) == {root}
        assert set(loader.claims()) == {e.metadata["path"] for e in entries if "root" in e.metadata}
    # JSONL records keep the metadata they carry: no root, and no claim on their ids.
    loader = FileLoader(doc / "python3-six", relative_to="pattern")
    by = {e.id: e for e in loader.load()}
    assert by["x"].metadata == {"k": "v"} and loader.claims() == {"copyright": str(doc / "python3-six")}
    assert [(rel, root) for _, rel, root in loader.selected_roots()] == [
        ("copyright", str(doc / "python3-six")), ("export.jsonl", None)]
    # Ids relative to a base directory record none and claim nothing.
    based = FileLoader("doc/python3-six", base_dir=tmp_path)
    assert all("root" not in e.metadata for e in based.load()) and based.claims() == {}


def test_byte_progress_counts_a_gzip_uncompressed_and_moves_within_a_large_file(tmp_path: Path) -> None:
    import gzip

    (tmp_path / "a.txt").write_text("small file\n")
    log = "".join(f"version {i}: fixed the thing number {i} in the changelog\n\n" for i in range(3000))
    (tmp_path / "changelog.gz").write_bytes(gzip.compress(log.encode()))
    (tmp_path / "z.txt").write_text("last\n")
    seen: list[tuple[int, int]] = []
    entries = list(FileLoader(tmp_path, chunker=Chunker(500)).load(byte_progress=lambda d, t: seen.append((d, t))))
    total = len("small file\n") + len(log.encode()) + len("last\n")
    assert len(entries) > 100 and {t for _, t in seen} == {total}  # the gzip by its text, not its few bytes
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == total
    inside = [d for d in done if len("small file\n") < d < len("small file\n") + len(log)]
    assert len(inside) > 100  # the large file moves entry by entry, not at its end only
