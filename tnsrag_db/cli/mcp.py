"""``tnsrag mcp``: serve one corpus to agents over the Model Context Protocol."""

from __future__ import annotations

import click

from tnsrag_db._plugins import is_missing
from tnsrag_db.cli._common import db_options, handle_errors
from tnsrag_db.store.store import connect

__all__ = ["mcp"]


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
@click.option("--embedding", default=None, metavar="NAME",
              help="Embedding provider for searches and writes. Default: the provider of the corpus's "
                   "newest complete space (a new corpus: the shipped model when installed, else hash).")
@handle_errors
def mcp(url: str | None, schema: str, corpus: str, read_only: bool, transport: str, host: str, port: int,
        max_top_k: int, embedding: str | None) -> None:
    """Run an MCP server whose tools search and write one corpus.

    Tools: search, stats, corpora, and unless --read-only remember, forget and link.
    Needs the optional dependency: pip install 'tnsrag-db[mcp]'.

    Example: tnsrag mcp --corpus team-memory --read-only --transport http --port 8765
    """
    try:
        from tnsrag_db.integrations.mcp import create_server
    except ImportError as exc:
        if not is_missing(exc, ("mcp",)):  # a broken import inside the integration is a bug: show it
            raise
        raise click.ClickException(f"the MCP server needs the [mcp] extra (pip install 'tnsrag-db[mcp]'): {exc}") \
            from None
    with connect(url, corpus=corpus, schema=schema, auto_migrate=None if url is None else False) as store:
        from tnsrag_db.indexes.spaces import query_embedding

        # The provider that filled the space searches use, so that queries and the
        # vectors of remembered entries live in the same space.
        server = create_server(store, read_only=read_only, max_top_k=max_top_k,
                               embedding=query_embedding(store, embedding))
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)
