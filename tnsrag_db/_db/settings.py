"""The connection settings a user gives, checked without importing SQLAlchemy or opening
anything: a schema name (:func:`validate_schema_name`), a statement timeout
(:func:`check_timeout`), and database URLs: in libpq form (:func:`libpq_url`), as a
connection string with the library's start-up options (:func:`conninfo_of`), back as a
URL (:func:`url_of`) and shown without their password (:func:`redact_url`,
:func:`location_of`)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import psycopg.conninfo

from tnsrag_db._errors import ConfigurationError
from tnsrag_db._validate import is_number

__all__ = ["DEFAULT_SCHEMA", "check_timeout", "conninfo_of", "libpq_url", "location_of", "redact_url", "url_of",
           "validate_schema_name"]

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


_PASSWORD = re.compile(r"://([^:/@]*):[^@]*@")


def redact_url(url: object) -> str:
    """``url`` as text for messages, its password hidden."""
    if hasattr(url, "render_as_string"):  # a SQLAlchemy URL the application holds
        return str(url.render_as_string(hide_password=True))
    return _PASSWORD.sub(r"://\1:***@", str(url))


def _url_text(url: object) -> str:
    if hasattr(url, "render_as_string") and hasattr(url, "query"):
        # A SQLAlchemy URL the application holds: its parts as libpq keywords (its rendered
        # text would carry a query's spaces as '+', which libpq does not decode).
        parts: dict[str, Any] = {"user": getattr(url, "username", None), "password": getattr(url, "password", None),
                                 "host": getattr(url, "host", None), "port": getattr(url, "port", None),
                                 "dbname": getattr(url, "database", None)}
        for key, value in dict(getattr(url, "query", {})).items():
            parts[key] = value if isinstance(value, str) else ",".join(value)
        return psycopg.conninfo.make_conninfo("", **{k: v for k, v in parts.items() if v is not None})
    if not isinstance(url, str):
        raise ConfigurationError(f"a database URL must be a str, got {type(url).__name__}")
    return url


def conninfo_of(url: object, *, schema: str | None = None, read_only: bool = False) -> str:
    """The libpq connection string of ``url`` (``postgresql://``, ``postgres://`` or the
    SQLAlchemy form ``postgresql+psycopg://``; a SQLAlchemy ``URL`` object too), with the
    library's start-up options after the URL's own ``options`` (which they win over): the
    ``search_path`` ``<schema>, public`` and, with ``read_only``, the read-only default.
    Raises :class:`ConfigurationError` for a URL that is not PostgreSQL's."""
    text = _url_text(url)
    libpq = libpq_url(text)
    if libpq is None and "://" not in text and "=" in text:
        libpq = text  # a libpq key=value string (a pool's conninfo)
    if libpq is None:
        scheme = text.partition("://")[0].partition("+")[0] if "://" in text else ""
        if scheme:
            raise ConfigurationError(f"tnsrag_db needs PostgreSQL, got a {scheme!r} URL")
        raise ConfigurationError(f"not a database URL: {redact_url(text)}")
    try:
        params = psycopg.conninfo.conninfo_to_dict(libpq)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"not a database URL: {redact_url(text)}: {exc}") from exc
    if schema is not None:
        validate_schema_name(schema)
        ours = f"-c search_path={schema},public" + (" -c default_transaction_read_only=on" if read_only else "")
        given = params.get("options")
        params["options"] = f"{given} {ours}" if given else ours
    return psycopg.conninfo.make_conninfo("", **params)


def url_of(conninfo: str, **changes: str | None) -> str:
    """A ``postgresql://`` URL of the libpq connection string or URL ``conninfo``, with
    ``changes`` (libpq keywords: ``dbname="tnsrag"``) applied; a socket directory as host
    goes to the query (``postgresql://user@/db?host=/run/sock``)."""
    params = psycopg.conninfo.conninfo_to_dict(libpq_url(conninfo) or conninfo)
    params.update(changes)
    user = quote(str(params.pop("user", "") or ""), safe="")
    password = params.pop("password", None)
    shown = "***" if password == "***" else quote(str(password), safe="")
    auth = f"{user}:{shown}@" if password is not None else (f"{user}@" if user else "")
    host = str(params.get("host") or "")
    netloc = ""
    if host and not host.startswith("/") and "," not in host:
        params.pop("host")
        port = params.pop("port", None)
        netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    database = quote(str(params.pop("dbname", "") or ""), safe="")
    query = urlencode({k: str(v) for k, v in params.items() if v is not None}, safe="/")
    return f"postgresql://{auth}{netloc}/{database}" + (f"?{query}" if query else "")


def location_of(url: object) -> str:
    """``url`` as the text a store's ``location`` shows: a ``postgresql://`` URL with its
    password hidden (``***``)."""
    conninfo = conninfo_of(url)
    hidden = "***" if psycopg.conninfo.conninfo_to_dict(conninfo).get("password") is not None else None
    return url_of(conninfo, password=hidden)
