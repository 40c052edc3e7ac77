"""``tnsrag ingest`` and ``tnsrag query``: the main job."""

from __future__ import annotations

import dataclasses
import time
from importlib import resources
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from tnsrag_db.cli._common import db_options, emit, handle_errors
from tnsrag_db.embeddings import get_process_embedding
from tnsrag_db.errors import ConfigurationError, InvalidEntryError
from tnsrag_db.loaders import FileLoader
from tnsrag_db.store.store import connect
from tnsrag_db.strategies.registry import STRATEGY_NAMES, build_strategy
from tnsrag_db.types import MemoryTier, RAGContext

__all__ = ["ingest", "query"]


def _pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        out[key] = value
    return out


def sample_corpus_path() -> Path:
    """The small sample corpus that ships with the package (JSONL)."""
    return Path(str(resources.files("tnsrag_db") / "data" / "sample_corpus.jsonl"))


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus to write into.")
@click.option("--tier", type=click.Choice([t.name for t in MemoryTier]), default="SEMANTIC", show_default=True,
              help="Tier for entries that do not set one.")
@click.option("--source", default=None, help="Source for every entry (default: the file path).")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", help="Metadata for every entry (repeatable).")
@click.option("--sample", is_flag=True, help="Ingest the sample corpus that ships with tnsrag_db.")
@click.option("--batch-size", default=500, show_default=True, help="Entries per embedding batch.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@handle_errors
def ingest(paths: tuple[Path, ...], url: str | None, schema: str, corpus: str, tier: str, source: str | None,
           meta: tuple[str, ...], sample: bool, batch_size: int, as_json: bool) -> None:
    """Ingest text, Markdown and JSONL files (or directories or globs of them) into a corpus.

    Markdown becomes one entry per heading section (each the child of its enclosing
    section), text becomes paragraph chunks, JSONL one entry per line; ids are the
    paths relative to the current directory plus "#n" (or the JSONL "id").

    Entries are embedded with the installed embedding provider (or the offline
    128-dimensional hash fallback) and indexed for BM25. Re-running with the same
    files is idempotent: unchanged entries are reported, not rewritten.

    Example: tnsrag ingest docs/ notes.md --tier SEMANTIC --meta tenant=acme
    """
    from tnsrag_db.indexes.graph import GraphStore
    from tnsrag_db.indexes.vector import VectorMemoryStore

    targets = list(paths) + ([sample_corpus_path()] if sample else [])
    if not targets:
        raise click.UsageError("give at least one PATH, or --sample")
    extra = _pairs(meta, "--meta")
    loader = FileLoader(*targets, tier=tier)
    try:
        loaded = list(loader.load())
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    edges = loader.edges  # from JSONL records (tnsrag export files), written with the entries
    entries = [dataclasses.replace(e, source=source or e.source, metadata={**e.metadata, **extra}) for e in loaded]
    if not entries:
        raise InvalidEntryError("no entries found in the given paths")
    started = time.perf_counter()
    with connect(url, corpus=corpus, schema=schema, auto_migrate=None if url is None else False) as store:
        vectors = VectorMemoryStore(store, get_process_embedding())
        graph = GraphStore(store)

        def write_edges(conn: Any) -> None:
            # In the entries' transaction: an edge to an entry neither in the files nor in
            # the corpus rolls everything back.
            graph.write_edges(conn, edges)

        index_bar: tqdm[Any] | None = None

        def index_advance(phase: str, done: int, total: int) -> None:
            # The HNSW build (once the corpus reaches the index threshold): heap blocks read
            # while it builds; the validation and waiting phases of the concurrent build
            # that follow only show their name.
            nonlocal index_bar
            if index_bar is None:
                index_bar = tqdm(total=total, unit="block", desc="HNSW index", disable=as_json or None)
            if phase == "done" or phase.startswith("building index"):
                index_bar.total = max(total, 1)
                index_bar.update(done - index_bar.n)
            index_bar.set_postfix_str(phase)

        with tqdm(total=len(entries), unit="entry", desc="ingest", disable=as_json or None) as bar:
            last = 0

            def advance(done: int) -> None:
                nonlocal last
                bar.update(done - last)
                last = done

            try:
                counts = vectors.add_all(entries, batch_size=batch_size, progress=advance,
                                         index_progress=index_advance, check=write_edges if edges else None)
            finally:
                if index_bar is not None:
                    index_bar.close()
    elapsed = time.perf_counter() - started
    emit({"corpus": corpus, "files": len(targets), "entries": len(entries), "inserted": counts.inserted,
          "updated": counts.updated, "unchanged": counts.unchanged, "edges": len(edges),
          "seconds": round(elapsed, 3)}, as_json,
         f"{len(entries)} entries from {len(targets)} path(s) into corpus {corpus!r}: "
         f"{counts.inserted} inserted, {counts.updated} updated, {counts.unchanged} unchanged"
         + (f", {len(edges)} edges" if edges else "") + f" ({elapsed:.1f} s)")


@click.command()
@click.argument("text")
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus to search.")
@click.option("--strategy", type=click.Choice(STRATEGY_NAMES), default="hybrid", show_default=True)
@click.option("--top-k", "top_k", default=5, show_default=True, type=click.IntRange(min=1), help="Results to return.")
@click.option("--min-score", default=0.0, show_default=True, type=float, help="Inclusive score threshold.")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Exact metadata filter, e.g. tier=SEMANTIC (repeatable; all must match).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@handle_errors
def query(text: str, url: str | None, schema: str, corpus: str, strategy: str, top_k: int, min_score: float,
          filters: tuple[str, ...], as_json: bool) -> None:
    """Retrieve the best entries for TEXT with one of the strategies.

    TEXT must not be blank. A corpus that does not exist is an error (exit 1) naming
    the corpora that do; when a --filter matches no entry, a note on stderr says which
    and what values its key takes. --json prints each result with id, score, content,
    source and metadata at top level (a shape kept stable across versions).

    Example: tnsrag query "how do agents share memory" --strategy hybrid --top-k 3 --filter tier=SEMANTIC
    """
    from tnsrag_db.admin import empty_filter_notes, require_corpus
    from tnsrag_db.cli._render import render_text, result_json
    from tnsrag_db.strategies.base import check_query

    check_query(text)
    context = RAGContext(top_k, min_score, _pairs(filters, "--filter"))
    with connect(url, corpus=corpus, schema=schema, auto_migrate=None if url is None else False) as store:
        require_corpus(store)  # reads only: a query never creates a corpus
        chosen = build_strategy(strategy, store)
        started = time.perf_counter()
        documents = chosen.retrieve(text, context)
        elapsed_ms = (time.perf_counter() - started) * 1000
        notes = empty_filter_notes(store, context.metadata_filters) if not documents else []
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if as_json:
        emit({"query": text, "strategy": chosen.name, "milliseconds": round(elapsed_ms, 2),
              "results": [result_json(n, d) for n, d in enumerate(documents, 1)], "notes": notes}, True)
        return
    click.echo(render_text(chosen.name, documents, elapsed_ms))
