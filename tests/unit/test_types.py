"""RAGContext, RetrievedDocument and MemoryEntry validation and immutability."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tnsrag_db._errors import InvalidContextError, InvalidEntryError, InvalidFilterError, ValidationError
from tnsrag_db._types import MemoryEntry, MemoryTier, RAGContext, RetrievedDocument


def test_context_defaults_and_with_methods() -> None:
    ctx = RAGContext()
    assert (ctx.max_results, ctx.min_score, dict(ctx.metadata_filters)) == (10, 0.0, {})
    derived = ctx.with_max_results(5).with_min_score(0.25).with_metadata_filters({"tier": "SEMANTIC"})
    assert (derived.max_results, derived.min_score, dict(derived.metadata_filters)) == (5, 0.25, {"tier": "SEMANTIC"})
    assert (ctx.max_results, ctx.min_score, dict(ctx.metadata_filters)) == (10, 0.0, {})


def test_context_copies_filters_and_is_read_only() -> None:
    source = {"tier": "WORKING"}
    ctx = RAGContext(metadata_filters=source)
    source["tier"] = "SEMANTIC"
    source["extra"] = "x"
    assert dict(ctx.metadata_filters) == {"tier": "WORKING"}
    with pytest.raises(TypeError):
        ctx.metadata_filters["tier"] = "X"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.max_results = 3  # type: ignore[misc]


@pytest.mark.parametrize("filters", [{None: "x"}, {"": "x"}, {" ": "x"}, {"k": None}, {"k": ""}, {"k": "  "},
                                     {"k": 1}, {1: "v"}])
def test_context_rejects_bad_filters(filters: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidFilterError):
        RAGContext(metadata_filters=filters)


@pytest.mark.parametrize("max_results", [0, -1, 1.5, True, "3"])
def test_context_rejects_bad_max_results(max_results: object) -> None:
    with pytest.raises(InvalidContextError):
        RAGContext(max_results=max_results)  # type: ignore[arg-type]


@pytest.mark.parametrize("min_score", [math.nan, math.inf, -math.inf, "0"])
def test_context_rejects_non_finite_min_score(min_score: object) -> None:
    with pytest.raises(InvalidContextError):
        RAGContext(min_score=min_score)  # type: ignore[arg-type]


def test_retrieved_document_copies_metadata() -> None:
    md = {"tier": "SEMANTIC"}
    doc = RetrievedDocument("c", "s", 1, md)
    md["tier"] = "WORKING"
    assert doc.metadata["tier"] == "SEMANTIC" and isinstance(doc.score, float)
    with pytest.raises(TypeError):
        doc.metadata["tier"] = "X"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.score = 2.0  # type: ignore[misc]


def test_memory_entry_metadata_aliases() -> None:
    e = MemoryEntry("c", "child", "WORKING", metadata={"parentId": "p", "timestamp": "2024-01-01T00:00:00Z"})
    assert e.tier is MemoryTier.WORKING and e.parent_id == "p"
    assert e.timestamp == datetime(2024, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(InvalidEntryError, match="disagrees"):
        MemoryEntry("c", "x", parent_id="q", metadata={"parentId": "p"})
    with pytest.raises(InvalidEntryError, match="own parent"):
        MemoryEntry("c", "x", parent_id="c")
    aware = datetime(2024, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    assert MemoryEntry("a", "x", timestamp=aware).timestamp == aware
    assert MemoryEntry("a", "x", source="s", metadata={"k": "v"}).result_metadata() == {
        "k": "v", "tier": "SEMANTIC", "entryId": "a", "source": "s"}


@pytest.mark.parametrize(("args", "message"), [
    (("c", None, 1.0, {"k": 3}), "str to str"),
    (("c", None, 1.0, {1: "v"}), "str to str"),
    (("c", None, float("nan"), {}), "not NaN"),
    (("c", None, "1.0", {}), "must be a number"),
    (("c", None, True, {}), "must be a number"),
    ((None, None, 1.0, {}), "content must be a string"),
    (("c", 7, 1.0, {}), "source must be a string or None"),
])
def test_retrieved_document_rejects_what_is_not_its_shape(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RetrievedDocument(*args)
    # The row builder of the strategies refuses the same, with the same message.
    with pytest.raises(ValidationError, match=message):
        RetrievedDocument._of_row(*args)


def test_the_row_builder_makes_what_the_constructor_makes() -> None:
    for args in (("c", "s", 0.5, {"k": "v", "tier": "WORKING"}), ("c", None, float("inf"), {})):
        built = RetrievedDocument._of_row(*args)  # type: ignore[arg-type]
        assert built == RetrievedDocument(*args) and type(built.metadata) is type(RetrievedDocument(*args).metadata)
        with pytest.raises(TypeError):
            built.metadata["k"] = "x"  # type: ignore[index]
    assert RetrievedDocument._of_row("c", None, 2, {}).score == 2.0  # an int: through the constructor


def test_retrieved_document_accepts_int_and_infinite_scores() -> None:
    assert RetrievedDocument("c", None, 3, {}).score == 3.0
    assert RetrievedDocument("c", "s", float("-inf"), {"k": "v"}).score == float("-inf")
