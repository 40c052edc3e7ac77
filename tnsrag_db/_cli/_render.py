"""How ``tnsrag query`` shows results: to people (wrapped text) and to scripts (JSON).

The JSON shape of one result is stable across versions (docs/ingest-and-cli.md, "Command line")::

    {"rank": 1, "id": "guide.md#2", "score": 0.0325, "content": "...", "source": "guide.md",
     "metadata": {"tier": "SEMANTIC", "entryId": "guide.md#2", ...}}

``id`` is the entry id (``metadata.entryId``; None for a document that is no entry),
``source`` may be None; new keys may be added, none of these is renamed or removed.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from tnsrag_db._cli._common import plural
from tnsrag_db._store.validity import VERSION_KEY, VERSION_SEPARATOR
from tnsrag_db._types import RetrievedDocument

__all__ = ["describe", "render_text", "result_json"]

_INDENT = "    "
#: Lines of content shown per result in text output.
SNIPPET_LINES = 3
_MAX_WIDTH = 100


def result_json(rank: int, doc: RetrievedDocument) -> dict[str, Any]:
    """The JSON object of one result (see the module docstring)."""
    return {"rank": rank, "id": doc.metadata.get("entryId"), "score": doc.score, "content": doc.content,
            "source": doc.source, "metadata": dict(doc.metadata)}


def _age(seconds: int) -> str:
    for size, unit in ((86400 * 365, "y"), (86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}" if seconds < 10 * size else f"{seconds // size} {unit}"
    return f"{seconds} s"


def _path(raw: str) -> str:
    try:
        hops = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return " > ".join(map(str, hops)) if isinstance(hops, list) else raw


def describe(metadata: Mapping[str, str]) -> list[str]:
    """What a strategy added to a result, as short phrases: graph and reasoning depth and
    path, temporal freshness and age, hierarchical level (0 for the hit itself)."""
    out: list[str] = []
    if "childOf" in metadata and "depth" in metadata:
        level = metadata["depth"]
        out.append("hit" if level == "0" else f"level {level} above {metadata['childOf']}")
    elif "depth" in metadata:
        out.append(f"depth {metadata['depth']}")
    if "path" in metadata:
        out.append(f"path {_path(metadata['path'])}")
    if "freshness" in metadata:
        age = metadata.get("ageSeconds")
        out.append(f"freshness {float(metadata['freshness']):.3f}, "
                   + (f"age {_age(int(age))}" if age is not None and age.lstrip("-").isdigit() else "undated"))
    return out


def _width() -> int:
    return max(40, min(_MAX_WIDTH, shutil.get_terminal_size((_MAX_WIDTH, 24)).columns))


def shown_id(metadata: Mapping[str, str]) -> str:
    """A result's entry id for people: a kept version (an answer ``as_of`` an earlier instant
    in a corpus that keeps history) as its entry's id and version number, not the stored
    id with its separator, a control character."""
    entry_id = metadata.get("entryId", "(no id)")
    of = metadata.get(VERSION_KEY)
    if of is not None and entry_id.startswith(of + VERSION_SEPARATOR):
        return f"{of} (kept version {entry_id[len(of) + 1:]})"
    return entry_id


def render_text(strategy: str, documents: Sequence[RetrievedDocument], elapsed_ms: float) -> str:
    """Results for people: a header line, then per result its rank, score, id, tier and
    source, what the strategy added (:func:`describe`), and up to three lines of content
    wrapped on word boundaries with indented continuation lines."""
    width = _width()
    lines = [f"{strategy}: {plural(len(documents), 'result')} in {elapsed_ms:.1f} ms"]
    for n, d in enumerate(documents, 1):
        about = ", ".join(x for x in (d.metadata.get("tier"), d.source) if x)
        head = f"[{n}] {d.score:.4f}  {shown_id(d.metadata)}" + (f"  ({about})" if about else "")
        lines.append(head)
        extra = describe(d.metadata)
        if extra:
            lines.extend(textwrap.wrap("; ".join(extra), width, initial_indent=_INDENT, subsequent_indent=_INDENT + "  ",
                                       break_long_words=False, break_on_hyphens=False))
        text = " ".join(d.content.split())
        lines.extend(textwrap.wrap(text, width, initial_indent=_INDENT, subsequent_indent=_INDENT,
                                   break_long_words=False, break_on_hyphens=False, max_lines=SNIPPET_LINES,
                                   placeholder=" ...") or [_INDENT + "(empty)"])
    return "\n".join(lines)
