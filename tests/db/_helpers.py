"""Helpers shared by database tests (not collected by pytest: the name does not start with ``test_``)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from tnsrag_db._store.filters import filter_sql
from tnsrag_db._store.reads import ENTRY_COLUMNS, document_from_row
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.base import resolve_context
from tnsrag_db._types import RAGContext, RetrievedDocument

__all__ = ["FixedScores", "RecordingStore", "ids_of", "read_statements", "run_processes"]


class RecordingStore:
    """A read store over ``inner`` (a :class:`~tnsrag_db._db.read_store.ReadStore`) that records
    each statement read through :meth:`read` as ``(text with :name parameters, parameters)``,
    so a test can look at the statements an index really sends without naming them."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reads: list[tuple[str, dict[str, Any]]] = []

    @property
    def corpus(self) -> str:
        return str(self._inner.corpus)

    @property
    def schema(self) -> str:
        return str(self._inner.schema)

    @property
    def max_query_terms(self) -> int:
        return int(self._inner.max_query_terms)

    @property
    def location(self) -> str:
        return str(self._inner.location)

    def filter_pairs_plan(self) -> Any:
        return self._inner.filter_pairs_plan()

    def read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        self.reads.append((sql, dict(params)))
        return list(self._inner.read(sql, params))

    def run(self, plan: Any, *, snapshot: bool = False) -> Any:
        raise AssertionError("RecordingStore records statements read one by one, not plans")


@contextmanager
def read_statements() -> Iterator[list[tuple[bool, str, tuple[Any, ...]]]]:
    """The read statements the library's read runner sends inside the block, in order:
    ``(sent from a coroutine, text with $n parameters, values)``."""
    from tnsrag_db._db import runner

    seen: list[tuple[bool, str, tuple[Any, ...]]] = []

    def record(text: str, values: Any) -> None:
        try:
            asyncio.get_running_loop()
            in_loop = True
        except RuntimeError:
            in_loop = False
        seen.append((in_loop, text, tuple(values)))

    runner.add_statement_listener(record)
    try:
        yield seen
    finally:
        runner.remove_statement_listener(record)


class FixedScores:
    """Test-only child strategy: the store's entries named in ``scores``, scored as given.

    Applies the context's filter in SQL, then min_score (inclusive) and top-K, ordered by
    score desc then id, like a direct strategy. Records every context it is called with.
    """

    name = "fixed"

    def __init__(self, store: Store, scores: Mapping[str, float]) -> None:
        self.store = store
        self.scores = dict(scores)
        self.calls: list[RAGContext] = []

    def retrieve(self, query: str, context: RAGContext | None = None) -> list[RetrievedDocument]:
        ctx = resolve_context(context)
        self.calls.append(ctx)
        predicate, params = filter_sql(ctx.metadata_filters)
        with self.store.session.transaction() as conn:
            rows = conn.execute(sa.text(f"SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.corpus = :c "
                                        f"AND e.id = ANY(:ids) AND {predicate}"),
                                {"c": self.store.corpus, "ids": list(self.scores), **params}).all()
        docs = [document_from_row(r, self.scores[r.entry_id]) for r in rows]
        docs = sorted((d for d in docs if d.score >= ctx.min_score), key=lambda d: (-d.score, d.metadata["entryId"]))
        return docs[:ctx.max_results]


def ids_of(docs: list[RetrievedDocument]) -> list[str]:
    """The entry ids of ``docs``, in order."""
    return [d.metadata["entryId"] for d in docs]


def run_processes(target: Callable[..., None], args: Sequence[tuple[Any, ...]], timeout: float = 180) -> list[int | None]:
    """Start one spawned process per ``args`` tuple, wait for all, return their exit codes."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    return [p.exitcode for p in procs]
