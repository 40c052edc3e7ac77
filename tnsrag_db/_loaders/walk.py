"""From patterns to files: globs (the directories a glob names are walked), directory walks
(hidden files, symlinked directories and cache directories skipped), duplicates removed,
and each file's id path relative to its anchor."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._loaders.base import SkippedFile
from tnsrag_db._loaders.formats import _suffix

_GLOB_CHARS = re.compile(r"[*?\[]")
#: Directories a walk does not enter: generated caches and installed dependencies, never
#: the tree's own text (``__pycache__`` holds only compiled ``.pyc``; ``node_modules`` the
#: sources and docs of every npm dependency). Hidden caches (``.mypy_cache``, ``.tox``,
#: ``.venv``) are skipped as hidden directories already. All of a root's are summarised
#: in one :class:`SkippedFile` (see :func:`_cache_summary`), not listed file by file.
CACHE_DIRS = frozenset({"__pycache__", "node_modules"})
_CACHE = "cache directory"
# What `tnsrag export -o F` writes to before renaming it to F (left behind when killed).
_EXPORT_TEMP = re.compile(r"\.tnsrag-export-\d+\.tmp$")  # the reason _walk gives them, summarised by _scan


def _scan(patterns: Sequence[str], base_dir: Path | None, relative_to: Literal["base", "pattern"],
          prefix: str) -> tuple[list[tuple[Path, str, bool, str, str]], list[SkippedFile]]:
    """``(path, rel, explicit, shown, pattern)`` of every candidate file (``shown``: the path
    as reached from its pattern, for messages; ``pattern``: the one that reached it) and the
    files skipped while walking."""
    base = (base_dir if base_dir is not None else Path.cwd()).resolve()
    found: list[tuple[Path, str, bool, str, str]] = []
    skipped: list[SkippedFile] = []
    candidates: list[tuple[Path, Path, bool, str, str]] = []  # (file, root, explicit, shown_root, pattern)
    for pattern in patterns:
        walk_skips = len(skipped)
        caches: list[Path] = []
        full = pattern if os.path.isabs(pattern) else str(base / pattern)
        matches: list[tuple[Path, Path, bool]] = []  # (file, root, explicit)
        shown_root = pattern  # what stands for the root in messages

        def take_tree(folder: Path, root: Path) -> None:
            """Walk ``folder`` (below ``root``): its files are matches, caches summarised, the rest skipped."""
            for path, reason in _walk(folder):
                if reason is None:
                    matches.append((path, root, False))
                elif reason == _CACHE:
                    caches.append(path)
                else:
                    skipped.append(SkippedFile(_shown(shown_root, root, path), reason))
        if _GLOB_CHARS.search(pattern):
            root = Path(_glob_root(full))
            shown_root = _glob_root(pattern)
            matched = sorted(glob.glob(full, recursive=True))
            matches = [(Path(m), root, True) for m in matched if os.path.isfile(m)]
            # Directories the glob names are read as the shell's expansion would have them
            # read (python3* -> each python3-x/ tree), unless the glob itself selects files
            # in them (docs/**/*.md, docs/**): then it chose which files it wants.
            skipped += [SkippedFile(_shown(shown_root, root, Path(m)), "symlinked directory (not followed)")
                        for m in matched if os.path.isdir(m) and os.path.islink(m)]
            for folder in _walked_dirs(matched, [m for m, _, _ in matches]):
                take_tree(folder, root)
        elif os.path.isdir(full):
            root = Path(full)
            take_tree(root, root)
        elif os.path.isfile(full):
            matches = [(Path(full), Path(full), True)]
        if caches:
            skipped.append(_cache_summary(shown_root, caches))
        if not matches and len(skipped) == walk_skips:
            raise ConfigurationError(f"knowledge source pattern {pattern!r} matched no files (looked in {base})")
        candidates += [(path, root, explicit, shown_root, pattern) for path, root, explicit in matches]
    # Each file once. A symlink to a file that is also reached directly (under any pattern)
    # is the duplicate; else the first path reaching a file keeps it.
    real = {path.resolve(): _shown(shown_root, root, path)
            for path, root, _, shown_root, _ in reversed(candidates) if not path.is_symlink()}
    seen: dict[Path, str] = {}
    for path, root, explicit, shown_root, pattern in candidates:
        resolved = path.resolve()
        shown = _shown(shown_root, root, path)
        kept = seen.get(resolved) or (real.get(resolved) if path.is_symlink() else None)
        if kept is not None:
            skipped.append(SkippedFile(shown, f"same file as {kept}"))
            continue
        seen[resolved] = shown
        anchor = base if relative_to == "base" else (root.parent if root == path else root)
        found.append((path, _joined(prefix, _rel(path, anchor)), explicit, shown, pattern))
    return found, skipped


def _rel(path: Path, anchor: Path) -> str:
    """The id path of ``path`` below ``anchor``: its own place (a symlink is named by where
    the link is, not by its target), with the directories on the way resolved on both
    sides; the absolute path when it is not below ``anchor``."""
    own = Path(os.path.realpath(path.parent)) / path.name
    for candidate, top in ((own, Path(os.path.realpath(anchor))), (Path(os.path.abspath(path)),
                                                                    Path(os.path.abspath(anchor)))):
        try:
            return candidate.relative_to(top).as_posix()
        except ValueError:
            continue
    return own.as_posix()


def _joined(prefix: str, rel: str) -> str:
    """``prefix`` (``""`` or ending in ``/``) in front of ``rel``, with one ``/`` between."""
    return prefix + rel.lstrip("/") if prefix else rel


def _cache_summary(shown_root: str, caches: list[Path]) -> SkippedFile:
    """One record for every cache directory a pattern's walk met: the files they hold (in
    ``files``) and which names they had, e.g. ``666 files in 45 cache directories (__pycache__)``."""
    files = sum(len(names) for folder in caches for _, _, names in os.walk(folder))
    kinds = ", ".join(sorted({folder.name for folder in caches}))
    return SkippedFile(shown_root, f"{files} file{'' if files == 1 else 's'} in {len(caches)} cache "
                                   f"director{'y' if len(caches) == 1 else 'ies'} ({kinds})", files=files)


def _walked_dirs(matched: list[str], files: list[Path]) -> list[Path]:
    """The directories among a glob's ``matched`` paths that are walked: those holding no
    matched file and not inside another walked one (symlinked directories are named as
    skipped instead, as in a directory walk)."""
    dirs = [Path(m) for m in matched if os.path.isdir(m) and not os.path.islink(m)]
    chosen = {Path(os.path.abspath(f)).parent for f in files}
    out: list[Path] = []
    for folder in dirs:
        absolute = Path(os.path.abspath(folder))
        if any(c == absolute or absolute in c.parents for c in chosen):
            continue
        if any(absolute == Path(os.path.abspath(o)) or Path(os.path.abspath(o)) in absolute.parents for o in out):
            continue
        out.append(folder)
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
    cache directories (:data:`CACHE_DIRS`, reason ``_CACHE``): not entered; directories
    that cannot be listed)."""
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
            elif name in CACHE_DIRS and not os.path.islink(here / name):
                yield here / name, _CACHE
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
    if _EXPORT_TEMP.search(path.name):
        return "unfinished tnsrag export (the export was killed; the next export to its target removes it)"
    return "binary" if b"\x00" in head else f"unknown file type {_suffix(path.name)!r}"
