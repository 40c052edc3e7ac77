"""``OnnxEmbedding``: a sentence-transformers model exported to ONNX, run with onnxruntime.

No torch: the text is tokenised with the model's own ``tokenizer.json`` (the
``tokenizers`` library), the ONNX graph gives one vector per token, and the sentence
vector is their mean over the attention mask (or the first, CLS, token) followed by L2
normalisation, as the model's sentence-transformers configuration says.

A model directory holds what a sentence-transformers export holds::

    model.onnx (or onnx/model.onnx)   the graph: inputs input_ids, attention_mask
                                      [, token_type_ids]; output last_hidden_state /
                                      token_embeddings (batch, tokens, dim)
    tokenizer.json                    the tokenizer (required)
    1_Pooling/config.json             pooling_mode_mean_tokens or pooling_mode_cls_token
    modules.json                      a Normalize module turns L2 normalisation on
    sentence_bert_config.json         max_seq_length: the model's window in tokens

Any of them can be given explicitly instead (``onnx_file=``, ``tokenizer_file=``,
``pooling=``, ``normalize=``, ``max_tokens=``), so an ONNX file from one installed package
can be combined with a tokenizer and configuration from another place.

Texts longer than the window are truncated to it (the model never sees more);
:attr:`OnnxEmbedding.truncated_texts` counts them and :meth:`OnnxEmbedding.count_tokens`
measures a text so a chunker can keep within :attr:`OnnxEmbedding.max_tokens`. A batch
is tokenised at once, sorted by length and cut into sub-batches padded only to their own
longest text, so short texts do not pay for long ones. onnxruntime runs with one
intra-op thread per available core.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tnsrag_db._errors import ConfigurationError, ProviderConfigurationError
from tnsrag_db._plugins import reraise_interrupt
from tnsrag_db._validate import is_int

__all__ = ["DEFAULT_BATCH_SIZE", "OnnxEmbedding", "POOLING_MODES"]

#: Texts per onnxruntime call (after sorting by length).
DEFAULT_BATCH_SIZE = 32
#: The pooling modes the provider implements.
POOLING_MODES = ("mean", "cls")

_EMBED_EXTRA = "pip install 'tnsrag-db[embed]'"
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
_KNOWN_INPUTS = {"input_ids", "attention_mask", "token_type_ids"}


def _import(module: str) -> Any:
    try:
        return import_module(module)
    except ImportError as exc:
        reraise_interrupt(exc)
        raise ProviderConfigurationError(
            f"the ONNX embedding provider needs the {module} package: {_EMBED_EXTRA}") from exc


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProviderConfigurationError(f"cannot read model configuration {path}: {exc}") from exc


class OnnxEmbedding:
    """An exported sentence-transformers model as an embedding function (see the module doc).

    ``model_dir`` is the model directory (None when every file and setting is given
    explicitly). ``name`` keys the stored embedding space (default: the directory's
    name); give each distinct model or weight file a distinct name. ``batch_size`` is the
    number of texts per onnxruntime call, ``threads`` the intra-op threads (default: the
    available cores).

    Raises :class:`ProviderConfigurationError` when a file is missing or unreadable (a
    directory without ``tokenizer.json`` included), the configuration names an
    unsupported pooling, or the ONNX graph's inputs or outputs are not those of a
    sentence-transformers export; :class:`ConfigurationError` for a bad option.
    """

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, *, name: str | None = None,
                 onnx_file: str | os.PathLike[str] | None = None,
                 tokenizer_file: str | os.PathLike[str] | None = None,
                 pooling: str | None = None, normalize: bool | None = None, max_tokens: int | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, threads: int | None = None) -> None:
        directory = None if model_dir is None else Path(model_dir)
        if directory is not None and not directory.is_dir():
            raise ProviderConfigurationError(f"model directory {directory} does not exist or is not a directory")
        for option, value in (("batch_size", batch_size), ("threads", threads), ("max_tokens", max_tokens)):
            if value is not None and (not is_int(value) or value < 1):
                raise ConfigurationError(f"{option} must be an int >= 1, got {value!r}")
        if pooling is not None and pooling not in POOLING_MODES:
            raise ConfigurationError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {pooling!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError(f"name must be a non-blank string, got {name!r}")
        self._onnx_path = self._find_onnx(directory, onnx_file)
        self._tokenizer_path = self._find_tokenizer(directory, tokenizer_file)
        self._pooling = pooling if pooling is not None else self._configured_pooling(directory)
        self._normalize = normalize if normalize is not None else self._configured_normalize(directory)
        self._max_tokens = max_tokens if max_tokens is not None else self._configured_max_tokens(directory)
        if name is None:
            name = directory.name if directory is not None else self._onnx_path.stem
        self._name = name
        self._batch_size = batch_size
        self._threads = threads if threads is not None else _cores()
        self._tokenizer, self._counter = self._load_tokenizer()
        self._session, self._inputs, self._output, self._token_level = self._load_session()
        self._truncated = 0
        self._truncated_lock = threading.Lock()
        self._dimension = self._probe()

    # -- files and configuration -------------------------------------------------------
    @staticmethod
    def _find_onnx(directory: Path | None, onnx_file: str | os.PathLike[str] | None) -> Path:
        if onnx_file is not None:
            path = Path(onnx_file)
            if not path.is_file():
                raise ProviderConfigurationError(f"ONNX file {path} does not exist")
            return path
        if directory is None:
            raise ConfigurationError("give a model directory or onnx_file=")
        for candidate in (directory / "model.onnx", directory / "onnx" / "model.onnx"):
            if candidate.is_file():
                return candidate
        raise ProviderConfigurationError(
            f"model directory {directory} has no model.onnx (nor onnx/model.onnx); pass onnx_file=")

    @staticmethod
    def _find_tokenizer(directory: Path | None, tokenizer_file: str | os.PathLike[str] | None) -> Path:
        if tokenizer_file is not None:
            path = Path(tokenizer_file)
            if not path.is_file():
                raise ProviderConfigurationError(f"tokenizer file {path} does not exist")
            return path
        if directory is None or not (directory / "tokenizer.json").is_file():
            where = f"model directory {directory}" if directory is not None else "the model"
            raise ProviderConfigurationError(
                f"{where} has no tokenizer.json (the tokenizers-library file of the model); "
                "add it or pass tokenizer_file=")
        return directory / "tokenizer.json"

    @staticmethod
    def _configured_pooling(directory: Path | None) -> str:
        config = None if directory is None else directory / "1_Pooling" / "config.json"
        if config is None or not config.is_file():
            raise ProviderConfigurationError(
                f"no pooling configuration ({config if config is not None else '1_Pooling/config.json'}); "
                f"pass pooling= ({' or '.join(POOLING_MODES)}) as the model card says")
        data = _read_json(config)
        modes = [k for k, v in data.items() if k.startswith("pooling_mode_") and v is True] if isinstance(
            data, dict) else []
        if modes == ["pooling_mode_mean_tokens"]:
            return "mean"
        if modes == ["pooling_mode_cls_token"]:
            return "cls"
        raise ProviderConfigurationError(
            f"{config}: unsupported pooling {modes or data!r}; only mean or CLS pooling is implemented")

    @staticmethod
    def _configured_normalize(directory: Path | None) -> bool:
        modules = None if directory is None else directory / "modules.json"
        if modules is None or not modules.is_file():
            return True  # cosine search does not depend on it; unit vectors are the safe default
        data = _read_json(modules)
        if not isinstance(data, list):
            raise ProviderConfigurationError(f"{modules}: expected a list of modules")
        return any(isinstance(m, dict) and str(m.get("type", "")).endswith(".Normalize") for m in data)

    @staticmethod
    def _configured_max_tokens(directory: Path | None) -> int:
        if directory is not None:
            for file, key in (("sentence_bert_config.json", "max_seq_length"),
                              ("tokenizer_config.json", "model_max_length")):
                path = directory / file
                if path.is_file():
                    value = _read_json(path).get(key) if isinstance(_read_json(path), dict) else None
                    if is_int(value) and 1 <= value <= 100_000:
                        return value
        raise ProviderConfigurationError(
            f"no max_seq_length in {directory}/sentence_bert_config.json; pass max_tokens= (the model's window)")

    # -- loading ---------------------------------------------------------------------------
    def _load_tokenizer(self) -> tuple[Any, Any]:
        tokenizers = _import("tokenizers")
        try:
            text = self._tokenizer_path.read_text(encoding="utf-8")
            tokenizer = tokenizers.Tokenizer.from_str(text)
            counter = tokenizers.Tokenizer.from_str(text)
        except Exception as exc:
            raise ProviderConfigurationError(f"cannot load tokenizer {self._tokenizer_path}: {exc}") from exc
        # The file may carry its own padding and truncation (all-MiniLM-L6-v2's pads every
        # text to 128); padding is done here per sub-batch, truncation at the model window.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self._max_tokens)
        counter.no_padding()
        counter.no_truncation()
        return tokenizer, counter

    def _load_session(self) -> tuple[Any, tuple[str, ...], str, bool]:
        ort = _import("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle intra-op threads sleep instead of spinning: spinning takes the cores from the
        # database writes that overlap embedding, and from everything else on a busy machine.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(str(self._onnx_path), sess_options=options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ProviderConfigurationError(f"cannot load ONNX model {self._onnx_path}: {exc}") from exc
        inputs = tuple(i.name for i in session.get_inputs())
        where = f"ONNX model {self._onnx_path}"
        unknown = [i for i in inputs if i not in _KNOWN_INPUTS]
        if "input_ids" not in inputs or "attention_mask" not in inputs or unknown:
            raise ProviderConfigurationError(
                f"{where} has inputs {list(inputs)}; a sentence-transformers export takes input_ids, "
                f"attention_mask and optionally token_type_ids")
        outputs = {o.name: o.shape for o in session.get_outputs()}
        for candidate in _TOKEN_OUTPUTS:
            if candidate in outputs and len(outputs[candidate]) == 3:
                return session, inputs, candidate, True
        if "sentence_embedding" in outputs and len(outputs["sentence_embedding"]) == 2:
            return session, inputs, "sentence_embedding", False
        raise ProviderConfigurationError(
            f"{where} has outputs {dict(outputs)}; expected last_hidden_state or token_embeddings of shape "
            f"(batch, tokens, dim), or sentence_embedding of shape (batch, dim)")

    def _probe(self) -> int:
        try:
            out = self._run(self._tokenizer.encode_batch(["tnsrag probe"]))
        except ProviderConfigurationError:
            raise
        except Exception as exc:
            raise ProviderConfigurationError(
                f"ONNX model {self._onnx_path} failed on a probe text: {exc}") from exc
        if out.ndim != 2 or out.shape[0] != 1 or out.shape[1] < 1 or not np.isfinite(out).all():
            raise ProviderConfigurationError(
                f"ONNX model {self._onnx_path} returned {out.shape} for one probe text, not one finite vector")
        return int(out.shape[1])

    # -- the protocol -----------------------------------------------------------------------
    #: Computed on this machine: a batch may be cut into small calls at about no cost (a
    #: call's texts are sorted and padded on their own), so a store embeds in calls short
    #: enough to stop between (see the protocol).
    local_compute = True

    @property
    def name(self) -> str:
        """The provider name; keys the stored embedding space."""
        return self._name

    @property
    def dimension(self) -> int:
        """The number of values in every vector (read from the model at load)."""
        return self._dimension

    @property
    def max_tokens(self) -> int:
        """The model's window in tokens, special tokens included; longer texts are truncated."""
        return self._max_tokens

    @property
    def pooling(self) -> str:
        """``mean`` or ``cls``."""
        return self._pooling

    @property
    def normalize(self) -> bool:
        """True when vectors are L2-normalised."""
        return self._normalize

    @property
    def onnx_file(self) -> Path:
        """The ONNX graph in use."""
        return self._onnx_path

    @property
    def truncated_texts(self) -> int:
        """How many texts embedded so far were longer than :attr:`max_tokens` and truncated."""
        return self._truncated

    def __repr__(self) -> str:
        return (f"OnnxEmbedding(name={self._name!r}, dimension={self._dimension}, pooling={self._pooling!r}, "
                f"max_tokens={self._max_tokens})")

    def count_tokens(self, text: str) -> int:
        """The number of tokens ``text`` becomes, special tokens included, without truncation."""
        return len(self._counter.encode(text).ids)

    def __call__(self, text: str) -> list[float]:
        """Embed one text; :attr:`dimension` floats (use :meth:`embed_batch` for arrays)."""
        vector: list[float] = self.embed_batch([text])[0].tolist()
        return vector

    def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` in order; a float32 array of shape (len(texts), :attr:`dimension`)."""
        batch = list(texts)
        out = np.zeros((len(batch), self._dimension), dtype=np.float32)
        if not batch:
            return out
        encodings = self._tokenizer.encode_batch(batch)
        truncated = sum(1 for e in encodings if e.overflowing)
        if truncated:
            with self._truncated_lock:
                self._truncated += truncated
        order = np.argsort(np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(batch)),
                           kind="stable")
        for start in range(0, len(batch), self._batch_size):
            rows = order[start:start + self._batch_size]
            vectors = self._run([encodings[i] for i in rows])
            if vectors.shape != (len(rows), self._dimension):
                raise ProviderConfigurationError(
                    f"ONNX model {self._onnx_path} returned shape {vectors.shape} for {len(rows)} texts, "
                    f"expected ({len(rows)}, {self._dimension})")
            out[rows] = vectors
        return out

    def _run(self, encodings: Sequence[Any]) -> npt.NDArray[np.float32]:
        """Pad ``encodings`` to their longest, run the graph, pool and normalise."""
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        (raw,) = self._session.run([self._output], {k: feeds[k] for k in self._inputs})
        hidden: npt.NDArray[np.float32] = np.asarray(raw, dtype=np.float32)
        if self._token_level:
            if hidden.ndim != 3 or hidden.shape[:2] != ids.shape:
                raise ProviderConfigurationError(
                    f"ONNX model {self._onnx_path} output {self._output} has shape {hidden.shape}, "
                    f"expected (batch, tokens, dim) = ({ids.shape[0]}, {ids.shape[1]}, dim)")
            if self._pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                weights = mask[:, :, None].astype(np.float32)
                pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        else:
            pooled = hidden
        if self._normalize:
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.maximum(norms, 1e-12)
        result: npt.NDArray[np.float32] = np.ascontiguousarray(pooled, dtype=np.float32)
        return result
