"""Small shared checks for arguments at the public boundary.

Each check returns the value it accepted (normalised where it says so) or raises the
error class it is given (``ValidationError`` for call arguments by default, the caller
passes ``ConfigurationError`` for constructor options), with a message naming the
argument. ``bool`` is never accepted as a number.
"""

from __future__ import annotations

import math
import numbers
from typing import NoReturn, TypeGuard

from tnsrag_db._errors import TnsragError, ValidationError

__all__ = ["check_int", "check_number", "check_prefix", "check_query_text", "is_int", "is_number"]


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


def check_query_text(query: object) -> str:
    """``query`` if it is a str of Unicode text without NUL (blank allowed); :class:`ValidationError`
    naming the problem otherwise (PostgreSQL text can hold neither NUL nor a lone surrogate)."""
    if not isinstance(query, str):
        raise ValidationError(f"query must be a string, got {type(query).__name__}")
    if "\x00" in query:
        raise ValidationError("query contains a NUL character")
    if not query.isascii():
        try:
            query.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError("query contains a lone surrogate (not Unicode text)") from None
    return query
