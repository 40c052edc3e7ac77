"""An MCP server over one corpus: agents search, remember, forget and link through tools.

Built on the official ``mcp`` SDK's :class:`~mcp.server.mcpserver.MCPServer` (install the
``[mcp]`` extra). That high-level server rather than the low-level ``Server``: the
tools' JSON schemas come from the typed signatures below (one declaration, no
hand-written schema to drift), pydantic validates every call against them, and
synchronous tools run in worker threads, so the blocking library calls never stall
the event loop that serves other requests.

Tools (``read_only=True`` registers only the first three):

* ``search(query, strategy="hybrid", top_k=5, filters=None, min_score=0.0)``
* ``stats()`` and ``corpora()``
* ``remember(content, tier="SEMANTIC", metadata=None, source=None, parent_id=None,
  timestamp=None, id=None)``: an upsert keyed by ``id``; without one, a new random UUID
  (so every call without an id is a new entry; pass an id to make retries idempotent)
* ``forget(id=None, filters=None)``: exactly one of them
* ``link(src, dst, relation="related", weight=1.0, source=None)``

Bad input never ends the server: a wrong type fails the SDK's schema check, a bad value
the library's own check, and either comes back as a tool error (``isError``) whose
text names the argument, with the library's message.
"""

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, cast

import sqlalchemy as sa
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field
from sqlalchemy.engine import Connection

from tnsrag_db._validate import is_int
from tnsrag_db.admin import corpus_stats, list_corpora
from tnsrag_db.embeddings import EmbeddingFunction
from tnsrag_db.errors import TnsragError
from tnsrag_db.indexes.graph import DEFAULT_RELATION, GraphStore
from tnsrag_db.indexes.temporal import TemporalIndex
from tnsrag_db.indexes.vector import VectorMemoryStore
from tnsrag_db.integrations._core import (
    ArgumentError,
    SerialEmbedding,
    StrategyCache,
    argument,
    check_text_query,
    document_record,
    new_entry_id,
    search_context,
)
from tnsrag_db.store.store import Store
from tnsrag_db.strategies.registry import STRATEGY_NAMES
from tnsrag_db.types import MemoryEntry, MemoryTier, parse_instant

__all__ = ["DEFAULT_MAX_TOP_K", "READ_TOOLS", "WRITE_TOOLS", "create_server"]

#: The largest ``top_k`` a ``search`` call may ask for unless the server is built with another cap.
DEFAULT_MAX_TOP_K = 100
#: Tools a read-only server registers.
READ_TOOLS = ("search", "stats", "corpora")
#: Tools only a writable server registers.
WRITE_TOOLS = ("remember", "forget", "link")

_F = TypeVar("_F", bound=Callable[..., Any])
_TIERS = [t.name for t in MemoryTier]
_Status = Literal["inserted", "updated", "unchanged"]


class Document(BaseModel):
    """One search result."""

    id: str | None = Field(description="The entry id.")
    content: str
    score: float = Field(description="The strategy's score (cosine, BM25, RRF sum, ...); higher is better.")
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


def create_server(store: Store, *, read_only: bool = False, max_top_k: int = DEFAULT_MAX_TOP_K,
                  embedding: EmbeddingFunction | Callable[[str], object] | None = None,
                  name: str = "tnsrag") -> MCPServer:
    """An MCP server whose tools work on ``store``'s corpus (the store stays the caller's to close).

    ``embedding`` defaults to the process provider (an installed entry point, else the
    128-dimensional hash fallback); ``tnsrag mcp`` passes the provider of the corpus's
    query space (:func:`tnsrag_db.indexes.spaces.query_embedding`). Its calls are
    serialised. ``max_top_k`` (default 100) caps ``search``'s ``top_k``. Constructing the
    server does no I/O; run it with ``server.run("stdio")`` or connect an in-process
    ``mcp.Client(server)``. Raises :class:`ValueError` for a ``max_top_k`` below 1.
    """
    if not is_int(max_top_k) or max_top_k < 1:
        raise ValueError(f"max_top_k must be an int >= 1, got {max_top_k!r}")
    serial = SerialEmbedding(embedding)
    strategies = StrategyCache(store, serial)
    server = MCPServer(name, log_level="WARNING", instructions=(
        f"Shared retrieval memory: corpus {store.corpus!r}. `search` finds entries (strategies: "
        f"{', '.join(STRATEGY_NAMES)}); " + ("this server is read-only." if read_only else
                                             "`remember` stores one, `forget` deletes, `link` adds a graph edge.")))
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=read, structured_output=True)
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
    ) -> SearchResult:
        """Search the shared memory; returns documents with ids, scores and metadata, best first."""
        text = check_text_query(query)
        context = search_context(top_k, filters, min_score, max_top_k=max_top_k)
        with argument("strategy"):
            chosen = strategies.get(strategy)
        documents = chosen.retrieve(text, context)
        return SearchResult(strategy=chosen.name,
                            documents=[Document(**document_record(d)) for d in documents])

    @server.tool(annotations=read)
    @_library_errors
    def stats() -> dict[str, Any]:
        """What this server's corpus holds: entries per tier, edges, vectors per embedding space."""
        return corpus_stats(store).to_dict()

    @server.tool(annotations=read)
    @_library_errors
    def corpora() -> dict[str, Any]:
        """Every corpus of the database schema, with its number of entries."""
        return {"corpora": [c.to_dict() for c in list_corpora(store)]}

    if read_only:
        return server

    vectors = VectorMemoryStore(store, serial)
    temporal = TemporalIndex(store)
    graph = GraphStore(store)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False), structured_output=True)
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
            description="Entry id; the same id updates the entry. Default: a new random UUID.")] = None,
    ) -> RememberResult:
        """Store one memory entry (embedded and indexed for every strategy); returns its id."""
        entry_id = new_entry_id() if id is None else id
        if isinstance(content, str) and not content.strip():
            raise ArgumentError("content", "content must not be blank")
        with argument("timestamp"):
            when = None if timestamp is None else parse_instant(timestamp)
        entry = _entry(id=entry_id, content=content, tier=tier, source=source, parent_id=parent_id,
                       timestamp=when, metadata=metadata or {})
        with argument("timestamp"):
            temporal.check_timestamps([entry])

        def parent_exists(conn: Connection) -> None:
            if entry.parent_id is not None and conn.execute(sa.text(
                    "SELECT 1 FROM entries WHERE corpus = :c AND id = :p"),
                    {"c": store.corpus, "p": entry.parent_id}).first() is None:
                raise ArgumentError("parent_id", f"parent_id {entry.parent_id!r} is not an entry of corpus "
                                                 f"{store.corpus!r}")

        counts = vectors.add_all([entry], check=parent_exists)
        return RememberResult(id=entry_id, status=_status(counts.inserted, counts.updated))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False), structured_output=True)
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

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False), structured_output=True)
    @_library_errors
    def link(
        src: Annotated[str, Field(description="Id of the entry the edge starts at.")],
        dst: Annotated[str, Field(description="Id of the entry the edge points to.")],
        relation: Annotated[str, Field(description="Edge type.")] = DEFAULT_RELATION,
        weight: Annotated[float, Field(description="Finite edge weight; heavier edges are walked first.")] = 1.0,
        source: Annotated[str | None, Field(description="Where the edge comes from.")] = None,
    ) -> LinkResult:
        """Add (or update) a directed graph edge src -> dst between two existing entries."""
        counts = graph.add_edge(src, dst, relation, weight, source)
        return LinkResult(src=src, dst=dst, relation=relation, status=_status(counts.inserted, counts.updated))

    return server


def _entry(**fields: Any) -> MemoryEntry:
    """The entry of a ``remember`` call; a bad field is a tool error naming its argument.

    Each field is checked on its own first (a probe entry with only that field from the
    call), so the error names the argument at fault, with the library's message."""
    with argument("id"):
        MemoryEntry(fields["id"], "")
    probe: dict[str, Any] = {"id": fields["id"], "content": ""}
    for name in ("content", "tier", "source", "metadata", "parent_id"):
        with argument(name):
            MemoryEntry(**{**probe, name: fields[name]})
    with argument("metadata"):
        return MemoryEntry(**fields)
