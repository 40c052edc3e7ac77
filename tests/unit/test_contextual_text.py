"""The text a contextual provider embeds for an entry, and the names that ask for one."""

from __future__ import annotations

from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import (
    CONTEXT_SUFFIX,
    ContextualEmbedding,
    HashingEmbedding,
    embedding_text,
    resolve_embedding,
)


def test_an_entry_without_context_is_embedded_as_its_content() -> None:
    assert embedding_text(MemoryEntry("a", "Swept wings delay the drag rise.")) == "Swept wings delay the drag rise."


def test_context_lines_come_first_without_repeating_what_the_content_starts_with() -> None:
    page = MemoryEntry("p#1", "Install\n\nRun it twice.", source="site/install.html",
                       metadata={"title": "Install", "path": "site/install.html", "section": "Setup"})
    # The title is the content's first line already; the path is said once; a section without
    # a heading path stands in for it.
    assert embedding_text(page) == "site/install.html\nSetup\n\nInstall\n\nRun it twice."
    chunk = MemoryEntry("m.py#3", "    def step(self):\n        return 1", source="m.py",
                        metadata={"path": "m.py", "definition": "class   Parser:"})
    assert embedding_text(chunk) == "m.py\nclass Parser:\n\n    def step(self):\n        return 1"


def test_a_context_name_resolves_to_its_base_provider_wrapped() -> None:
    provider = resolve_embedding("hash-64" + CONTEXT_SUFFIX)
    assert isinstance(provider, ContextualEmbedding) and provider.name == "tnsrag-hash-64+context1"
    assert provider("a query") == HashingEmbedding(64)("a query")  # queries carry no context
    assert provider.dimension == 64
