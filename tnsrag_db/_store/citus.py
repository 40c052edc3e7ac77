"""The script an operator runs on a Citus coordinator to distribute the tables by corpus.

Every table the library shares between corpora is keyed by ``corpus`` first, and every
statement the library sends pins each shared table to one corpus (a test checks the
whole suite's statements), so with the tables hash-distributed on ``corpus`` and
co-located, each store operation routes to the one shard group that holds its corpus.

The script is derived from the table declarations (``schema.metadata``), in foreign-key
order, and relies on these Citus rules (Citus documentation, "Creating and Modifying
Distributed Tables (DDL)" and "Citus Utility Functions"):

* ``create_distributed_table(table, column, colocate_with => other)`` hash-distributes a
  table; tables co-located with each other keep rows of one distribution value on one
  node, which is what joins and foreign keys between them need.
* A primary key or unique constraint of a distributed table must include the
  distribution column (``citus_problems`` checks every one).
* A foreign key between distributed tables must include the distribution column on
  both sides and join co-located tables; the referenced table is distributed first.
* A table with no distribution column becomes a reference table
  (``create_reference_table``), copied to every node. The library has none today; the
  alembic version table stays a local table on the coordinator, where migrations run.
* Extensions (``vector``, ``btree_gin``) must be installed on every node.

Nothing here connects to a database: :func:`citus_script` returns text.
"""

from __future__ import annotations

from sqlalchemy import ForeignKeyConstraint, PrimaryKeyConstraint, Table, UniqueConstraint

from tnsrag_db._db.settings import validate_schema_name
from tnsrag_db._db.schema import metadata

__all__ = ["DISTRIBUTION_COLUMN", "citus_problems", "citus_script"]

#: The column every shared table is keyed and distributed by.
DISTRIBUTION_COLUMN = "corpus"


def citus_problems(tables: list[Table] | None = None) -> list[str]:
    """What in the table declarations Citus would refuse when distributing by ``corpus``.

    Checks each primary key and unique constraint includes ``corpus``, and each foreign
    key joins ``corpus`` to ``corpus``. Returns one line per problem (empty: none).
    """
    problems: list[str] = []
    for table in tables if tables is not None else list(metadata.sorted_tables):
        if DISTRIBUTION_COLUMN not in table.c:
            continue  # a reference table: no constraint rule applies
        for constraint in table.constraints:
            if isinstance(constraint, (PrimaryKeyConstraint, UniqueConstraint)):
                cols = [c.name for c in constraint.columns]
                if DISTRIBUTION_COLUMN in cols:
                    continue
                kind = "primary key" if isinstance(constraint, PrimaryKeyConstraint) else "unique constraint"
                problems.append(f"{table.name}: {kind} ({', '.join(cols)}) does not include {DISTRIBUTION_COLUMN}")
            if isinstance(constraint, ForeignKeyConstraint):
                pairs = [(e.parent.name, e.column.name) for e in constraint.elements]
                if (DISTRIBUTION_COLUMN, DISTRIBUTION_COLUMN) not in pairs:
                    problems.append(f"{table.name}: foreign key ({', '.join(p for p, _ in pairs)}) to "
                                    f"{constraint.referred_table.name} does not join {DISTRIBUTION_COLUMN}")
    return problems


def citus_script(*, schema: str = "tnsrag") -> str:
    """The SQL to run on a Citus coordinator after ``tnsrag db upgrade`` (schema ``schema``).

    Raises :class:`~tnsrag_db._errors.ConfigurationError` for an invalid schema name and
    ``RuntimeError`` if the declarations break a Citus rule (a test keeps them clean).
    """
    validate_schema_name(schema)
    problems = citus_problems()
    if problems:  # pragma: no cover - tests/unit/test_citus.py keeps the schema clean
        raise RuntimeError("the schema breaks Citus rules: " + "; ".join(problems))
    # Referenced tables first (a foreign key needs its target distributed); corpora leads
    # the co-location group, since every other table references it.
    ordered = [t for t in metadata.sorted_tables if t.name == "corpora"] + [
        t for t in metadata.sorted_tables if t.name != "corpora"]
    distributed = [t for t in ordered if DISTRIBUTION_COLUMN in t.c]
    reference = [t for t in ordered if DISTRIBUTION_COLUMN not in t.c]
    lines = [
        f"-- tnsrag_db on Citus: run on the coordinator, after `tnsrag db upgrade --schema {schema}`",
        "-- and before the first write. Needs the citus extension on the coordinator, and",
        "-- vector and btree_gin on every node. Every shared table is hash-distributed by",
        f"-- {DISTRIBUTION_COLUMN} and co-located with {distributed[0].name}, so each store operation",
        "-- (which names its corpus on every shared table) routes to one shard group.",
        "-- Run it once, as the tables' owner; each call is atomic on its own.",
        "CREATE EXTENSION IF NOT EXISTS citus;",
    ]
    lead = distributed[0].name
    for table in distributed:
        colocate = "" if table.name == lead else f", colocate_with => '{schema}.{lead}'"
        lines.append(f"SELECT create_distributed_table('{schema}.{table.name}', '{DISTRIBUTION_COLUMN}'{colocate});")
    for table in reference:
        lines.append(f"SELECT create_reference_table('{schema}.{table.name}');")
    if not reference:
        lines.append("-- No reference tables: every table has a corpus column. alembic_version stays a")
        lines.append("-- local table on the coordinator, where migrations run.")
    return "\n".join(lines) + "\n"
