"""FileLoader in Python keeps the ingest's rule: ids relative to one folder are that folder's,
and a second folder at the same relative paths is refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tnsrag_db import FileLoader, HashingEmbedding, IdCollisionError, VectorMemoryStore
from tnsrag_db._store.store import Store


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _snapshot(store: Store) -> list[tuple[str, str, dict[str, str]]]:
    return [(e.id, e.content, dict(e.metadata)) for e in store.iter_entries()]


def test_file_loader_refuses_a_second_root_at_the_same_paths(tmp_path: Path, store: Store) -> None:
    six = _tree(tmp_path / "python3-six", {"README.md": "# Six\n\nsix readme\n", "copyright": "six licence\n",
                                           "NEWS": "six news\n"})
    toml = _tree(tmp_path / "python3-toml", {"README.md": "# Toml\n\ntoml readme\n", "copyright": "toml licence\n",
                                             "export.jsonl": json.dumps({"id": "NEWS#0", "content": "x"}) + "\n"})
    vectors = VectorMemoryStore(store, HashingEmbedding())
    first = FileLoader(six, relative_to="pattern")
    first.check_ids(store)  # an empty corpus: nothing to meet
    assert vectors.ingest(first.load()).inserted == 3
    before = _snapshot(store)
    assert {m["root"] for _, _, m in before} == {str(six)}
    second = FileLoader(toml, relative_to="pattern")
    # JSONL records bring their own ids (an export read back): they claim no path.
    assert second.claims() == {"README.md": str(toml), "copyright": str(toml)}
    with pytest.raises(IdCollisionError) as refused:
        second.check_ids(store)
    assert refused.value.collisions == (("README.md#1", str(toml), str(six)), ("copyright#0", str(toml), str(six)))
    assert refused.value.entry_id == "README.md#1"
    assert f"read from {six} at 2 of the file paths read now from {toml}" in str(refused.value)
    assert "id_prefix=" in str(refused.value) and f"store.delete_where({{'root': {str(six)!r}}})" in str(refused.value)
    assert _snapshot(store) == before
    # The same folder again passes and updates in place; a prefix of its own keeps the second apart.
    (six / "NEWS").write_text("six news, revised\n")
    again = FileLoader(six, relative_to="pattern")
    again.check_ids(store)
    counts = vectors.ingest(again.load())
    assert (counts.inserted, counts.updated, counts.unchanged) == (0, 1, 2)
    apart = FileLoader(toml, relative_to="pattern", id_prefix="toml")
    apart.check_ids(store)
    assert vectors.ingest(e for e in apart.load() if e.id != "NEWS#0").inserted == 2
    assert [e.id for e in store.iter_entries()] == ["NEWS#0", "README.md#1", "copyright#0", "toml/README.md#1",
                                                  "toml/copyright#0"]
    # Ids relative to a base directory record no root and claim nothing.
    based = FileLoader("python3-toml", base_dir=tmp_path)
    assert based.claims() == {} and all("root" not in e.metadata for e in based.load())
    based.check_ids(store)


def test_the_cli_and_file_loader_name_a_root_alike(tmp_path: Path, store: Store,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder reached through a symlink, and a relative path, are the same root in both paths."""
    from click.testing import CliRunner

    from tests.fix_db import SCHEMA
    from tnsrag_db._cli import main_group
    from tnsrag_db._db.settings import url_of

    real = _tree(tmp_path / "real" / "docs", {"a.txt": "alpha\n", "b.md": "# B\n\nbeta\n"})
    (tmp_path / "link").symlink_to(tmp_path / "real")
    url = url_of(store.pool.conninfo)
    monkeypatch.chdir(tmp_path / "link")
    res = CliRunner().invoke(main_group, ["ingest", "docs", "--url", url,
                                          "--schema", SCHEMA, "--corpus", store.corpus, "--embedding", "hash"])
    assert res.exit_code == 0, res.output
    assert {e.metadata["root"] for e in store.iter_entries()} == {str(real.resolve())}
    loader = FileLoader("docs", relative_to="pattern")
    assert set(loader.claims().values()) == {str(real.resolve())}
    loader.check_ids(store)
    counts = VectorMemoryStore(store, HashingEmbedding()).ingest(loader.load())
    assert counts.unchanged == 2 and counts.inserted == counts.updated == 0
