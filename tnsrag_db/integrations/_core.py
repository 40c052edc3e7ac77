"""What the integrations share: argument checks with the argument's name in the error,
strategies built once per store, serialised embedding calls, and result records.

Nothing here imports an optional dependency, so it is tested without them.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tnsrag_db._errors import TnsragError, ValidationError
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.base import RAGStrategy
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import RAGContext, RetrievedDocument, validate_filters
from tnsrag_db._validate import check_query
from tnsrag_db.embeddings import EmbeddingFunction, get_process_embedding, provider_name

__all__ = ["NO_SCORE_FLOOR", "ArgumentError", "SerialEmbedding", "StrategyCache", "argument", "check_text_query",
           "document_record", "new_entry_id", "search_context"]

#: The ``min_score`` of a search without a score floor (``min_score=None``): the lowest score
#: any of the library's strategies gives (a cosine similarity of -1; BM25 and fused scores
#: are positive). The library's contexts need a finite bound, and the composed strategies
#: divide a negative one by their decay, so it is not the lowest float.
NO_SCORE_FLOOR = -1.0


class ArgumentError(ValidationError):
    """One named argument of an integration call is invalid; ``argument`` names it."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"invalid argument {argument!r}: {message}")
        #: The name of the offending argument.
        self.argument = argument


@contextmanager
def argument(name: str) -> Iterator[None]:
    """Re-raise a library error raised while checking argument ``name`` as :class:`ArgumentError`."""
    try:
        yield
    except ArgumentError:
        raise
    except TnsragError as exc:
        raise ArgumentError(name, str(exc)) from exc


def check_text_query(query: object, name: str = "query") -> str:
    """``query`` when the strategies accept it (:func:`~tnsrag_db._validate.check_query`: non-blank
    Unicode text without NUL); :class:`ArgumentError` naming argument ``name`` otherwise."""
    return check_query(query, error=functools.partial(ArgumentError, name))


def search_context(top_k: object, filters: Mapping[str, str] | None, min_score: object, *,
                   top_k_name: str = "top_k", max_top_k: int | None = None) -> RAGContext:
    """A :class:`RAGContext` from integration arguments, each error naming its argument.

    ``min_score`` None means no score floor (:data:`NO_SCORE_FLOOR`).

    ``max_top_k`` (optional) caps ``top_k``: a server answering many agents bounds the work
    one call can ask for.
    """
    with argument(top_k_name):
        RAGContext(max_results=top_k)  # type: ignore[arg-type]  # validated here
    if max_top_k is not None and isinstance(top_k, int) and top_k > max_top_k:
        raise ArgumentError(top_k_name, f"{top_k_name} must be at most {max_top_k}, got {top_k}")
    with argument("filters"):
        checked = validate_filters(filters)
    if min_score is None:
        min_score = NO_SCORE_FLOOR
    with argument("min_score"):
        RAGContext(min_score=min_score)  # type: ignore[arg-type]
    return RAGContext(top_k, min_score, checked)  # type: ignore[arg-type]


class SerialEmbedding:
    """An embedding function that runs one call at a time, queueing the others.

    The process provider refuses concurrent calls (:class:`ProviderBusyError`) so that an
    application sees its overload; a server handling requests in worker threads queues
    them instead. Keeps the wrapped provider's name, so vectors land in the same
    embedding space as ``tnsrag ingest`` writes.

    Without ``embedding``, the provider is chosen at first use (no I/O at construction):
    with ``store``, the provider of the corpus's own space, its newest complete one
    (:func:`~tnsrag_db._indexes.vector.spaces.query_embedding`: a corpus embedded with the
    shipped model is searched and written with it, whatever the process default is; a
    corpus without vectors gets the default provider); without, the process provider.
    """

    def __init__(self, embedding: EmbeddingFunction | Callable[[str], object] | None = None, *,
                 store: Store | None = None) -> None:
        self._fn: Any = embedding
        self._store = store
        self._lock = threading.Lock()

    def _target(self) -> Any:
        if self._fn is None:
            with self._lock:
                if self._fn is None:
                    if self._store is not None:
                        from tnsrag_db._indexes.vector.spaces import query_embedding

                        self._fn = query_embedding(self._store)
                    else:
                        self._fn = get_process_embedding()
        return self._fn

    @property
    def name(self) -> str:
        """The wrapped provider's name (the space it reads and writes)."""
        return provider_name(self._target())

    def __call__(self, text: str) -> Sequence[float]:
        fn = self._target()
        with self._lock:
            return fn(text)  # type: ignore[no-any-return]

    def embed_batch(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        fn = self._target()
        batch = getattr(fn, "embed_batch", None)
        with self._lock:
            if batch is None:
                return [fn(t) for t in texts]
            return batch(texts)  # type: ignore[no-any-return]


class StrategyCache:
    """The registry's strategies over one store, each built once (they cache index state).

    Thread-safe. Unknown names raise the registry's :class:`StrategyUnavailableError`.
    """

    def __init__(self, store: Store, embedding: EmbeddingFunction | Callable[[str], object]) -> None:
        self._store = store
        self._embedding = embedding
        self._built: dict[str, RAGStrategy] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> RAGStrategy:
        """The strategy called ``name``."""
        with self._lock:
            strategy = self._built.get(name)
            if strategy is None:
                strategy = build_strategy(name, self._store, embedding=self._embedding)
                self._built[name] = strategy
            return strategy


#: Result metadata keys the library fills in (see :func:`document_record`).
_PROMOTED = ("entryId", "tier", "source")


def document_record(doc: RetrievedDocument) -> dict[str, Any]:
    """A JSON-ready record of a result: ``id``, ``content``, ``score``, ``tier``, ``source`` and
    ``metadata`` (the entry's own metadata plus what the strategy added, such as ``depth``)."""
    md = doc.metadata
    return {"id": md.get("entryId"), "content": doc.content, "score": doc.score, "tier": md.get("tier"),
            "source": doc.source, "metadata": {k: v for k, v in md.items() if k not in _PROMOTED}}


def new_entry_id() -> str:
    """A fresh entry id (a random UUID) for writes that name none."""
    return str(uuid.uuid4())
