"""Which format a file is read as, from its name: the suffix tables and :func:`file_format`."""

from __future__ import annotations

import os

__all__ = ["file_format"]

#: File name suffixes :class:`FileLoader` reads when it walks a directory, by format.
_FORMATS = {".md": "markdown", ".markdown": "markdown", ".mdown": "markdown", ".mkd": "markdown",
            ".txt": "text", ".text": "text", ".rst": "text", ".rest": "text", ".adoc": "text",
            ".asciidoc": "text", ".org": "text", ".jsonl": "jsonl", ".ndjson": "jsonl",
            ".html": "html", ".htm": "html", ".xhtml": "html", ".pdf": "pdf",
            # logs, configuration and Perl/Texinfo documentation are read as they are written
            ".log": "text", ".conf": "text", ".pod": "text", ".texi": "text", ".texinfo": "text",
            # Graphviz graphs (documentation diagrams): their labels and node names are text
            ".dot": "text", ".gv": "text"}
#: Source code suffixes and the ``language`` metadata they get.
_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript", ".java": "java", ".kt": "kotlin",
    ".kts": "kotlin", ".scala": "scala", ".groovy": "groovy", ".go": "go", ".rs": "rust", ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp", ".cs": "csharp",
    ".fs": "fsharp", ".swift": "swift", ".m": "objective-c", ".mm": "objective-c", ".rb": "ruby",
    ".php": "php", ".pl": "perl", ".pm": "perl", ".perl": "perl", ".awk": "awk", ".lua": "lua", ".r": "r", ".jl": "julia", ".hs": "haskell",
    ".ml": "ocaml", ".mli": "ocaml", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang", ".clj": "clojure",
    ".el": "emacs-lisp", ".lisp": "lisp", ".scm": "scheme", ".dart": "dart", ".zig": "zig", ".nim": "nim",
    ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".fish": "shell", ".ps1": "powershell",
    ".sql": "sql", ".vue": "vue", ".svelte": "svelte", ".css": "css", ".scss": "scss", ".less": "less",
    ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".cfg": "ini", ".json": "json",
    ".xml": "xml", ".proto": "protobuf", ".tf": "terraform", ".cmake": "cmake", ".mk": "make",
}
#: Files named like this (before the first dot, any case: ``README.Debian``) are plain text
#: whatever their suffix, and so are files with one of them as their suffix (``git-p4.README``).
_TEXT_NAMES = {"readme", "changelog", "changes", "news", "history", "copying", "copyright", "license",
               "licence", "authors", "contributors", "credits", "thanks", "todo", "install", "notice",
               "bugs", "faq", "hacking", "contributing", "makefile", "dockerfile"}


def file_format(name: str) -> str | None:
    """The format :class:`FileLoader` reads a file named ``name`` as (``markdown``, ``text``,
    ``jsonl``, ``html``, ``pdf``, ``code``), or None for an unknown type. ``x.gz`` is read
    as ``x``; ``README``-style names are text whether the name is the stem (``README.Debian``)
    or the suffix (``git-p4.README``)."""
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
    if lower.split(".", 1)[0] in _TEXT_NAMES or suffix in _TEXT_NAMES:
        return "text"
    return None


def _language(name: str) -> str:
    lower = name.lower().removesuffix(".gz")
    return _LANGUAGES.get(os.path.splitext(lower)[1], "text")



def _suffix(name: str) -> str:
    lower = name.lower().removesuffix(".gz")
    return os.path.splitext(lower)[1] or lower
