"""``tnsrag ingest`` and ``tnsrag query`` (filled in with the retrieval strategies)."""

from __future__ import annotations

import click

__all__ = ["ingest", "query"]


@click.command()
def ingest() -> None:
    """Ingest files into a corpus.

    Example: tnsrag ingest docs/
    """


@click.command()
def query() -> None:
    """Query a corpus.

    Example: tnsrag query "agent memory"
    """
