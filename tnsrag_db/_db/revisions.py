"""Which revision the shipped migrations and a schema are at, and whether this release may
use the schema (:func:`schema_state`, :func:`is_at_head`, :func:`ensure_at_head`), read
with plain statements on the store's own connections: opening a store on a schema at
head (every command) costs one statement and imports neither alembic nor SQLAlchemy.

A schema may be *newer* than this release: an upgrade by a later release, while this
one still runs (a rolling upgrade). Every revision from 0012 on keeps, in the function
``tnsrag_schema_compat()``, the oldest revision whose release can still use the schema
(``serves_from``), and the floor ``tnsrag db upgrade --finish`` moves it to once the
rollout is over (``finish_to``). A release accepts a newer schema whose ``serves_from``
it knows, and refuses one that has moved past it; see :class:`SchemaState`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tnsrag_db._db.driver_errors import map_db_errors
from tnsrag_db._db.settings import validate_schema_name
from tnsrag_db._db.statement import Plan, Rows, Statement, run_plan
from tnsrag_db._errors import DatabaseError, MigrationError, SchemaNotReadyError

if TYPE_CHECKING:
    from tnsrag_db._db.pool import Connections

__all__ = ["COMPAT_FUNCTION", "SchemaState", "ensure_at_head", "is_at_head", "migrations_dir", "schema_revisions_plan",
           "schema_state", "schema_state_plan", "serves_releases_before", "shipped_chain", "shipped_head"]

_log = logging.getLogger("tnsrag_db")

#: The function (in the library's schema) that tells which releases the schema serves.
COMPAT_FUNCTION = "tnsrag_schema_compat"

_REVISION_RE = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_DOWN_REVISION_RE = re.compile(r"^down_revision(?:\s*:[^=]+)?\s*=\s*(None|['\"]([^'\"]+)['\"])", re.M)


try:  # the revisions as the wheel ships them, else (a source tree) the top-level folder
    import tnsrag_db._migrations as _packaged  # type: ignore[import-not-found]
except ImportError:
    _MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
else:
    _MIGRATIONS = Path(_packaged.__file__).parent


def migrations_dir() -> Path:
    """The folder holding ``env.py`` and ``versions/``: the packaged copy, else the source tree's."""
    return _MIGRATIONS


@lru_cache(maxsize=1)
def shipped_chain() -> tuple[str, ...] | None:
    """This installation's revisions from the first to the head, read from the revision
    files (no alembic), or None when they are not a plain linear chain of literal
    ``revision``/``down_revision`` strings."""
    parent_of: dict[str, str | None] = {}
    for path in (migrations_dir() / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        rev, down = _REVISION_RE.search(source), _DOWN_REVISION_RE.search(source)
        if rev is None and down is None:
            continue  # __init__.py and helpers
        if rev is None or down is None:
            return None
        parent_of[rev.group(1)] = down.group(2)
    children: dict[str | None, str] = {}
    for child, parent in parent_of.items():
        if parent in children:
            return None  # a branch
        children[parent] = child
    chain: list[str] = []
    current = children.get(None)
    while current is not None:
        chain.append(current)
        current = children.get(current)
    return tuple(chain) if chain and len(chain) == len(parent_of) else None


def serves_releases_before(floor: str, revision: str) -> bool:
    """Whether a schema serving releases from revision ``floor`` on (its ``serves_from``)
    still serves releases older than ``revision``, one of this installation's revisions: a
    change those releases cannot read must wait. A floor this installation does not ship
    is newer than every revision it knows."""
    chain = shipped_chain() or ()
    if floor not in chain:
        return False
    return chain.index(floor) < chain.index(revision)


def shipped_head() -> str | None:
    """This installation's head revision (see :func:`shipped_chain`), or None."""
    chain = shipped_chain()
    return chain[-1] if chain else None


@dataclass(frozen=True, slots=True)
class SchemaState:
    """Where a schema stands for this release.

    ``revision`` is what the schema's version table holds (None: not migrated; several
    revisions joined by commas when it holds more than one). ``newer``: a revision this
    release does not ship, written by a later one. ``serves_from``: for a newer schema,
    the oldest revision whose release it still serves (None when it does not say).
    """

    revision: str | None
    head: str
    newer: bool = False
    serves_from: str | None = None

    @property
    def at_head(self) -> bool:
        """The schema is at this release's head."""
        return self.revision == self.head

    @property
    def usable(self) -> bool:
        """This release may read and write the schema: at its head, or newer and still
        serving it (its ``serves_from`` is a revision this release ships)."""
        if self.at_head:
            return True
        chain = shipped_chain() or ()
        return self.newer and self.serves_from in chain

    def error(self, schema: str) -> SchemaNotReadyError:
        """Why this release cannot use the schema, with what helps."""
        if self.newer:
            served = (f"it serves releases from revision {self.serves_from} on" if self.serves_from
                      else "it does not say which older releases it serves")
            return SchemaNotReadyError(
                f"schema {schema!r} is at revision {self.revision}, newer than this tnsrag_db (head {self.head}), "
                f"and {served}: upgrade tnsrag_db to a release that ships revision {self.revision}")
        state = "not migrated" if self.revision is None else f"at revision {self.revision}"
        return SchemaNotReadyError(
            f"schema {schema!r} is {state}, this tnsrag_db needs {self.head}: run `tnsrag db upgrade --url ...` "
            "(or connect with auto_migrate=True)")


#: SQLSTATE undefined_table.
_UNDEFINED_TABLE = "42P01"


def schema_revisions_plan(schema: str) -> Plan[list[str] | None]:
    """The alembic revisions recorded in ``schema`` (this release's head alone: migrated
    to head), or None when it has no version table (schema missing or never migrated).
    One statement; raises :class:`ConfigurationError` for a bad schema name."""
    validate_schema_name(schema)
    try:
        # The schema name matched [a-z_][a-z0-9_]* above, so it is safe as an identifier.
        rows = yield Statement(f"SELECT version_num FROM {schema}.alembic_version", {}, ("version_num",))
    except DatabaseError as exc:
        if exc.sqlstate != _UNDEFINED_TABLE:
            raise
        return None  # run in autocommit (every runner's reads): the connection stays usable
    return [str(r.version_num) for r in rows]


def schema_state_plan(schema: str) -> Plan[SchemaState | None]:
    """Where ``schema`` stands for this release (:class:`SchemaState`), or None when this
    installation's revisions cannot be read without alembic. One statement for a schema
    this release knows; a newer one's ``tnsrag_schema_compat()`` is looked up and read
    after it. Raises :class:`ConfigurationError` for a bad schema name."""
    chain = shipped_chain()
    revisions = yield from schema_revisions_plan(schema)
    if chain is None:
        return None
    head = chain[-1]
    if not revisions:
        return SchemaState(None, head)
    if len(revisions) > 1 or revisions[0] in chain:
        return SchemaState(",".join(revisions), head)
    # A revision of a later release: ask the schema which releases it still serves.
    rows = yield Statement("SELECT to_regprocedure(:f) IS NOT NULL AS present",
                           {"f": f"{schema}.{COMPAT_FUNCTION}()"}, ("present",))
    floor = None
    if rows[0].present:
        rows = yield Statement(f"SELECT serves_from FROM {schema}.{COMPAT_FUNCTION}()", {}, ("serves_from",))
        floor = str(rows[0].serves_from) if rows and rows[0].serves_from is not None else None
    return SchemaState(revisions[0], head, newer=True, serves_from=floor)


def is_at_head(db: Connections, *, schema: str) -> bool:
    """True when ``schema`` is at this release's head, checked with one query and no alembic
    (False also when that cannot be decided cheaply: callers then take the full alembic path)."""
    head = shipped_head()
    if head is None:
        return False
    validate_schema_name(schema)
    with db.connect() as conn:
        if not conn.execute("SELECT to_regclass(:t) IS NOT NULL", {"t": f"{schema}.alembic_version"}).scalar_one():
            return False
        # The schema name matched [a-z_][a-z0-9_]* above, so it is safe as an identifier.
        versions = conn.execute(f"SELECT version_num FROM {schema}.alembic_version").scalars()
    return list(versions) == [head]


def schema_state(db: Connections, *, schema: str) -> SchemaState:
    """Where ``schema`` stands for this release: at its head, behind, not migrated, or newer
    (and whether it still serves this release); see :class:`SchemaState`. Raises
    :class:`MigrationError` when this installation's revision files are not one chain."""
    with db.connect(autocommit=True) as conn:

        def execute(statement: Statement) -> Rows:
            with map_db_errors("reading the schema's revision"):
                return conn.execute(statement.sql, dict(statement.params)).all()

        state = run_plan(schema_state_plan(schema), execute)
    if state is None:
        # Not one chain of literal revisions (a branch, a merge): alembic's "head" is then
        # ambiguous too, and no release ships so.
        raise MigrationError(f"the revision files in {migrations_dir() / 'versions'} are not one chain of "
                             "revisions (a branch or a merge revision): this installation cannot tell "
                             f"where schema {schema!r} stands")
    return state


def ensure_at_head(db: Connections, *, schema: str) -> None:
    """Raise :class:`SchemaNotReadyError` unless this release can use ``schema``: migrated to
    its head, or upgraded by a later release that still serves it (logged once)."""
    if is_at_head(db, schema=schema):
        return
    state = schema_state(db, schema=schema)
    if not state.usable:
        raise state.error(schema)
    if state.newer:
        _log.info("schema %r is at revision %s, newer than this tnsrag_db (head %s), and still serves it "
                  "(from revision %s)", schema, state.revision, state.head, state.serves_from)
