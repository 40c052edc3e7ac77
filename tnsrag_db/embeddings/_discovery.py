"""The process-wide embedding provider of the declarative path, found via entry points.

Applications register one provider in the ``tnsrag_db.embedding_functions`` entry-point
group (the Python form of the SPI's ``META-INF/services`` file), e.g. in
``pyproject.toml``::

    [project.entry-points."tnsrag_db.embedding_functions"]
    my-model = "my_package.embeddings:MyEmbedding"

No provider selects the 128-slot :class:`HashingEmbedding`; exactly one is loaded,
wrapped in :class:`ValidatingEmbedding` and cached for the process; more than one is a
:class:`ProviderConfigurationError` (installation order never picks one). Programmatic
stores that are handed an embedding function do not use any of this.

Concurrency follows the SPI: initialisation and every embedding call take a
non-blocking lock, so a concurrent call fails at once with :class:`ProviderBusyError`
instead of queueing. The application controls call concurrency.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from tnsrag_db._errors import ProviderBusyError, ProviderConfigurationError
from tnsrag_db.embeddings._hashing import DEFAULT_HASH_DIMENSION, HashingEmbedding
from tnsrag_db.embeddings._protocol import EmbeddingFunction
from tnsrag_db.embeddings._validating import ValidatingEmbedding

__all__ = [
    "ENTRY_POINT_GROUP",
    "ProcessEmbedding",
    "discover_embedding_providers",
    "get_process_embedding",
    "load_process_embedding",
    "reset_process_embedding",
]

#: The entry-point group an application registers its embedding provider in.
ENTRY_POINT_GROUP = "tnsrag_db.embedding_functions"


class ProcessEmbedding:
    """The process-wide provider: a :class:`ValidatingEmbedding` that refuses concurrent calls.

    Each call raises :class:`ProviderBusyError` at once while another call is running,
    besides whatever :class:`ValidatingEmbedding` raises.
    """

    def __init__(self, embedding: ValidatingEmbedding, *, is_fallback: bool = False) -> None:
        self._embedding = embedding
        self._is_fallback = is_fallback
        self._call_lock = threading.Lock()

    @property
    def name(self) -> str:
        """The provider name (``tnsrag-hash-128`` for the fallback)."""
        return self._embedding.name

    @property
    def dimension(self) -> int | None:
        """The fixed dimension, or None until the first shape-valid vector (128 for the fallback)."""
        return self._embedding.dimension

    @property
    def is_fallback(self) -> bool:
        """True when no provider is installed and the hash fallback is in use."""
        return self._is_fallback

    def __repr__(self) -> str:
        return f"ProcessEmbedding(name={self.name!r}, dimension={self.dimension!r}, is_fallback={self._is_fallback})"

    def __call__(self, text: str) -> npt.NDArray[np.float32]:
        """Embed ``text`` as a fresh 1-d float32 array; :class:`ProviderBusyError` if a call is running."""
        self._enter()
        try:
            return self._embedding(text)
        finally:
            self._call_lock.release()

    def embed_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Embed each text in order; :class:`ProviderBusyError` if a call is running."""
        self._enter()
        try:
            return self._embedding.embed_batch(texts)
        finally:
            self._call_lock.release()

    def _enter(self) -> None:
        # Queueing behind a slow provider would hide the overload from the application;
        # the SPI asks for an immediate failure instead.
        if not self._call_lock.acquire(blocking=False):
            raise ProviderBusyError(
                f"embedding provider {self.name} is busy with another call; "
                "concurrent embedding calls are refused, not queued"
            )


def discover_embedding_providers() -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of :data:`ENTRY_POINT_GROUP`, sorted by name and value, not loaded.

    The same ``module:attr`` registered twice counts once (as ServiceLoader ignores a
    class named twice).
    """
    unique: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        unique.setdefault(ep.value, ep)
    return sorted(unique.values(), key=lambda e: (e.name, e.value))


def _describe(ep: importlib.metadata.EntryPoint) -> str:
    text = f"{ep.name} = {ep.value}"
    dist = getattr(ep, "dist", None)
    if dist is not None:
        text += f" (from {dist.name} {dist.version})"
    return text


def _build(ep: importlib.metadata.EntryPoint) -> EmbeddingFunction:
    """Load ``ep`` and turn what it names into an embedding function."""
    where = _describe(ep)
    try:
        target = ep.load()
    except Exception as exc:
        raise ProviderConfigurationError(f"cannot load embedding provider {where}: {exc}") from exc
    if isinstance(target, type):
        try:
            built: object = target()
        except Exception as exc:
            raise ProviderConfigurationError(
                f"cannot instantiate embedding provider {where} with no arguments: {exc}"
            ) from exc
    elif inspect.isroutine(target) and _takes_no_arguments(target):
        # A routine callable with no arguments is a factory; one that takes the text
        # is itself the embedding function and is used as it is.
        try:
            built = target()
        except Exception as exc:
            raise ProviderConfigurationError(f"embedding provider factory {where} failed: {exc}") from exc
    else:
        built = target
    if isinstance(built, type) or not callable(built):
        raise ProviderConfigurationError(
            f"embedding provider {where} produced {type(built).__name__}, not a callable embedding function"
        )
    function: EmbeddingFunction = built
    return function


def _takes_no_arguments(fn: Callable[..., object]) -> bool:
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return False
    except ValueError:  # no signature available (some builtins): assume it takes the text
        return False
    return True


def load_process_embedding() -> ProcessEmbedding:
    """Discover and build a new (uncached) process provider: the hash fallback, or the one installed.

    Raises :class:`ProviderConfigurationError` for more than one provider (naming all)
    or for one that cannot be loaded or instantiated.
    """
    providers = discover_embedding_providers()
    if not providers:
        fallback = HashingEmbedding(DEFAULT_HASH_DIMENSION)
        return ProcessEmbedding(ValidatingEmbedding(fallback, dimension=fallback.dimension), is_fallback=True)
    if len(providers) > 1:
        names = "; ".join(_describe(ep) for ep in providers)
        raise ProviderConfigurationError(
            f"{len(providers)} embedding providers are installed in entry-point group {ENTRY_POINT_GROUP!r}: "
            f"{names}. Install exactly one (installation order is never used to choose)"
        )
    return ProcessEmbedding(ValidatingEmbedding(_build(providers[0])))


_init_lock = threading.Lock()
_cached: ProcessEmbedding | None = None


def get_process_embedding() -> ProcessEmbedding:
    """The cached process provider, initialised on first use; the same object every time.

    Raises :class:`ProviderBusyError` at once while another thread is initialising, and
    :class:`ProviderConfigurationError` as :func:`load_process_embedding` does (a failed
    initialisation is not cached; the next call tries again).
    """
    global _cached
    cached = _cached
    if cached is not None:
        return cached
    if not _init_lock.acquire(blocking=False):
        raise ProviderBusyError("the process embedding provider is being initialised by another thread")
    try:
        if _cached is None:
            _cached = load_process_embedding()
        return _cached
    finally:
        _init_lock.release()


def reset_process_embedding() -> None:
    """Forget the cached process provider (for tests); :class:`ProviderBusyError` during initialisation."""
    global _cached
    if not _init_lock.acquire(blocking=False):
        raise ProviderBusyError("the process embedding provider is being initialised by another thread")
    try:
        _cached = None
    finally:
        _init_lock.release()
