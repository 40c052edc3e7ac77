"""``tnsrag db``: the schema's migrations, its upkeep and its tenants.

Its commands load lazily, as the root's do (:data:`DB_COMMANDS`): the migration commands
(:mod:`~tnsrag_db._cli.db_migrate`) import alembic, which the upkeep
(:mod:`~tnsrag_db._cli.db_upkeep`, e.g. ``tnsrag db sweep``) and the tenant grants
(:mod:`~tnsrag_db._cli.db_tenant`) do not need.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from tnsrag_db._cli._group import LazyGroup
from tnsrag_db._db.pool import OneConnection
from tnsrag_db._store.embedded.resolve import embedded_url

__all__ = ["DB_COMMANDS", "database", "db"]

#: Command name -> ("module:attribute" of the click command, short help for ``tnsrag db --help``).
DB_COMMANDS: dict[str, tuple[str, str]] = {
    "build-indexes": ("tnsrag_db._cli.db_upkeep:build_indexes",
                      "Build the HNSW indexes that are due, in every corpus (as the schema's owner)."),
    "check": ("tnsrag_db._cli.db_migrate:check",
              "Check for drift between the library's table declarations and the database."),
    "consolidate": ("tnsrag_db._cli.db_upkeep:consolidate", "Merge or link the duplicates within one tier of a corpus."),
    "current": ("tnsrag_db._cli.db_migrate:current", "Print the revision the schema is at and this release's head."),
    "distribute": ("tnsrag_db._cli.db_upkeep:distribute",
                   "Distribute the migrated tables by corpus on a Citus coordinator."),
    "downgrade": ("tnsrag_db._cli.db_migrate:downgrade",
                  "Migrate the schema down (default: to base, dropping the library's tables and data)."),
    "merge-postings": ("tnsrag_db._cli.db_upkeep:merge_postings",
                       "Merge the BM25 postings of every corpus (or --corpus) from rows into blocks."),
    "partition-sql": ("tnsrag_db._cli.db_upkeep:partition_sql",
                      "Print the script that hash-partitions the big tables by corpus."),
    "promote": ("tnsrag_db._cli.db_upkeep:promote",
                "Move the entries of one tier that meet a rule (metadata filters, age) to another tier."),
    "sql": ("tnsrag_db._cli.db_migrate:sql", "Print the SQL of a migration without connecting (for review or a DBA)."),
    "sweep": ("tnsrag_db._cli.db_upkeep:sweep", "Delete the expired entries of every corpus (or --corpus)."),
    "tenant": ("tnsrag_db._cli.db_tenant:tenant", "Grant database roles their corpora for tenant isolation."),
    "upgrade": ("tnsrag_db._cli.db_migrate:upgrade",
                "Migrate the schema up (safe to run from several processes at once)."),
}


@contextmanager
def database(url: str | None, schema: str) -> Iterator[OneConnection]:
    """One connection to ``url`` (or the embedded server), closed afterwards."""
    db = OneConnection(url if url else embedded_url(), schema=schema)
    try:
        yield db
    finally:
        db.close()


@click.group(cls=LazyGroup, lazy_commands=DB_COMMANDS)
def db() -> None:
    """Manage the library's schema with its alembic migrations.

    Example: tnsrag db upgrade --url postgresql://app@db.internal/app
    """
