"""Contextual embedding: each entry embedded with its context (title, path, heading path,
enclosing definition) before its text; queries embedded as they are.

The text the model sees for an entry (:func:`embedding_text`) is derived from the stored
entry alone, so re-embedding a corpus (``tnsrag embed``) gives the vectors an ingest
gives. The form is versioned in the provider's name (``<model>+context1``), which keys
the corpus's embedding space: a space filled from plain texts is never mixed with one
filled from contextual texts, and :func:`~tnsrag_db.embeddings.resolve_embedding` turns
such a name back into the provider that fills (and queries) its space.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings._protocol import EmbeddingFunction, batch_method, provider_name

__all__ = ["CONTEXT_SUFFIX", "ContextualEmbedding", "embedding_text", "split_context_name"]

#: What a contextual provider's name ends with: the version of the text form it embeds.
CONTEXT_SUFFIX = "+context1"

#: The metadata keys whose values head the embedded text, in order (``path`` only when the
#: entry has no ``source``; ``section`` only without ``headingPath``).
_CONTEXT_KEYS = ("title", "path", "headingPath", "section", "definition")


def embedding_text(entry: MemoryEntry) -> str:
    """The text the model sees for ``entry`` in form ``context1``: its context lines (the
    metadata ``title``, the ``source`` (else metadata ``path``), the ``headingPath`` (else
    ``section``), the enclosing ``definition`` of a code chunk), one a line, a blank line,
    then its content; a line the content already starts with is left out, and an entry
    without context is embedded as its content alone."""
    meta = entry.metadata or {}
    values = {key: str(meta.get(key, "")).strip() for key in _CONTEXT_KEYS}
    if entry.source:
        values["path"] = str(entry.source).strip()
    if values["headingPath"]:
        values["section"] = ""
    head = entry.content.lstrip()[:512]
    lines: list[str] = []
    for key in _CONTEXT_KEYS:
        value = " ".join(values[key].split())
        if value and value not in lines and not head.startswith(value):
            lines.append(value)
    return "\n".join(lines) + "\n\n" + entry.content if lines else entry.content


def split_context_name(name: str) -> tuple[str, bool]:
    """``(base provider name, contextual)`` of a provider name."""
    if name.endswith(CONTEXT_SUFFIX) and len(name) > len(CONTEXT_SUFFIX):
        return name[: -len(CONTEXT_SUFFIX)], True
    return name, False


class ContextualEmbedding:
    """``provider`` embedding entries with their context (:func:`embedding_text`), under the
    name ``<provider's name>+context1``; queries (``__call__``, ``embed_batch``) are
    embedded by ``provider`` unchanged."""

    def __init__(self, provider: EmbeddingFunction) -> None:
        self._provider = provider
        self._batch = batch_method(provider)
        self._name = provider_name(provider) + CONTEXT_SUFFIX

    @property
    def name(self) -> str:
        """The provider name, ``<base>+context1`` (keys the stored embedding space)."""
        return self._name

    @property
    def provider(self) -> EmbeddingFunction:
        """The provider that embeds the texts."""
        return self._provider

    @property
    def dimension(self) -> int | None:
        """The base provider's declared dimension, if any."""
        value: Any = getattr(self._provider, "dimension", None)
        return value if isinstance(value, int) else None

    def __getattr__(self, attribute: str) -> Any:  # max_tokens, truncated_texts, ...
        if attribute.startswith("_") or attribute == "embed_entries":
            raise AttributeError(attribute)
        return getattr(self._provider, attribute)

    def __repr__(self) -> str:
        return f"ContextualEmbedding({self._provider!r})"

    def __call__(self, text: str) -> Any:
        return self._provider(text)

    def embed_batch(self, texts: Sequence[str]) -> Sequence[Any]:
        """The query-side embeddings of ``texts`` (no context added)."""
        if self._batch is not None:
            return self._batch(list(texts))
        return [self._provider(t) for t in texts]

    def entry_text(self, entry: MemoryEntry) -> str:
        """The text embedded for ``entry`` (:func:`embedding_text`); a vector store embeds
        an entry's ``entry_text`` rather than its content."""
        return embedding_text(entry)
