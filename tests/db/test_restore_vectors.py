"""Export with vectors, restore without embedding: the library and the CLI, on the real database."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import URL

from tnsrag_db._cli import main_group
from tnsrag_db._db.pool import Pool
from tnsrag_db._errors import InvalidEntryError, ProviderConfigurationError
from tnsrag_db._indexes.graph import Edge, GraphStore
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._loaders import FileLoader
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry
from tnsrag_db.admin import export_corpus, restore_corpus
from tnsrag_db.embeddings import HashingEmbedding


class Precomputed:
    """A provider of 16-d vectors that only ever writes precomputed rows (never embeds)."""

    name = "test-precomputed-16"
    dimension = 16

    def __call__(self, text: str) -> list[float]:
        raise AssertionError(f"embedded {text!r}")


def _entries() -> list[MemoryEntry]:
    return [MemoryEntry(f"e{i}", f"entry number {i} about restoring vectors", parent_id="e0" if i else None,
                        metadata={"n": str(i)}) for i in range(12)]


def _fill(store: Store) -> None:
    VectorMemoryStore(store, HashingEmbedding()).add_all(_entries())
    rows = np.random.default_rng(5).standard_normal((12, 16)).astype(np.float32)  # full float32 precision
    VectorMemoryStore(store, Precomputed()).add_all(_entries(), embeddings=rows)
    GraphStore(store).add_edges([Edge(f"e{i}", f"e{i + 1}", "next") for i in range(11)])


def _vectors(pool: Pool, corpus: str) -> list[tuple[Any, ...]]:
    with pool.connect() as conn:
        return [tuple(r) for r in conn.execute((
            "SELECT s.provider, s.dimension, x.entry_id, CAST(x.embedding AS real[]) FROM embeddings x "
            "JOIN embedding_spaces s ON s.corpus = x.corpus AND s.space_id = x.space_id "
            "WHERE x.corpus = :c ORDER BY s.provider, x.entry_id"), {"c": corpus})]


def _refuse_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on any embedding by the hash provider fails the test: the restore must
    write what the file holds."""
    def refuse(self: object, *args: object) -> None:
        raise AssertionError("the restore embedded a text")

    monkeypatch.setattr(HashingEmbedding, "embed_batch", refuse)
    monkeypatch.setattr(HashingEmbedding, "__call__", refuse)


def test_library_restore_writes_the_exported_vectors_and_embeds_nothing(
        tmp_path: Path, pool: Pool, make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch) -> None:
    original, copy = make_store(), make_store()
    _fill(original)
    dump = tmp_path / "dump.jsonl"
    with dump.open("w", encoding="utf-8") as fh:
        export_corpus(original, fh, batch_size=5, vectors=True)
    first = json.loads(dump.read_text(encoding="utf-8").splitlines()[0])
    assert [v["provider"] for v in first["vectors"]] == [HashingEmbedding().name, Precomputed.name]
    _refuse_embedding(monkeypatch)
    counts = restore_corpus(copy, dump)
    assert counts.to_dict()["entries"] == {"inserted": 12, "updated": 0, "unchanged": 0}
    assert counts.to_dict()["edges"] == {"inserted": 11, "updated": 0, "unchanged": 0}
    assert _vectors(pool, copy.corpus) == _vectors(pool, original.corpus)  # bit for bit, both spaces
    assert list(copy.iter_entries()) == list(original.iter_entries())
    again = restore_corpus(copy, dump)  # idempotent
    assert again.to_dict()["entries"] == {"inserted": 0, "updated": 0, "unchanged": 12}
    assert _vectors(pool, copy.corpus) == _vectors(pool, original.corpus)


def test_cli_export_vectors_then_ingest_restores_every_space(db_url: URL, tmp_path: Path, pool: Pool,
                                                             make_store: Callable[..., Store],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    original, copy = make_store(), make_store()
    url = db_url.render_as_string(hide_password=False)
    _fill(original)
    dump = tmp_path / "dump.jsonl"
    res = CliRunner().invoke(main_group, ["export", "--corpus", original.corpus, "--vectors", "-o", str(dump),
                                          "--url", url, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"corpus": original.corpus, "file": str(dump), "entries": 12, "edges": 11}
    _refuse_embedding(monkeypatch)
    args = ["ingest", str(dump), "--corpus", copy.corpus, "--url", url, "--json", "--embedding", "hash", "-q"]
    res = CliRunner().invoke(main_group, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["inserted"], out["edges"]) == (12, 11)
    assert out["embedding"] == f"{HashingEmbedding().name}, {Precomputed.name}"
    assert _vectors(pool, copy.corpus) == _vectors(pool, original.corpus)
    assert GraphStore(copy).count() == 11
    assert out["restored_vectors"] == [HashingEmbedding().name, Precomputed.name] and out["embedded_missing"] == 0
    res = CliRunner().invoke(main_group, args)  # again: nothing changes
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["unchanged"] == 12
    # The summary says where the vectors came from: nothing was embedded.
    res = CliRunner().invoke(main_group, [a for a in args if a != "--json"])
    assert res.exit_code == 0, res.output
    assert (f"vectors of {HashingEmbedding().name}, {Precomputed.name} restored from the file ("
            in res.stdout) and "embedded" not in res.stdout, res.stdout


def test_cli_summary_counts_the_entries_a_restore_embedded(db_url: URL, tmp_path: Path,
                                                           make_store: Callable[..., Store]) -> None:
    # An export with vectors plus a record without one: only that record is embedded, by
    # the space's own provider, and the summary says so.
    original, copy = make_store(), make_store()
    VectorMemoryStore(original, HashingEmbedding()).add_all(_entries()[:3])
    dump = tmp_path / "dump.jsonl"
    with dump.open("w", encoding="utf-8") as out:
        export_corpus(original, out, vectors=True)
    with dump.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"id": "late", "content": "added after the export"}) + "\n")
    url = db_url.render_as_string(hide_password=False)
    res = CliRunner().invoke(main_group, ["ingest", str(dump), "--corpus", copy.corpus, "--url", url, "-q"])
    assert res.exit_code == 0, res.output
    assert (f"vectors of {HashingEmbedding().name} restored from the file (1 entry without one embedded)"
            in res.stdout), res.stdout


def test_entries_without_an_exported_vector_need_the_space_provider(tmp_path: Path,
                                                                     make_store: Callable[..., Store]) -> None:
    store = make_store()
    dump = tmp_path / "partial.jsonl"
    vector = base64.b64encode(np.full(4, 0.5, dtype="<f4").tobytes()).decode()
    dump.write_text(json.dumps({"id": "a", "content": "alpha", "vectors": [
        {"provider": "nowhere-model", "float32": vector}]}) + "\n"
        + json.dumps({"id": "b", "content": "beta"}) + "\n", encoding="utf-8")
    with pytest.raises(ProviderConfigurationError, match=r"'b'.*nowhere-model|nowhere-model.*'b'"):
        restore_corpus(store, dump)
    assert store.count() == 0  # nothing written


_ONE = base64.b64encode(np.float32(1.0).tobytes()).decode()


@pytest.mark.parametrize(("vectors", "message"), [
    ({"provider": "p", "float32": _ONE}, "'vectors' must be a list"),
    ([{"provider": "p"}], "exactly 'provider' and 'float32'"),
    ([{"provider": " ", "float32": _ONE}], "non-blank string"),
    ([{"provider": "p", "float32": ""}], "base64 of float32 values"),
    ([{"provider": "p", "float32": "not base64!"}], "base64 of float32 values"),
    ([{"provider": "p", "float32": base64.b64encode(b"abc").decode()}], "base64 of float32 values"),
    ([{"provider": "p", "float32": [1.0]}], "base64 of float32 values"),
    ([{"provider": "p", "float32": base64.b64encode(np.float32("nan").tobytes()).decode()}], "finite"),
    ([{"provider": "p", "float32": _ONE}, {"provider": "p", "float32": _ONE}], "a second 1-dimensional"),
])
def test_bad_vectors_name_the_line(tmp_path: Path, vectors: object, message: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "ok", "content": "fine"}\n' + json.dumps({"id": "x", "content": "c", "vectors": vectors})
                   + "\n", encoding="utf-8")
    with pytest.raises(InvalidEntryError, match="bad.jsonl:2") as info:
        list(FileLoader(bad).load())
    assert message in str(info.value)


def test_ingest_of_an_export_with_every_vector_loads_no_embedding_model(
        db_url: URL, tmp_path: Path, pool: Pool, make_store: Callable[..., Store],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tnsrag_db.embeddings

    original, copy, plain = make_store(), make_store(), make_store()
    url = db_url.render_as_string(hide_password=False)
    _fill(original)
    dump = tmp_path / "dump.jsonl"
    res = CliRunner().invoke(main_group, ["export", "--corpus", original.corpus, "--vectors", "-o", str(dump),
                                          "--url", url])
    assert res.exit_code == 0, res.output
    resolved: list[str | None] = []
    real_resolve = tnsrag_db.embeddings.resolve_embedding

    def resolve(name: str | None = None, **kwargs: Any) -> Any:
        # The process default (None) stands for the model whose loading takes seconds.
        resolved.append(name)
        if name is None:
            raise AssertionError("the default embedding model was loaded")
        return real_resolve(name, **kwargs)

    monkeypatch.setattr(tnsrag_db.embeddings, "resolve_embedding", resolve)
    res = CliRunner().invoke(main_group, ["ingest", str(dump), "--corpus", copy.corpus, "--url", url, "--json", "-q"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["inserted"] == 12 and resolved == []
    assert _vectors(pool, copy.corpus) == _vectors(pool, original.corpus)
    assert "hash fallback" not in res.stderr
    # A file without vectors needs the model: it is resolved then (and here refused).
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"id": "x", "content": "needs a vector"}) + "\n", encoding="utf-8")
    res = CliRunner().invoke(main_group, ["ingest", str(bare), "--corpus", plain.corpus, "--url", url, "-q"])
    assert res.exit_code != 0 and resolved == [None]


def test_entries_of_one_text_get_their_own_exported_vectors(db_url: URL, tmp_path: Path, pool: Pool,
                                                            make_store: Callable[..., Store]) -> None:
    # Two entries of one text whose vectors differ (written as precomputed rows, or by two
    # versions of a model): each gets its own back, by id, through the library and the CLI.
    original, by_library, by_cli = make_store(), make_store(), make_store()
    twins = [MemoryEntry("a", "the same words"), MemoryEntry("b", "the same words"), MemoryEntry("c", "other")]
    rows = np.random.default_rng(7).standard_normal((3, 16)).astype(np.float32)
    VectorMemoryStore(original, Precomputed()).add_all(twins, embeddings=rows)
    dump = tmp_path / "twins.jsonl"
    with dump.open("w", encoding="utf-8") as out:
        export_corpus(original, out, vectors=True)
    restore_corpus(by_library, dump)
    url = db_url.render_as_string(hide_password=False)
    res = CliRunner().invoke(main_group, ["ingest", str(dump), "--corpus", by_cli.corpus, "--url", url, "-q"])
    assert res.exit_code == 0, res.output
    expected = _vectors(pool, original.corpus)
    assert [r[2] for r in expected] == ["a", "b", "c"] and expected[0][3] != expected[1][3]
    assert _vectors(pool, by_library.corpus) == expected
    assert _vectors(pool, by_cli.corpus) == expected
