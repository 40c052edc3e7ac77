"""The ``tnsrag`` command line: a thin click group over the library.

Database: ``--url`` / ``TNSRAG_DATABASE_URL``, else the embedded server. Every
command has an "Example:" in its help and ``--json`` where scripts read its output.
"""

from __future__ import annotations

import click

from tnsrag_db.cli._common import main_group
from tnsrag_db.cli.db import db
from tnsrag_db.cli.embed import embed
from tnsrag_db.cli.eval import eval_command
from tnsrag_db.cli.ingest import ingest
from tnsrag_db.cli.mcp import mcp
from tnsrag_db.cli.retrieve import query

__all__ = ["main"]

main_group.add_command(db)
main_group.add_command(embed)
main_group.add_command(ingest)
main_group.add_command(mcp)
main_group.add_command(query)
main_group.add_command(eval_command)
try:
    from tnsrag_db.cli.graph import graph

    main_group.add_command(graph)
except ImportError:  # pragma: no cover - graph commands not installed
    pass


def main() -> None:
    """Entry point of the ``tnsrag`` console script."""
    main_group(prog_name="tnsrag")


_ = click
