"""``ValidatingEmbedding``: the wrapper that makes any embedding function safe to store.

Every vector a provider returns is snapshotted (copied) first, then checked: not None,
a 1-d sequence of real numbers, non-empty, at most ``max_dimension`` values, the same
dimension as the first shape-valid vector, and finite both as float64 and as the float32
it is returned in. Provider exceptions are classified: a :class:`RetrievalError` (such as
:class:`ProviderTransportError`) or an :class:`EmbeddingValidationError` keeps its type;
anything else becomes an :class:`ExecutionError` whose ``__cause__`` is the original.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, TypeVar, cast

import numpy as np
import numpy.typing as npt

from tnsrag_db._errors import (
    ConfigurationError,
    EmbeddingValidationError,
    ExecutionError,
    TnsragError,
    ValidationError,
)
from tnsrag_db._validate import is_int, is_number
from tnsrag_db.embeddings._protocol import EmbeddingFunction, batch_method, provider_name

__all__ = ["MAX_EMBEDDING_DIMENSION", "ValidatingEmbedding"]

#: The largest number of values an embedding may have (the SPI's limit, as pgvector's).
MAX_EMBEDDING_DIMENSION = 16_000

_T = TypeVar("_T")

# Integer, unsigned and floating arrays hold numbers; bool, complex, strings, bytes,
# datetimes and structured records do not, even where numpy would cast them.
_NUMERIC_KINDS = frozenset("iuf")


class ValidatingEmbedding:
    """Wraps an :class:`EmbeddingFunction` and validates every vector it returns.

    ``name`` defaults to :func:`provider_name` of ``fn``; ``max_dimension`` (default and
    upper bound 16,000, pgvector's and the schema's limit) caps the number of values; ``dimension`` (default None) fixes the
    dimension up front instead of letting the first shape-valid vector fix it.
    Raises :class:`ConfigurationError` for a bad option; calls raise
    :class:`EmbeddingValidationError`, :class:`ExecutionError` or the provider's own
    :class:`RetrievalError`.
    """

    def __init__(
        self,
        fn: EmbeddingFunction | Callable[[str], object],
        *,
        name: str | None = None,
        max_dimension: int = MAX_EMBEDDING_DIMENSION,
        dimension: int | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigurationError(f"embedding function must be callable, got {type(fn).__name__}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError(f"embedding provider name must be a non-blank string, got {name!r}")
        if not is_int(max_dimension) or not 1 <= max_dimension <= MAX_EMBEDDING_DIMENSION:
            raise ConfigurationError(
                f"max_dimension must be an int from 1 to {MAX_EMBEDDING_DIMENSION}, got {max_dimension!r}"
            )
        if dimension is not None and (not is_int(dimension) or not 1 <= dimension <= max_dimension):
            raise ConfigurationError(f"dimension must be None or an int from 1 to {max_dimension}, got {dimension!r}")
        self._fn = fn
        self._batch = batch_method(fn)
        self._name = name if name is not None else provider_name(fn)
        self._max_dimension = max_dimension
        self._dimension = dimension
        self._dimension_lock = threading.Lock()

    @property
    def name(self) -> str:
        """The provider name (keys the stored embedding space)."""
        return self._name

    @property
    def dimension(self) -> int | None:
        """The fixed dimension, or None until the first shape-valid vector arrives."""
        return self._dimension

    @property
    def max_dimension(self) -> int:
        """The largest number of values accepted in one vector."""
        return self._max_dimension

    @property
    def provider(self) -> Any:
        """The wrapped embedding function."""
        return self._fn

    def __repr__(self) -> str:
        return f"ValidatingEmbedding(name={self._name!r}, dimension={self._dimension!r})"

    def __call__(self, text: str) -> npt.NDArray[np.float32]:
        """Embed ``text``; returns a fresh 1-d float32 array. Raises as the class says."""
        if not isinstance(text, str):
            raise ValidationError(f"text to embed must be a str, got {type(text).__name__}")
        raw = self._invoke(self._fn, text)
        return self._validate(raw, "")

    def embed_batch(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Embed each text (through the provider's ``embed_batch`` when it has one); one
        fresh float32 array per text, in order. Raises as the class says, and
        :class:`EmbeddingValidationError` when the batch has the wrong number of vectors.
        """
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
            raise ValidationError(f"texts to embed must be a sequence of str, got {type(texts).__name__}")
        batch = list(texts)
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise ValidationError(f"text {i} of the batch must be a str, got {type(text).__name__}")
        if not batch:
            return []
        if self._batch is None:
            return [self._validate(self._invoke(self._fn, text), f"vector {i} of the batch: ")
                    for i, text in enumerate(batch)]
        raw = self._invoke(self._batch, batch)
        if (isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.shape[0] == len(batch)
                and raw.dtype.kind in _NUMERIC_KINDS):
            return self._check_matrix(raw.astype(np.float64))  # astype copies: the snapshot
        rows = self._rows(raw, len(batch))
        # Snapshot every row before checking any, so a provider that reuses its buffers
        # cannot change a row while an earlier one is being validated.
        snapshots = [self._snapshot(row, f"vector {i} of the batch: ") for i, row in enumerate(rows)]
        return [self._check(snap, f"vector {i} of the batch: ") for i, snap in enumerate(snapshots)]

    # -- internals -------------------------------------------------------------------

    def _check_matrix(self, snap: npt.NDArray[np.float64]) -> list[npt.NDArray[np.float32]]:
        """The per-row rules of :meth:`_check` over a whole numeric matrix at once.

        Every row has the same length, so row 0 decides the size and dimension rules; the
        first row holding a non-finite value (before or after the float32 conversion) is
        then checked on its own, which raises the same error the row-by-row path would.
        """
        self._check(snap[0], "vector 0 of the batch: ")
        with np.errstate(over="ignore"):
            out: npt.NDArray[np.float32] = snap.astype(np.float32)
        bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
        if bad.size:
            i = int(bad[0])
            self._check(snap[i], f"vector {i} of the batch: ")
        return list(out)


    def _invoke(self, call: Callable[[Any], _T], arg: Any) -> _T:
        try:
            return call(arg)
        except TnsragError:  # the library's own typed errors keep their type
            raise
        except Exception as exc:
            raise ExecutionError(f"embedding provider {self._name} failed: {exc}") from exc

    def _fail(self, where: str, message: str) -> NoReturn:
        raise EmbeddingValidationError(f"embedding provider {self._name}: {where}{message}")

    def _rows(self, raw: object, expected: int) -> list[object]:
        if raw is None:
            self._fail("", "embed_batch returned None")
        if isinstance(raw, np.ndarray):
            raw = raw.copy()
        if isinstance(raw, (str, bytes)):
            self._fail("", f"embed_batch returned {type(raw).__name__}, not a sequence of vectors")
        if not isinstance(raw, Iterable):
            self._fail("", f"embed_batch returned {type(raw).__name__}, not a sequence of vectors")
        rows = list(raw)
        if len(rows) != expected:
            self._fail("", f"embed_batch returned {len(rows)} vectors for {expected} texts")
        return rows

    def _validate(self, raw: object, where: str) -> npt.NDArray[np.float32]:
        # What most providers return, once the dimension is known: a 1-d float32 array of
        # finite values of that dimension is valid as it is; its copy is the snapshot.
        # Anything else (or a failing check) takes the full path, which says what is wrong.
        if type(raw) is np.ndarray and raw.dtype == np.float32 and raw.ndim == 1 \
                and raw.shape[0] == self._dimension:
            out: npt.NDArray[np.float32] = raw.copy()
            if np.isfinite(out).all():
                return out
        return self._check(self._snapshot(raw, where), where)

    def _snapshot(self, raw: object, where: str) -> npt.NDArray[np.float64]:
        """Copy ``raw`` into a new float64 array, checking only that it holds numbers."""
        if raw is None:
            self._fail(where, "returned None instead of a vector")
        if isinstance(raw, (str, bytes, bytearray)):
            self._fail(where, f"returned {type(raw).__name__}, not a 1-d sequence of numbers")
        try:
            copied = np.array(raw, copy=True)
        except (TypeError, ValueError) as exc:
            raise EmbeddingValidationError(
                f"embedding provider {self._name}: {where}returned {type(raw).__name__}, "
                f"not a 1-d sequence of numbers ({exc})"
            ) from exc
        if copied.ndim != 1:
            self._fail(where, f"returned {type(raw).__name__} of shape {copied.shape}, not a 1-d sequence of numbers")
        if copied.dtype.kind == "O":
            return self._from_objects(copied, raw, where)
        if copied.dtype.kind not in _NUMERIC_KINDS:
            self._fail(where, f"returned values of type {copied.dtype}, not a 1-d sequence of numbers")
        result: npt.NDArray[np.float64] = copied.astype(np.float64)
        return result

    def _from_objects(self, values: npt.NDArray[Any], raw: object, where: str) -> npt.NDArray[np.float64]:
        out = np.empty(values.shape[0], dtype=np.float64)
        for i, value in enumerate(values):
            if not is_number(value):
                self._fail(where, f"value {i} is {type(value).__name__}, not a number "
                                  f"(a 1-d sequence of numbers is required)")
            try:
                out[i] = float(value)
            except OverflowError:
                # An int too large for a double is as unusable as inf; the finite-value
                # check reports it after the shape has had its say.
                out[i] = np.inf if cast(Any, value) > 0 else -np.inf
        return out

    def _check(self, snap: npt.NDArray[np.float64], where: str) -> npt.NDArray[np.float32]:
        size = int(snap.shape[0])
        if size == 0:
            self._fail(where, "embedding is empty")
        if size > self._max_dimension:
            self._fail(where, f"embedding has {size} values, more than the maximum of {self._max_dimension}")
        # The first shape-valid vector fixes the dimension even when the finite-value
        # check below rejects it (the SPI's rule), so this runs before that check.
        with self._dimension_lock:
            if self._dimension is None:
                self._dimension = size
            expected = self._dimension
        if size != expected:
            self._fail(where, f"embedding has dimension {size}, expected {expected} (fixed by the first vector)")
        if not np.isfinite(snap).all():
            bad = np.flatnonzero(~np.isfinite(snap))
            i = int(bad[0])
            self._fail(where, f"embedding has a non-finite value {float(snap[i])!r} at index {i} "
                              f"({bad.size} non-finite in all)")
        with np.errstate(over="ignore"):
            out: npt.NDArray[np.float32] = snap.astype(np.float32)
        if not np.isfinite(out).all():
            i = int(np.flatnonzero(~np.isfinite(out))[0])
            self._fail(where, f"embedding value {float(snap[i])!r} at index {i} is too large for float32 "
                              f"(non-finite after conversion)")
        return out

