"""The ``tnsrag`` command line: a thin click group over the library.

Database: ``--url`` / ``TNSRAG_DATABASE_URL``, else the embedded server. Every
command has an "Example:" in its help and ``--json`` where scripts read its output.
"""

from __future__ import annotations

import click

from tnsrag_db.cli._common import main_group
from tnsrag_db.cli.corpora import corpora, delete, drop, export, stats
from tnsrag_db.cli.db import db
from tnsrag_db.cli.retrieve import ingest, query

__all__ = ["main"]

main_group.add_command(db)
main_group.add_command(ingest)
main_group.add_command(query)
for _command in (corpora, stats, delete, drop, export):
    main_group.add_command(_command)
try:
    from tnsrag_db.cli.graph import graph

    main_group.add_command(graph)
except ImportError:  # pragma: no cover - graph commands not installed
    pass


def main() -> None:
    """Entry point of the ``tnsrag`` console script."""
    main_group(prog_name="tnsrag")


_ = click
