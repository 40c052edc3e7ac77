"""The ``EmbeddingFunction`` protocol and the helpers that read its optional parts.

An embedding function is any callable ``str -> Sequence[float]``. Two parts are
optional and found by attribute lookup rather than declared on the protocol, so a
plain function or lambda still satisfies it:

* ``embed_batch(texts) -> Sequence[Sequence[float]]``, a faster batch form;
* ``name: str``, the provider name that keys the stored embedding space;
* ``local_compute: bool``, True when the provider computes on this machine, so that a
  call costs about its texts' worth whatever their number: a store then embeds a batch in
  calls of about half a second (an ingest stops between two), shortest texts first.
  Without it a batch is one call (a remote service may charge per call).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["BatchEmbed", "EmbeddingFunction", "batch_method", "provider_name"]

#: The signature of the optional ``embed_batch`` method.
BatchEmbed = Callable[[Sequence[str]], Sequence[Sequence[float]]]


@runtime_checkable
class EmbeddingFunction(Protocol):
    """A callable turning one text into a vector of floats (any fixed dimension).

    Optional: an ``embed_batch(texts)`` method and a ``name: str`` attribute; see
    :func:`batch_method` and :func:`provider_name`.
    """

    def __call__(self, text: str) -> Sequence[float]:
        """Return the embedding of ``text``."""
        ...


def provider_name(fn: object) -> str:
    """The provider name of ``fn``: its non-blank ``name`` attribute when it is a str,
    else ``module.qualname`` of the function (for routines) or of its type (for instances).
    """
    declared = getattr(fn, "name", None)
    if isinstance(declared, str) and declared.strip():
        return declared
    # A partial has no qualname of its own; naming the wrapped function is more useful
    # than the constant "functools.partial".
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn):
        module = getattr(fn, "__module__", None) or "builtins"
        qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        return f"{module}.{qualname}"
    cls = type(fn)
    return f"{cls.__module__}.{cls.__qualname__}"


def batch_method(fn: object) -> BatchEmbed | None:
    """The callable ``embed_batch`` attribute of ``fn``, or None when it has none."""
    method = getattr(fn, "embed_batch", None)
    if method is None or not callable(method):
        return None
    batch: BatchEmbed = method
    return batch
