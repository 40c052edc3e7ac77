"""Which provider filled which embedding space, and the CLI that chooses, remembers and re-embeds."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tests._entrypoints import Installer, installer
from tests.unit.test_model_folder import export_folder
from tnsrag_db._cli import main_group
from tnsrag_db._errors import EmbeddingValidationError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._indexes.vector.spaces import bind_embedding, list_spaces, query_embedding, query_space
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import DEFAULT_EMBEDDING_NAME, SHIPPED_MODEL_NAME, HashingEmbedding, default_model

DOCS = [
    ("cat", "A kitten is asleep on the sofa."),
    ("tax", "File the quarterly tax return before the April deadline."),
    ("wing", "Swept wings delay the drag rise at transonic speeds."),
]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    yield from installer(tmp_path, monkeypatch, "spaces")


class Fixed:
    """A provider with a declared name and dimension returning ``width`` values."""

    def __init__(self, name: str, dimension: int, width: int | None = None) -> None:
        self.name, self.dimension, self._width = name, dimension, width or dimension

    def __call__(self, text: str) -> list[float]:
        return [1.0] + [0.0] * (self._width - 1)


def _cli(db_url: URL) -> Callable[..., Any]:
    url = db_url.render_as_string(hide_password=False)  # type: ignore[attr-defined]
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Any:
        res = runner.invoke(main_group, [*args, "--url", url])
        assert res.exit_code == code, res.output
        return res

    return run


def _entries(store: Store) -> list[MemoryEntry]:
    return [MemoryEntry(i, t) for i, t in DOCS]


def test_query_uses_the_newest_complete_space(store: Store) -> None:
    VectorMemoryStore(store, HashingEmbedding()).add_all(_entries(store))
    assert query_space(store) == list_spaces(store)[0]
    # A space filled for two of three entries (a re-embedding under way) does not serve yet.
    partial = VectorMemoryStore(store, Fixed("partial", 4))
    partial.add_all(_entries(store)[:2])
    spaces = list_spaces(store)
    assert [(s.provider, s.vectors, s.complete) for s in spaces] == [
        ("tnsrag-hash-128", 3, True), ("partial", 2, False)]
    assert query_space(store).provider == "tnsrag-hash-128"  # type: ignore[union-attr]
    partial.add_all(_entries(store))
    assert query_space(store).provider == "partial"  # type: ignore[union-attr]
    assert query_space(store, "tnsrag-hash-128").provider == "tnsrag-hash-128"  # type: ignore[union-attr]
    assert query_space(store, "ghost") is None


def test_provider_of_another_dimension_than_its_space_is_refused(store: Store) -> None:
    VectorMemoryStore(store, Fixed("m", 3)).add_all(_entries(store))
    with pytest.raises(EmbeddingValidationError, match=r"m returns 2-dimensional vectors.*space for m at "
                                                        r"dimension 3"):
        bind_embedding(store, Fixed("m", 2))
    # A provider that declares one dimension and returns another: rejected before any write.
    liar = VectorMemoryStore(store, bind_embedding(store, Fixed("liar", 4, width=3)))
    with pytest.raises(EmbeddingValidationError, match="dimension 3, expected 4"):
        liar.add_all([MemoryEntry("new", "new text"), *_entries(store)])
    assert store.count() == 3 and [s.provider for s in list_spaces(store)] == ["m"]


def test_cli_ingests_with_the_shipped_model_and_queries_its_space(db_url: URL, tmp_path: Path,
                                                                   make_store: Callable[..., Store]) -> None:
    run = _cli(db_url)
    corpus = f"emb_{uuid.uuid4().hex[:8]}"
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": i, "content": t}) for i, t in DOCS)
                    + "\n" + json.dumps({"id": "long", "content": "laminar flow " * 400}) + "\n")
    out = json.loads(run("ingest", str(docs), "--corpus", corpus, "--json").stdout)  # progress: stderr
    # The default: the shipped model with each entry's context (these records have none).
    assert out["embedding"] == DEFAULT_EMBEDDING_NAME and out["inserted"] == 4 and out["truncated"] == 1
    res = json.loads(run("query", "a young cat sleeping on a couch", "--corpus", corpus, "--strategy", "vector",
                         "--json").output)
    assert res["results"][0]["metadata"]["entryId"] == "cat"  # no shared content word: semantics
    # Re-embed with the hash fallback: a second space; the newest complete one then serves.
    emb = json.loads(run("embed", "--corpus", corpus, "--embedding", "hash", "--json").output)
    assert (emb["embedding"], emb["embedded"], emb["serving"]) == ("tnsrag-hash-128", 4, "tnsrag-hash-128")
    store = make_store(corpus)
    assert [(s.provider, s.dimension, s.complete) for s in list_spaces(store)] == [
        (DEFAULT_EMBEDDING_NAME, 384, True), ("tnsrag-hash-128", 128, True)]
    assert query_embedding(store).name == "tnsrag-hash-128"
    again = json.loads(run("embed", "--corpus", corpus, "--embedding", "hash", "--json").output)
    assert again["embedded"] == 0  # a re-run resumes: nothing left to embed
    res = json.loads(run("query", "a young cat sleeping on a couch", "--corpus", corpus, "--strategy", "hybrid",
                         "--embedding", DEFAULT_EMBEDDING_NAME, "--json").output)
    assert res["results"][0]["metadata"]["entryId"] == "cat"
    bad = run("query", "x", "--corpus", corpus, "--strategy", "vector", "--embedding", "hash-64", code=1)
    assert "no embedding space for provider tnsrag-hash-64" in bad.output


def test_cli_ingests_and_queries_with_a_model_folder(db_url: URL, tmp_path: Path,
                                                     make_store: Callable[..., Store]) -> None:
    run = _cli(db_url)
    corpus = f"emb_{uuid.uuid4().hex[:8]}"
    folder = export_folder(tmp_path, default_model(), name="my-minilm")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": i, "content": t}) for i, t in DOCS) + "\n")
    out = json.loads(run("ingest", str(docs), "--corpus", corpus, "--embedding", str(folder), "--json").stdout)
    assert out["embedding"].startswith("my-minilm@") and out["inserted"] == 3
    store = make_store(corpus)
    assert [(s.provider, s.dimension, s.complete) for s in list_spaces(store)] == [(out["embedding"], 384, True)]
    res = json.loads(run("query", "a young cat sleeping on a couch", "--corpus", corpus, "--strategy", "hybrid",
                         "--embedding", str(folder), "--json").output)
    assert res["results"][0]["metadata"]["entryId"] == "cat"
    # Without the folder, a query says which folder to pass; another model is refused.
    bad = run("query", "cat", "--corpus", corpus, "--strategy", "vector", code=1)
    assert f"provider {out['embedding']}, which is not installed" in bad.output
    assert "the model folder my-minilm it was embedded with and pass its path (--embedding DIR)" in bad.output
    (tmp_path / "other").mkdir()
    other = export_folder(tmp_path / "other", default_model(), name="my-minilm")
    (other / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    bad = run("query", "cat", "--corpus", corpus, "--strategy", "vector", "--embedding", str(other), code=1)
    assert "has no embedding space for provider my-minilm@" in bad.output and out["embedding"] in bad.output


def test_query_fails_clearly_when_the_space_provider_is_not_installed(db_url: URL, make_store: Callable[..., Store],
                                                                       install: Installer) -> None:
    run = _cli(db_url)
    store = make_store()
    install("ghost-embeddings", """
        class Ghost:
            name = "ghost-model"
            dimension = 3

            def __call__(self, text):
                return [1.0, 0.0, 0.0]
    """, {"ghost": "Ghost"})
    out = json.loads(run("ingest", "--sample", "--corpus", store.corpus, "--embedding", "ghost", "--json").stdout)
    assert out["embedding"] == "ghost-model"
    assert query_embedding(store).name == "ghost-model"  # found again by its provider name
    keyword = run("query", "agents", "--corpus", store.corpus, "--strategy", "keyword")
    assert "keyword" in keyword.output
    # Another process without the provider's package: the vector search says what to install.
    with store.session.transaction() as conn:
        conn.execute("UPDATE embedding_spaces SET provider = 'gone-model' WHERE corpus = :c",
                     {"c": store.corpus})
    res = run("query", "agents", "--corpus", store.corpus, "--strategy", "hybrid", code=1)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "provider gone-model, which is not installed" in lines[0]
    assert "entry-point group 'tnsrag_db.embedding_functions'" in lines[0]
    # The keyword strategy never needs the provider.
    run("query", "agents", "--corpus", store.corpus, "--strategy", "keyword")


def test_declarative_path_registers_the_shipped_model_with_two_lines(install: Installer) -> None:
    from tnsrag_db.embeddings import get_process_embedding

    install("my-app", "from tnsrag_db.embeddings import default_model\n", {"minilm": "default_model"})
    provider = get_process_embedding()
    assert provider.name == SHIPPED_MODEL_NAME and not provider.is_fallback
    assert provider.embed_batch(["x"])[0].shape == (default_model().dimension,)
