"""The options of ``@retrieval``: the eight modes, failure policies and the validated config."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from tnsrag_db._errors import ConfigurationError, InvalidFilterError
from tnsrag_db._types import RetrievedDocument, validate_filters
from tnsrag_db._validate import is_int, is_number

__all__ = [
    "DEFAULT_DEDUP_THRESHOLD",
    "RESERVED_REQUEST_PREFIX",
    "OnFailure",
    "Reranker",
    "RetrievalConfig",
    "RetrievalStrategy",
    "retrieval_config",
    "strip_reserved",
]

_E = TypeVar("_E", bound=enum.Enum)

#: Metadata keys with this prefix are request (chat lifecycle) context, never document predicates.
RESERVED_REQUEST_PREFIX = "tnsai.chat."

#: Cosine similarity at or above which two retrieved documents count as near duplicates.
DEFAULT_DEDUP_THRESHOLD = 0.95

#: A reranker: ``(query, documents) -> documents`` best first (it may rescore, reorder or drop).
Reranker = Callable[[str, list[RetrievedDocument]], Sequence[RetrievedDocument]]


class RetrievalStrategy(enum.Enum):
    """The eight declarative retrieval modes (the SPI's ``@Retrieval`` strategies)."""

    SEMANTIC = "SEMANTIC"
    KEYWORD = "KEYWORD"
    HYBRID = "HYBRID"
    GRAPH = "GRAPH"
    MULTI_QUERY = "MULTI_QUERY"
    HIERARCHICAL = "HIERARCHICAL"
    TEMPORAL = "TEMPORAL"
    REASONING = "REASONING"


class OnFailure(enum.Enum):
    """What an action does when retrieval or its embedding provider fails at run time.

    Configuration errors (bad decorator options, two embedding providers, a mode that
    is not installed) and query binding errors are always raised, whatever the policy.
    """

    #: Raise the failure to the caller of the action (the default).
    RAISE = "RAISE"
    #: Call the action with an empty result whose ``failure`` holds the error.
    CONTINUE_EMPTY = "CONTINUE_EMPTY"


def strip_reserved(filters: Mapping[str, str]) -> dict[str, str]:
    """``filters`` without the reserved ``tnsai.chat.*`` request-context keys."""
    return {k: v for k, v in filters.items() if not (isinstance(k, str) and k.startswith(RESERVED_REQUEST_PREFIX))}


def _positive_int(value: object, what: str, *, minimum: int = 1) -> int:
    if not (is_int(value) and value >= minimum):
        raise ConfigurationError(f"{what} must be an int >= {minimum}, got {value!r}")
    return value


def _optional_name(value: object, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{what} must be None or a non-blank string, got {value!r}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrievalConfig:
    """The validated options of one ``@retrieval`` declaration (see :func:`retrieval`)."""

    strategy: RetrievalStrategy = RetrievalStrategy.HYBRID
    top_k: int = 5
    rerank_top_n: int = 0
    reranker: Reranker | None = None
    min_score: float = 0.0
    metadata_filters: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    query_param: str = ""
    on_failure: OnFailure = OnFailure.RAISE
    deduplicate: bool = True
    dedup_threshold: float = DEFAULT_DEDUP_THRESHOLD
    navigator: str | None = None
    navigator_model: str | None = None
    expander: str | None = None
    expansion_mode: object = None
    expansion_model: str | None = None
    max_expansions: int = 3

    @classmethod
    def create(
        cls,
        strategy: RetrievalStrategy | str = RetrievalStrategy.HYBRID,
        *,
        top_k: int = 5,
        rerank_top_n: int = 0,
        reranker: Reranker | None = None,
        min_score: float = 0.0,
        metadata_filters: Mapping[str, str] | None = None,
        query_param: str = "",
        on_failure: OnFailure | str = OnFailure.RAISE,
        deduplicate: bool = True,
        dedup_threshold: float = DEFAULT_DEDUP_THRESHOLD,
        navigator: str | None = None,
        navigator_model: str | None = None,
        expander: str | None = None,
        expansion_mode: object = None,
        expansion_model: str | None = None,
        max_expansions: int = 3,
    ) -> RetrievalConfig:
        """Validate every option; raises :class:`ConfigurationError` (or :class:`InvalidFilterError`).

        This is the one written list of ``@retrieval``'s options: :func:`retrieval` takes its
        signature from here (``_decorators._options_of``). The fields above are the
        validated values (``strategy`` an enum, filters a read-only mapping), a different
        shape, so they stay a list of their own.
        """
        mode = _parse_enum(RetrievalStrategy, strategy, "strategy")
        policy = _parse_enum(OnFailure, on_failure, "on_failure")
        _positive_int(top_k, "top_k")
        _positive_int(rerank_top_n, "rerank_top_n", minimum=0)
        if rerank_top_n and rerank_top_n < top_k:
            raise ConfigurationError(f"rerank_top_n ({rerank_top_n}) must be 0 (no reranking) or >= top_k ({top_k})")
        if rerank_top_n and reranker is None:
            raise ConfigurationError("rerank_top_n > 0 needs a reranker=(query, documents) -> documents callable")
        if reranker is not None and not rerank_top_n:
            raise ConfigurationError("a reranker needs rerank_top_n > 0 (the number of candidates it sees)")
        if reranker is not None and not callable(reranker):
            raise ConfigurationError(f"reranker must be callable, got {type(reranker).__name__}")
        if not is_number(min_score) or not math.isfinite(min_score):
            raise ConfigurationError(f"min_score must be a finite number, got {min_score!r}")
        if not isinstance(query_param, str):
            raise ConfigurationError(f"query_param must be a string (blank = first str parameter), got {query_param!r}")
        if not isinstance(deduplicate, bool):
            raise ConfigurationError(f"deduplicate must be a bool, got {deduplicate!r}")
        if not is_number(dedup_threshold) or not -1.0 <= dedup_threshold <= 1.0:
            raise ConfigurationError(f"dedup_threshold must be a cosine similarity in [-1, 1], got {dedup_threshold!r}")
        try:
            filters = validate_filters(metadata_filters)
        except InvalidFilterError as exc:
            raise InvalidFilterError(f"@retrieval metadata_filters: {exc}") from None
        _optional_name(navigator, "navigator")
        _optional_name(navigator_model, "navigator_model")
        _optional_name(expander, "expander")
        _optional_name(expansion_model, "expansion_model")
        _positive_int(max_expansions, "max_expansions")
        if mode is RetrievalStrategy.REASONING and navigator_model is None:
            raise ConfigurationError("strategy REASONING needs navigator_model= (the exact model name the "
                                     "installed TreeNavigator uses)")
        if mode is RetrievalStrategy.MULTI_QUERY:
            mode_name = getattr(expansion_mode, "name", expansion_mode)
            if expansion_mode is None or (isinstance(mode_name, str) and mode_name.strip().upper() == "NONE"):
                raise ConfigurationError("strategy MULTI_QUERY needs expansion_mode= other than NONE")
            if expansion_model is None:
                raise ConfigurationError("strategy MULTI_QUERY needs expansion_model= (the exact provider model name)")
        return cls(strategy=mode, top_k=top_k, rerank_top_n=rerank_top_n, reranker=reranker,
                   min_score=float(min_score), metadata_filters=filters, query_param=query_param,
                   on_failure=policy, deduplicate=deduplicate, dedup_threshold=float(dedup_threshold),
                   navigator=navigator, navigator_model=navigator_model, expander=expander,
                   expansion_mode=expansion_mode, expansion_model=expansion_model, max_expansions=max_expansions)

    @property
    def candidates(self) -> int:
        """How many documents the strategy is asked for: ``rerank_top_n`` when reranking, else ``top_k``."""
        return self.rerank_top_n or self.top_k


def _parse_enum(kind: type[_E], value: object, what: str) -> _E:
    if isinstance(value, kind):
        return value
    if isinstance(value, str) and value in kind.__members__:
        return kind[value]
    raise ConfigurationError(f"{what} must be one of {', '.join(kind.__members__)}, got {value!r}")


#: The attribute ``@retrieval`` sets on the function it wraps.
CONFIG_ATTRIBUTE = "__tnsrag_retrieval__"


def retrieval_config(action: Callable[..., object]) -> RetrievalConfig | None:
    """The :class:`RetrievalConfig` of a decorated action (bound or not), or None."""
    func = getattr(action, "__func__", action)
    config = getattr(func, CONFIG_ATTRIBUTE, None)
    return config if isinstance(config, RetrievalConfig) else None
