"""A model folder (an exported sentence-transformers model) as a named provider, tested with
the shipped model's own files laid out as such an export (no mocks, no network)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tnsrag_db._errors import ProviderConfigurationError
from tnsrag_db.embeddings import (
    OnnxEmbedding,
    default_model,
    embedding_install_hint,
    model_folder,
    resolve_embedding,
    shipped_model_dir,
)

TEXTS = ["A kitten is asleep on the sofa.", "File the quarterly tax return before April.", "",
         "boundary layer transition on a swept wing " * 60]


@pytest.fixture(scope="module")
def shipped() -> OnnxEmbedding:
    return default_model()


def export_folder(parent: Path, shipped: OnnxEmbedding, name: str = "minilm") -> Path:
    """The shipped model's files laid out as sentence-transformers' ONNX backend saves a model:
    onnx/model.onnx (a symlink to the shipped graph), tokenizer.json, 1_Pooling/config.json,
    modules.json (with Normalize) and sentence_bert_config.json (the window)."""
    folder = parent / name
    shutil.copytree(shipped_model_dir(), folder)
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").symlink_to(shipped.onnx_file)
    return folder


def test_a_folder_gives_the_shipped_models_vectors_under_a_stable_name(tmp_path: Path,
                                                                      shipped: OnnxEmbedding) -> None:
    folder = export_folder(tmp_path, shipped)
    model = model_folder(folder)
    name, digest = model.name.split("@")
    assert name == "minilm" and len(digest) == 12 and int(digest, 16) >= 0
    assert (model.dimension, model.pooling, model.normalize, model.max_tokens) == (384, "mean", True, 256)
    np.testing.assert_allclose(model.embed_batch(TEXTS), shipped.embed_batch(TEXTS), atol=1e-6)
    assert model_folder(folder) is model  # loaded once while its files are unchanged
    # The same files elsewhere, in a folder of the same name, are the same provider name.
    (tmp_path / "elsewhere").mkdir()
    assert model_folder(export_folder(tmp_path / "elsewhere", shipped)).name == model.name


def test_what_decides_the_vectors_decides_the_name(tmp_path: Path, shipped: OnnxEmbedding) -> None:
    names = {model_folder(export_folder(tmp_path, shipped)).name}
    # Another window, pooling or normalisation, in a folder of the same name: another provider.
    for i, (file, content) in enumerate([
            ("sentence_bert_config.json", {"max_seq_length": 128}),
            ("1_Pooling/config.json", {"pooling_mode_cls_token": True}),
            ("modules.json", [{"idx": 0, "type": "sentence_transformers.models.Transformer"}])]):
        (tmp_path / str(i)).mkdir()
        folder = export_folder(tmp_path / str(i), shipped)
        (folder / file).write_text(json.dumps(content))
        names.add(model_folder(folder).name)
    assert len(names) == 4 and all(n.startswith("minilm@") for n in names)


@pytest.mark.parametrize("missing", ["onnx/model.onnx", "tokenizer.json", "1_Pooling/config.json",
                                     "sentence_bert_config.json"])
def test_a_folder_lacking_a_file_is_refused_naming_folder_and_file(tmp_path: Path, shipped: OnnxEmbedding,
                                                                   missing: str) -> None:
    folder = export_folder(tmp_path, shipped)
    (folder / missing).unlink()
    shown = "model.onnx (or onnx/model.onnx)" if missing == "onnx/model.onnx" else missing
    with pytest.raises(ProviderConfigurationError, match=re.escape(f"model folder {folder} lacks {shown} (")):
        resolve_embedding(str(folder))


def test_paths_resolve_to_folders(tmp_path: Path, shipped: OnnxEmbedding, monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_folder(export_folder(tmp_path, shipped))
    monkeypatch.chdir(tmp_path)
    assert resolve_embedding("./minilm") is model
    assert resolve_embedding("minilm") is model  # a folder in the working directory
    assert resolve_embedding(str(tmp_path / "minilm")) is model
    with pytest.raises(ProviderConfigurationError, match=r"model folder .*/absent does not exist"):
        resolve_embedding("./absent")
    # A folder model's stored name, without its folder: the error says to pass the folder.
    with pytest.raises(ProviderConfigurationError, match=r"install the model folder minilm it was embedded with "
                                                          r"and pass its path \(--embedding DIR\)"):
        resolve_embedding("minilm@0123456789ab")
    assert "install" not in embedding_install_hint(model.name)
