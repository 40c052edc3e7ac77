"""RAGPipeline phases, order and validation (no database needed: the strategy is plain Python)."""

from __future__ import annotations

import pytest

from tnsrag_db._errors import ConfigurationError, ValidationError
from tnsrag_db._pipeline import RAGPipeline, format_context
from tnsrag_db._types import RAGContext, RetrievedDocument


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, RAGContext | None]] = []

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        self.calls.append((query, context))
        return [RetrievedDocument("first", "a.md", 2.0), RetrievedDocument("second", None, 1.0)]


def test_phases_in_order_and_numbered_text() -> None:
    strategy = Recorder()
    ctx = RAGContext(3)
    events: list[str] = []

    def pre(q: str) -> str:
        events.append("pre")
        return q.strip().lower()

    def rerank(docs: list[RetrievedDocument]) -> list[RetrievedDocument]:
        events.append(f"rerank:{len(strategy.calls)}")
        return list(reversed(docs))

    pipeline = RAGPipeline.builder(strategy).default_context(ctx).query_preprocessor(pre).reranker(rerank).build()
    assert pipeline.execute("  Agent MEMORY ") == "[1] second\n\n[2] first\n(source: a.md)"
    assert strategy.calls == [("agent memory", ctx)]
    assert events == ["pre", "rerank:1"]
    other = RAGContext(1)
    docs = pipeline.retrieve_documents("x", other)
    assert strategy.calls[-1] == ("x", other) and [d.content for d in docs] == ["second", "first"]


def test_builder_validation() -> None:
    with pytest.raises(ConfigurationError):
        RAGPipeline.builder(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        RAGPipeline.builder(Recorder()).reranker("no")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        RAGPipeline.builder(Recorder()).build().execute(None)  # type: ignore[arg-type]
    bad = RAGPipeline.builder(Recorder()).reranker(lambda docs: None).build()  # type: ignore[arg-type,return-value]
    with pytest.raises(ValidationError):
        bad.execute("q")
    assert format_context([]) == ""
