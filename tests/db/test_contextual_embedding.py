"""Contextual embedding: entries embedded with their title, path, heading path and enclosing
definition, in a space of their own; re-embedding gives the ingest's vectors."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._chunking import Chunker
from tnsrag_db._cli import main_group
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._indexes.vector.spaces import list_spaces, query_embedding
from tnsrag_db._loaders import FileLoader
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import ContextualEmbedding, HashingEmbedding, embedding_text, resolve_embedding

MARKDOWN = "# Guide\n\nIntro text.\n\n## Install\n\nRun the installer twice.\n"
CODE = "class Parser:\n" + "".join(
    f"    def step_{n}(self):\n        return {n}  # advance the parser by one token\n\n" for n in range(12))


class Recorder(HashingEmbedding):
    """The hash embedding, remembering every text it embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [self(t) for t in texts]


def _load(tmp_path: Path) -> list[MemoryEntry]:
    (tmp_path / "guide.md").write_text(MARKDOWN, encoding="utf-8")
    (tmp_path / "parse.py").write_text(CODE, encoding="utf-8")
    return list(FileLoader(tmp_path, base_dir=tmp_path, chunker=Chunker(200, overlap=0)).load())


def test_embedded_text_carries_the_section_and_code_context(store: Store, tmp_path: Path) -> None:
    entries = _load(tmp_path)
    model = Recorder()
    VectorMemoryStore(store, ContextualEmbedding(model)).add_all(entries)
    install = next(t for t in model.texts if "Run the installer" in t)
    assert install.startswith("guide.md\nGuide > Install\n\n## Install")
    inner = [t for t in model.texts if t.startswith("parse.py\nclass Parser:\n\n    def step_")]
    assert inner, model.texts  # a chunk inside the class names it; the first chunk holds it already
    assert any(t.startswith("parse.py\n\nclass Parser:") for t in model.texts)
    # The text is derived from the stored entry alone.
    assert sorted(embedding_text(e) for e in store.iter_entries()) == sorted(model.texts)
    assert [s.provider for s in list_spaces(store)] == ["tnsrag-hash-128+context1"]


def test_embed_into_a_contextual_space_gives_the_ingest_vectors(db_url: URL, tmp_path: Path,
                                                                 make_store: Callable[..., Store]) -> None:
    entries = _load(tmp_path)
    fresh, old = make_store(f"ctx_{uuid.uuid4().hex[:8]}"), make_store(f"ctx_{uuid.uuid4().hex[:8]}")
    VectorMemoryStore(fresh, resolve_embedding("hash+context1")).add_all(entries)
    plain = VectorMemoryStore(old, HashingEmbedding())
    plain.add_all(entries)
    url = db_url.render_as_string(hide_password=False)  # type: ignore[attr-defined]
    res = CliRunner().invoke(main_group, ["embed", "--corpus", old.corpus, "--embedding", "hash+context1", "--json",
                                          "--url", url])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.output)
    assert (out["embedding"], out["embedded"], out["serving"]) == (
        "tnsrag-hash-128+context1", len(entries), "tnsrag-hash-128+context1")
    ids = [e.id for e in entries]
    want = VectorMemoryStore(fresh, ContextualEmbedding(HashingEmbedding())).stored_vectors(ids, 128)
    got = VectorMemoryStore(old, ContextualEmbedding(HashingEmbedding())).stored_vectors(ids, 128)
    assert set(got) == set(ids) and all(np.allclose(got[i], want[i]) for i in ids)
    before = plain.stored_vectors(ids, 128)
    assert any(not np.allclose(before[i], got[i]) for i in ids)  # the contextual texts differ
    # The old space still answers queries, by name; the new one serves by default.
    assert query_embedding(old).name == "tnsrag-hash-128+context1"
    named = query_embedding(old, "hash")
    assert named.name == "tnsrag-hash-128"
    hits = VectorMemoryStore(old, named).search("Run the installer twice", 3)
    assert hits and hits[0][0] == next(e.id for e in entries if "installer" in e.content)
    # Queries are embedded without context in either space.
    vector = VectorMemoryStore(old, query_embedding(old))
    assert np.allclose(vector.embed_query("install"), HashingEmbedding()("install"))
