"""Shared CLI plumbing: database options, JSON output, error reporting.

The root group is defined in ``tnsrag_db/_cli/__init__.py`` (commands register there, in
``COMMANDS``).
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from tnsrag_db._cli._group import did_you_mean
from tnsrag_db._db.settings import DEFAULT_SCHEMA
from tnsrag_db._errors import TnsragError

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["DEFAULT_SCHEMA", "STRATEGY_ALIASES", "Suggesting", "db_options", "emit", "error_text", "handle_errors",
           "natural_key", "parse_pairs", "plural"]

#: Words people type for a strategy of another name (the suggestion names the strategy).
STRATEGY_ALIASES = {"semantic": "vector", "dense": "vector", "embedding": "vector", "embeddings": "vector",
                    "knn": "vector", "ann": "vector", "bm25": "keyword", "lexical": "keyword", "fulltext": "keyword",
                    "full-text": "keyword", "sparse": "keyword", "text": "keyword", "rrf": "hybrid",
                    "fusion": "hybrid"}


class Suggesting(click.Choice):  # type: ignore[type-arg]
    """A :class:`click.Choice` whose error for a value it does not know suggests the close
    choices (:func:`~tnsrag_db._cli._group.did_you_mean`), and the choice an ``aliases`` word stands for
    (``semantic`` -> ``vector``)."""

    def __init__(self, choices: Sequence[str], aliases: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(choices, **kwargs)
        self.aliases = dict(aliases or {})

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            hint = did_you_mean(str(value), [str(c) for c in self.choices], self.aliases)
            self.fail(f"{exc.message}{hint}", param, ctx)




def db_options(func: F) -> F:
    """Add --url and --schema options (url from TNSRAG_DATABASE_URL)."""
    func = click.option("--schema", default=DEFAULT_SCHEMA, show_default=True,
                        help="PostgreSQL schema holding the library's tables.")(func)
    func = click.option("--url", envvar="TNSRAG_DATABASE_URL", default=None,
                        help="Database URL (libpq or SQLAlchemy form). Default: the embedded server.")(func)
    return func


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key putting numbers in text in numeric order: ``a.md#2`` before ``a.md#10``."""
    parts = re.split(r"(\d+)", text)
    return (*(int(p) if i % 2 else p for i, p in enumerate(parts)), text)


def plural(n: Any, singular: str, many: str | None = None) -> str:
    """``n`` and the noun agreeing with it: ``1 entry``, ``2 entries``, ``3 files``."""
    if n == 1:
        return f"1 {singular}"
    if many is None:
        many = singular[:-1] + "ies" if singular.endswith("y") and singular[-2:-1] not in "aeiou" else singular + "s"
    return f"{n} {many}"


def emit(data: Any, as_json: bool, text: str | None = None) -> None:
    """Print ``data`` as JSON, or ``text`` for people."""
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str, ensure_ascii=False))
    elif text is not None:
        click.echo(text)


#: What SQLAlchemy adds to a driver's message: the error class in front, then on lines of
#: their own the statement, its parameters and a link to its documentation (the library's
#: messages carry the driver's own words; these are for the ones that reach the CLI whole).
_SQLALCHEMY_CLASS = re.compile(r"\((?:psycopg|psycopg2|sqlalchemy)(?:\.\w+)+\) ")
_SQLALCHEMY_TAIL = re.compile(r"\n(?:\[SQL: |\[parameters: |\(Background on this error at: ).*", re.DOTALL)


def error_text(exc: BaseException) -> str:
    """The message of ``exc`` as the CLI prints it after ``error:``: without SQLAlchemy's
    class tag, statement, parameters and documentation link."""
    return _SQLALCHEMY_TAIL.sub("", _SQLALCHEMY_CLASS.sub("", str(exc))).strip()


def handle_errors(func: F) -> F:
    """Turn library errors into a one-line message and exit status 1 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TnsragError as exc:
            click.echo(f"error: {error_text(exc)}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def parse_pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; a usage error (exit 2) naming ``option`` for a malformed one."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        out[key] = value
    return out
