"""Small shared checks for arguments at the public boundary.

Each check returns the value it accepted (normalised where it says so) or raises the
error class it is given (``ValidationError`` for call arguments by default, the caller
passes ``ConfigurationError`` for constructor options), with a message naming the
argument. ``bool`` is never accepted as a number.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import NoReturn, TypeGuard

from tnsrag_db._errors import TnsragError, ValidationError

__all__ = ["check_int", "check_number", "check_prefix", "check_query", "check_query_text", "check_text", "is_int",
           "is_number", "is_unicode_text"]


def is_int(value: object) -> TypeGuard[int]:
    """True for an ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """True for a real number (``int``, ``float``, ``numpy`` scalars) that is not a ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fail(error: type[TnsragError], message: str) -> NoReturn:
    raise error(message)


def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None,
              error: type[TnsragError] = ValidationError) -> int:
    """``value`` if it is an int within ``[minimum, maximum]`` (each bound optional)."""
    if not is_int(value):
        _fail(error, f"{name} must be an int, got {value!r}")
    assert isinstance(value, int)
    if minimum is not None and value < minimum:
        _fail(error, f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        _fail(error, f"{name} must be at most {maximum}, got {value}")
    return value


def check_number(value: object, name: str, *, minimum: float | None = None, maximum: float | None = None,
                 above: float | None = None, error: type[TnsragError] = ValidationError) -> float:
    """``float(value)`` if it is a finite real number within the bounds: ``minimum`` and
    ``maximum`` inclusive, ``above`` exclusive (each optional)."""
    if not is_number(value) or not math.isfinite(float(value)):  # type: ignore[arg-type]
        _fail(error, f"{name} must be a finite number, got {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if minimum is not None and number < minimum:
        _fail(error, f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and number > maximum:
        _fail(error, f"{name} must be at most {maximum}, got {value!r}")
    if above is not None and not number > above:
        _fail(error, f"{name} must be > {above}, got {value!r}")
    return number


def check_prefix(prefix: object, *, error: type[TnsragError] = ValidationError) -> str:
    """A bind-parameter prefix: a short lower-case identifier (``[a-z][a-z0-9_]*``, at most 20)."""
    if (not isinstance(prefix, str) or not prefix or len(prefix) > 20 or not prefix[0].isascii()
            or not prefix[0].isalpha() or not prefix[0].islower()
            or any(not (c.isascii() and (c.islower() or c.isdigit() or c == "_")) for c in prefix)):
        _fail(error, f"prefix must be a short lower-case identifier ([a-z][a-z0-9_]*), got {prefix!r}")
    return prefix


def is_unicode_text(value: str) -> bool:
    """False when ``value`` holds a lone surrogate (``"\\ud800"``): such a str is not Unicode
    text, has no UTF-8 form, and PostgreSQL cannot store or compare it."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(value: object, what: str, *, blank_ok: bool = False, blank_message: str = "{what} must not be blank",
               error: Callable[[str], TnsragError] = ValidationError) -> str:
    """``value`` if it is a str that PostgreSQL text can hold (neither a NUL character nor a lone
    surrogate) and, unless ``blank_ok``, not blank (empty or whitespace only); else
    ``error(message)``, the message naming ``what`` (``blank_message``, formatted with ``what``
    and ``value``, is the one of a blank value). The one text check of the library: queries,
    entry fields and metadata filters all go through it."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}")
    # Neither NUL nor a lone surrogate is whitespace: the order of the checks below is free.
    if not blank_ok and not value.strip():
        raise error(blank_message.format(what=what, value=value))
    if "\x00" in value:
        raise error(f"{what} contains a NUL character")
    if not is_unicode_text(value):
        raise error(f"{what} contains a lone surrogate (not Unicode text)")
    return value


def check_query(query: object, *, blank_ok: bool = False,
                error: Callable[[str], TnsragError] = ValidationError) -> str:
    """``query`` if it is Unicode text without NUL and, unless ``blank_ok``, not blank: a blank
    query has no meaning for any strategy (an error instead of arbitrary results). Else
    ``error(message)`` (default :class:`ValidationError`) naming the problem."""
    return check_text(query, "query", blank_ok=blank_ok, error=error,
                      blank_message="query is blank ({value!r}); give some text to search for")


def check_query_text(query: object) -> str:
    """:func:`check_query` with a blank query allowed (the indexes' own query methods)."""
    return check_query(query, blank_ok=True)
