"""The connection settings a user gives, checked without importing SQLAlchemy: a schema
name (:func:`validate_schema_name`), a statement timeout (:func:`check_timeout`) and a
database URL in libpq form (:func:`libpq_url`)."""

from __future__ import annotations

import re

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._validate import is_number

__all__ = ["DEFAULT_SCHEMA", "check_timeout", "libpq_url", "validate_schema_name"]

#: The PostgreSQL schema that holds the library's tables unless configured otherwise.
DEFAULT_SCHEMA = "tnsrag"

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def libpq_url(url: str) -> str | None:
    """``url`` (libpq or SQLAlchemy form: ``postgresql://``, ``postgres://``,
    ``postgresql+psycopg://``) as a libpq URL, or None when it is no PostgreSQL URL of
    that shape (the caller then says what is wrong with it)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.partition("+")[0] not in ("postgresql", "postgres"):
        return None
    return f"postgresql://{rest}"


def validate_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case identifier (``[a-z_][a-z0-9_]*``, ≤ 63 chars).

    Raises :class:`ConfigurationError` otherwise. Only such names are accepted, so the
    schema can be quoted safely wherever PostgreSQL needs an identifier.
    """
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise ConfigurationError(
            f"schema name must match [a-z_][a-z0-9_]* and be at most 63 characters, got {schema!r}"
        )
    return schema


def check_timeout(seconds: object, what: str = "statement_timeout") -> int | None:
    """``seconds`` (None, or a positive finite number) as whole milliseconds (at least 1)."""
    if seconds is None:
        return None
    if not is_number(seconds) or not 0 < seconds < 86_400 * 24:  # type: ignore[operator]
        raise ConfigurationError(f"{what} must be None or a positive number of seconds (under 24 days), "
                                 f"got {seconds!r}")
    return max(1, round(float(seconds) * 1000))  # type: ignore[arg-type]
