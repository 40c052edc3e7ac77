"""``tnsrag query``: retrieve with one of the strategies (``tnsrag ingest`` lives in :mod:`tnsrag_db._cli.ingest`).

What only the strategies that embed the query need (the embedding provider, which loads
numpy) is imported inside the command, so a keyword query process does not pay for it.

The command opens the store as any application does (:func:`tnsrag_db._cli._schema.open_existing`,
which never creates a schema but the embedded server's own), on one psycopg connection
without pool threads, builds the strategy by name and answers: the same plans and
statements as the library's. Opening a schema at head reads its revision with one
statement and imports neither SQLAlchemy nor alembic, so a keyword query stays a short
process. The missing corpus's error, the filter notes, the empty-corpus note and a partly
filled space's note are plans on that connection too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

import tnsrag_db
from tnsrag_db._cli._common import STRATEGY_ALIASES, Suggesting, db_options, emit, handle_errors, parse_pairs
from tnsrag_db._cli._render import render_text, result_json
from tnsrag_db._cli._schema import open_existing
from tnsrag_db._db.as_of import as_of as answering_at
from tnsrag_db._errors import TemporalValidationError
from tnsrag_db._indexes import graph
from tnsrag_db._store.embedded.keeper import use_keeper_model
from tnsrag_db._store.reads import count_plan
from tnsrag_db._strategies.base import check_query
from tnsrag_db._strategies.compose import EMBEDDING_STRATEGIES, STRATEGY_NAMES
from tnsrag_db._strategies.registry import build_strategy
from tnsrag_db._types import RAGContext, RetrievedDocument, parse_instant
from tnsrag_db.admin.corpora import require_corpus, require_corpus_plan
from tnsrag_db.admin.filter_notes import empty_filter_notes, empty_filter_notes_plan

if TYPE_CHECKING:
    from tnsrag_db._db.statement import Plan
    from tnsrag_db.explain import Explanation

__all__ = ["empty_answer_notes_plan", "query"]


def empty_answer_notes_plan(corpus: str, filters: Mapping[str, str] | None) -> Plan[list[str]]:
    """The notes printed with an empty answer from ``corpus``: why ``filters`` match
    nothing, or, without filters, that the corpus holds no entries yet (if so)."""
    notes = yield from empty_filter_notes_plan(corpus, filters)
    if not filters and (yield from count_plan(corpus)) == 0:
        notes.append(f"corpus {corpus!r} holds no entries yet: add some with tnsrag ingest PATH --corpus {corpus}")
    return notes


def _answer(store: Any, chosen: Any, text: str, context: RAGContext, *, space_notes: Callable[[], list[str]],
            corpus_checked: bool) -> tuple[list[RetrievedDocument], float, list[str]]:
    """What the command does once the strategy is built: its results for ``text``, the
    milliseconds they took, and the notes (an empty answer's, checking the corpus exists
    first unless ``corpus_checked``; then ``space_notes()``, a partly filled space's)."""
    started = time.perf_counter()
    documents = chosen.retrieve(text, context)
    elapsed_ms = (time.perf_counter() - started) * 1000
    notes: list[str] = []
    if not documents:
        if not corpus_checked:
            store.run(require_corpus_plan(store.corpus))
        notes = store.run(empty_answer_notes_plan(store.corpus, context.metadata_filters))
    notes += space_notes()
    return documents, elapsed_ms, notes


def _print_results(text: str, strategy: str, documents: Sequence[RetrievedDocument], elapsed_ms: float,
                   notes: list[str], as_json: bool) -> None:
    if as_json:  # the notes are in the JSON: stderr stays quiet for scripts that merge it
        emit({"query": text, "strategy": strategy, "milliseconds": round(elapsed_ms, 2),
              "results": [result_json(n, d) for n, d in enumerate(documents, 1)], "notes": notes}, True)
        return
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(render_text(strategy, documents, elapsed_ms))


def _explained_json(text: str, explained: Explanation, elapsed_ms: float, notes: list[str]) -> dict[str, Any]:
    """The ``--json --explain`` document: the ``--json`` one (every key, same names) plus
    ``queries``, ``plans`` and, per result, ``explanation`` (and ``entryId``, the name
    ``--explain`` used before it kept ``id``)."""
    results = []
    for r in explained.results:
        row = result_json(r.rank, r.document)
        row["entryId"] = row["id"]
        row["explanation"] = r.explanation.to_dict()
        results.append(row)
    return {"query": text, "strategy": explained.strategy, "milliseconds": round(elapsed_ms, 2),
            "results": results, "notes": notes, "queries": list(explained.queries),
            "plans": [p.to_dict() for p in explained.plans]}


def _query_embedding(store: Any, strategy: str, name: str | None) -> tuple[Any, Callable[[], list[str]]]:
    """What embeds the query of ``strategy``, and what gives its space's notes after the
    search. For the strategies that embed: the provider of the corpus's space (or
    ``--embedding``'s), from the corpus's spaces listed once with their counts, and the
    note of that space when it lacks vectors for some entries
    (:func:`~tnsrag_db._indexes.vector.spaces.space_fill_note`). Else ``name`` as given
    (never resolved) and no note."""
    if strategy not in EMBEDDING_STRATEGIES:
        return name, list
    from tnsrag_db._indexes.vector import spaces  # loads numpy: only for the strategies that embed the query

    listed = spaces.list_spaces(store)

    def space_notes() -> list[str]:
        note = spaces.space_fill_note(store, name, spaces=listed)
        return [note] if note else []

    return spaces.query_embedding(store, name, spaces=listed), space_notes


@click.command()
@click.argument("text")
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus to search.")
@click.option("--strategy", type=Suggesting(STRATEGY_NAMES, STRATEGY_ALIASES), default="hybrid", show_default=True)
@click.option("--top-k", "top_k", default=5, show_default=True, type=click.IntRange(min=1), help="Results to return.")
@click.option("--min-score", default=0.0, show_default=True, type=float, help="Inclusive score threshold.")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Exact metadata filter, e.g. tier=SEMANTIC (repeatable; all must match).")
@click.option("--embedding", default=None, metavar="NAME|DIR",
              help="Search the corpus's embedding space of this provider (a name, or the model folder it was "
                   "embedded with). Default: its newest complete space.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--explain", "explain", is_flag=True,
              help="Show how each score arose (BM25 terms, cosine, fusion shares, decays) and the search plans.")
@click.option("--read-url", "read_urls", multiple=True, metavar="URL",
              help="A hot standby of --url's server to read from (repeatable; default: TNSRAG_READ_URLS, "
                   "space-separated). The primary answers while no standby can.")
@click.option("--distinct", is_flag=True,
              help="Collapse results with identical content into the best-scored one (its metadata lists the "
                   "others' ids under duplicateIds); still returns --top-k results when there are that many.")
@click.option("--as-of", "as_of", default=None, metavar="INSTANT",
              help="Answer from the entries valid, recorded and not expired at this ISO-8601 instant with a "
                   "zone (e.g. 2026-03-01T12:00:00Z). Default: now.")
@handle_errors
def query(text: str, url: str | None, schema: str, corpus: str, strategy: str, top_k: int, min_score: float,
          filters: tuple[str, ...], embedding: str | None, as_json: bool, explain: bool,
          read_urls: tuple[str, ...], distinct: bool, as_of: str | None) -> None:
    """Retrieve the best entries for TEXT with one of the strategies.

    Vector and hybrid search embed TEXT with the provider that filled the embedding
    space they search: the corpus's newest complete space, or --embedding NAME's; so
    do hierarchical and temporal (over vector search) and multi_query (over hybrid).

    TEXT must not be blank. A corpus that does not exist is an error (exit 1) naming
    the corpora that do; when a --filter matches no entry, a note on stderr says which
    and what values its key takes. --json prints each result with id, score, content,
    source and metadata at top level (a shape kept stable across versions).

    Example: tnsrag query "how do agents share memory" --strategy hybrid --top-k 3 --filter tier=SEMANTIC

    Example: tnsrag query "TAN-5326" --strategy keyword --explain

    Example: tnsrag query "lighthouse" --url "$PRIMARY_URL" --read-url "$STANDBY_URL"

    Example: tnsrag query "release notes" --distinct

    Example: tnsrag query "user preferences" --as-of 2026-03-01T12:00:00Z
    """
    check_query(text)
    try:
        instant = None if as_of is None else parse_instant(as_of)
    except TemporalValidationError as exc:
        raise click.BadParameter(str(exc), param_hint="--as-of") from None
    context = RAGContext(top_k, min_score, parse_pairs(filters, "--filter"), instant)
    # Every read of the command answers at the instant (the lean path's statements too).
    click.get_current_context().with_resource(answering_at(instant))
    standbys = list(read_urls) or os.environ.get("TNSRAG_READ_URLS", "").split()
    if standbys and url is None:
        raise click.UsageError("--read-url needs --url: standbys belong to a server named by URL")
    if url is None and strategy != "keyword":  # the kept-running server's keeper embeds the query with its warm model
        # A keeper that does not answer within about a second is passed by, with one note.
        undo = use_keeper_model(notify=lambda notice: click.echo(f"note: {notice}", err=True))
        click.get_current_context().call_on_close(undo)  # undone after the command
    # A query never creates a schema; one connection serves the command's statements in turn.
    with open_existing(url, schema, corpus, read_urls=standbys, one_connection=True,
                       vector_types=strategy in EMBEDDING_STRATEGIES) as store:
        require_corpus(store)  # reads only: a query never creates a corpus
        # Only the strategies that embed the query load a model (keyword, graph, reasoning never
        # do); they embed with the corpus's own space's provider, or --embedding's.
        embedder, space_notes = _query_embedding(store, strategy, embedding)
        chosen = build_strategy(strategy, store, embedding=embedder)
        if distinct:
            chosen = tnsrag_db.DistinctContentRAGStrategy(chosen)  # its module loads on first use (PEP 562)
        if explain:
            started = time.perf_counter()
            from tnsrag_db._strategies.explain import explain_with  # --explain only: its modules cost a query 30 ms

            explained = explain_with(chosen, text, context)
            elapsed_ms = (time.perf_counter() - started) * 1000
            notes = empty_filter_notes(store, context.metadata_filters) if not explained.results else []
            notes += space_notes()
            if not as_json:
                for note in notes:
                    click.echo(f"note: {note}", err=True)
            emit(_explained_json(text, explained, elapsed_ms, notes), as_json, explained.to_text())
            return
        documents, elapsed_ms, notes = _answer(store, chosen, text, context, space_notes=space_notes,
                                               corpus_checked=True)
        if chosen.name == "graph" and not graph.GraphStore(store).has_edges():
            notes.append(f"corpus {corpus!r} has no edges: the graph results are its BM25 seeds, as "
                         "--strategy keyword ranks them (add edges with tnsrag graph add-edge or tnsrag graph import)")
    _print_results(text, chosen.name, documents, elapsed_ms, notes, as_json)
