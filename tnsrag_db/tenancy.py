"""Tenant isolation in the database: row-level security tying a database role to its corpora.

Model (docs/deployment.md, "Tenancy"): each tenant connects as its own PostgreSQL role. The table
``tenant_grants`` (migration 0005) lists the corpora each role may use; with row-level
security on (:func:`enable`), every table keyed by corpus shows a tenant role only the
rows of its granted corpora and refuses to let it write any other row: a policy reads
the grants through ``current_user``, which a session cannot change by hand (``SET
ROLE`` reaches only roles it is a member of). A policy on a session setting
(``current_setting('tnsrag.corpus')``) would not hold: any statement on the connection
can ``SET`` it.

The tables' owner (the migrator) and superusers are not subject to the policies: they
run migrations, ``tnsrag db build-indexes`` and these grants. Only the owner can
change ``tenant_grants``; a tenant role sees its own grants and nothing else.

Every function takes the connections (a :class:`~tnsrag_db._db.pool.Pool`) of the schema's owner and raises
:class:`~tnsrag_db._errors.ConfigurationError` for a bad role or corpus name and
:class:`~tnsrag_db._errors.DatabaseError` subclasses for database failures.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg

from tnsrag_db._db.driver_errors import db_error
from tnsrag_db._db.filter_pairs import FILTER_PAIRS_SQL, FILTER_PAIRS_TRIGGERS
from tnsrag_db._db.lock_retries import DEFAULT_LOCK_RETRIES, DEFAULT_LOCK_TIMEOUT, run_with_lock_retries
from tnsrag_db._db.pool import Connection, Connections
from tnsrag_db._db.settings import validate_schema_name
from tnsrag_db._errors import ConfigurationError, TnsragError
from tnsrag_db._store.corpus import check_corpus_name

__all__ = ["DEFAULT_LOCK_TIMEOUT_SECONDS", "PAIRS_TABLE", "POLICY_SQL", "SPACE_INSERT_COLUMNS", "TENANT_TABLES",
           "TenantGrant", "disable", "enable", "filters_use_indexes", "grant", "grants", "is_enabled", "lock_timeout",
           "pair_triggers_attached", "revoke", "status"]

#: Every table keyed by corpus: each carries the ``tenant_isolation`` policy.
_BASE_TABLES = ("corpora", "entries", "embedding_spaces", "embeddings", "bm25_postings", "bm25_stats", "bm25_df",
                "edges")
#: The merged BM25 postings' tables (revision 0011).
_BLOCK_TABLES = ("bm25_docs", "bm25_blocks", "bm25_tombstones", "bm25_merge_state")
#: The aliases of merged entries (revision 0016).
_ALIAS_TABLES = ("entry_aliases",)
TENANT_TABLES = _BASE_TABLES + _BLOCK_TABLES + _ALIAS_TABLES

#: The metadata filter pairs (migration 0007): keyed by corpus too, with a policy of its own
#: (``tenant_filter_pairs``, the same grant lookup) and row-level security switched on and off
#: with the tables above. Tenant roles only read it: triggers on ``entries`` write it.
PAIRS_TABLE = "entry_filter_pairs"
PAIRS_POLICY = "tenant_filter_pairs"


_log = logging.getLogger("tnsrag_db")

#: The ``lock_timeout`` :func:`grant` gives a tenant role in the schema's database: the
#: longest any lock held by another session (another tenant's ``LOCK TABLE``, say) stalls
#: one of the role's statements before it fails with
#: :class:`~tnsrag_db._errors.LockTimeoutError` naming the holder's role.
DEFAULT_LOCK_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class TenantGrant:
    """One row of ``tenant_grants``: ``role`` may use ``corpus``."""

    role: str
    corpus: str
    created_at: datetime


@contextmanager
def _connection(db: Connections, what: str) -> Iterator[Connection]:
    try:
        with db.connect() as conn:
            yield conn
    except TnsragError:
        raise
    except psycopg.Error as exc:
        raise db_error(exc, what) from exc


#: The policy of every table in :data:`TENANT_TABLES` (as revision 0005 creates it): the
#: row's corpus is among those granted to ``current_user``, looked up once per statement.
POLICY_SQL = ("CREATE POLICY tenant_isolation ON {s}.{t} USING ({granted}) WITH CHECK ({granted})")
_PAIRS_POLICY_SQL = ("CREATE POLICY " + PAIRS_POLICY + " ON {s}." + PAIRS_TABLE
                     + " USING ({granted}) WITH CHECK ({granted})")
#: The grant lookup of the policies: through ``tnsrag_tenant_corpora()`` (revision 0008), a
#: scalar subquery the planner plans in microseconds however often the tables are named.
_GRANTED = "corpus = ANY (CAST((SELECT {s}.tnsrag_tenant_corpora()) AS text[]))"
#: The lookup of revisions 0005-0007 (a schema not yet at 0008 has no function).
_GRANTED_BEFORE_0008 = ("corpus = ANY (ARRAY(SELECT g.corpus FROM {s}.tenant_grants g "
                        "WHERE g.role_name = current_user::text))")


#: The triggers that keep the filter pairs (revision 0007 creates their function only):
#: attached by the first :func:`enable`, and left in place by :func:`disable`, so that a
#: store opened while tenancy was on, which keeps matching filters through the pairs,
#: stays right after tenancy is switched off. ``tnsrag db partition-sql`` re-creates
#: them on the partitioned ``entries``; :func:`enable` attaches any that are missing.
_PAIRS_TRIGGERS = {
    "tnsrag_filter_pairs_insert": "AFTER INSERT ON {s}.entries REFERENCING NEW TABLE AS new_rows",
    "tnsrag_filter_pairs_update": "AFTER UPDATE ON {s}.entries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "tnsrag_filter_pairs_delete": "AFTER DELETE ON {s}.entries REFERENCING OLD TABLE AS old_rows",
}
assert tuple(_PAIRS_TRIGGERS) == FILTER_PAIRS_TRIGGERS
#: Every entry's pairs, in one statement (the table is emptied first).
_PAIRS_FILL = (
    "INSERT INTO {s}.entry_filter_pairs (corpus, key, value, entry_id) SELECT n.corpus, m.key, m.value #>> '{{}}', "
    "n.id FROM {s}.entries n CROSS JOIN LATERAL jsonb_each(n.metadata) m WHERE jsonb_typeof(m.value) = 'string' "
    "/* tnsrag:all-corpora */"
)


def _pair_triggers_enabled(conn: Connection, schema: str) -> bool:
    """Whether every pair trigger is attached to ``schema``'s ``entries`` and enabled."""
    enabled = set(conn.execute((
        "SELECT tg.tgname FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relname = 'entries' "
        "AND tg.tgenabled <> 'D'"), {"s": schema}).scalars())
    return all(name in enabled for name in _PAIRS_TRIGGERS)


def _attach_pairs(conn: Connection, schema: str) -> None:
    """Attach the pair triggers and fill the pairs, unless every trigger is in place and
    enabled already (then the pairs are up to date: the triggers kept them)."""
    if _pair_triggers_enabled(conn, schema):
        return
    # Names: the validated schema and the constants above.
    for name in _PAIRS_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name} ON {schema}.entries")
    conn.execute(f"DELETE FROM {schema}.{PAIRS_TABLE} /* tnsrag:all-corpora */")
    for name, when in _PAIRS_TRIGGERS.items():
        conn.execute(f"CREATE TRIGGER {name} {when.format(s=schema)} FOR EACH STATEMENT "
                             f"EXECUTE FUNCTION {schema}.tnsrag_filter_pairs_sync()")
    conn.execute(_PAIRS_FILL.format(s=schema))


def _set_security(db: Connections, schema: str, on: bool, lock_timeout: float, lock_retries: int) -> None:
    validate_schema_name(schema)
    action = "ENABLE" if on else "DISABLE"

    def alter() -> None:
        with conn.begin():
            # The tables of the schema's revision (the BM25 blocks' came with 0011).
            tables = [str(t) for t in conn.execute((
                "SELECT t FROM unnest(CAST(:t AS text[])) AS t WHERE to_regclass(format('%I.%I', CAST(:s AS text), t)) "
                "IS NOT NULL"), {"s": schema, "t": list(TENANT_TABLES)}).scalars()]
            if on:
                granted = (_GRANTED if conn.execute(
                    "SELECT to_regprocedure(format('%I.tnsrag_tenant_corpora()', CAST(:s AS text))) IS NOT NULL",
                    {"s": schema}).scalar_one() else _GRANTED_BEFORE_0008).format(s=schema)
                # A table re-created since the revision (``tnsrag db partition-sql`` swaps
                # in a partitioned copy) lost its policy: switching on without it would
                # leave the table closed to every tenant, or, worse, open once re-granted.
                present = set(conn.execute(
                    "SELECT tablename FROM pg_policies WHERE schemaname = :s AND policyname = 'tenant_isolation'",
                    {"s": schema}).scalars())
                for table in tables:
                    if table not in present:
                        conn.execute(POLICY_SQL.format(s=schema, t=table, granted=granted))
                if pairs and not conn.execute(
                        "SELECT 1 FROM pg_policies WHERE schemaname = :s AND tablename = :t AND policyname = :p",
                        {"s": schema, "t": PAIRS_TABLE, "p": PAIRS_POLICY}).first():
                    conn.execute(_PAIRS_POLICY_SQL.format(s=schema, granted=granted))
            for table in tables + ([PAIRS_TABLE] if pairs else []):
                # Names: the validated schema and the constants above.
                conn.execute(f"ALTER TABLE {schema}.{table} {action} ROW LEVEL SECURITY")
            if pairs and on:
                # After the ALTERs: entries is locked, no write slips between the triggers and the fill.
                _attach_pairs(conn, schema)

    with _connection(db, f"{action.lower()} row-level security in schema {schema!r}") as conn:
        pairs = _has_pairs(conn, schema, maintained=False)
        # ALTER TABLE takes each table's ACCESS EXCLUSIVE lock: bounded waits, as in migrations.
        run_with_lock_retries(conn, alter, lock_timeout=lock_timeout, retries=lock_retries, pause=0.5)


def enable(db: Connections, *, schema: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
           lock_retries: int = DEFAULT_LOCK_RETRIES) -> None:
    """Switch row-level security on for every table of :data:`TENANT_TABLES` (idempotent).

    Also for the filter pairs of revision 0007 (:data:`PAIRS_TABLE`): attaches the
    statement triggers on ``entries`` that keep them and fills them from every entry (one
    INSERT ... SELECT, in the same transaction as the switch), unless every trigger is in
    place and enabled already (left by :func:`disable`): then the pairs are up to date.
    A store decides with its first filtered retrieval: from then on, stores match a
    metadata filter through the pairs; a store that ran one before keeps ``@>`` (the same
    results, slower for tenant roles) until it is opened again.

    From then on a role that neither owns the tables nor is a superuser (nor has
    BYPASSRLS) sees and writes only the corpora :func:`grant` gave it, and nothing
    without a grant. Raises :class:`~tnsrag_db._db.lock_retries.LockRetriesExhausted` when a
    long transaction keeps a table locked through every retry.
    """
    _set_security(db, schema, True, lock_timeout, lock_retries)


def disable(db: Connections, *, schema: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
            lock_retries: int = DEFAULT_LOCK_RETRIES) -> None:
    """Switch row-level security off again (the grants are kept).

    The filter pairs' triggers stay attached and keep the pairs up to date: a store opened
    while tenancy was on goes on matching its metadata filters through them (right, as
    before), while stores deciding from now on use ``metadata @>``. So every write keeps
    paying the triggers until the schema is downgraded below revision 0007, which drops
    the pairs with their triggers.
    """
    _set_security(db, schema, False, lock_timeout, lock_retries)


def status(db: Connections, *, schema: str) -> dict[str, bool]:
    """Whether row-level security is on, for each table of :data:`TENANT_TABLES` the schema
    has (a schema not yet upgraded lacks the tables of later revisions)."""
    validate_schema_name(schema)
    with _connection(db, f"row-level security status of schema {schema!r}") as conn:
        rows = conn.execute((
            "SELECT c.relname, c.relrowsecurity FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND c.relname = ANY(:t)"), {"s": schema, "t": list(TENANT_TABLES)}).all()
    found = {str(r.relname): bool(r.relrowsecurity) for r in rows}
    return {table: found[table] for table in TENANT_TABLES if table in found}


def is_enabled(db: Connections, *, schema: str) -> bool:
    """True when row-level security is on for every corpus-keyed table."""
    return all(status(db, schema=schema).values())


def _has_pairs(conn: Connection, schema: str, *, maintained: bool = True) -> bool:
    """Whether ``schema`` has the filter pairs table of migration 0007 (``maintained``: and
    they are in use, row-level security on with every pair trigger attached and enabled:
    :data:`~tnsrag_db._db.filter_pairs.FILTER_PAIRS_SQL`, the stores' own test)."""
    if not conn.execute("SELECT to_regclass(format('%I.%I', CAST(:s AS text), CAST(:t AS text))) IS NOT NULL",
                        {"s": schema, "t": PAIRS_TABLE}).scalar_one():
        return False
    return not maintained or bool(conn.execute(FILTER_PAIRS_SQL, {"s": schema}).scalar_one())


def pair_triggers_attached(db: Connections, *, schema: str) -> bool:
    """Whether the filter pairs' triggers are attached to ``entries`` and enabled (so every
    write keeps the pairs up to date), whether row-level security is on or off: after
    :func:`enable`, and after a :func:`disable` that followed it."""
    validate_schema_name(schema)
    with _connection(db, "filter pair triggers check") as conn:
        return _has_pairs(conn, schema, maintained=False) and _pair_triggers_enabled(conn, schema)


def filters_use_indexes(db: Connections, *, schema: str = "tnsrag") -> bool:
    """Whether a tenant role's metadata filters are index conditions under row-level security.

    Under a policy PostgreSQL evaluates a condition before the policy only when its
    operators are LEAKPROOF. jsonb's ``@>`` is not (by default); the filter pairs of
    migration 0007 are looked up with text equality, which is: True when ``schema`` uses
    them (tenancy on, their triggers on ``entries`` attached and enabled), or when a
    superuser has marked ``pg_catalog.jsonb_contains(jsonb, jsonb)`` LEAKPROOF. False
    means a tenant's filtered query reads its whole corpus and filters afterwards (same
    result, slower; see ``bench/bench_tenancy.py``): at revision 0006, or when the
    triggers are gone or disabled (``entries`` swapped for a new table, say), which
    :func:`enable` repairs (it attaches them and rebuilds the pairs).
    """
    validate_schema_name(schema)
    with _connection(db, "leakproof check of metadata filters") as conn:
        if _has_pairs(conn, schema):
            return True
        return bool(conn.execute("SELECT proleakproof FROM pg_proc WHERE oid = "
                                         "'pg_catalog.jsonb_contains(jsonb, jsonb)'::regprocedure").scalar_one())


def _check_role(conn: Connection, schema: str, role: str) -> None:
    if not isinstance(role, str) or not role or "\x00" in role or len(role.encode()) > 63:
        raise ConfigurationError(f"not a database role name: {role!r}")
    row = conn.execute((
        "SELECT r.rolsuper OR r.rolbypassrls AS bypass, "
        "  pg_has_role(r.oid, c.relowner, 'USAGE') AS owner "
        "FROM pg_roles r, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE r.rolname = :r AND n.nspname = :s AND c.relname = 'entries'"), {"r": role, "s": schema}).one_or_none()
    if row is None:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = :r", {"r": role}).first()
        raise ConfigurationError(f"no database role {role!r}: create it first (CREATE ROLE ... LOGIN)" if exists is None
                                 else f"schema {schema!r} is not migrated: run tnsrag db upgrade")
    if row.bypass or row.owner:
        why = "is a superuser or has BYPASSRLS" if row.bypass else "owns the tables (or is a member of their owner)"
        raise ConfigurationError(f"role {role!r} {why}, so row-level security never applies to it; "
                                 "grant corpora to a plain application role")


#: The columns of ``embedding_spaces`` a tenant may set: never ``space_id``, which the
#: identity assigns, nor ``index_name``, which only the owner's index builds record.
#: Space ids name the per-space HNSW indexes (partial indexes on ``space_id`` alone), so
#: an id a tenant could choose would put its vectors into another corpus's index.
SPACE_INSERT_COLUMNS = ("corpus", "provider", "dimension")

#: Privileges a tenant role needs (and no more): DML on the corpus tables, read on its grants
#: and on the schema's version (``connect()`` checks it).
#: TRUNCATE and TRIGGER are taken away: TRUNCATE ignores row-level security, and a trigger
#: would run the tenant's code in other tenants' sessions. On ``embedding_spaces`` a tenant
#: inserts :data:`SPACE_INSERT_COLUMNS` only and updates nothing; it has no privilege on
#: the schema's sequences (an identity default draws its value without one), so it can
#: neither read the next space id nor move the sequence.
_PRIVILEGE_STATEMENTS = (
    "GRANT USAGE ON SCHEMA %1$I TO %2$I",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON "
    + ", ".join(f"%1$I.{t}" for t in _BASE_TABLES if t != "embedding_spaces") + " TO %2$I",
    "REVOKE INSERT, UPDATE ON %1$I.embedding_spaces FROM %2$I",
    "GRANT SELECT, DELETE ON %1$I.embedding_spaces TO %2$I",
    f"GRANT INSERT ({', '.join(SPACE_INSERT_COLUMNS)}) ON %1$I.embedding_spaces TO %2$I",
    "REVOKE TRUNCATE, TRIGGER, REFERENCES ON ALL TABLES IN SCHEMA %1$I FROM %2$I",
    "REVOKE ALL ON %1$I.tenant_grants FROM %2$I",
    "GRANT SELECT ON %1$I.tenant_grants, %1$I.alembic_version TO %2$I",
    "REVOKE ALL ON ALL SEQUENCES IN SCHEMA %1$I FROM %2$I",
)
#: The BM25 blocks' tables (revision 0011), granted like the tables above where the schema has them.
_BLOCK_PRIVILEGES = ("GRANT SELECT, INSERT, UPDATE, DELETE ON "
                     + ", ".join(f"%1$I.{t}" for t in _BLOCK_TABLES) + " TO %2$I",)
#: The aliases' table (revision 0016), granted like the tables above where the schema has it.
_ALIAS_PRIVILEGES = ("GRANT SELECT, INSERT, UPDATE, DELETE ON "
                     + ", ".join(f"%1$I.{t}" for t in _ALIAS_TABLES) + " TO %2$I",)
#: Read only: the triggers on ``entries`` (SECURITY DEFINER) write the pairs.
_PAIRS_PRIVILEGES = (
    "REVOKE ALL ON %1$I." + PAIRS_TABLE + " FROM %2$I",
    "GRANT SELECT ON %1$I." + PAIRS_TABLE + " TO %2$I",
)


def _check_lock_timeout(seconds: object) -> int | None:
    """``seconds`` as whole milliseconds (None stays None), else :class:`ConfigurationError`."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or seconds < 0 or seconds > 86_400:
        raise ConfigurationError(f"lock_timeout must be a number of seconds from 0 to 86400 (0: no bound), "
                                 f"got {seconds!r}")
    ms = round(seconds * 1000)
    if seconds > 0 and ms == 0:
        raise ConfigurationError(f"lock_timeout must be 0 (no bound) or at least 0.001 seconds, got {seconds!r}")
    return ms


def grant(db: Connections, *, schema: str, role: str, corpus: str,
          lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT_SECONDS) -> bool:
    """Let ``role`` use ``corpus`` (which need not exist yet: the role's first write creates it).

    Also gives the role the table privileges a tenant needs and takes away those that
    would get round the policies (TRUNCATE, TRIGGER, REFERENCES, writes to
    ``tenant_grants``). Run as the tables' owner. Returns False when the grant existed.
    Raises :class:`ConfigurationError` for an unknown role or one that bypasses
    row-level security (a superuser, a BYPASSRLS role, the owner), or a bad ``lock_timeout``.

    ``lock_timeout`` (seconds; 0: no bound; None: leave the role's setting alone) becomes
    the role's ``lock_timeout`` in this database (``ALTER ROLE ... IN DATABASE ... SET``),
    for its sessions opened from then on: a lock another tenant holds (a ``LOCK TABLE`` its
    UPDATE privilege allows) stalls the role that long at most, then the statement fails
    with :class:`~tnsrag_db._errors.LockTimeoutError` naming the holder's role. Setting it
    takes a superuser, or a role with CREATEROLE and the ADMIN option on ``role``; an owner
    without either grants the corpus all the same and logs a warning with the statement
    to run (:func:`lock_timeout` reads the setting).
    """
    validate_schema_name(schema)
    timeout_ms = _check_lock_timeout(lock_timeout)
    check_corpus_name(corpus)
    with _connection(db, f"grant of corpus {corpus!r} to role {role!r}") as conn, conn.begin():
        _check_role(conn, schema, role)
        blocks = conn.execute("SELECT to_regclass(format('%I.bm25_blocks', CAST(:s AS text))) IS NOT NULL",
                              {"s": schema}).scalar_one()
        aliases = conn.execute(("SELECT to_regclass(format('%I.entry_aliases', CAST(:s AS text))) "
                                       "IS NOT NULL"), {"s": schema}).scalar_one()
        for template in (_PRIVILEGE_STATEMENTS + (_BLOCK_PRIVILEGES if blocks else ())
                         + (_ALIAS_PRIVILEGES if aliases else ())
                         + (_PAIRS_PRIVILEGES if _has_pairs(conn, schema, maintained=False) else ())):
            # format() quotes the identifiers server-side (%I); nothing is concatenated.
            ddl = conn.execute("SELECT format(CAST(:t AS text), CAST(:s AS text), CAST(:r AS text))", {"t": template, "s": schema, "r": role}).scalar_one()
            conn.execute(str(ddl))
        inserted = conn.execute((
            f"INSERT INTO {schema}.tenant_grants (role_name, corpus) VALUES (:r, :c) "
            "ON CONFLICT DO NOTHING RETURNING 1"), {"r": role, "c": corpus}).first()
        if timeout_ms is not None:
            _set_lock_timeout(conn, role, timeout_ms)
    return inserted is not None


def _set_lock_timeout(conn: Connection, role: str, ms: int) -> None:
    ddl = str(conn.execute(("SELECT format('ALTER ROLE %I IN DATABASE %I SET lock_timeout = %L', "
                                   "CAST(:r AS text), current_database(), CAST(:v AS text))"),
                           {"r": role, "v": f"{ms}ms"}).scalar_one())
    try:
        with conn.begin_nested():
            conn.execute(ddl)
    except psycopg.Error as exc:
        if exc.sqlstate != "42501":
            raise
        _log.warning("lock_timeout of role %r not set (%s): run as a superuser: %s", role,
                     str(exc).strip().splitlines()[0], ddl)


def lock_timeout(db: Connections, *, role: str) -> float | None:
    """The ``lock_timeout`` in seconds the sessions of ``role`` get in this database from
    the role's settings (``ALTER ROLE ... SET``, as :func:`grant` does: in this database
    first, then for every database); None when neither sets it (the server's, by default
    0: no bound)."""
    with _connection(db, f"lock_timeout of role {role!r}") as conn:
        value = conn.execute((
            "SELECT substr(c, length('lock_timeout=') + 1) FROM pg_catalog.pg_db_role_setting s "
            "JOIN pg_catalog.pg_roles r ON r.oid = s.setrole CROSS JOIN LATERAL unnest(s.setconfig) c "
            "WHERE r.rolname = :r AND s.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database "
            "WHERE datname = current_database())) AND c LIKE 'lock\\_timeout=%' "
            "ORDER BY s.setdatabase DESC LIMIT 1"), {"r": role}).scalar_one_or_none()
        if value is None:
            return None
        ms = conn.execute(("SELECT EXTRACT(EPOCH FROM CAST(CASE WHEN :v ~ '^[0-9]+$' THEN :v || 'ms' "
                                  "ELSE :v END AS interval)) * 1000"), {"v": str(value)}).scalar_one()
    return float(ms) / 1000


def revoke(db: Connections, *, schema: str, role: str, corpus: str) -> bool:
    """Take ``corpus`` away from ``role`` (its data stays); True when there was such a grant.

    Sessions of the role see the change with their next statement.
    """
    validate_schema_name(schema)
    with _connection(db, f"revoke of corpus {corpus!r} from role {role!r}") as conn, conn.begin():
        gone = conn.execute((f"DELETE FROM {schema}.tenant_grants WHERE role_name = :r AND corpus = :c "
                                    "RETURNING 1"), {"r": role, "c": corpus}).first()
    return gone is not None


def grants(db: Connections, *, schema: str, role: str | None = None, corpus: str | None = None) -> list[TenantGrant]:
    """The grants, by role then corpus, optionally only those of ``role`` and/or ``corpus``.

    Run as the owner it lists every grant; run as a tenant role, only its own.
    """
    validate_schema_name(schema)
    with _connection(db, f"grants of schema {schema!r}") as conn:
        rows = conn.execute((
            f"SELECT role_name, corpus, created_at FROM {schema}.tenant_grants "
            "WHERE (CAST(:r AS text) IS NULL OR role_name = :r) AND (CAST(:c AS text) IS NULL OR corpus = :c) "
            "ORDER BY role_name, corpus"), {"r": role, "c": corpus}).all()
    return [TenantGrant(str(r.role_name), str(r.corpus), r.created_at) for r in rows]
