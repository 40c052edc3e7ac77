"""A model folder as a named provider: an exported sentence-transformers model on disk.

:func:`model_folder` loads a folder laid out as a sentence-transformers ONNX export
(what :class:`OnnxEmbedding` reads: ``model.onnx`` or ``onnx/model.onnx``,
``tokenizer.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json``, and
``modules.json`` for normalisation) and names it ``<folder name>@<12 hex digits>``, the
digits a sha256 of what decides its vectors: the ONNX graph (and its external data file,
if any), the tokenizer and the pooling, normalisation and window settings. The name keys
the embedding space a corpus stores, so a corpus embedded with one folder is never
searched with another model, even one in a folder of the same name; the same files
anywhere give the same name. Nothing is fetched: the folder must hold every file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path

from tnsrag_db._errors import ProviderConfigurationError
from tnsrag_db.embeddings._onnx import OnnxEmbedding

__all__ = ["FOLDER_NAME", "is_folder_model_name", "looks_like_path", "model_folder"]

#: The provider names of model folders: the folder's name, ``@``, 12 hex digits of a sha256.
FOLDER_NAME = re.compile(r".+@[0-9a-f]{12}")
# Files beside the graph that hold its weights when it is over 2 GB (ONNX external data).
_EXTERNAL_DATA = ("model.onnx_data", "model.onnx.data")
_CHUNK = 1 << 20

_lock = threading.Lock()
# Resolved folder -> (the files' (path, size, mtime) it was loaded from, the provider).
_loaded: dict[Path, tuple[tuple[tuple[str, int, int], ...], OnnxEmbedding]] = {}


def is_folder_model_name(name: str) -> bool:
    """True when ``name`` has the form of a model folder's provider name (``bge-small@1a2b3c4d5e6f``)."""
    return FOLDER_NAME.fullmatch(name) is not None


def looks_like_path(name: str) -> bool:
    """True when ``name`` is written as a path (it has a separator, or starts with ``.`` or ``~``)."""
    return (os.sep in name or (os.altsep is not None and os.altsep in name)
            or name.startswith((".", "~")))


def _stamp(files: list[Path]) -> tuple[tuple[str, int, int], ...]:
    stamps = []
    for file in files:
        stat = file.stat()
        stamps.append((str(file), stat.st_size, stat.st_mtime_ns))
    return tuple(stamps)


def _digest(files: list[Path], settings: dict[str, object]) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        try:
            with file.open("rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
        except OSError as exc:
            raise ProviderConfigurationError(f"cannot read model file {file}: {exc}") from exc
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()


def model_folder(path: str | os.PathLike[str]) -> OnnxEmbedding:
    """The model in folder ``path`` as a provider named ``<folder name>@<sha256 prefix>``.

    Loaded once per process while its files are unchanged (then the same object;
    thread-safe). Raises :class:`ProviderConfigurationError` naming the folder and the
    file when the folder does not exist or lacks a file (``model.onnx``,
    ``tokenizer.json``, ``1_Pooling/config.json``, the window in
    ``sentence_bert_config.json``), or a file cannot be read or loaded.
    """
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ProviderConfigurationError(
            f"model folder {folder.absolute()} does not exist or is not a directory (a model folder holds model.onnx, "
            "tokenizer.json, 1_Pooling/config.json and sentence_bert_config.json)")
    folder = folder.resolve()
    missing = [shown for shown, present in (
        ("model.onnx (or onnx/model.onnx)",
         (folder / "model.onnx").is_file() or (folder / "onnx" / "model.onnx").is_file()),
        ("tokenizer.json", (folder / "tokenizer.json").is_file()),
        ("1_Pooling/config.json", (folder / "1_Pooling" / "config.json").is_file()),
        ("sentence_bert_config.json", (folder / "sentence_bert_config.json").is_file()
         or (folder / "tokenizer_config.json").is_file())) if not present]
    if missing:
        raise ProviderConfigurationError(
            f"model folder {folder} lacks {', '.join(missing)} (a sentence-transformers ONNX export holds them)")
    # The same lookups OnnxEmbedding makes, first, so that the name covers what it loads.
    onnx_file = OnnxEmbedding._find_onnx(folder, None)
    tokenizer_file = OnnxEmbedding._find_tokenizer(folder, None)
    pooling = OnnxEmbedding._configured_pooling(folder)
    normalize = OnnxEmbedding._configured_normalize(folder)
    max_tokens = OnnxEmbedding._configured_max_tokens(folder)
    settings: dict[str, object] = {"pooling": pooling, "normalize": normalize, "max_tokens": max_tokens}
    files = [onnx_file, *(onnx_file.parent / n for n in _EXTERNAL_DATA if (onnx_file.parent / n).is_file()),
             tokenizer_file]
    with _lock:
        stamp = _stamp(files)
        known = _loaded.get(folder)
        if known is not None and known[0] == stamp:
            return known[1]
        name = f"{folder.name}@{_digest(files, settings)[:12]}"
        model = OnnxEmbedding(folder, name=name, onnx_file=onnx_file, tokenizer_file=tokenizer_file,
                              pooling=pooling, normalize=normalize, max_tokens=max_tokens)
        _loaded[folder] = (stamp, model)
        return model
