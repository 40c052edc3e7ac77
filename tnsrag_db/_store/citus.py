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
* A row-level security policy of a distributed table may not hold a subquery ("Subqueries
  are not supported in policies on distributed tables"). The tenancy policies' grant
  lookup ``corpus = ANY (CAST((SELECT tnsrag_tenant_corpora()) AS text[]))`` is rewritten
  to call the STABLE function directly, ``corpus = ANY (tnsrag_tenant_corpora())``.
* A table with triggers is distributed only with ``citus.enable_unsafe_triggers`` on, and
  a trigger then runs on each shard, where it may reach co-located shards of its own node
  only. The statement triggers of ``entries`` (revision 0011) serve writers of releases
  before 0011 alone (this release's writers retire merged entries themselves), and read
  other tables by a corpus taken from their transition tables (never one shard): they are
  dropped, once the schema serves no such release (``tnsrag_schema_compat()``).
* Functions of a distributed schema (``tnsrag_tenant_corpora()``, the policies' lookup,
  ``tnsrag_schema_compat()``) are propagated to every node by Citus as dependencies when
  the tables are distributed; later ``CREATE OR REPLACE FUNCTION`` on the coordinator (the
  finish of a rolling upgrade) is propagated as well.

Modifications by ctid. The write path stages its batch in temporary tables of the
session (see :mod:`tnsrag_db._store.staging`); a statement that reads one is planned by
Citus in steps, the stage rows shipped to the corpus's worker as an intermediate result,
and Citus refuses such a statement when it changes rows named by ``ctid`` ("Recursively
planned distributed modifications with ctid on where clause are not supported"), since a
row may move between the steps. So every statement of the library that changes rows by
``ctid`` takes its ctids as one bound constant array (read from the stage by a statement
of its own) and reads no table of the session's own; a statement that changes rows read
from the stage names them by key instead (the rewrite of changed entries). Nor may an
``UPDATE`` Citus sends to a worker hold a function other than IMMUTABLE inside ``CASE`` or
``coalesce`` ("non-IMMUTABLE functions are not allowed in CASE or COALESCE statements"):
the expiry of a rewritten entry is computed from the stage, before the update. A
statement that joins the stage must join it, not reach it through a ``LATERAL`` subquery
("direct joins between distributed and local tables are not supported"). These are the
statements of one server too: there is one write path.

:func:`citus_script` returns the statements as text; :func:`distribute` runs them on a
coordinator, after checking it can.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ForeignKeyConstraint, PrimaryKeyConstraint, Table, UniqueConstraint

from tnsrag_db._db.filter_pairs import FILTER_PAIRS_TRIGGERS
from tnsrag_db._db.pool import Connections
from tnsrag_db._db.schema import metadata
from tnsrag_db._db.settings import validate_schema_name
from tnsrag_db._errors import ConfigurationError

__all__ = ["DISTRIBUTION_COLUMN", "DistributeReport", "citus_problems", "citus_script", "distribute"]

#: The policies of the tenancy revisions whose grant lookup holds a scalar subquery.
TENANCY_POLICIES = ("tenant_isolation", "tenant_filter_pairs")
#: The statement triggers of revision 0011 (for writers of releases before it).
RETIRE_TRIGGERS = ("tnsrag_bm25_retire_deleted", "tnsrag_bm25_retire_rewritten")
#: The first revision whose writers retire merged entries themselves.
SELF_RETIRING = "0011"

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


def _ordered() -> tuple[list[Table], list[Table]]:
    """The distributed tables (``corpora`` first, referenced tables before their referrers)
    and the reference tables."""
    problems = citus_problems()
    if problems:  # pragma: no cover - tests/unit/test_citus.py keeps the schema clean
        raise RuntimeError("the schema breaks Citus rules: " + "; ".join(problems))
    # Referenced tables first (a foreign key needs its target distributed); corpora leads
    # the co-location group, since every other table references it.
    ordered = [t for t in metadata.sorted_tables if t.name == "corpora"] + [
        t for t in metadata.sorted_tables if t.name != "corpora"]
    return [t for t in ordered if DISTRIBUTION_COLUMN in t.c], [t for t in ordered if DISTRIBUTION_COLUMN not in t.c]


def _policies_sql(schema: str) -> str:
    """Rewrite the tenancy policies that exist in ``schema`` without a subquery (a DO block,
    so that the script finds them when it runs)."""
    granted = f"corpus = ANY ({schema}.tnsrag_tenant_corpora())"
    names = ", ".join(f"'{p}'" for p in TENANCY_POLICIES)
    return (f"DO $tnsrag$ DECLARE r record; BEGIN "
            f"FOR r IN SELECT tablename, policyname FROM pg_policies "
            f"WHERE schemaname = '{schema}' AND policyname IN ({names}) LOOP "
            f"EXECUTE format('ALTER POLICY %I ON %I.%I USING ({granted}) WITH CHECK ({granted})', "
            f"r.policyname, '{schema}', r.tablename); END LOOP; END $tnsrag$;")


def _distribute_sql(schema: str, table: Table, lead: str) -> str:
    colocate = "" if table.name == lead else f", colocate_with => '{schema}.{lead}'"
    return f"SELECT create_distributed_table('{schema}.{table.name}', '{DISTRIBUTION_COLUMN}'{colocate});"


def citus_script(*, schema: str = "tnsrag") -> str:
    """The SQL to run on a Citus coordinator after ``tnsrag db upgrade`` (schema ``schema``).

    Raises :class:`~tnsrag_db._errors.ConfigurationError` for an invalid schema name and
    ``RuntimeError`` if the declarations break a Citus rule (a test keeps them clean).
    Unlike :func:`distribute`, the script checks nothing: run it on a schema that serves no
    release before 0011 (``tnsrag db upgrade --finish``) and without tenancy triggers.
    """
    validate_schema_name(schema)
    distributed, reference = _ordered()
    lines = [
        f"-- tnsrag_db on Citus: run on the coordinator, after `tnsrag db upgrade --schema {schema}`",
        "-- and before the first write (`tnsrag db distribute` runs the same, after checks). Needs the",
        "-- citus extension on the coordinator, and vector and btree_gin on every node. Every shared",
        f"-- table is hash-distributed by {DISTRIBUTION_COLUMN} and co-located with {distributed[0].name}, so each",
        "-- store operation (which names its corpus on every shared table) routes to one shard group.",
        "-- Run it once, as the tables' owner; each call is atomic on its own.",
        "CREATE EXTENSION IF NOT EXISTS citus;",
        "-- Citus refuses subqueries in the policies of distributed tables: call the lookup directly.",
        _policies_sql(schema),
        "-- Statement triggers for writers of releases before 0011 (this release retires merged",
        "-- entries itself); Citus distributes no table with triggers.",
        *(f"DROP TRIGGER IF EXISTS {name} ON {schema}.entries;" for name in RETIRE_TRIGGERS),
    ]
    lines += [_distribute_sql(schema, table, distributed[0].name) for table in distributed]
    for table in reference:
        lines.append(f"SELECT create_reference_table('{schema}.{table.name}');")
    if not reference:
        lines.append("-- No reference tables: every table has a corpus column. alembic_version stays a")
        lines.append("-- local table on the coordinator, where migrations run.")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DistributeReport:
    """What :func:`distribute` did: the tables it distributed now (in order) and those that
    already were, the policies it rewrote and the triggers it dropped."""

    distributed: list[str]
    already: list[str]
    policies: int
    triggers: list[str]


def distribute(db: Connections, *, schema: str = "tnsrag") -> DistributeReport:
    """Distribute ``schema``'s tables by corpus on the Citus coordinator ``db`` connects to (a :class:`~tnsrag_db._db.pool.Pool`)
    (after ``tnsrag db upgrade``; safe to run again: distributed tables are skipped).

    Raises :class:`~tnsrag_db._errors.ConfigurationError` when the server has no citus
    extension, the schema is not at this release's head, it still serves releases before
    0011 (run ``tnsrag db upgrade --finish`` first: their writers need the triggers), or
    tenant isolation is on (row-level security does not run on a distributed schema).
    The filter pairs' triggers, which ``tnsrag db upgrade --tenancy off`` leaves attached,
    are dropped with revision 0011's (Citus refuses triggers on distributed tables): a
    store opened while tenancy was on, which matches filters through the pairs, must be
    opened again (new stores match them with ``@>``).
    """
    from tnsrag_db._db import migrate

    validate_schema_name(schema)
    distributed, reference = _ordered()
    with db.connect() as conn:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").first() is None:
            raise ConfigurationError("the server has no citus extension: tnsrag db distribute runs on a Citus "
                                     "coordinator (CREATE EXTENSION citus, with the workers added)")
    current, head = migrate.current_revision(db, schema=schema), migrate.head_revision()
    if current != head:
        raise ConfigurationError(f"schema {schema} is at {current or 'no revision'}, this release's head is "
                                 f"{head}: run tnsrag db upgrade first")
    served = migrate.served_releases(db, schema=schema)
    if served is None or served[0] < SELF_RETIRING:
        raise ConfigurationError(f"schema {schema} still serves releases before {SELF_RETIRING}, whose writers "
                                 "need the triggers Citus cannot distribute: run tnsrag db upgrade --finish first")
    with db.connect() as conn:
        triggers = set(conn.execute((
            "SELECT tg.tgname FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND NOT tg.tgisinternal"),
            {"s": schema}).scalars())
        foreign = sorted(triggers - set(RETIRE_TRIGGERS) - set(FILTER_PAIRS_TRIGGERS))
        if foreign:
            raise ConfigurationError(f"schema {schema} has triggers Citus cannot distribute ({', '.join(foreign)}): "
                                     "drop them first")
        if conn.execute((
                "SELECT c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relname = 'entries'"), {"s": schema}).scalar():
            raise ConfigurationError(f"schema {schema} has tenant isolation on (row-level security), which does not "
                                     "run on a Citus cluster (docs/deployment.md, 'Scale out with Citus'); switch it "
                                     "off first: tnsrag db upgrade --tenancy off")
        done = set(conn.execute((
            "SELECT c.relname FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s"), {"s": schema}).scalars())
        policies = int(conn.execute(
            "SELECT count(*) FROM pg_policies WHERE schemaname = :s AND policyname = ANY (:p)",
            {"s": schema, "p": list(TENANCY_POLICIES)}).scalar_one())
    lead = distributed[0].name
    new: list[str] = []
    with db.connect(autocommit=True) as conn:
        # The driver's own execute: the statements take no parameters, and the DO block's
        # format() placeholders are not the driver's. Each statement commits on its own.
        raw = conn.driver
        raw.execute(_policies_sql(schema))
        for name in sorted(triggers):
            raw.execute(f"DROP TRIGGER IF EXISTS {name} ON {schema}.entries")
        for table in distributed:
            if table.name not in done:
                raw.execute(_distribute_sql(schema, table, lead))
                new.append(table.name)
        for table in reference:  # pragma: no cover - the schema has none today
            if table.name not in done:
                raw.execute(f"SELECT create_reference_table('{schema}.{table.name}')")
                new.append(table.name)
    return DistributeReport(new, sorted(done), policies, sorted(triggers))
