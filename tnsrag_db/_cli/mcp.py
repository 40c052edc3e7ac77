"""``tnsrag mcp``: serve one corpus to agents over the Model Context Protocol."""

from __future__ import annotations

import os
from pathlib import Path

import click

from tnsrag_db._cli._common import db_options, handle_errors
from tnsrag_db._cli._schema import open_existing
from tnsrag_db._db.pool import Connection
from tnsrag_db._db.settings import conninfo_of, url_of
from tnsrag_db._db.statement import run_plan
from tnsrag_db._errors import ConfigurationError, SchemaNotReadyError
from tnsrag_db._indexes.vector.spaces import bind_embedding, ensure_space_plan, query_embedding
from tnsrag_db._indexes.vector.write import on_connection
from tnsrag_db._plugins import is_missing, reraise_interrupt
from tnsrag_db._store.embedded.server import default_data_dir
from tnsrag_db._store.store import Store, connect
from tnsrag_db.embeddings import ValidatingEmbedding, resolve_embedding

__all__ = ["database_line", "mcp"]

#: The third-party modules the integration imports that only the ``[mcp]`` extra installs.
_EXTRA_MODULES = ("mcp", "jsonschema")


def database_line(url: str | None, schema: str, corpus: str, read_only: bool) -> str:
    """The server's first stderr line: which database, schema and corpus it serves.

    ``url`` is shown without its password; with none, the embedded server's data
    directory. A host that spawns the server with a bare environment (the official stdio
    client passes only HOME, PATH and a few more) sees here which cluster it got.
    """
    if url is None:
        where = f"the embedded server at {default_data_dir()}"
    else:
        # Built anew without any password (libpq takes one in the query too).
        where = url_of(conninfo_of(url), password=None)
    mode = "read-only" if read_only else "read-write"
    return f"tnsrag mcp: corpus {corpus!r} ({mode}), schema {schema!r}, database {where}"


def _missing_cluster_error(data_dir: Path) -> SchemaNotReadyError:
    """The error of a read-only server whose embedded data directory holds no cluster:
    where it looked and how to point it at the right database."""
    xdg = os.environ.get("XDG_DATA_HOME")
    origin = f"XDG_DATA_HOME={xdg}" if xdg else f"HOME={os.environ.get('HOME', '')}, XDG_DATA_HOME unset"
    return SchemaNotReadyError(
        f"no embedded database at {data_dir} ({origin}), and --read-only creates none: pass --url URL "
        "(or TNSRAG_DATABASE_URL) for a PostgreSQL server, or XDG_DATA_HOME=DIR for the embedded one in "
        "DIR/tnsrag_db/pg18; an MCP host passes only HOME, PATH and a few more to a server it starts, so put "
        "them in the host's server config (args or env; see docs/integrations.md, 'MCP server (many agents, one corpus)')")


def _open(url: str | None, schema: str, corpus: str, read_only: bool) -> Store:
    """The store the server works on. A writable server on the embedded server creates its
    cluster and schema when missing; a read-only one creates neither (nor a schema on a
    URL's server): it fails saying where it looked. An existing embedded schema of an
    older revision is brought to head, as every command does."""
    if not read_only:
        return connect(url, corpus=corpus, schema=schema, auto_migrate=None if url is None else False)
    if url is None:
        data_dir = default_data_dir()
        if not (data_dir / "PG_VERSION").is_file():  # checked before anything could initialise one there
            raise _missing_cluster_error(data_dir)
    return open_existing(url, schema, corpus, create_default=False)


def _provider(store: Store, embedding: str | None, read_only: bool) -> ValidatingEmbedding:
    """The provider the server embeds with, bound to its space.

    A writable server creates its corpus and the provider's embedding space (it is going to
    write there): searches of a new memory then answer an empty list, and a later server
    without ``--embedding`` picks the same provider. A named provider on a corpus without
    entries needs no ``tnsrag embed`` (there is nothing to embed), so it is taken as is.
    """
    if embedding is None or store.count() > 0:
        provider = query_embedding(store, embedding)
    else:
        provider = bind_embedding(store, resolve_embedding(embedding))
    if not read_only:
        dimension = provider.dimension
        assert dimension is not None  # bound: its dimension is known

        def create(conn: Connection) -> None:
            store.writer.corpus.text_config(conn)  # creates the corpus row (under the corpus's write lock)
            run_plan(ensure_space_plan(store, provider.name, dimension), on_connection(conn))

        store.writer.transaction(create)
    return provider


@click.command()
@db_options
@click.option("--corpus", default="default", show_default=True, help="Corpus the tools work on.")
@click.option("--read-only", is_flag=True, help="Register only search, stats and corpora (no write tool).")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio for a client that spawns the server; http for Streamable HTTP at /mcp.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the http transport listens on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535),
              help="Port of the http transport.")
@click.option("--max-top-k", default=100, show_default=True, type=click.IntRange(min=1),
              help="Largest top_k a search may ask for.")
@click.option("--max-content-chars", default=4000, show_default=True, type=click.IntRange(min=0),
              help="Characters of each document's content a search answer carries (longer ones are cut and "
                   "marked truncated); 0: no bound.")
@click.option("--all-corpora", is_flag=True,
              help="Let the corpora tool (and the missing-corpus error) name every corpus of the schema; "
                   "default: only the served one.")
@click.option("--embedding", default=None, metavar="NAME|DIR",
              help="Embedding provider for searches and writes. Default: the provider of the corpus's "
                   "newest complete space (a new corpus: the shipped model when installed, else hash).")
@handle_errors
def mcp(url: str | None, schema: str, corpus: str, read_only: bool, transport: str, host: str, port: int,
        max_top_k: int, max_content_chars: int, all_corpora: bool, embedding: str | None) -> None:
    """Run an MCP server whose tools search and write one corpus.

    Tools: search, stats, corpora, and unless --read-only remember, forget, link and consolidate.
    A writable server creates its corpus and embedding space at start (and, without
    --url, the embedded server's cluster and schema); a read-only one creates nothing and
    fails naming where it looked when the database is not there. The first line on
    stderr names the database and corpus served. Needs the optional dependency:
    pip install 'tnsrag-db[mcp]'.

    Example: tnsrag mcp --corpus team-memory --read-only --transport http --port 8765
    """
    try:
        from tnsrag_db.integrations.mcp import create_server, serve_stdio  # the [mcp] extra, only when it serves
    except ImportError as exc:
        reraise_interrupt(exc)
        if not is_missing(exc, _EXTRA_MODULES):  # a broken import inside the integration is a bug: show it
            raise
        raise ConfigurationError(f"tnsrag mcp needs the [mcp] extra, and module {exc.name!r} is not installed: "
                                 "pip install 'tnsrag-db[mcp]'") from None
    click.echo(database_line(url, schema, corpus, read_only), err=True)
    with _open(url, schema, corpus, read_only) as store:
        # The provider that filled the space searches use, so that queries and the
        # vectors of remembered entries live in the same space.
        server = create_server(store, read_only=read_only, max_top_k=max_top_k,
                               max_content_chars=max_content_chars or None, all_corpora=all_corpora,
                               embedding=_provider(store, embedding, read_only))
        if transport == "stdio":
            serve_stdio(server)
        else:
            server.run("streamable-http", host=host, port=port)
