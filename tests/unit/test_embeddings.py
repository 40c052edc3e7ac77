"""Unit tests of tnsrag_db.embeddings (no database).

Discovery tests install real distributions: a module plus a ``*.dist-info`` directory
with an ``entry_points.txt`` in a temporary directory put on ``sys.path``.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import tnsrag_db.embeddings as embeddings
from tests._entrypoints import Installer, installer
from tnsrag_db._errors import (
    ConfigurationError,
    EmbeddingValidationError,
    ExecutionError,
    ProviderBusyError,
    ProviderConfigurationError,
    ProviderTransportError,
    RetrievalCancelledError,
    StatementTimeoutError,
    ValidationError,
)
from tnsrag_db.embeddings import (
    ENTRY_POINT_GROUP,
    MAX_EMBEDDING_DIMENSION,
    EmbeddingFunction,
    HashingEmbedding,
    ProcessEmbedding,
    ValidatingEmbedding,
    batch_method,
    discover_embedding_providers,
    get_process_embedding,
    load_process_embedding,
    provider_name,
)

# -- helpers ---------------------------------------------------------------------------


def const(vector: Any) -> Callable[[str], Any]:
    """An embedding function that always returns ``vector``."""

    def fn(text: str) -> Any:
        return vector

    return fn


def by_text(table: dict[str, Any]) -> Callable[[str], Any]:
    def fn(text: str) -> Any:
        return table[text]

    return fn


def raising(exc: BaseException) -> Callable[[str], Any]:
    def fn(text: str) -> Any:
        raise exc

    return fn


class Named:
    name = "my-model"

    def __call__(self, text: str) -> list[float]:
        return [1.0, 0.0]


class Unnamed:
    def __call__(self, text: str) -> list[float]:
        return [1.0, 0.0]


def plain_function(text: str) -> list[float]:
    return [1.0, 0.0]


# -- public surface --------------------------------------------------------------------


def test_all_is_sorted_and_complete() -> None:
    assert embeddings.__all__ == sorted(embeddings.__all__)
    public = {
        name
        for name, value in vars(embeddings).items()
        if not name.startswith("_") and not isinstance(value, ModuleType) and name != "annotations"
    }
    assert public == set(embeddings.__all__)


# -- protocol --------------------------------------------------------------------------


def test_protocol_accepts_functions_lambdas_and_instances() -> None:
    assert isinstance(plain_function, EmbeddingFunction)
    assert isinstance(lambda text: [1.0], EmbeddingFunction)
    assert isinstance(Named(), EmbeddingFunction)
    assert isinstance(HashingEmbedding(), EmbeddingFunction)
    assert not isinstance(42, EmbeddingFunction)


def test_provider_name_prefers_the_name_attribute() -> None:
    assert provider_name(Named()) == "my-model"
    assert provider_name(HashingEmbedding(64)) == "tnsrag-hash-64"


def test_provider_name_falls_back_to_module_and_qualname() -> None:
    assert provider_name(Unnamed()) == f"{__name__}.Unnamed"
    assert provider_name(plain_function) == f"{__name__}.plain_function"
    assert provider_name(functools.partial(plain_function)) == f"{__name__}.plain_function"
    assert provider_name(lambda text: [1.0]).startswith(f"{__name__}.test_provider_name_falls_back")

    class BlankName:
        name = "  "

        def __call__(self, text: str) -> list[float]:
            return [1.0]

    assert provider_name(BlankName()).endswith("BlankName")


def test_batch_method_is_detected_with_getattr() -> None:
    assert batch_method(plain_function) is None
    hashing = HashingEmbedding()
    method = batch_method(hashing)
    assert method is not None and method(["a"]) == [hashing("a")]


# -- ValidatingEmbedding: options ------------------------------------------------------


def test_name_defaults_and_override() -> None:
    assert ValidatingEmbedding(Named()).name == "my-model"
    assert ValidatingEmbedding(plain_function).name == f"{__name__}.plain_function"
    assert ValidatingEmbedding(Named(), name="override").name == "override"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, "name must be a non-blank string"),
        ({"name": 3}, "name must be a non-blank string"),
        ({"max_dimension": 0}, "max_dimension must be an int from 1 to 16000"),
        ({"max_dimension": 16_001}, "max_dimension must be an int from 1 to 16000"),
        ({"max_dimension": True}, "max_dimension must be an int"),
        ({"dimension": 0}, "dimension must be None or an int"),
        ({"dimension": 9, "max_dimension": 8}, "dimension must be None or an int from 1 to 8"),
    ],
)
def test_bad_options_raise_configuration_error(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ValidatingEmbedding(plain_function, **kwargs)


def test_fn_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match="must be callable"):
        ValidatingEmbedding([1.0, 2.0])  # type: ignore[arg-type]


def test_text_must_be_a_str() -> None:
    wrapped = ValidatingEmbedding(plain_function)
    with pytest.raises(ValidationError, match="must be a str, got int"):
        wrapped(3)  # type: ignore[arg-type]


# -- ValidatingEmbedding: results ------------------------------------------------------


def test_returns_fresh_float32_1d_array() -> None:
    buffer = np.array([0.5, 0.25], dtype=np.float32)
    wrapped = ValidatingEmbedding(const(buffer))
    out = wrapped("x")
    assert out.dtype == np.float32 and out.shape == (2,)
    assert out.tolist() == [0.5, 0.25]
    assert not np.shares_memory(out, buffer)
    out[0] = 99.0
    assert buffer[0] == np.float32(0.5)
    assert wrapped.dimension == 2


@pytest.mark.parametrize(
    "vector",
    [[1, 2, 3], (1.0, 2.0, 3.0), np.arange(3, dtype=np.int64), np.ones(3, dtype=np.float16), [np.float32(1), 2, 3.5]],
)
def test_accepts_numeric_sequences(vector: Any) -> None:
    out = ValidatingEmbedding(const(vector))("x")
    assert out.dtype == np.float32 and out.shape == (3,)


def test_rejects_none() -> None:
    wrapped = ValidatingEmbedding(const(None), name="p")
    with pytest.raises(EmbeddingValidationError, match="embedding provider p: returned None"):
        wrapped("x")
    assert wrapped.dimension is None


@pytest.mark.parametrize(
    "vector",
    [
        "abc",
        b"ab",
        5,
        3.0,
        [[1.0, 2.0]],
        np.ones((2, 2)),
        {"a": 1.0},
        {1.0, 2.0},
        ["1.0", "2.0"],
        [True, False],
        [1 + 1j, 2.0],
        [None, 1.0],
        [1.0, [2.0]],
        [1.0, "2"],
        np.array(["2021-01-01"], dtype="datetime64[D]"),
    ],
    ids=repr,
)
def test_rejects_non_numeric_or_not_1d(vector: Any) -> None:
    wrapped = ValidatingEmbedding(const(vector))
    with pytest.raises(EmbeddingValidationError, match=r"not a 1-d sequence of numbers|not a number"):
        wrapped("x")
    assert wrapped.dimension is None


def test_rejects_empty_without_fixing_dimension() -> None:
    wrapped = ValidatingEmbedding(by_text({"empty": [], "ok": [1.0, 2.0, 3.0]}))
    with pytest.raises(EmbeddingValidationError, match="embedding is empty"):
        wrapped("empty")
    assert wrapped.dimension is None
    assert wrapped("ok").shape == (3,)


def test_rejects_more_than_16000_values_without_fixing_dimension() -> None:
    assert MAX_EMBEDDING_DIMENSION == 16_000  # pgvector's vector limit, and the schema's check
    wrapped = ValidatingEmbedding(by_text({"long": [0.0] * 16_001, "max": [0.5] * 16_000}))
    with pytest.raises(EmbeddingValidationError, match="16001 values, more than the maximum of 16000"):
        wrapped("long")
    assert wrapped.dimension is None
    assert wrapped("max").shape == (16_000,)
    assert wrapped.dimension == 16_000


def test_custom_max_dimension() -> None:
    wrapped = ValidatingEmbedding(const([1.0] * 5), max_dimension=4)
    with pytest.raises(EmbeddingValidationError, match="5 values, more than the maximum of 4"):
        wrapped("x")


def test_dimension_mismatch_names_both_dimensions() -> None:
    wrapped = ValidatingEmbedding(by_text({"two": [1.0, 2.0], "three": [1.0, 2.0, 3.0]}), name="p")
    wrapped("two")
    with pytest.raises(EmbeddingValidationError) as info:
        wrapped("three")
    assert str(info.value) == "embedding provider p: embedding has dimension 3, expected 2 (fixed by the first vector)"
    assert wrapped.dimension == 2
    assert wrapped("two").shape == (2,)


def test_explicit_dimension_is_fixed_up_front() -> None:
    wrapped = ValidatingEmbedding(const([1.0, 2.0, 3.0]), dimension=2)
    assert wrapped.dimension == 2
    with pytest.raises(EmbeddingValidationError, match="dimension 3, expected 2"):
        wrapped("x")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_rejects_non_finite(bad: float) -> None:
    wrapped = ValidatingEmbedding(const([1.0, bad, 3.0]))
    with pytest.raises(EmbeddingValidationError, match=r"non-finite value .* at index 1"):
        wrapped("x")


def test_rejects_value_that_overflows_float32() -> None:
    wrapped = ValidatingEmbedding(const([1.0, 1e39]))
    with pytest.raises(EmbeddingValidationError, match="too large for float32"):
        wrapped("x")
    # Finite in float64 but not representable: still shape-valid, so it fixed the dimension.
    assert wrapped.dimension == 2


def test_rejects_int_too_large_for_a_double() -> None:
    wrapped = ValidatingEmbedding(const([1, 10**400]))
    with pytest.raises(EmbeddingValidationError, match="non-finite"):
        wrapped("x")
    assert wrapped.dimension == 2


def test_shape_valid_nan_vector_fixes_the_dimension() -> None:
    wrapped = ValidatingEmbedding(by_text({"nan": [math.nan, 1.0], "three": [1.0, 2.0, 3.0], "two": [3.0, 4.0]}))
    with pytest.raises(EmbeddingValidationError, match="non-finite"):
        wrapped("nan")
    assert wrapped.dimension == 2
    with pytest.raises(EmbeddingValidationError, match="dimension 3, expected 2"):
        wrapped("three")
    assert wrapped("two").tolist() == [3.0, 4.0]


def test_snapshot_of_a_reused_numpy_buffer() -> None:
    buffer = np.zeros(3, dtype=np.float32)

    def mutating(text: str) -> np.ndarray:
        buffer[:] = float(len(text))
        return buffer

    wrapped = ValidatingEmbedding(mutating)
    first = wrapped("a")
    second = wrapped("abc")
    buffer[:] = np.nan  # the provider scribbling after returning changes nothing
    assert first.tolist() == [1.0, 1.0, 1.0]
    assert second.tolist() == [3.0, 3.0, 3.0]


def test_snapshot_of_a_reused_list() -> None:
    buffer = [0.0, 0.0]

    def mutating(text: str) -> list[float]:
        buffer[0] = float(len(text))
        return buffer

    wrapped = ValidatingEmbedding(mutating)
    first = wrapped("ab")
    buffer[1] = math.nan
    assert first.tolist() == [2.0, 0.0]


class Shifty(Sequence[float]):
    """A vector whose values change after each complete read."""

    def __init__(self, first: float, later: float) -> None:
        self.reads = 0
        self.first = first
        self.later = later

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, int):
            raise TypeError("no slices")
        if i >= 2:
            raise IndexError(i)
        self.reads += 1
        return self.first if self.reads <= 2 else self.later


def test_buffer_is_read_once_and_checks_run_on_the_snapshot() -> None:
    # Read once: the finite first read is what is checked and returned, later NaN reads
    # never happen.
    good_then_bad = Shifty(1.0, math.nan)
    assert ValidatingEmbedding(const(good_then_bad))("x").tolist() == [1.0, 1.0]
    assert good_then_bad.reads == 2
    bad_then_good = Shifty(math.nan, 1.0)
    with pytest.raises(EmbeddingValidationError, match="non-finite"):
        ValidatingEmbedding(const(bad_then_good))("x")


# -- ValidatingEmbedding: provider exceptions ------------------------------------------


def test_transport_error_keeps_its_type_and_identity() -> None:
    error = ProviderTransportError("connection reset")
    with pytest.raises(ProviderTransportError) as info:
        ValidatingEmbedding(raising(error))("x")
    assert info.value is error


def test_other_retrieval_errors_propagate_unchanged() -> None:
    error = RetrievalCancelledError("cancelled")
    with pytest.raises(RetrievalCancelledError) as info:
        ValidatingEmbedding(raising(error))("x")
    assert info.value is error


def test_provider_validation_error_propagates() -> None:
    error = EmbeddingValidationError("provider says no")
    with pytest.raises(EmbeddingValidationError) as info:
        ValidatingEmbedding(raising(error))("x")
    assert info.value is error


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("boom"), KeyError("boom")])
def test_other_exceptions_become_execution_error(error: Exception) -> None:
    with pytest.raises(ExecutionError) as info:
        ValidatingEmbedding(raising(error), name="p")("x")
    assert str(info.value) == f"embedding provider p failed: {error}"
    assert info.value.__cause__ is error


@pytest.mark.parametrize("error", [ConfigurationError("boom"), StatementTimeoutError("canceling statement")])
def test_the_library_s_own_errors_pass_through_unchanged(error: Exception) -> None:
    # Changed: a provider raising one of the library's typed errors (say, a provider that
    # reads from the database and times out) keeps its type instead of becoming ExecutionError.
    with pytest.raises(type(error)) as info:
        ValidatingEmbedding(raising(error), name="p")("x")
    assert info.value is error


# -- ValidatingEmbedding: batches ------------------------------------------------------


class Batching:
    name = "batching"

    def __init__(self, result: Any = None) -> None:
        self.single_calls = 0
        self.batch_calls: list[list[str]] = []
        self.result = result

    def __call__(self, text: str) -> list[float]:
        self.single_calls += 1
        return [float(len(text)), 1.0]

    def embed_batch(self, texts: Sequence[str]) -> Any:
        self.batch_calls.append(list(texts))
        if self.result is not None:
            return self.result
        return [[float(len(t)), 1.0] for t in texts]


def test_batch_uses_the_batch_method() -> None:
    provider = Batching()
    out = ValidatingEmbedding(provider).embed_batch(["a", "bb"])
    assert [v.tolist() for v in out] == [[1.0, 1.0], [2.0, 1.0]]
    assert all(v.dtype == np.float32 for v in out)
    assert provider.batch_calls == [["a", "bb"]] and provider.single_calls == 0


def test_batch_falls_back_to_single_calls() -> None:
    calls: list[str] = []

    def fn(text: str) -> list[float]:
        calls.append(text)
        return [1.0, 2.0]

    out = ValidatingEmbedding(fn).embed_batch(("x", "y", "z"))
    assert len(out) == 3 and calls == ["x", "y", "z"]


def test_empty_batch_does_not_call_the_provider() -> None:
    provider = Batching()
    assert ValidatingEmbedding(provider).embed_batch([]) == []
    assert provider.batch_calls == []


@pytest.mark.parametrize(
    ("result", "match"),
    [
        ([[1.0, 1.0]], "returned 1 vectors for 2 texts"),
        ([[1.0, 1.0]] * 3, "returned 3 vectors for 2 texts"),
        (7, "not a sequence of vectors"),
        ("ab", "not a sequence of vectors"),
    ],
)
def test_batch_count_and_type_checked(result: Any, match: str) -> None:
    with pytest.raises(EmbeddingValidationError, match=match):
        ValidatingEmbedding(Batching(result)).embed_batch(["a", "b"])


def test_batch_returning_none() -> None:
    class NoneBatch(Batching):
        def embed_batch(self, texts: Sequence[str]) -> Any:
            return None

    with pytest.raises(EmbeddingValidationError, match="returned None"):
        ValidatingEmbedding(NoneBatch()).embed_batch(["a"])


def test_batch_accepts_a_2d_array_and_copies_it() -> None:
    matrix = np.ones((2, 3), dtype=np.float32)
    out = ValidatingEmbedding(Batching(matrix)).embed_batch(["a", "b"])
    matrix[:] = np.nan
    assert [v.tolist() for v in out] == [[1.0] * 3, [1.0] * 3]


def test_batch_checks_every_vector_and_names_it() -> None:
    wrapped = ValidatingEmbedding(Batching([[1.0, 2.0], [1.0, math.nan]]), name="p")
    with pytest.raises(EmbeddingValidationError, match=r"p: vector 1 of the batch: embedding has a non-finite"):
        wrapped.embed_batch(["a", "b"])
    wrapped = ValidatingEmbedding(Batching([[1.0, 2.0], [1.0, 2.0, 3.0]]))
    with pytest.raises(EmbeddingValidationError, match="vector 1 of the batch: embedding has dimension 3, expected 2"):
        wrapped.embed_batch(["a", "b"])


def _outcome(wrapped: ValidatingEmbedding, n: int) -> tuple[str, object]:
    try:
        return "ok", [v.tolist() for v in wrapped.embed_batch(["t"] * n)] + [wrapped.dimension]
    except EmbeddingValidationError as exc:
        return "error", (str(exc), wrapped.dimension)


@pytest.mark.parametrize("seed", range(40))
def test_a_batch_matrix_is_judged_exactly_as_row_by_row(seed: int) -> None:
    # A numeric 2-d array is checked as a whole; a list of lists goes row by row. Both must
    # accept the same batches, return the same vectors and raise the same first error.
    rng = np.random.default_rng(seed)
    rows, dim = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    matrix = rng.normal(size=(rows, dim))
    for _ in range(int(rng.integers(0, 3))):
        matrix[rng.integers(rows), rng.integers(dim)] = rng.choice([math.nan, math.inf, -math.inf, 1e300])
    fixed = [None, dim, dim + 1][int(rng.integers(3))]
    max_dimension = [16_000, dim, dim - 1][int(rng.integers(3))] or 1
    fixed = fixed if fixed is None or fixed <= max_dimension else None
    as_matrix = ValidatingEmbedding(Batching(matrix.copy()), name="p", dimension=fixed, max_dimension=max_dimension)
    row_by_row = ValidatingEmbedding(Batching(matrix.tolist()), name="p", dimension=fixed,
                                     max_dimension=max_dimension)
    assert _outcome(as_matrix, rows) == _outcome(row_by_row, rows)


def test_batch_exceptions_are_classified() -> None:
    class Failing(Batching):
        def embed_batch(self, texts: Sequence[str]) -> Any:
            raise OSError("socket closed")

    with pytest.raises(ExecutionError, match="failed: socket closed") as info:
        ValidatingEmbedding(Failing()).embed_batch(["a"])
    assert isinstance(info.value.__cause__, OSError)


def test_batch_rejects_a_str_and_non_str_items() -> None:
    wrapped = ValidatingEmbedding(Batching())
    with pytest.raises(ValidationError, match="sequence of str"):
        wrapped.embed_batch("ab")
    with pytest.raises(ValidationError, match="text 1 of the batch must be a str"):
        wrapped.embed_batch(["a", 2])  # type: ignore[list-item]


def test_dimension_is_fixed_once_under_concurrency() -> None:
    barrier = threading.Barrier(16)

    def fn(text: str) -> list[float]:
        barrier.wait()
        return [1.0] * int(text)

    wrapped = ValidatingEmbedding(fn)
    results: list[int] = []
    errors: list[Exception] = []

    def worker(dim: int) -> None:
        try:
            results.append(wrapped(str(dim)).shape[0])
        except EmbeddingValidationError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(2 + i % 2,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrapped.dimension in (2, 3)
    assert results and all(r == wrapped.dimension for r in results)
    assert len(results) + len(errors) == 16
    assert all("expected" in str(e) for e in errors)


# -- HashingEmbedding ------------------------------------------------------------------


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_hash_defaults() -> None:
    hashing = HashingEmbedding()
    assert hashing.dimension == 128 and hashing.name == "tnsrag-hash-128"
    assert HashingEmbedding(32).name == "tnsrag-hash-32"
    assert len(hashing("hello")) == 128


@pytest.mark.parametrize("bad", [0, -1, 16_001, 1.5, True, "128"])
def test_hash_bad_dimension(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="dimension must be an int from 1 to 16000"):
        HashingEmbedding(bad)


def test_hash_is_unit_length_and_case_insensitive() -> None:
    hashing = HashingEmbedding()
    v = hashing("The quick brown fox")
    assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-12)
    assert hashing("THE QUICK brown fox") == v
    assert hashing("the, quick; brown... fox!") == v


@pytest.mark.parametrize("text", ["", "   ", "!!! --- ???", "_"])
def test_hash_no_tokens_gives_all_zero(text: str) -> None:
    assert HashingEmbedding()(text) == [0.0] * 128


def test_hash_pinned_values() -> None:
    # Pins the hash scheme: changing it would silently change every stored vector.
    v = HashingEmbedding()("hello world hello")
    nonzero = {i: x for i, x in enumerate(v) if x}
    assert nonzero == {84: 1 / math.sqrt(5), 91: -2 / math.sqrt(5)}


def test_hash_measures_token_overlap() -> None:
    hashing = HashingEmbedding()
    query = hashing("agent memory persistence")
    assert cosine(query, hashing("agents persist semantic memory")) > cosine(query, hashing("weather in paris"))
    assert math.isclose(cosine(query, hashing("persistence memory agent")), 1.0)


def test_hash_tokens_are_unicode_words_and_split_snake_case() -> None:
    hashing = HashingEmbedding()
    assert hashing("café") != [0.0] * 128
    assert hashing("Straße 東京") != [0.0] * 128
    assert hashing("snake_case_name") == hashing("snake case name")
    assert hashing("TAN-5326") == hashing("tan 5326")


def test_hash_batch_matches_single() -> None:
    hashing = HashingEmbedding(16)
    texts = ["a b", "c", ""]
    assert hashing.embed_batch(texts) == [hashing(t) for t in texts]


def test_hash_through_validating_wrapper() -> None:
    wrapped = ValidatingEmbedding(HashingEmbedding())
    assert wrapped.name == "tnsrag-hash-128"
    assert wrapped("").tolist() == [0.0] * 128  # zero is finite and shape-valid
    assert wrapped.dimension == 128


def test_hash_is_deterministic_across_processes() -> None:
    text = "Deterministic hashing across processes: TAN-5326 snake_case Über"
    expected = repr(HashingEmbedding()(text))
    code = f"from tnsrag_db.embeddings import HashingEmbedding; print(repr(HashingEmbedding()({text!r})))"
    root = str(Path(embeddings.__file__).resolve().parents[2])
    outputs = []
    for seed in ("0", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outputs.append(done.stdout.strip())
    assert outputs == [expected] * 3


# -- discovery with real entry points --------------------------------------------------

@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    """Install fake distributions into ``tmp_path`` and put it on ``sys.path``.

    ``install(dist, source, entry_points)`` writes ``source`` as a fresh module and a
    ``dist``-1.0.dist-info declaring ``entry_points`` (name -> attribute of that module)
    in the embedding group; it returns the imported module.
    """
    yield from installer(tmp_path, monkeypatch, "tnsrag_fake")


PROVIDERS = """
    import math
    import threading

    from tnsrag_db._errors import ProviderTransportError

    TRANSPORT = ProviderTransportError("provider endpoint unreachable")
    entered = threading.Event()
    release = threading.Event()
    init_entered = threading.Event()
    init_release = threading.Event()


    class Provider:
        name = "fake-model"

        def __init__(self):
            self.calls = 0

        def __call__(self, text):
            self.calls += 1
            if text == "nan":
                return [math.nan, 1.0]
            if text == "three":
                return [1.0, 2.0, 3.0]
            if text == "long":
                return [0.0] * 16385
            if text == "transport":
                raise TRANSPORT
            if text == "crash":
                raise ZeroDivisionError("division by zero in provider")
            if text == "block":
                entered.set()
                release.wait(10)
            return [1.0, 0.5]


    class Unnamed:
        def __call__(self, text):
            return [1.0]


    def factory():
        return Provider()


    def plain(text):
        return [0.25, 0.75]


    instance = Provider()


    class SlowInit:
        name = "slow-init"

        def __init__(self):
            init_entered.set()
            init_release.wait(10)

        def __call__(self, text):
            return [1.0]


    class NeedsArgs:
        def __init__(self, url):
            self.url = url

        def __call__(self, text):
            return [1.0]


    class BrokenInit:
        def __init__(self):
            raise RuntimeError("model file missing")

        def __call__(self, text):
            return [1.0]


    def bad_factory():
        return 42
"""


def test_zero_providers_use_the_hash_fallback(install: Installer) -> None:
    assert discover_embedding_providers() == []
    process = get_process_embedding()
    assert isinstance(process, ProcessEmbedding)
    assert process.is_fallback
    assert process.name == "tnsrag-hash-128"
    assert process.dimension == 128
    out = process("hello world")
    assert out.dtype == np.float32 and out.shape == (128,)
    assert get_process_embedding() is process


def test_one_provider_is_wrapped_and_cached(install: Installer) -> None:
    install("tnsrag-fake-one", PROVIDERS, {"fake": "Provider"})
    (ep,) = discover_embedding_providers()
    assert ep.name == "fake" and ep.value.endswith(":Provider")
    process = get_process_embedding()
    assert get_process_embedding() is process
    assert not process.is_fallback
    assert process.name == "fake-model"
    assert process.dimension is None
    assert process("hi").tolist() == [1.0, 0.5]
    assert process.dimension == 2
    assert [v.tolist() for v in process.embed_batch(["a", "b"])] == [[1.0, 0.5], [1.0, 0.5]]


def test_discovery_is_lazy(install: Installer) -> None:
    module = install("tnsrag-fake-lazy", PROVIDERS, {"fake": "Provider"})
    sys.modules.pop(module.__name__)
    discover_embedding_providers()
    assert module.__name__ not in sys.modules


@pytest.mark.parametrize(
    ("attr", "expected"),
    [("factory", [1.0, 0.5]), ("instance", [1.0, 0.5]), ("plain", [0.25, 0.75])],
)
def test_entry_point_may_name_a_factory_an_instance_or_a_function(
    install: Installer, attr: str, expected: list[float]
) -> None:
    install("tnsrag-fake-kinds", PROVIDERS, {"fake": attr})
    assert load_process_embedding()("x").tolist() == expected


def test_unnamed_provider_uses_module_and_qualname(install: Installer) -> None:
    module = install("tnsrag-fake-unnamed", PROVIDERS, {"fake": "Unnamed"})
    assert load_process_embedding().name == f"{module.__name__}.Unnamed"


def test_two_providers_fail_naming_both(install: Installer) -> None:
    beta = install("tnsrag-fake-beta", PROVIDERS, {"beta": "Provider"})
    alpha = install("tnsrag-fake-alpha", PROVIDERS, {"alpha": "Provider"})
    with pytest.raises(ProviderConfigurationError) as info:
        get_process_embedding()
    message = str(info.value)
    first = f"alpha = {alpha.__name__}:Provider"
    second = f"beta = {beta.__name__}:Provider"
    assert first in message and second in message
    assert message.index(first) < message.index(second)  # sorted, not installation order
    assert "2 embedding providers" in message and ENTRY_POINT_GROUP in message
    # Nothing was cached: the next call fails the same way.
    with pytest.raises(ProviderConfigurationError):
        get_process_embedding()


def test_same_target_registered_twice_counts_once(install: Installer) -> None:
    install("tnsrag-fake-dup", PROVIDERS, {"one": "Provider", "two": "Provider"})
    assert [ep.name for ep in discover_embedding_providers()] == ["one"]
    assert load_process_embedding().name == "fake-model"


@pytest.mark.parametrize(
    ("attr", "match"),
    [
        ("DoesNotExist", "cannot load embedding provider"),
        ("NeedsArgs", "cannot instantiate embedding provider .* with no arguments"),
        ("BrokenInit", "cannot instantiate .*model file missing"),
        ("bad_factory", "produced int, not a callable"),
        ("TRANSPORT", "produced ProviderTransportError, not a callable"),
    ],
)
def test_unloadable_provider_is_a_configuration_error(install: Installer, attr: str, match: str) -> None:
    install("tnsrag-fake-broken", PROVIDERS, {"broken": attr})
    with pytest.raises(ProviderConfigurationError, match=match) as info:
        get_process_embedding()
    if attr not in ("bad_factory", "TRANSPORT"):
        assert info.value.__cause__ is not None


def test_process_provider_rejects_nan(install: Installer) -> None:
    install("tnsrag-fake-nan", PROVIDERS, {"fake": "Provider"})
    process = get_process_embedding()
    with pytest.raises(EmbeddingValidationError, match="non-finite"):
        process("nan")
    assert process.dimension == 2  # the shape-valid NaN vector fixed it
    with pytest.raises(EmbeddingValidationError, match="dimension 3, expected 2"):
        process("three")


def test_process_provider_wrong_dimension_on_second_call(install: Installer) -> None:
    install("tnsrag-fake-dim", PROVIDERS, {"fake": "Provider"})
    process = get_process_embedding()
    process("first")
    with pytest.raises(EmbeddingValidationError, match=r"embedding has dimension 3, expected 2 \(fixed by the first vector\)"):
        process("three")


def test_process_provider_rejects_too_long_vector(install: Installer) -> None:
    install("tnsrag-fake-long", PROVIDERS, {"fake": "Provider"})
    process = get_process_embedding()
    with pytest.raises(EmbeddingValidationError, match="16385 values, more than the maximum of 16000"):
        process("long")
    assert process.dimension is None


def test_process_transport_error_keeps_its_type(install: Installer) -> None:
    module = install("tnsrag-fake-transport", PROVIDERS, {"fake": "Provider"})
    process = get_process_embedding()
    with pytest.raises(ProviderTransportError) as info:
        process("transport")
    assert info.value is module.TRANSPORT
    assert process("after").tolist() == [1.0, 0.5]  # the call lock was released


def test_process_other_exception_becomes_execution_error(install: Installer) -> None:
    install("tnsrag-fake-crash", PROVIDERS, {"fake": "Provider"})
    process = get_process_embedding()
    with pytest.raises(ExecutionError, match="embedding provider fake-model failed: division by zero") as info:
        process("crash")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def run_blocked(target: Callable[[], object], entered: threading.Event) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def body() -> None:
        try:
            outcome.append(target())
        except Exception as exc:  # reported to the test through ``outcome``
            outcome.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    assert entered.wait(5), "the provider was never entered"
    return thread, outcome


def test_concurrent_embedding_call_fails_immediately(install: Installer) -> None:
    module = install("tnsrag-fake-busy", PROVIDERS, {"fake": "Provider"})
    process = get_process_embedding()
    thread, outcome = run_blocked(lambda: process("block"), module.entered)
    try:
        started = time.monotonic()
        with pytest.raises(ProviderBusyError, match="busy"):
            process("other")
        with pytest.raises(ProviderBusyError):
            process.embed_batch(["other"])
        assert time.monotonic() - started < 1.0
    finally:
        module.release.set()
        thread.join(5)
    assert [v.tolist() for v in outcome] == [[1.0, 0.5]]  # type: ignore[attr-defined]
    assert process("free again").tolist() == [1.0, 0.5]


def test_concurrent_initialisation_fails_immediately(install: Installer) -> None:
    module = install("tnsrag-fake-slow", PROVIDERS, {"slow": "SlowInit"})
    thread, outcome = run_blocked(get_process_embedding, module.init_entered)
    try:
        started = time.monotonic()
        with pytest.raises(ProviderBusyError, match="being initialised"):
            get_process_embedding()
        assert time.monotonic() - started < 1.0
    finally:
        module.init_release.set()
        thread.join(5)
    (process,) = outcome
    assert isinstance(process, ProcessEmbedding)
    assert get_process_embedding() is process
