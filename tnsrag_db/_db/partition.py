"""Hash-partitioning the big tables by corpus on one server: the step before Citus.

:func:`partition_script` reads the migrated schema's catalog and returns one SQL script
(one transaction) that turns ``entries``, ``bm25_postings``, ``bm25_df`` and ``edges``
into tables ``PARTITION BY HASH (corpus)`` with ``partitions`` partitions each, keeping
every column, default, check, primary key, index, foreign key (in both directions),
grant, row-level security policy and trigger, and moving the rows. Every statement the library sends pins the corpus with an
equality (see docs/deployment.md, "Scale out with Citus"), so the planner prunes each to the one
partition of its corpus. ``tnsrag db sql --partition N`` prints it for an operator to
review and run (``psql -1 -f``); nothing runs it implicitly.

``embeddings`` stays one table: the library builds an HNSW index per embedding space
with ``CREATE INDEX CONCURRENTLY`` (so writes go on during the build), which PostgreSQL
does not support on a partitioned table; each space's partial index already confines a
vector search to its corpus. ``corpora``, ``bm25_stats`` and ``embedding_spaces`` hold a
few rows per corpus.

The script takes ``ACCESS EXCLUSIVE`` locks on the tables and copies them: run it in a
maintenance window (its time grows with the corpus size), after ``tnsrag db upgrade``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tnsrag_db._db.pool import Connection
from tnsrag_db._errors import ConfigurationError

__all__ = ["PARTITIONED_TABLES", "PARTITION_NAME", "partition_script"]

#: The tables the script partitions, in the order it moves them.
PARTITIONED_TABLES = ("entries", "bm25_postings", "bm25_df", "edges")
#: Names of the partitions the script creates (``entries_p0`` ...): not schema drift.
PARTITION_NAME = re.compile(rf"^({'|'.join(PARTITIONED_TABLES)})_p[0-9]+$")
_MAX_PARTITIONS = 1024


@dataclass(frozen=True)
class _Table:
    name: str
    constraints: list[tuple[str, str, str]]  # (name, type, definition) of PK / UNIQUE / FK / CHECK
    indexes: list[tuple[str, str]]  # (name, definition) of indexes not backing a constraint
    grants: list[tuple[str, str]]  # (grantee, privilege)
    # Row-level security (tenancy): the ALTER TABLE ... ROW LEVEL SECURITY and CREATE
    # POLICY statements the new table needs, or a tenant would see every corpus.
    security: list[str] = field(default_factory=list)
    # User triggers (the filter pairs' on ``entries`` under tenancy): CREATE TRIGGER, and the
    # ALTER TABLE restoring a trigger's enabled state when it is not the default.
    triggers: list[str] = field(default_factory=list)


def _quote(conn: Connection, name: str) -> str:
    return str(conn.execute("SELECT quote_ident(:n)", {"n": name}).scalar_one())


def _table(conn: Connection, schema: str, name: str) -> _Table:
    oid = conn.execute("SELECT to_regclass(format('%I.%I', CAST(:s AS text), CAST(:t AS text)))::oid",
                       {"s": schema, "t": name}).scalar_one()
    if oid is None:
        raise ConfigurationError(f"table {schema}.{name} does not exist: run `tnsrag db upgrade` first")
    kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = :o", {"o": oid}).scalar_one()
    if kind == "p":
        raise ConfigurationError(f"table {schema}.{name} is partitioned already")
    constraints = [(r.conname, r.contype, r.definition) for r in conn.execute((
        "SELECT conname, contype, pg_get_constraintdef(oid) AS definition FROM pg_constraint "
        "WHERE conrelid = :o AND contype IN ('p', 'u', 'f', 'c') ORDER BY contype DESC, conname"), {"o": oid})]
    indexes = [(r.name, r.definition) for r in conn.execute((
        "SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = :o "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = :o) "
        "ORDER BY c.relname"), {"o": oid})]
    grants = [(r.grantee, r.privilege) for r in conn.execute((
        "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS grantee, "
        "a.privilege_type AS privilege FROM pg_class c, aclexplode(c.relacl) a "
        "WHERE c.oid = :o AND a.grantee <> c.relowner ORDER BY 1, 2"), {"o": oid})]
    return _Table(name, constraints, indexes, grants, _security(conn, schema, name, oid),
                  _triggers(conn, schema, name, oid))


#: ALTER TABLE ... TRIGGER for each pg_trigger.tgenabled other than the default 'O'.
_TRIGGER_STATES = {"D": "DISABLE TRIGGER", "R": "ENABLE REPLICA TRIGGER", "A": "ENABLE ALWAYS TRIGGER"}


def _triggers(conn: Connection, schema: str, name: str, oid: int) -> list[str]:
    """The statements giving a new ``schema.name`` the user triggers of table ``oid``.

    ``pg_get_triggerdef`` names the table as it is called now, which is the new table's
    name once the script has renamed the old one."""
    target = f"{_quote(conn, schema)}.{_quote(conn, name)}"
    out = []
    for t in conn.execute((
            "SELECT quote_ident(tgname) AS name, pg_get_triggerdef(oid) AS definition, tgenabled AS state "
            "FROM pg_trigger WHERE tgrelid = :o AND NOT tgisinternal ORDER BY tgname"), {"o": oid}):
        out.append(f"{t.definition};")
        if str(t.state) in _TRIGGER_STATES:
            out.append(f"ALTER TABLE {target} {_TRIGGER_STATES[str(t.state)]} {t.name};")
    return out


_POLICY_COMMANDS = {"*": "ALL", "r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE"}


def _security(conn: Connection, schema: str, name: str, oid: int) -> list[str]:
    """The statements giving a new ``schema.name`` the row-level security of table ``oid``."""
    target = f"{_quote(conn, schema)}.{_quote(conn, name)}"
    out = []
    for p in conn.execute((
            "SELECT quote_ident(p.polname) AS name, p.polpermissive, p.polcmd, "
            "pg_get_expr(p.polqual, p.polrelid) AS qual, pg_get_expr(p.polwithcheck, p.polrelid) AS wcheck, "
            "array_to_string(ARRAY(SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r)) END "
            "FROM unnest(p.polroles) AS r), ', ') AS roles "
            "FROM pg_policy p WHERE p.polrelid = :o ORDER BY p.polname"), {"o": oid}):
        using = f" USING ({p.qual})" if p.qual is not None else ""
        check = f" WITH CHECK ({p.wcheck})" if p.wcheck is not None else ""
        out.append(f"CREATE POLICY {p.name} ON {target} AS {'PERMISSIVE' if p.polpermissive else 'RESTRICTIVE'} "
                   f"FOR {_POLICY_COMMANDS[str(p.polcmd)]} TO {p.roles}{using}{check};")
    flags = conn.execute("SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = :o",
                         {"o": oid}).one()
    if flags.relrowsecurity:
        out.append(f"ALTER TABLE {target} ENABLE ROW LEVEL SECURITY;")
    if flags.relforcerowsecurity:
        out.append(f"ALTER TABLE {target} FORCE ROW LEVEL SECURITY;")
    return out


def _incoming(conn: Connection, schema: str, name: str) -> list[tuple[str, str, str]]:
    """Foreign keys of other tables referencing ``name``: (table, constraint, definition)."""
    return [(r.tab, r.conname, r.definition) for r in conn.execute((
        "SELECT c.relname AS tab, k.conname, pg_get_constraintdef(k.oid) AS definition FROM pg_constraint k "
        "JOIN pg_class c ON c.oid = k.conrelid "
        "WHERE k.contype = 'f' AND k.confrelid = to_regclass(format('%I.%I', CAST(:s AS text), CAST(:t AS text))) "
        "AND k.conrelid <> k.confrelid ORDER BY 1, 2"), {"s": schema, "t": name})]


def partition_script(conn: Connection, *, schema: str, partitions: int = 8) -> str:
    """The SQL script hash-partitioning :data:`PARTITIONED_TABLES` of ``schema`` by corpus.

    Read from the catalog through ``conn`` (nothing is changed). ``partitions`` (2 to
    1024, default 8) per table. Raises :class:`ConfigurationError` for a bad count, a
    schema that is not migrated, or tables already partitioned.
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 2 <= partitions <= _MAX_PARTITIONS:
        raise ConfigurationError(f"partitions must be an int from 2 to {_MAX_PARTITIONS}, got {partitions!r}")
    s = _quote(conn, schema)
    tables = [_table(conn, schema, name) for name in PARTITIONED_TABLES]
    moved = set(PARTITIONED_TABLES)
    incoming = {fk for name in PARTITIONED_TABLES for fk in _incoming(conn, schema, name)}
    out = [f"-- Hash-partition {', '.join(PARTITIONED_TABLES)} of schema {schema} by corpus "
           f"({partitions} partitions each).",
           "-- Generated by tnsrag_db._db.partition from the live catalog; review, then run in one transaction.",
           "BEGIN;",
           f"SET LOCAL search_path = {s}, public;  -- the foreign keys' REFERENCES name tables without a schema",
           f"LOCK TABLE {', '.join(f'{s}.{t}' for t in PARTITIONED_TABLES)} IN ACCESS EXCLUSIVE MODE;",
           "", "-- Foreign keys into the moved tables are dropped now and recreated against the new tables."]
    for table, con, _ in sorted(incoming):
        out.append(f"ALTER TABLE {s}.{_quote(conn, table)} DROP CONSTRAINT {_quote(conn, con)};")
    for t in tables:
        q, old = _quote(conn, t.name), _quote(conn, f"{t.name}__unpartitioned")
        out += ["", f"-- {t.name}",
                f"ALTER TABLE {s}.{q} RENAME TO {old};"]
        for name, kind, _ in t.constraints:
            if kind in ("p", "u"):  # their indexes carry the names the new table's must take
                out.append(f"ALTER TABLE {s}.{old} RENAME CONSTRAINT {_quote(conn, name)} "
                           f"TO {_quote(conn, name + '__old')};")
        for name, _ in t.indexes:
            out.append(f"ALTER INDEX {s}.{_quote(conn, name)} RENAME TO {_quote(conn, name + '__old')};")
        out.append(f"CREATE TABLE {s}.{q} (LIKE {s}.{old} INCLUDING DEFAULTS INCLUDING GENERATED "
                   f"INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY HASH (corpus);")
        for r in range(partitions):
            out.append(f"CREATE TABLE {s}.{_quote(conn, f'{t.name}_p{r}')} PARTITION OF {s}.{q} "
                       f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {r});")
        for name, kind, definition in t.constraints:
            if kind != "f":
                out.append(f"ALTER TABLE {s}.{q} ADD CONSTRAINT {_quote(conn, name)} {definition};")
        for _, definition in t.indexes:
            out.append(f"{definition};")
        out.append(f"INSERT INTO {s}.{q} SELECT * FROM {s}.{old};")
        # After the rows: the moved rows must not fire the triggers (the filter pairs hold them).
        out += t.triggers
        for grantee, privilege in t.grants:
            out.append(f"GRANT {privilege} ON {s}.{q} TO {grantee};")
        out += t.security
    out += ["", "-- Foreign keys: those of the moved tables, then those into them."]
    for t in tables:
        for name, kind, definition in t.constraints:
            if kind == "f":
                out.append(f"ALTER TABLE {s}.{_quote(conn, t.name)} ADD CONSTRAINT {_quote(conn, name)} {definition};")
    for table, con, definition in sorted(incoming):
        if table not in moved:
            out.append(f"ALTER TABLE {s}.{_quote(conn, table)} ADD CONSTRAINT {_quote(conn, con)} {definition};")
    out += ["", "-- The old tables go last, once nothing references them."]
    for t in reversed(tables):
        out.append(f"DROP TABLE {s}.{_quote(conn, t.name + '__unpartitioned')};")
    out += [f"ANALYZE {', '.join(f'{s}.{t}' for t in PARTITIONED_TABLES)};", "COMMIT;", ""]
    return "\n".join(out)
