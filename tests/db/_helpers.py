"""Helpers shared by database tests (not collected by pytest: the name does not start with ``test_``)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tnsrag_db._store.filters import filter_sql
from tnsrag_db._store.reads import ENTRY_COLUMNS, document_from_row
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.base import resolve_context
from tnsrag_db._types import RAGContext, RetrievedDocument

__all__ = ["FixedScores", "ids_of", "read_statements", "run_processes"]


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
            rows = conn.execute((f"SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.corpus = :c "
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
