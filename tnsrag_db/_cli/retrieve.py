"""``tnsrag query``: retrieve with one of the strategies (``tnsrag ingest`` lives in :mod:`tnsrag_db._cli.ingest`).

What only the strategies that embed the query need (the embedding provider, which loads
numpy) is imported inside the command, so a keyword query process does not pay for it.

A keyword, vector or hybrid query runs on the lean path (:func:`lean_query`): the same
strategy plans and statements as a full store's (a vector query's spaces and embedding
provider are chosen by plans too, :mod:`tnsrag_db._indexes.vector.spaces`), run by the
library's read runner on one psycopg connection (a
:class:`~tnsrag_db._db.driver.DriverStore`), so the process imports neither SQLAlchemy
nor alembic. Everything the command says about an answer is a plan too, run on that
connection: the schema check (:func:`~tnsrag_db._db.revisions.schema_state_plan`,
and the tnsrag schemas named when it is missing), the missing corpus's error
(:func:`~tnsrag_db.admin.corpora.require_corpus_plan`: for a keyword query only with an
empty answer, for the others first, before a model loads), the filter notes
(:func:`~tnsrag_db.admin.filter_notes.empty_filter_notes_plan`), the empty-corpus note
and a partly filled space's note; so every statement runs once and errors are raised
where they arise. Once the strategy is built, both paths answer through one function
(:func:`_answer`). The full path (:func:`tnsrag_db._store.store.connect`) takes what the
lean one cannot do, before any query statement is sent: a schema to migrate or set up
(the embedded server's), ``--explain``, ``--distinct``, standbys (``--read-url`` /
``TNSRAG_READ_URLS``), a URL not of the ``postgresql://`` shape, the embedded server
when the command runs outside ``tnsrag`` (no kept-running server), a hybrid query of a
corpus with edges while hybrid by name weights its graph stream above 0, and the other
strategies.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from tnsrag_db._cli._common import STRATEGY_ALIASES, Suggesting, db_options, emit, handle_errors, parse_pairs
from tnsrag_db._strategies.compose import STRATEGY_NAMES
from tnsrag_db._types import RAGContext, RetrievedDocument

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tnsrag_db._db.statement import Plan
    from tnsrag_db.explain import Explanation

__all__ = ["LEAN_STRATEGIES", "empty_answer_notes_plan", "lean_query", "query"]


def empty_answer_notes_plan(corpus: str, filters: Mapping[str, str] | None) -> Plan[list[str]]:
    """The notes printed with an empty answer from ``corpus``: why ``filters`` match
    nothing, or, without filters, that the corpus holds no entries yet (if so)."""
    from tnsrag_db._store.reads import count_plan
    from tnsrag_db.admin.filter_notes import empty_filter_notes_plan

    notes = yield from empty_filter_notes_plan(corpus, filters)
    if not filters and (yield from count_plan(corpus)) == 0:
        notes.append(f"corpus {corpus!r} holds no entries yet: add some with tnsrag ingest PATH --corpus {corpus}")
    return notes


#: The strategies the lean path answers.
LEAN_STRATEGIES = ("keyword", "vector", "hybrid")


def lean_query(text: str, url: str | None, *, schema: str, corpus: str, strategy: str, embedding: str | None,
               context: RAGContext) -> tuple[list[RetrievedDocument], float, list[str]] | None:
    """``text``'s results by ``strategy`` (one of :data:`LEAN_STRATEGIES`) on ``url`` (None:
    the kept-running embedded server), the milliseconds they took and the notes to print
    with them, by the lean path (see the module docstring); None when the full path must
    answer instead (decided before any query statement is sent). ``embedding`` is
    ``--embedding``'s provider name (vector and hybrid).

    Raises :class:`~tnsrag_db._errors.CorpusNotFoundError` naming the corpora that exist
    when ``corpus`` does not, :class:`~tnsrag_db._errors.SchemaNotReadyError` naming the
    tnsrag schemas when ``schema`` does not exist, :class:`~tnsrag_db._errors.DatabaseError`
    (``could not connect: ...``) when the server cannot be reached, what starting the
    embedded server raises, and for vector and hybrid what choosing and loading the
    query's embedding provider raises (as the full path does)."""
    from tnsrag_db._cli._common import DEFAULT_SCHEMA
    from tnsrag_db._cli._schema import missing_schema_error, tnsrag_schemas_plan
    from tnsrag_db._db.driver import DriverStore
    from tnsrag_db._db.revisions import schema_state_plan, shipped_head
    from tnsrag_db._db.settings import libpq_url
    from tnsrag_db._indexes.bm25 import BM25Index
    from tnsrag_db._store.analysis import DEFAULT_MAX_QUERY_TERMS
    from tnsrag_db._store.embedded.keeper import ensure_running
    from tnsrag_db._store.embedded.resolve import kept_running_timeout
    from tnsrag_db._strategies.base import RAGStrategy
    from tnsrag_db._strategies.compose import HYBRID_GRAPH_WEIGHT
    from tnsrag_db._strategies.keyword import KeywordRAGStrategy
    from tnsrag_db.admin.corpora import corpus_has_edges_plan, require_corpus_plan

    head = shipped_head()
    if head is None:
        return None  # the head cannot be read without alembic: the full path's check
    if url is None:
        idle_timeout = kept_running_timeout()
        if idle_timeout is None:
            return None  # no `tnsrag` group around this call: the wheel's own server (full path)
        target = ensure_running(idle_timeout=idle_timeout)
    else:
        found = libpq_url(url)
        if found is None:
            return None
        target = found
    with DriverStore(target, corpus=corpus, schema=schema, max_query_terms=DEFAULT_MAX_QUERY_TERMS,
                     pgvector=strategy != "keyword") as store:
        state = store.run(schema_state_plan(schema))
        if state is None:
            return None  # the full path's check
        if state.revision is None:
            existing = store.run(tnsrag_schemas_plan())
            if schema not in existing and not (url is None and schema == DEFAULT_SCHEMA):
                raise missing_schema_error(schema, existing, embedded=url is None)
            return None  # the embedded server's own schema is set up, an old one migrated, by the full path
        if not state.usable:
            return None  # migrated by the full path (embedded), or its error (a URL's)
        spaces = None
        chosen: RAGStrategy
        if strategy == "keyword":
            chosen = KeywordRAGStrategy(BM25Index(store))
        else:
            # The full path's order: a missing corpus is an error before any model loads.
            store.run(require_corpus_plan(corpus))
            if strategy == "hybrid" and HYBRID_GRAPH_WEIGHT and store.run(corpus_has_edges_plan(corpus)):
                return None  # hybrid's graph stream walks the edges: the full path's graph store
            from tnsrag_db._indexes.vector import VectorMemoryStore

            spaces, embedder = _query_embedding(store, strategy, embedding)
            vectors = VectorMemoryStore(store, embedder)
            if strategy == "vector":
                from tnsrag_db._strategies.vector import VectorRAGStrategy

                chosen = VectorRAGStrategy(vectors)
            else:
                # Without edges, or weighted 0, the graph stream adds nothing: the two streams rank alone.
                from tnsrag_db._strategies.hybrid import HybridRAGStrategy

                chosen = HybridRAGStrategy(BM25Index(store), vectors)
        return _answer(store, chosen, text, context, strategy=strategy, embedding=embedding, spaces=spaces,
                       corpus_checked=strategy != "keyword")


def _answer(store: Any, chosen: Any, text: str, context: RAGContext, *, strategy: str, embedding: str | None,
            spaces: list[Any] | None, corpus_checked: bool) -> tuple[list[RetrievedDocument], float, list[str]]:
    """What both paths do once the strategy is built: its results for ``text``, the
    milliseconds they took, and the notes (an empty answer's, checking the corpus exists
    first unless ``corpus_checked``; a partly filled space's)."""
    started = time.perf_counter()
    documents = chosen.retrieve(text, context)
    elapsed_ms = (time.perf_counter() - started) * 1000
    notes: list[str] = []
    if not documents:
        if not corpus_checked:
            from tnsrag_db.admin.corpora import require_corpus_plan

            store.run(require_corpus_plan(store.corpus))
        notes = store.run(empty_answer_notes_plan(store.corpus, context.metadata_filters))
    notes += _space_notes(store, strategy, embedding, spaces)
    return documents, elapsed_ms, notes


def _print_results(text: str, strategy: str, documents: Sequence[RetrievedDocument], elapsed_ms: float,
                   notes: list[str], as_json: bool) -> None:
    from tnsrag_db._cli._render import render_text, result_json

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
    from tnsrag_db._cli._render import result_json

    results = []
    for r in explained.results:
        row = result_json(r.rank, r.document)
        row["entryId"] = row["id"]
        row["explanation"] = r.explanation.to_dict()
        results.append(row)
    return {"query": text, "strategy": explained.strategy, "milliseconds": round(elapsed_ms, 2),
            "results": results, "notes": notes, "queries": list(explained.queries),
            "plans": [p.to_dict() for p in explained.plans]}


def _query_embedding(store: Any, strategy: str, name: str | None) -> tuple[list[Any] | None, Any]:
    """The corpus's spaces (listed once, with their counts) and what embeds the query of
    ``strategy``: the provider of the corpus's space (or ``--embedding``'s) for the
    strategies that embed, else ``name`` as given (never resolved)."""
    from tnsrag_db._strategies.compose import EMBEDDING_STRATEGIES

    if strategy not in EMBEDDING_STRATEGIES:
        return None, name
    from tnsrag_db._indexes.vector.spaces import list_spaces, query_embedding

    spaces = list_spaces(store)
    return spaces, query_embedding(store, name, spaces=spaces)


def _space_notes(store: Any, strategy: str, embedding: str | None, spaces: list[Any] | None) -> list[str]:
    """The note of a strategy that embeds the query when its space lacks vectors for some
    entries (:func:`~tnsrag_db._indexes.vector.spaces.space_fill_note`), from the spaces
    :func:`_query_embedding` listed."""
    if spaces is None:
        return []
    from tnsrag_db._indexes.vector.spaces import space_fill_note

    note = space_fill_note(store, embedding, spaces=spaces)
    return [note] if note else []


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
    from tnsrag_db._db.as_of import as_of as answering_at
    from tnsrag_db._errors import TemporalValidationError
    from tnsrag_db._strategies.base import check_query
    from tnsrag_db._types import parse_instant

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
        from tnsrag_db._store.embedded.keeper import use_keeper_model

        # A keeper that does not answer within about a second is passed by, with one note.
        undo = use_keeper_model(notify=lambda notice: click.echo(f"note: {notice}", err=True))
        click.get_current_context().call_on_close(undo)  # undone after the command
    if strategy in LEAN_STRATEGIES and not explain and not standbys and not distinct:
        answered = lean_query(text, url, schema=schema, corpus=corpus, strategy=strategy, embedding=embedding,
                              context=context)
        if answered is not None:
            _print_results(text, strategy, *answered, as_json)
            return

    from tnsrag_db._cli._schema import open_existing
    from tnsrag_db._strategies.explain import explain_with
    from tnsrag_db._strategies.registry import build_strategy
    from tnsrag_db.admin.corpora import require_corpus
    from tnsrag_db.admin.filter_notes import empty_filter_notes

    with open_existing(url, schema, corpus, read_urls=standbys) as store:  # a query never creates a schema
        require_corpus(store)  # reads only: a query never creates a corpus
        # Only the strategies that embed the query load a model (keyword, graph, reasoning never
        # do); they embed with the corpus's own space's provider, or --embedding's.
        spaces, embedder = _query_embedding(store, strategy, embedding)
        chosen = build_strategy(strategy, store, embedding=embedder)
        if distinct:
            from tnsrag_db._strategies.distinct import DistinctContentRAGStrategy

            chosen = DistinctContentRAGStrategy(chosen)
        if explain:
            started = time.perf_counter()
            explained = explain_with(chosen, text, context)
            elapsed_ms = (time.perf_counter() - started) * 1000
            notes = empty_filter_notes(store, context.metadata_filters) if not explained.results else []
            notes += _space_notes(store, strategy, embedding, spaces)
            if not as_json:
                for note in notes:
                    click.echo(f"note: {note}", err=True)
            emit(_explained_json(text, explained, elapsed_ms, notes), as_json, explained.to_text())
            return
        documents, elapsed_ms, notes = _answer(store, chosen, text, context, strategy=strategy, embedding=embedding,
                                               spaces=spaces, corpus_checked=True)
        if chosen.name == "graph":
            from tnsrag_db._indexes.graph import GraphStore

            if not GraphStore(store).has_edges():
                notes.append(f"corpus {corpus!r} has no edges: the graph results are its BM25 seeds, as "
                             "--strategy keyword ranks them (add edges with tnsrag graph add-edge or tnsrag graph import)")
    _print_results(text, chosen.name, documents, elapsed_ms, notes, as_json)
