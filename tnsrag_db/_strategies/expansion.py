"""Query expansion for multi-query retrieval: ``QueryExpansion``, the ``QueryExpander``
protocol, ``CancellationToken``, variant normalisation, the model-free
``RM3QueryExpander`` and entry-point discovery of model-backed expanders.

Model-backed expanders plug in through the entry-point group
``tnsrag_db.query_expanders``, e.g. in ``pyproject.toml``::

    [project.entry-points."tnsrag_db.query_expanders"]
    my-llm = "my_package.expansion:MyExpander"

:func:`load_expander` loads one by name (a class or factory called with no arguments);
the built-in ``"rm3"`` name needs a store to read and is always available.
"""

from __future__ import annotations

import enum
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from tnsrag_db._errors import ConfigurationError, ExecutionError, RetrievalCancelledError
from tnsrag_db._indexes.bm25 import BM25Index
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.navigation import _entry_points, load_plugin, plugin_names
from tnsrag_db._types import validate_filters
from tnsrag_db._validate import is_int, is_number

__all__ = [
    "EXPANDER_ENTRY_POINT_GROUP",
    "CancellationToken",
    "QueryExpander",
    "QueryExpansion",
    "RM3QueryExpander",
    "available_expanders",
    "installed_expanders",
    "load_expander",
    "normalize_variant",
    "normalize_variants",
]

#: The entry-point group model-backed query expanders are registered in.
EXPANDER_ENTRY_POINT_GROUP = "tnsrag_db.query_expanders"


class QueryExpansion(enum.Enum):
    """How query variations are produced (the SPI's ``Retrieval.QueryExpansion`` modes).

    ``NONE``: no expansion (not accepted by ``MultiQueryRAGStrategy``); ``LLM``:
    variations written by a language model, through an installed expander;
    ``RM3``: pseudo-relevance feedback over the BM25 index (:class:`RM3QueryExpander`).
    """

    NONE = "none"
    LLM = "llm"
    RM3 = "rm3"

    @classmethod
    def parse(cls, value: QueryExpansion | str) -> QueryExpansion:
        """The mode for a ``QueryExpansion``, its name or its value (case-insensitive);
        :class:`ConfigurationError` otherwise."""
        if isinstance(value, QueryExpansion):
            return value
        if isinstance(value, str):
            for member in cls:
                if value.strip().lower() in (member.value, member.name.lower()):
                    return member
        raise ConfigurationError(f"unknown query expansion mode {value!r}; expected one of "
                                 f"{', '.join(m.name for m in cls)}")


@runtime_checkable
class QueryExpander(Protocol):
    """Produces variations of a query: ``expand(query, mode, model, max_expansions) -> list[str]``.

    Return at most ``max_expansions`` variants (extra ones are ignored); the original
    query need not be included, and duplicates, blanks and list markers are cleaned up
    by the caller (:func:`normalize_variants`). Raise
    :class:`~tnsrag_db._errors.ProviderTransportError` when the model cannot be reached;
    any other exception is reported as an :class:`~tnsrag_db._errors.ExecutionError`.
    Optional attribute ``supported_modes`` (a collection of :class:`QueryExpansion`):
    when present, ``MultiQueryRAGStrategy`` rejects other modes at construction.
    """

    def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> Sequence[str]:
        """Variants of ``query``; see the class docstring."""
        ...


class CancellationToken:
    """A thread-safe, one-way cancellation flag: ``cancel()`` sets it, ``cancelled`` reads it.

    Pass one to ``MultiQueryRAGStrategy`` and call :meth:`cancel` from any thread; the
    strategy checks it before every base-strategy call and raises
    :class:`RetrievalCancelledError` instead of starting more work.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Cancel (idempotent)."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._event.is_set()

    def raise_if_cancelled(self, what: str = "retrieval") -> None:
        """Raise :class:`RetrievalCancelledError` when cancelled."""
        if self._event.is_set():
            raise RetrievalCancelledError(f"{what} was cancelled by its CancellationToken")

    def __repr__(self) -> str:
        return f"CancellationToken(cancelled={self.cancelled})"


# -- variant normalisation ------------------------------------------------------------------

# "1." "2)" "(3)" "-" "*" "•" "+" "–" "—" "·" followed by whitespace, possibly repeated
# ("1. - foo"); markdown emphasis is left alone.
_MARKER_RE = re.compile(r"^(?:(?:\(?\d{1,3}[.)]|[-*•+–—·▪◦])\s+)+")


def normalize_variant(text: str) -> str:
    """``text`` with whitespace collapsed (NUL counts as whitespace) and a leading list
    marker (``1.``, ``2)``, ``(3)``, ``-``, ``*``, ``•``, ...) stripped; ``""`` when nothing is left."""
    collapsed = " ".join(text.replace("\x00", " ").split())
    return _MARKER_RE.sub("", collapsed + " ").strip()


def normalize_variants(query: str, variants: Sequence[object], max_expansions: int) -> list[str]:
    """The queries to run: ``query`` first (as given), then up to ``max_expansions`` distinct variants.

    Each variant is normalised by :func:`normalize_variant`; empties are dropped, and a
    variant whose case-folded form equals the original's (whitespace collapsed) or an
    earlier variant's is a duplicate (the first spelling is kept). Raises
    :class:`ExecutionError` when ``variants`` is not a sequence of strings.
    """
    if isinstance(variants, (str, bytes)) or not isinstance(variants, Sequence):
        raise ExecutionError(f"query expander must return a list of strings, got {type(variants).__name__}")
    seen = {" ".join(query.split()).casefold()}
    out = [query]
    for i, variant in enumerate(variants):
        if not isinstance(variant, str):
            raise ExecutionError(f"query expander returned a {type(variant).__name__} at position {i}, "
                                 "expected strings")
        if len(out) - 1 >= max_expansions:
            break
        clean = normalize_variant(variant)
        key = clean.casefold()
        if clean and key not in seen:
            seen.add(key)
            out.append(clean)
    return out


# -- RM3 --------------------------------------------------------------------------------------

_TERM_RE = re.compile(r"\w{2,20}")


def _check_positive(value: object, what: str) -> int:
    if is_int(value):
        assert isinstance(value, int)
        if value >= 1:
            return value
    raise ConfigurationError(f"{what} must be a positive int, got {value!r}")


class RM3QueryExpander:
    """Model-free expansion by pseudo-relevance feedback (RM3) over a :class:`BM25Index`.

    ``expand`` takes the BM25 top ``feedback_docs`` (default 10) documents of the query,
    estimates the relevance model ``P(w|R) ∝ Σ_d P(w|d) · score(d)`` with
    ``P(w|d) = tf / doc length`` and the BM25 scores normalised to sum to 1, keeps its
    ``expansion_terms`` (default 10) best terms that are not already query terms
    (plain word terms of 2–20 characters that analyse to themselves), and returns one
    variant: the original query text followed by those terms, best first.

    Weights and the text interface: base strategies take text and BM25 counts each
    distinct query term once, so a variant cannot carry term weights. The interpolation
    with the original query happens at rank level instead: ``MultiQueryRAGStrategy``
    always runs the original query as its own stream and fuses it with the expanded
    stream by RRF with equal weights, the rank-level form of ``original_weight = 0.5``.
    :meth:`expansion_model` returns the full weighted RM3 query
    ``original_weight · P(w|Q) + (1 − original_weight) · P(w|R)`` (the relevance model
    truncated to ``expansion_terms`` terms and renormalised) for callers that can run
    weighted queries.

    Feedback documents are searched with ``filters`` (default none) — set it to the
    filter you retrieve with so no vocabulary of other tenants leaks into variants.
    ``model`` is accepted and ignored; ``mode`` must be :attr:`QueryExpansion.RM3`.
    Raises :class:`ConfigurationError` for a non-BM25Index ``index`` or bad limits.
    """

    #: The modes this expander serves.
    supported_modes = frozenset({QueryExpansion.RM3})

    def __init__(self, index: BM25Index, *, feedback_docs: int = 10, expansion_terms: int = 10,
                 original_weight: float = 0.5, filters: Mapping[str, str] | None = None) -> None:
        if not isinstance(index, BM25Index):
            raise ConfigurationError(f"RM3QueryExpander needs a BM25Index, got {type(index).__name__}")
        self._index = index
        self._feedback_docs = _check_positive(feedback_docs, "feedback_docs")
        self._expansion_terms = _check_positive(expansion_terms, "expansion_terms")
        if not is_number(original_weight) or not 0.0 <= original_weight <= 1.0:
            raise ConfigurationError(f"original_weight must be a number in [0, 1], got {original_weight!r}")
        self._original_weight = float(original_weight)
        try:
            self._filters = validate_filters(filters)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from exc

    @classmethod
    def for_store(cls, store: Store) -> RM3QueryExpander:
        """An expander with default settings over ``BM25Index(store)``."""
        return cls(BM25Index(store))

    @property
    def index(self) -> BM25Index:
        """The BM25 index feedback documents come from."""
        return self._index

    def __repr__(self) -> str:
        return (f"RM3QueryExpander({self._index!r}, feedback_docs={self._feedback_docs}, "
                f"expansion_terms={self._expansion_terms}, original_weight={self._original_weight})")

    def relevance_model(self, query: str) -> list[tuple[str, float]]:
        """``P(w|R)`` over every term of the feedback documents, best first (ties by term), summing to 1.

        Empty when the query matches no document. Two statements (search, term counts).
        """
        feedback = self._index.search(query, self._feedback_docs, filters=self._filters)
        total_score = math.fsum(score for _, score in feedback)
        if not feedback or total_score <= 0:
            return []
        doc_terms = self._index.document_terms([entry_id for entry_id, _ in feedback])
        weights: dict[str, float] = {}
        for entry_id, score in feedback:
            terms = doc_terms.get(entry_id) or {}
            length = sum(terms.values())
            if length == 0:
                continue
            factor = (score / total_score) / length
            for term, tf in terms.items():
                weights[term] = weights.get(term, 0.0) + tf * factor
        norm = math.fsum(weights.values())
        if norm <= 0:
            return []
        return sorted(((t, w / norm) for t, w in weights.items()), key=lambda tw: (-tw[1], tw[0]))

    def expansion_terms(self, query: str) -> list[str]:
        """The expansion terms of ``query``: the best relevance-model terms that are not query
        terms, at most ``expansion_terms``, best first. Up to four statements."""
        model = self.relevance_model(query)
        if not model:
            return []
        original = set(self._index.query_terms(query))
        candidates = [t for t, _ in model if t not in original and _TERM_RE.fullmatch(t)]
        candidates = candidates[: 3 * self._expansion_terms]
        if not candidates:
            return []
        # A stem such as ``aerodynam`` must analyse to itself, or the variant would ask
        # for a different term than the one the feedback documents contain.
        stable = set(self._index.query_terms(" ".join(candidates)))
        return [t for t in candidates if t in stable][: self._expansion_terms]

    def expansion_model(self, query: str) -> list[tuple[str, float]]:
        """The weighted RM3 query: ``λ·P(w|Q) + (1−λ)·P(w|R)`` with ``λ = original_weight``,
        ``P(w|Q)`` uniform over the query's distinct terms and ``P(w|R)`` truncated to the
        ``expansion_terms`` best terms and renormalised. Best first (ties by term)."""
        original = self._index.query_terms(query)
        model = self.relevance_model(query)[: self._expansion_terms]
        lam = self._original_weight
        out: dict[str, float] = {t: lam / len(original) for t in original} if original else {}
        norm = math.fsum(w for _, w in model)
        for term, w in model:
            out[term] = out.get(term, 0.0) + (1.0 - lam) * w / norm
        return sorted(out.items(), key=lambda tw: (-tw[1], tw[0]))

    def expand(self, query: str, mode: QueryExpansion, model: str, max_expansions: int) -> list[str]:
        """One variant — ``query`` followed by its expansion terms — or none when the query
        matches nothing or no term qualifies. ``model`` is ignored. Raises
        :class:`ConfigurationError` for a mode other than RM3 or a non-positive ``max_expansions``."""
        if QueryExpansion.parse(mode) is not QueryExpansion.RM3:
            raise ConfigurationError(f"RM3QueryExpander serves QueryExpansion.RM3 only, got {mode!r}")
        _check_positive(max_expansions, "max_expansions")
        terms = self.expansion_terms(query)
        if not terms:
            return []
        return [f"{query} {' '.join(terms)}"]


# -- entry points -------------------------------------------------------------------------


def _is_expander(obj: object) -> bool:
    return not isinstance(obj, type) and callable(getattr(obj, "expand", None))


def available_expanders() -> list[str]:
    """Names :func:`load_expander` accepts: ``"rm3"`` plus every installed entry point, sorted."""
    return plugin_names(EXPANDER_ENTRY_POINT_GROUP, {"rm3": None})


def installed_expanders() -> list[str]:
    """Names of the expanders installed as entry points (built-ins excluded), sorted."""
    return sorted(_entry_points(EXPANDER_ENTRY_POINT_GROUP))


def load_expander(name: str, *, store: Store | None = None) -> QueryExpander:
    """The expander called ``name``: ``"rm3"`` (an :class:`RM3QueryExpander` over
    ``BM25Index(store)``; ``store`` required) or an entry point of
    ``tnsrag_db.query_expanders`` (a class or factory called with no arguments).

    Raises :class:`StrategyUnavailableError` for an unknown name (listing the available
    ones), :class:`ConfigurationError` for ``"rm3"`` without a store, and
    :class:`ProviderConfigurationError` for an ambiguous or broken entry point.
    """

    def rm3() -> QueryExpander:
        if store is None:
            raise ConfigurationError("the rm3 query expander needs a store (load_expander('rm3', store=...))")
        return RM3QueryExpander.for_store(store)

    builtins: dict[str, Callable[[], QueryExpander]] = {"rm3": rm3}
    return load_plugin(EXPANDER_ENTRY_POINT_GROUP, name, builtins, "query expander", _is_expander)
