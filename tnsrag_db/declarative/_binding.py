"""Query binding: which argument of an action becomes the retrieval query.

Rules (the SPI's ``queryParam``):

* ``query_param=""`` (the default) binds the first parameter annotated ``str``, in
  declaration order (``self`` and the ``retrieved`` parameter never count);
* a name binds that parameter;
* both are resolved when the decorator runs, so a missing name or an action without
  a ``str`` parameter is a :class:`ConfigurationError` at class definition;
* at call time a missing argument or a non-string value is a :class:`ValidationError`,
  raised before the ``on_failure`` policy is consulted.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tnsrag_db._errors import ConfigurationError, ValidationError

__all__ = ["RESULT_PARAMETER", "QueryBinding", "is_str_annotation", "plan_binding"]

#: The keyword parameter through which an action receives its :class:`RetrievalResult`.
RESULT_PARAMETER = "retrieved"

_BINDABLE = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)


def is_str_annotation(annotation: object) -> bool:
    """True for ``str`` itself or the string ``"str"`` (postponed annotations)."""
    return annotation is str or annotation in ("str", "builtins.str")


def describe(func: Callable[..., Any]) -> str:
    """``Class.method`` (the qualified name) of ``func`` for error messages."""
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


@dataclass(frozen=True, slots=True)
class QueryBinding:
    """How one action's call is bound: the query parameter and the signatures to bind with."""

    #: The name of the parameter whose argument is the query.
    parameter: str
    #: The action's full signature (with ``retrieved``).
    signature: inspect.Signature
    #: The signature callers see (without ``retrieved``).
    call_signature: inspect.Signature
    #: ``Class.method`` for messages.
    action: str

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Bind a call; returns ``(query, arguments)`` (arguments in declaration order, defaults applied).

        Raises :class:`ValidationError` when the arguments do not fit the signature, the
        query argument is missing, or it is not a ``str``.
        """
        if RESULT_PARAMETER in kwargs:
            raise ValidationError(f"action {self.action}: {RESULT_PARAMETER!r} is supplied by @retrieval; "
                                  "do not pass it")
        try:
            bound = self.call_signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ValidationError(f"action {self.action}: cannot bind the query parameter "
                                  f"{self.parameter!r}: {exc}") from None
        bound.apply_defaults()
        if self.parameter not in bound.arguments:
            raise ValidationError(f"action {self.action}: the query parameter {self.parameter!r} was not given")
        query = bound.arguments[self.parameter]
        if not isinstance(query, str):
            raise ValidationError(f"action {self.action}: the query parameter {self.parameter!r} must be a str, "
                                  f"got {type(query).__name__}")
        return query, dict(bound.arguments)

    def call(self, func: Callable[..., Any], arguments: Mapping[str, Any], result: object) -> Any:
        """Call ``func`` with the bound ``arguments`` plus ``retrieved=result``."""
        merged = {**arguments, RESULT_PARAMETER: result}
        ordered = {name: merged[name] for name in self.signature.parameters if name in merged}
        final = inspect.BoundArguments(self.signature, ordered)
        return func(*final.args, **final.kwargs)


def plan_binding(func: Callable[..., Any], query_param: str, *, action: str | None = None,
                 class_level: str | None = None) -> QueryBinding:
    """Resolve the query parameter of ``func`` (a method: its first parameter is the role instance).

    ``class_level`` names the class when the rule comes from a class-level ``@retrieval``
    (the message then tells the user to decorate each method). Raises
    :class:`ConfigurationError` as the module docstring says, and when ``func`` has no
    ``retrieved`` parameter that can be passed by keyword.
    """
    name = action or describe(func)
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"@retrieval cannot read the signature of {name}: {exc}") from exc
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                            inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise ConfigurationError(f"@retrieval decorates methods of a role class; {name} has no 'self' parameter")
    own = params[1:]
    result = signature.parameters.get(RESULT_PARAMETER)
    if result is None or result.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                             inspect.Parameter.KEYWORD_ONLY):
        raise ConfigurationError(
            f"action {name} must declare a keyword parameter {RESULT_PARAMETER!r} (for example "
            f"'*, {RESULT_PARAMETER}: RetrievalResult'): @retrieval passes the retrieved documents "
            "and the formatted context through it")
    candidates = [p for p in own if p.name != RESULT_PARAMETER and p.kind in _BINDABLE]
    hint = f"; put @retrieval on each method of {class_level} instead" if class_level else ""
    if query_param.strip():
        chosen = next((p for p in candidates if p.name == query_param), None)
        if chosen is None:
            raise ConfigurationError(
                f"@retrieval(query_param={query_param!r}): action {name} has no parameter {query_param!r} "
                f"(parameters: {', '.join(p.name for p in candidates) or 'none'}){hint}")
        if chosen.annotation is not inspect.Parameter.empty and not is_str_annotation(chosen.annotation):
            raise ConfigurationError(
                f"@retrieval(query_param={query_param!r}): parameter {query_param!r} of action {name} is annotated "
                f"{chosen.annotation!r}, not str{hint}")
    else:
        chosen = next((p for p in candidates if is_str_annotation(p.annotation)), None)
        if chosen is None:
            raise ConfigurationError(
                f"action {name} has no parameter annotated str to bind the query to; annotate the query "
                f"parameter as str or name it with query_param=...{hint}")
    call_signature = signature.replace(parameters=[p for p in params if p.name != RESULT_PARAMETER])
    return QueryBinding(chosen.name, signature, call_signature, name)
