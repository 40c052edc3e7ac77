"""``@retrieval``: retrieval before an action, on a method or on a whole role class.

The decorated action receives the result as its ``retrieved`` keyword argument (a
:class:`RetrievalResult` with ``documents`` and numbered ``context`` text); callers do
not pass it. Errors are sorted in two kinds:

* configuration and binding errors (:class:`ConfigurationError`, :class:`ValidationError`
  such as a bad query argument or filter, :class:`StrategyUnavailableError`) are always
  raised;
* run-time retrieval and provider failures (other :class:`RetrievalError` s such as
  :class:`ProviderBusyError`, :class:`ProviderTransportError`, :class:`ExecutionError`;
  :class:`EmbeddingValidationError` for a bad vector from the provider; and
  :class:`DatabaseError`) follow ``on_failure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, ParamSpec, Protocol, TypeVar

from tnsrag_db._errors import ConfigurationError, TnsragError
from tnsrag_db._types import validate_filters
from tnsrag_db.declarative._binding import QueryBinding, plan_binding
from tnsrag_db.declarative._config import CONFIG_ATTRIBUTE, OnFailure, RetrievalConfig, strip_reserved
from tnsrag_db.declarative._result import RetrievalResult
from tnsrag_db.declarative._runtime import retrieve_for

__all__ = ["is_runtime_failure", "retrieval", "retrieval_filters"]

_log = logging.getLogger("tnsrag_db.declarative")
_T = TypeVar("_T")
_R = TypeVar("_R")
_P = ParamSpec("_P")

_request_filters: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "tnsrag_db_request_filters", default=MappingProxyType({}))


@contextlib.contextmanager
def retrieval_filters(filters: Mapping[str, str]) -> Iterator[None]:
    """Add request filters to every declarative retrieval run inside the block (this thread/task).

    They are merged over each action's ``metadata_filters`` (the request's value wins for
    a key both name). Reserved ``tnsai.chat.*`` keys are request context: they are dropped
    before filtering. Nested blocks merge. Filter values are checked when an action runs
    (:class:`InvalidFilterError`, always raised).
    """
    if not isinstance(filters, Mapping):
        raise ConfigurationError(f"retrieval_filters needs a mapping of str to str, got {type(filters).__name__}")
    token = _request_filters.set(MappingProxyType({**_request_filters.get(), **filters}))
    try:
        yield
    finally:
        _request_filters.reset(token)


def effective_filters(config: RetrievalConfig) -> Mapping[str, str]:
    """The action's filters merged with the request's, ``tnsai.chat.*`` removed, validated."""
    merged = {**config.metadata_filters, **_request_filters.get()}
    return validate_filters(strip_reserved(merged))


def is_runtime_failure(exc: BaseException) -> bool:
    """True for the errors ``on_failure`` applies to (retrieval, provider and database failures):
    each library error class says so itself (:attr:`TnsragError.runtime_failure`)."""
    return isinstance(exc, TnsragError) and exc.runtime_failure


def _run(role: object, config: RetrievalConfig, query: str) -> RetrievalResult:
    filters = effective_filters(config)
    try:
        documents = retrieve_for(role, config, query, filters)
    except TnsragError as exc:
        if config.on_failure is OnFailure.CONTINUE_EMPTY and is_runtime_failure(exc):
            _log.warning("retrieval for %s failed; continuing with empty context: %s",
                         type(role).__qualname__, exc)
            return RetrievalResult.of(query, [], config.strategy, failure=exc)
        raise
    return RetrievalResult.of(query, documents, config.strategy)


def _wrap(func: Callable[..., Any], config: RetrievalConfig, binding: QueryBinding) -> Callable[..., Any]:
    self_name = next(iter(binding.signature.parameters))
    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            query, arguments = binding.bind(args, kwargs)
            # Retrieval blocks on the database and the provider: keep it off the event loop.
            result = await asyncio.to_thread(_run, arguments[self_name], config, query)
            return await binding.call(func, arguments, result)

        wrapper = async_wrapper
    else:
        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            query, arguments = binding.bind(args, kwargs)
            result = _run(arguments[self_name], config, query)
            return binding.call(func, arguments, result)

        wrapper = sync_wrapper
    setattr(wrapper, "__signature__", binding.call_signature)
    setattr(wrapper, CONFIG_ATTRIBUTE, config)
    return wrapper


def _actions(cls: type) -> dict[str, Callable[..., Any]]:
    return {name: value for name, value in cls.__dict__.items()
            if not name.startswith("_") and inspect.isfunction(value)}


class RetrievalDecorator(Protocol):
    """What ``@retrieval(...)`` returns: applied to an action or a role class, it returns the same kind."""

    def __call__(self, target: _T, /) -> _T: ...


def _options_of(factory: Callable[_P, object]) -> Callable[[Callable[..., _R]], Callable[_P, _R]]:
    """Give the decorated function the parameters of ``factory``, for type checkers (through
    the ParamSpec) and for :func:`inspect.signature` / ``help()``: the options are written
    once, on :meth:`RetrievalConfig.create`, and ``retrieval`` forwards them."""

    def adopt(func: Callable[..., _R]) -> Callable[_P, _R]:
        own = inspect.signature(func)
        setattr(func, "__signature__", own.replace(parameters=list(inspect.signature(factory).parameters.values())))
        return func

    return adopt


@_options_of(RetrievalConfig.create)
def retrieval(*args: Any, **options: Any) -> RetrievalDecorator:
    """Retrieve before an action; on a method, or on a role class (every action of it).

    Options (defaults in brackets):

    - ``strategy`` [HYBRID]: one of the eight :class:`RetrievalStrategy` modes;
    - ``top_k`` [5]: documents the action receives, at most;
    - ``rerank_top_n`` [0] with ``reranker``: retrieve N ≥ top_k candidates, pass them
      to ``reranker(query, documents)`` and keep its first ``top_k``;
    - ``min_score`` [0.0]: inclusive lower bound on the strategy's score;
    - ``metadata_filters`` [none]: exact-match filters on the documents' metadata
      (tier, entryId, source and the loaders' own keys), applied before top-K
      (top-N when reranking); ``tnsai.chat.*`` keys are dropped;
    - ``query_param`` [""]: the parameter whose argument is the query; blank binds the
      first parameter annotated ``str``. On a class the name must exist on every action;
    - ``on_failure`` [RAISE]: RAISE or CONTINUE_EMPTY for run-time failures;
    - ``deduplicate`` [True], ``dedup_threshold`` [0.95]: collapse near-duplicate results
      (cosine of the process provider's embeddings ≥ threshold) to the best one;
    - REASONING: ``navigator_model`` (required) and ``navigator`` (default: the one
      installed entry point of ``tnsrag_db.tree_navigators``, else ``"lexical"``);
    - MULTI_QUERY: ``expansion_mode`` (not NONE) and ``expansion_model`` (required),
      ``expander`` (default: ``"rm3"`` for RM3; for the LLM modes the one installed entry
      point of ``tnsrag_db.query_expanders`` — none is "not available", several a
      configuration error naming them), ``max_expansions`` [3].

    The action must declare a keyword parameter ``retrieved``; it receives a
    :class:`RetrievalResult`. On a class, "every action" means every public function
    defined in the class body; a method with its own ``@retrieval`` keeps it.
    Raises :class:`ConfigurationError` (or :class:`InvalidFilterError`) when decorating.
    """
    config = RetrievalConfig.create(*args, **options)

    def decorate(target: _T) -> _T:
        if isinstance(target, type):
            actions = _actions(target)
            if not actions:
                raise ConfigurationError(f"class-level @retrieval on {target.__qualname__}: the class defines no "
                                         "public action methods")
            plans = {name: plan_binding(func, config.query_param, class_level=target.__qualname__)
                     for name, func in actions.items() if not hasattr(func, CONFIG_ATTRIBUTE)}
            for name, plan in plans.items():
                setattr(target, name, _wrap(actions[name], config, plan))
            return target
        if isinstance(target, (staticmethod, classmethod)) or not callable(target):
            raise ConfigurationError("@retrieval decorates action methods (plain or async functions) or role classes")
        wrapped: _T = _wrap(target, config, plan_binding(target, config.query_param))  # type: ignore[assignment]
        return wrapped

    return decorate


