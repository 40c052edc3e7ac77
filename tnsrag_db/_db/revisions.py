"""Which revision the shipped migrations and a schema are at, read without alembic (the
CLI's lean path checks a schema before every query and cannot pay alembic's import)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from tnsrag_db._db.settings import validate_schema_name
from tnsrag_db._db.statement import Plan, Statement
from tnsrag_db._errors import DatabaseError

__all__ = ["migrations_dir", "schema_revisions_plan", "shipped_head"]

_REVISION_RE = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_DOWN_REVISION_RE = re.compile(r"^down_revision(?:\s*:[^=]+)?\s*=\s*(None|['\"]([^'\"]+)['\"])", re.M)


def migrations_dir() -> Path:
    """The folder holding ``env.py`` and ``versions/``: the packaged copy, else the source tree's."""
    try:
        import tnsrag_db._migrations as packaged  # type: ignore[import-not-found]

        return Path(packaged.__file__).parent
    except ImportError:
        return Path(__file__).resolve().parents[2] / "migrations"


@lru_cache(maxsize=1)
def shipped_head() -> str | None:
    """This installation's head revision read from the revision files (no alembic), or None
    when they are not a plain linear chain of literal ``revision``/``down_revision`` strings."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (migrations_dir() / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        rev, down = _REVISION_RE.search(source), _DOWN_REVISION_RE.search(source)
        if rev is None and down is None:
            continue  # __init__.py and helpers
        if rev is None or down is None:
            return None
        revisions.add(rev.group(1))
        if down.group(2) is not None:
            parents.add(down.group(2))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


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
