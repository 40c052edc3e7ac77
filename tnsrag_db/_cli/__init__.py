"""The ``tnsrag`` command line: a thin click group over the library.

Database: ``--url`` / ``TNSRAG_DATABASE_URL``, else the embedded server (see
``tnsrag server``). Every command has an "Example:" in its help and ``--json`` where
scripts read its output.

Commands load lazily: :data:`COMMANDS` maps each name to the ``module:attribute`` of its
click command and the one-line help ``tnsrag --help`` shows, and a command's module is
imported only when that command runs (or its own ``--help`` is asked for). So
``tnsrag --version`` and ``tnsrag --help`` import click and nothing of the library's
database stack. Adding a command is one entry here.
"""

from __future__ import annotations

import click

from tnsrag_db._cli._group import LazyGroup

__all__ = ["COMMANDS", "main", "main_group"]

#: Command name -> ("module:attribute" of the click command, short help for ``tnsrag --help``).
COMMANDS: dict[str, tuple[str, str]] = {
    "corpora": ("tnsrag_db._cli.corpora:corpora", "List the corpora of the schema with their sizes."),
    "db": ("tnsrag_db._cli.db:db", "Manage the library's schema with its alembic migrations."),
    "delete": ("tnsrag_db._cli.corpora:delete", "Delete entries by id or by metadata filter."),
    "drop": ("tnsrag_db._cli.corpora:drop", "Drop a whole corpus (asks first unless --yes)."),
    "embed": ("tnsrag_db._cli.embed:embed", "Re-embed a corpus into a new embedding space."),
    "eval": ("tnsrag_db._cli.eval:eval_command", "Evaluate strategies on judged queries (nDCG, recall, MRR)."),
    "export": ("tnsrag_db._cli.corpora:export", "Write every entry of a corpus, with its edges, as JSONL."),
    "graph": ("tnsrag_db._cli.graph:graph", "Typed, weighted, directed edges between entries."),
    "ingest": ("tnsrag_db._cli.ingest:ingest", "Ingest a document tree (or files, or globs) into a corpus."),
    "mcp": ("tnsrag_db._cli.mcp:mcp", "Run an MCP server whose tools search and write one corpus."),
    "query": ("tnsrag_db._cli.retrieve:query", "Retrieve the best entries for TEXT with one of the strategies."),
    "server": ("tnsrag_db._cli.server:server", "Start, stop or inspect the embedded PostgreSQL server."),
    "stats": ("tnsrag_db._cli.corpora:stats", "What a corpus holds: tiers, sources, spaces, BM25, edges."),
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tnsrag-db")
@click.option("--server-idle-timeout", type=click.FloatRange(min=0), default=900.0, show_default=True,
              envvar="TNSRAG_SERVER_IDLE_TIMEOUT", metavar="SECONDS",
              help="When a command starts the embedded server: stop it after this long idle (0: never).")
@click.pass_context
def main_group(ctx: click.Context, server_idle_timeout: float) -> None:
    """tnsrag: a persistent PostgreSQL retrieval store for RAG and agent memory.

    With no --url (or TNSRAG_DATABASE_URL) commands use the embedded PostgreSQL server,
    started on first use and left running until it has been idle for a while
    (tnsrag server status|stop).

    Example: tnsrag ingest docs/ && tnsrag query "agent memory" --strategy hybrid
    """
    from tnsrag_db._store.embedded.resolve import keep_running

    keep_running(server_idle_timeout)
    ctx.call_on_close(lambda: keep_running(None))  # in-process callers (tests) get the default back


def main() -> None:
    """Entry point of the ``tnsrag`` console script."""
    main_group(prog_name="tnsrag")
