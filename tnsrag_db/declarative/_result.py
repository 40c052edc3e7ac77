"""What an action receives: :class:`RetrievalResult` and the numbered context text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tnsrag_db._errors import TnsragError
from tnsrag_db._pipeline import format_context as _pipeline_format
from tnsrag_db._types import RetrievedDocument
from tnsrag_db.declarative._config import RetrievalStrategy

__all__ = ["RetrievalResult", "format_context"]


def format_context(documents: Sequence[RetrievedDocument]) -> str:
    """Numbered context text exactly as ``RAGPipeline.execute`` formats it ("" when there is no document)."""
    return _pipeline_format(documents)


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    """The retrieval an action receives as its ``retrieved`` keyword argument.

    ``documents`` are best first (at most ``top_k``); ``context`` is them as numbered
    text; ``failure`` is the error that ``OnFailure.CONTINUE_EMPTY`` swallowed (None
    when retrieval succeeded).
    """

    query: str
    documents: tuple[RetrievedDocument, ...]
    context: str
    strategy: RetrievalStrategy
    failure: TnsragError | None = None

    @classmethod
    def of(cls, query: str, documents: Sequence[RetrievedDocument], strategy: RetrievalStrategy,
           failure: TnsragError | None = None) -> RetrievalResult:
        """A result over ``documents`` with its context text formatted."""
        docs = tuple(documents)
        return cls(query, docs, format_context(docs), strategy, failure)

    @property
    def ok(self) -> bool:
        """True when retrieval did not fail (an empty result can still be ok)."""
        return self.failure is None

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[RetrievedDocument]:
        return iter(self.documents)
