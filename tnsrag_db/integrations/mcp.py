"""An MCP server over one corpus: agents search, remember, forget, link and consolidate through tools.

Built on the official ``mcp`` SDK's :class:`~mcp.server.mcpserver.MCPServer` (install the
``[mcp]`` extra). That high-level server rather than the low-level ``Server``: the
tools' JSON schemas come from the typed signatures below (one declaration, no
hand-written schema to drift), and synchronous tools run in worker threads, so the
blocking library calls never stall the event loop that serves other requests.

Tools (``read_only=True`` registers only the first three):

* ``search(query, strategy="hybrid", top_k=5, filters=None, min_score=0.0, as_of=None)``:
  each document's ``content`` is cut to ``max_content_chars`` characters, with
  ``truncated`` telling whether it was; ``as_of`` (an ISO-8601 instant with a zone)
  answers from the entries valid, recorded and not expired then
* ``stats()`` and ``corpora()`` (``corpora`` names only the served corpus unless the
  server is built with ``all_corpora=True``)
* ``remember(content, tier="SEMANTIC", metadata=None, source=None, parent_id=None,
  timestamp=None, id=None, ttl_seconds=None, expires_at=None, valid_from=None,
  valid_until=None)``: an upsert keyed by ``id`` (in a corpus that keeps history, a new
  version of the entry: the one it replaces stays, found ``as_of`` an earlier instant);
  without one, the id is derived from the call (:func:`remember_id`; the expiry does not
  count, so remembering the same thing again renews its time-to-live), so a retried call
  stores nothing new. An entry past its expiry is found by no tool
* ``forget(id=None, filters=None)``: exactly one of them
* ``link(src, dst, relation="related", weight=1.0, source=None, valid_from=None,
  valid_until=None)``: an end that is an alias (the id of an entry merged into another)
  stands for that entry; a search follows the edge only at the instants it is valid
* ``consolidate(tier, threshold=None, mode="merge", dry_run=False)``: the duplicates of a
  tier (the same text, or with ``threshold`` vectors of the server's space at least that
  similar) merged into their first-written entry or linked (:meth:`Store.consolidate`);
  the answer lists at most :data:`MAX_GROUPS_LISTED` groups

Every input schema is strict (``additionalProperties: false``) and every call is checked
against the published schema before anything else (JSON Schema semantics: ``true`` is no
integer, ``"3"`` no number, an unknown argument is refused), because the SDK's own
validation coerces. Bad input never ends the server: a schema violation or a bad value
(the library's own checks) comes back as a tool error (``isError``) whose text names the
argument. ``search`` and ``stats`` on a corpus that does not exist are tool errors naming it.

:func:`serve_stdio` runs a server on the process's stdin and stdout and answers a line
that is not a JSON-RPC message with a JSON-RPC error (the SDK's transport drops it).
"""

import functools
import io
import json
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal, TextIO, TypeVar, cast

import jsonschema  # type: ignore[import-untyped]  # no stubs; the [mcp] extra installs it
import pydantic
import pydantic_core
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations, jsonrpc_message_adapter
from pydantic import BaseModel, Field

from tnsrag_db._db.pool import Connection
from tnsrag_db._errors import TnsragError
from tnsrag_db._indexes.graph import DEFAULT_RELATION, Edge, GraphStore
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._indexes.temporal import TemporalIndex
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.consolidate import check_threshold
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.registry import STRATEGY_NAMES
from tnsrag_db._types import MemoryEntry, MemoryTier, parse_instant
from tnsrag_db._validate import is_int
from tnsrag_db.admin import corpus_names, corpus_stats, list_corpora
from tnsrag_db.embeddings import EmbeddingFunction
from tnsrag_db.integrations._core import (
    ArgumentError,
    SerialEmbedding,
    StrategyCache,
    argument,
    check_text_query,
    document_record,
    search_context,
)

__all__ = ["DEFAULT_MAX_CONTENT_CHARS", "DEFAULT_MAX_TOP_K", "READ_TOOLS", "WRITE_TOOLS", "create_server",
           "remember_id", "serve_stdio"]

#: The largest ``top_k`` a ``search`` call may ask for unless the server is built with another cap.
DEFAULT_MAX_TOP_K = 100
#: Characters of each document's content a ``search`` answer carries unless the server is
#: built with another bound: about a thousand tokens, four times the largest chunk ``tnsrag
#: ingest`` writes (:data:`tnsrag_db._chunking.DEFAULT_CHUNK_CHARS`), so ingested chunks come
#: whole and only outsized entries (a whole file remembered as one) are cut. A bound rather
#: than None: one entry of megabytes would otherwise fill an agent's context window.
DEFAULT_MAX_CONTENT_CHARS = 4000
#: Tools a read-only server registers.
READ_TOOLS = ("search", "stats", "corpora")
#: Tools only a writable server registers.
WRITE_TOOLS = ("remember", "forget", "link", "consolidate")
#: The most groups a ``consolidate`` answer lists (its counts cover them all).
MAX_GROUPS_LISTED = 50

_F = TypeVar("_F", bound=Callable[..., Any])
_TIERS = [t.name for t in MemoryTier]
_Status = Literal["inserted", "updated", "unchanged"]
#: The namespace of the name-based UUIDs of :func:`remember_id` (fixed: ids must not change
#: between releases, or a retry after an upgrade would store a duplicate).
_REMEMBER_NAMESPACE = uuid.UUID("5b0b7c4e-2f4a-4d53-9a39-4f1f2c1e7a61")
#: Characters of a rejected value quoted in a schema error (a 10 MB argument stays out of it).
_QUOTE_CHARS = 200


class Document(BaseModel):
    """One search result."""

    id: str | None = Field(description="The entry id.")
    content: str = Field(description="The entry's text, cut to the server's max_content_chars characters.")
    truncated: bool = Field(description="Whether content was cut (the entry holds more).")
    score: float = Field(description="The strategy's score (cosine, BM25, fused score, ...); higher is better.")
    tier: str | None
    source: str | None
    metadata: dict[str, str] = Field(description="The entry's own metadata plus what the strategy added.")


class SearchResult(BaseModel):
    """The documents a search found, best first."""

    strategy: str
    documents: list[Document]


class RememberResult(BaseModel):
    """The id of the remembered entry and whether it was inserted, updated or already identical."""

    id: str
    status: _Status


class ForgetResult(BaseModel):
    """How many entries were deleted (with their vectors, postings and edges)."""

    deleted: int


class DuplicateGroup(BaseModel):
    """Entries found to be duplicates: the one kept and the others (merged into it, or linked)."""

    survivor: str
    others: list[str]
    similarity: float = Field(description="The lowest similarity of the pairs that joined the group (1.0: the "
                                          "same text).")


class ConsolidateResult(BaseModel):
    """What a consolidation found and did."""

    pairs: int = Field(description="Duplicate pairs found.")
    merged: int = Field(description="Entries merged into a survivor (their ids now read as it).")
    linked: int = Field(description="Edges written between duplicates.")
    dry_run: bool
    groups: list[DuplicateGroup] = Field(description=f"The groups, at most {MAX_GROUPS_LISTED}.")
    more_groups: int = Field(description="Groups found beyond those listed.")


class LinkResult(BaseModel):
    """The edge written and whether it was inserted, updated or already identical."""

    src: str
    dst: str
    relation: str
    status: _Status


def _status(inserted: int, updated: int) -> _Status:
    return "inserted" if inserted else "updated" if updated else "unchanged"


def _library_errors(fn: _F) -> _F:
    """``fn`` with the library's errors turned into tool errors carrying the library's message
    (the SDK would report any other exception as a crash, without its text)."""

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TnsragError as exc:
            raise ToolError(str(exc)) from exc

    return cast(_F, tool)


def _package_version() -> str:
    try:
        return version("tnsrag-db")
    except PackageNotFoundError:  # pragma: no cover - a source tree run without installing
        return "0+unknown"


def remember_id(content: str, *, tier: str = "SEMANTIC", metadata: dict[str, str] | None = None,
                source: str | None = None, parent_id: str | None = None, timestamp: str | None = None) -> str:
    """The id ``remember`` gives an entry when the call names none: a name-based UUID
    (RFC 4122 version 5) of the content, tier, metadata, source, parent id and instant.

    Equal calls get equal ids, so a host that retries ``remember`` (the tool is declared
    idempotent) stores one entry, and the same memory remembered twice stays one. The
    timestamp counts as the instant it names (``...T12:00:00Z`` and ``...T13:00:00+01:00``
    are the same); an unparsable one counts as its text (the call is refused anyway).
    """
    when: str | None = timestamp
    if timestamp is not None:
        try:
            when = parse_instant(timestamp).astimezone(timezone.utc).isoformat()
        except (TnsragError, TypeError, ValueError):
            pass
    # ASCII JSON: any string (a lone surrogate included) has one spelling, and uuid5 can encode it.
    key = json.dumps([content, tier, sorted((metadata or {}).items()), source, parent_id, when],
                     ensure_ascii=True, separators=(",", ":"))
    return str(uuid.uuid5(_REMEMBER_NAMESPACE, key))


def _quote(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "..."


def _schema_message(error: jsonschema.ValidationError, properties: list[str]) -> str:
    """One schema violation as ``invalid argument 'name': why`` (``unknown argument`` for an extra)."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        # An optional argument's schema is anyOf [its type, null]: say what is wrong with the
        # value as its type, not that it matches no alternative.
        deepest = [e for e in error.context if e.validator_value != "null"]
        if deepest:
            return _schema_message(max(deepest, key=lambda e: len(e.absolute_path)), properties)
    if not error.absolute_path:
        if error.validator == "additionalProperties":
            known = ", ".join(properties) or "none"
            extra = sorted(set(cast(dict[str, Any], error.instance)) - set(properties))
            return f"unknown argument {', '.join(map(repr, extra))} (arguments: {known})"
        if error.validator == "required":
            return f"missing argument: {error.message}"
        return f"invalid arguments: {error.message}"
    name = str(error.absolute_path[0])
    where = "".join(f"[{p!r}]" for p in list(error.absolute_path)[1:])
    value = _quote(error.instance)
    expected = error.validator_value
    if error.validator == "type":
        why = f"{value} is not of type {' or '.join(map(repr, expected)) if isinstance(expected, list) else repr(expected)}"
    elif error.validator == "enum":
        why = f"{value} is not one of: {', '.join(map(str, expected))}"
    elif len(error.message) <= 2 * _QUOTE_CHARS:
        why = error.message
    else:
        why = f"{value} fails {error.validator} {_quote(expected)}"
    return f"invalid argument {name!r}{where}: {why}"


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` refusing unknown arguments, and with ``anyOf: [T, null]`` kept as the SDK
    derives it (JSON Schema already refuses what pydantic would coerce)."""
    return {**schema, "additionalProperties": False}


class _StrictServer(MCPServer[Any]):
    """An :class:`MCPServer` that checks a call's raw arguments against the tool's published
    input schema before the SDK's own (coercing) validation sees them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._validators: dict[str, tuple[Any, list[str]]] = {}

    def check_with(self, tool: Tool) -> None:
        """Check every call of ``tool`` against its ``parameters`` schema."""
        cls = jsonschema.validators.validator_for(tool.parameters, default=jsonschema.Draft202012Validator)
        cls.check_schema(tool.parameters)
        self._validators[tool.name] = (cls(tool.parameters), list(tool.parameters.get("properties", {})))

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> CallToolResult | InputRequiredResult:
        """Refuse with :class:`ToolError` arguments the tool's published schema refuses, then
        call it as :meth:`MCPServer.call_tool` does."""
        checked = self._validators.get(name)
        if checked is not None:
            validator, properties = checked
            errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(map(str, e.path)), e.validator))
            if errors:
                raise ToolError("; ".join(dict.fromkeys(_schema_message(e, properties) for e in errors)))
        return await super().call_tool(name, arguments, context)


def create_server(store: Store, *, read_only: bool = False, max_top_k: int = DEFAULT_MAX_TOP_K,
                  max_content_chars: int | None = DEFAULT_MAX_CONTENT_CHARS, all_corpora: bool = False,
                  embedding: EmbeddingFunction | Callable[[str], object] | None = None,
                  name: str = "tnsrag") -> MCPServer[Any]:
    """An MCP server whose tools work on ``store``'s corpus (the store stays the caller's to close).

    ``embedding`` defaults to the provider of the corpus's own space, its newest complete
    one (:func:`tnsrag_db._indexes.vector.spaces.query_embedding`, resolved at the first
    call that embeds; the default provider for a corpus without vectors), as ``tnsrag mcp``
    does. Its calls are serialised. ``max_top_k`` (default 100) caps ``search``'s ``top_k``.
    ``max_content_chars`` (characters, default 4000; None: no bound) cuts each document's
    content in a ``search`` answer, marking it ``truncated``. ``all_corpora`` (default
    False) lets ``corpora`` and the missing-corpus error name every corpus of the schema;
    without it they name only the served one, so a server for one corpus does not reveal
    the others. The server reports the installed tnsrag-db version. Constructing the server
    does no I/O; run it with :func:`serve_stdio`, ``server.run("streamable-http")``, or
    connect an in-process ``mcp.Client(server)``. Raises :class:`ValueError` for a
    ``max_top_k`` or ``max_content_chars`` below 1.
    """
    if not is_int(max_top_k) or max_top_k < 1:
        raise ValueError(f"max_top_k must be an int >= 1, got {max_top_k!r}")
    if max_content_chars is not None and (not is_int(max_content_chars) or max_content_chars < 1):
        raise ValueError(f"max_content_chars must be an int >= 1 or None, got {max_content_chars!r}")
    serial = SerialEmbedding(embedding, store=store)
    strategies = StrategyCache(store, serial)
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    tools: list[Tool] = []

    def register(annotations: ToolAnnotations, structured: bool = False,
                 description: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            tools.append(Tool.from_function(fn, annotations=annotations, description=description,
                                            structured_output=True if structured else None))
            return fn
        return add

    def require_corpus() -> None:
        """A tool error naming the corpus unless it exists (reads only: nothing is created)."""
        names = corpus_names(store)
        if store.corpus in names:
            return
        if all_corpora:
            here = f"corpora here: {', '.join(names)}" if names else "the database holds no corpus"
        else:
            others = f"{len(names)} other corpus" if len(names) == 1 else f"{len(names)} other corpora"
            here = (f"the database holds {others}, which this server does not name" if names
                    else "the database holds no corpus")
        hint = "" if read_only else "; `remember` creates it"
        raise ToolError(f"corpus {store.corpus!r} does not exist ({here}){hint}")

    @register(read, structured=True)
    @_library_errors
    def search(
        query: Annotated[str, Field(description="What to look for (non-blank).")],
        strategy: Annotated[str, Field(description="Retrieval strategy.",
                                       json_schema_extra={"enum": list(STRATEGY_NAMES)})] = "hybrid",
        top_k: Annotated[int, Field(ge=1, le=max_top_k, description="Most results to return.")] = 5,
        filters: Annotated[dict[str, str] | None, Field(
            description="Exact metadata filters, all must match: tier, entryId, source or the "
                        "entry's own keys, e.g. {\"tier\": \"SEMANTIC\"}.")] = None,
        min_score: Annotated[float, Field(description="Inclusive score threshold.")] = 0.0,
        as_of: Annotated[str | None, Field(
            description="Answer from the entries valid, recorded and not expired at this ISO-8601 instant "
                        "with a zone, e.g. 2026-01-31T12:00:00Z. Default: now.")] = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Search the shared memory; returns documents with ids, scores and metadata, best first
        (each document's content cut to a bounded length, with truncated telling whether it was)."""
        text = check_text_query(query)
        context = search_context(top_k, filters, min_score, max_top_k=max_top_k)
        if as_of is not None:
            with argument("as_of"):
                context = context.with_as_of(parse_instant(as_of))
        with argument("strategy"):
            chosen = strategies.get(strategy)
        require_corpus()
        documents = []
        for d in chosen.retrieve(text, context):
            record = document_record(d)
            cut = max_content_chars is not None and len(record["content"]) > max_content_chars
            if cut:
                record["content"] = record["content"][:max_content_chars]
            documents.append(Document(**record, truncated=cut))
        result = SearchResult(strategy=chosen.name, documents=documents)
        return _structured(result)

    @register(read)
    @_library_errors
    def stats() -> dict[str, Any]:
        """What this server's corpus holds: entries per tier, edges, vectors per embedding space."""
        require_corpus()
        return corpus_stats(store).to_dict()

    @register(read, description=(
        "Every corpus of the database schema, with its number of entries." if all_corpora else
        "This server's corpus, with its number of entries (an empty list before its first write)."))
    @_library_errors
    def corpora() -> dict[str, Any]:
        # list_corpora sizes each corpus by its share of the shared tables: the filter keeps
        # other corpora's names and counts out of the answer, not their existence out of the estimate.
        return {"corpora": [c.to_dict() for c in list_corpora(store) if all_corpora or c.name == store.corpus]}

    if not read_only:
        _write_tools(store, serial, register)

    server = _StrictServer(name, version=_package_version(), log_level="WARNING", tools=tools, instructions=(
        f"Shared retrieval memory: corpus {store.corpus!r}. `search` finds entries (strategies: "
        f"{', '.join(STRATEGY_NAMES)}); " + ("this server is read-only." if read_only else
                                             "`remember` stores one, `forget` deletes, `link` adds a graph edge.")))
    for tool in tools:
        tool.parameters = _strict(tool.parameters)
        server.check_with(tool)
    return server


def _structured(result: BaseModel) -> CallToolResult:
    """``result`` as structured content plus the same JSON as one text block.

    The text block is a second copy of every document's content, and stays on purpose: the
    Model Context Protocol (revision 2025-06-18 onwards, the ones this SDK speaks) says a tool
    returning structured content SHOULD also return it serialised in a text block, for
    clients that do not read structured content; hosts in wide use hand the model only the
    text blocks, so a summary there would leave the model blind. Dropping the structured
    half instead is not allowed: a tool with an output schema MUST return it. What bounds
    the answer is ``max_content_chars``: about twice ``top_k * max_content_chars``
    characters at most, compact JSON (no indentation, unlike the SDK's default rendering).
    """
    data = result.model_dump(mode="json")
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
                          structured_content=data)


def _write_tools(store: Store, serial: SerialEmbedding,
                 register: Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]) -> None:
    """Register ``remember``, ``forget``, ``link`` and ``consolidate`` on ``store``."""
    vectors = VectorMemoryStore(store, serial)
    temporal = TemporalIndex(store)
    hierarchy = HierarchyIndex(store)
    graph = GraphStore(store)

    # Idempotent for real: without an id, the id is derived from the call (remember_id), so
    # a retried call (which a host may send after a lost answer) updates nothing.
    @register(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                              open_world_hint=False), True)
    @_library_errors
    def remember(
        content: Annotated[str, Field(description="The text to remember.")],
        tier: Annotated[str, Field(description="Memory tier.", json_schema_extra={"enum": _TIERS})] = "SEMANTIC",
        metadata: Annotated[dict[str, str] | None, Field(
            description="String metadata, filterable by search (keys tier, entryId, source are reserved).")] = None,
        source: Annotated[str | None, Field(description="Where the memory comes from.")] = None,
        parent_id: Annotated[str | None, Field(description="Id of an existing parent entry.")] = None,
        timestamp: Annotated[str | None, Field(
            description="ISO-8601 instant with a zone, e.g. 2026-01-31T12:00:00Z (at most 5 minutes ahead).")] = None,
        id: Annotated[str | None, Field(
            description="Entry id; the same id updates the entry. Default: derived from the other arguments "
                        "(a name-based UUID), so repeating a call stores nothing new.")] = None,
        ttl_seconds: Annotated[float | None, Field(
            description="Forget the entry this many seconds from now (each remember renews it); "
                        "not with expires_at.")] = None,
        expires_at: Annotated[str | None, Field(
            description="Forget the entry from this ISO-8601 instant with a zone on; not with ttl_seconds.")] = None,
        valid_from: Annotated[str | None, Field(
            description="The entry is true from this ISO-8601 instant with a zone on (default: always).")] = None,
        valid_until: Annotated[str | None, Field(
            description="The entry is true until this ISO-8601 instant with a zone (default: still).")] = None,
    ) -> RememberResult:
        """Store one memory entry (embedded and indexed for every strategy); returns its id.
        Idempotent: the same call twice stores one entry."""
        entry_id = id if id is not None else remember_id(content, tier=tier, metadata=metadata, source=source,
                                                         parent_id=parent_id, timestamp=timestamp)
        if isinstance(content, str) and not content.strip():
            raise ArgumentError("content", "content must not be blank")
        with argument("timestamp"):
            when = None if timestamp is None else parse_instant(timestamp)
        with argument("expires_at"):
            until = None if expires_at is None else parse_instant(expires_at)
        bounds = {}
        for name, value in (("valid_from", valid_from), ("valid_until", valid_until)):
            with argument(name):
                bounds[name] = None if value is None else parse_instant(value)
        entry = _entry(id=entry_id, content=content, tier=tier, source=source, parent_id=parent_id,
                       timestamp=when, metadata=metadata or {}, expires_at=until, ttl=ttl_seconds, **bounds)
        with argument("timestamp"):
            temporal.check_timestamps([entry])

        def parent_checked(conn: Connection) -> None:
            # The hierarchy index's own check, in the write's transaction: the parent exists
            # and the new parent does not close a loop through this entry.
            if entry.parent_id is not None:
                with argument("parent_id"):
                    hierarchy.check_written(conn, [entry.id])

        counts = vectors.add_all([entry], check=parent_checked)
        return RememberResult(id=entry_id, status=_status(counts.inserted, counts.updated))

    @register(ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                              open_world_hint=False), True)
    @_library_errors
    def forget(
        id: Annotated[str | None, Field(description="Id of the entry to delete.")] = None,
        filters: Annotated[dict[str, str] | None, Field(
            description="Delete every entry matching these exact metadata filters instead.")] = None,
    ) -> ForgetResult:
        """Delete one entry by id, or every entry matching exact filters (exactly one of the two)."""
        if (id is None) == (filters is None):
            raise ArgumentError("id", "give exactly one of 'id' and 'filters'")
        if id is not None:
            return ForgetResult(deleted=int(store.delete(id)))
        assert filters is not None
        with argument("filters"):
            return ForgetResult(deleted=store.delete_where(filters))

    @register(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                              open_world_hint=False), True)
    @_library_errors
    def link(
        src: Annotated[str, Field(description="Id of the entry the edge starts at.")],
        dst: Annotated[str, Field(description="Id of the entry the edge points to.")],
        relation: Annotated[str, Field(description="Edge type.")] = DEFAULT_RELATION,
        weight: Annotated[float, Field(description="Finite edge weight; heavier edges are walked first.")] = 1.0,
        source: Annotated[str | None, Field(description="Where the edge comes from.")] = None,
        valid_from: Annotated[str | None, Field(
            description="The edge holds from this ISO-8601 instant with a zone on (default: always).")] = None,
        valid_until: Annotated[str | None, Field(
            description="The edge holds until this ISO-8601 instant with a zone (default: still).")] = None,
    ) -> LinkResult:
        """Add (or update) a directed graph edge src -> dst between two existing entries; its
        weight, source and validity are replaced. Searches follow it only while it is valid."""
        with argument("valid_from"):
            start = None if valid_from is None else parse_instant(valid_from)
        with argument("valid_until"):
            end = None if valid_until is None else parse_instant(valid_until)
            Edge("a", "b", valid_from=start, valid_until=end)  # the interval alone (a probe edge)
        counts = graph.add_edge(src, dst, relation, weight, source, valid_from=start, valid_until=end)
        return LinkResult(src=src, dst=dst, relation=relation, status=_status(counts.inserted, counts.updated))


    @register(ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                              open_world_hint=False), True)
    @_library_errors
    def consolidate(
        tier: Annotated[str, Field(description="The tier whose duplicates are found.",
                                   json_schema_extra={"enum": _TIERS})],
        threshold: Annotated[float | None, Field(
            description="Also pair entries whose vectors have at least this cosine similarity (0 < t <= 1); "
                        "without it, only entries with the same text.")] = None,
        mode: Annotated[str, Field(description="merge: keep the first written of each group, the others' ids then "
                                               "read as it; link: an edge between the entries of each pair.",
                                   json_schema_extra={"enum": ["merge", "link"]})] = "merge",
        dry_run: Annotated[bool, Field(description="Only list the groups.")] = False,
    ) -> ConsolidateResult:
        """Merge (or link) duplicate memories within one tier. Idempotent: a second call finds nothing new."""
        with argument("threshold"):
            check_threshold(threshold)
        report = store.consolidate(tier, threshold=threshold, mode=mode, dry_run=dry_run,
                                   vectors=vectors if threshold is not None else None)
        groups = [DuplicateGroup(survivor=g.survivor, others=list(g.others), similarity=g.similarity)
                  for g in report.groups[:MAX_GROUPS_LISTED]]
        return ConsolidateResult(pairs=report.pairs, merged=report.merged, linked=report.linked, dry_run=dry_run,
                                 groups=groups, more_groups=max(0, len(report.groups) - MAX_GROUPS_LISTED))


def _entry(**fields: Any) -> MemoryEntry:
    """The entry of a ``remember`` call; a bad field is a tool error naming its argument.

    Each field is checked on its own first (a probe entry with only that field from the
    call), so the error names the argument at fault, with the library's message."""
    with argument("id"):
        MemoryEntry(fields["id"], "")
    probe: dict[str, Any] = {"id": fields["id"], "content": ""}
    for name in ("content", "tier", "source", "metadata", "parent_id", "expires_at", "ttl", "valid_from",
                 "valid_until"):
        with argument("ttl_seconds" if name == "ttl" else name):
            MemoryEntry(**{**probe, name: fields[name]})
    if fields["expires_at"] is not None and fields["ttl"] is not None:
        raise ArgumentError("ttl_seconds", "give ttl_seconds or expires_at, not both")
    with argument("valid_until"):
        MemoryEntry(**{**probe, "valid_from": fields["valid_from"], "valid_until": fields["valid_until"]})
    with argument("metadata"):
        return MemoryEntry(**fields)


# --- stdio -------------------------------------------------------------------------------
#
# The SDK's stdio transport hands a line it cannot parse to the session as an exception,
# which logs and drops it: the client never hears back and waits for ever. JSON-RPC 2.0 asks
# for an error response with id null (-32700 for text that is not JSON, -32600 for JSON that
# is no valid message). serve_stdio puts a line filter between the wire and the SDK through
# the one door its transport documents: it reads sys.stdin's and writes sys.stdout's binary
# buffers. The filter answers bad lines itself and passes the others on unchanged; both it
# and the SDK write through one writer that emits whole lines under a lock, so an error
# response never lands inside a long answer.


class _WireWriter(io.BufferedIOBase):
    """The wire's write side: bytes are emitted to ``fd`` in whole lines, one writer at a time."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._pending = bytearray()
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        with self._lock:
            self._pending += chunk
            end = self._pending.rfind(b"\n") + 1
            if end:
                self._emit(bytes(self._pending[:end]))
                del self._pending[:end]
        return len(chunk)

    def line(self, message: dict[str, Any]) -> None:
        """Write ``message`` as one JSON line (between two of the SDK's, never inside one)."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with self._lock:
            self._emit(data)

    def _emit(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]


def _rejection(line: bytes) -> dict[str, Any] | None:
    """The JSON-RPC error answering ``line``, or None when it is a message the SDK can take."""
    def error(code: int, message: str, id_: object = None) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}

    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return error(-32700, f"Parse error: the line is not UTF-8 ({exc.reason} at byte {exc.start})")
    try:
        value = pydantic_core.from_json(line)  # the SDK's parser: it refuses lone surrogates too
    except ValueError as exc:
        return error(-32700, f"Parse error: {exc}")
    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except pydantic.ValidationError as exc:
        # The request's id only when the line is a request (a broken *response* carries an id
        # of the server's, which the client must not read as the answer to one of its own).
        id_ = value.get("id") if isinstance(value, dict) and "method" in value else None
        if isinstance(id_, bool) or not isinstance(id_, str | int):
            id_ = None
        first = exc.errors()[0]
        return error(-32600, f"Invalid Request: {first['msg']} at {'.'.join(map(str, first['loc'])) or 'top'}", id_)
    return None


class _WireReader(io.BufferedIOBase):
    """The wire's read side as the SDK sees it: only lines that are JSON-RPC messages; each
    other line is answered through ``writer`` and skipped, blank lines skipped silently."""

    def __init__(self, source: io.BufferedReader, writer: _WireWriter) -> None:
        super().__init__()
        self._source = source
        self._writer = writer
        self._line = b""

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        while not self._line:
            line = self._source.readline()
            if not line:
                return False
            if not line.strip():
                continue
            rejection = _rejection(line)
            if rejection is None:
                self._line = line
            else:
                self._writer.line(rejection)
        return True

    def read1(self, size: int = -1) -> bytes:
        if not self._fill():
            return b""
        n = len(self._line) if size is None or size < 0 else size
        out, self._line = self._line[:n], self._line[n:]
        return out

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size >= 0:
            return self.read1(size)
        parts = []
        while chunk := self.read1():
            parts.append(chunk)
        return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read1(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class _DivertedStdout(io.TextIOBase):
    """``sys.stdout`` while serving: its binary ``buffer`` is the wire (what the SDK writes),
    its text goes to stderr (a stray ``print`` must not corrupt the protocol)."""

    def __init__(self, wire: _WireWriter, text: TextIO) -> None:
        super().__init__()
        self._wire = wire
        self._text = text

    @property
    def buffer(self) -> _WireWriter:
        return self._wire

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        return self._text.write(s)

    def flush(self) -> None:
        self._text.flush()


@contextmanager
def _filtered_stdio() -> Iterator[None]:
    """While open, ``sys.stdin``/``sys.stdout`` are the filtered wire, and file descriptors
    0 and 1 point at the null device and stderr (as the SDK's transport arranges for itself
    when it owns them: a child process or C library writing to fd 1 misses the wire)."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved = sys.stdin, sys.stdout
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        writer = _WireWriter(wire_out)
        reader = _WireReader(os.fdopen(wire_in, "rb", closefd=False), writer)
        sys.stdin = io.TextIOWrapper(reader, encoding="utf-8")
        sys.stdout = cast(TextIO, _DivertedStdout(writer, sys.stderr))
        yield
    finally:
        sys.stdin, sys.stdout = saved
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        for fd in (devnull, wire_in, wire_out):
            os.close(fd)


def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve ``server`` on this process's stdin and stdout until stdin ends.

    What ``server.run("stdio")`` does, and a line that is not a JSON-RPC message (not
    UTF-8, not JSON, a lone surrogate escape, JSON of another shape) gets a JSON-RPC error
    response with id null (code -32700 parse error, -32600 invalid request) instead of
    silence; blank lines are skipped.
    """
    with _filtered_stdio():
        server.run("stdio")
