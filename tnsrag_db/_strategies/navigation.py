"""Tree navigators for reasoning retrieval: the ``TreeNavigator`` protocol, the model-free
``LexicalTreeNavigator`` and entry-point discovery of model-backed navigators.

A navigator ranks the children of one node of the hierarchy for a query;
:class:`~tnsrag_db._strategies.reasoning.ReasoningRAGStrategy` calls it once per frontier
expansion and descends into the children it scores above zero. When every score is
≤ 0 the descent stops at that node.

Model-backed navigators plug in through the entry-point group
``tnsrag_db.tree_navigators`` (the Python form of the SPI's ServiceLoader lookup),
e.g. in ``pyproject.toml``::

    [project.entry-points."tnsrag_db.tree_navigators"]
    my-llm = "my_package.navigation:MyNavigator"

:func:`load_navigator` loads one by name; the built-in ``"lexical"`` name is always
available and needs nothing installed.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from tnsrag_db._errors import ConfigurationError, ProviderConfigurationError, StrategyUnavailableError
from tnsrag_db._indexes.bm25 import scoring
from tnsrag_db._indexes.bm25.scoring import DEFAULT_B, DEFAULT_K1, check_bm25_parameters
from tnsrag_db._store.bm25.analysis import analyze

__all__ = [
    "NAVIGATOR_ENTRY_POINT_GROUP",
    "LexicalTreeNavigator",
    "NavNode",
    "TreeNavigator",
    "available_navigators",
    "installed_navigators",
    "load_navigator",
]

#: The entry-point group model-backed tree navigators are registered in.
NAVIGATOR_ENTRY_POINT_GROUP = "tnsrag_db.tree_navigators"

#: Longest title (first line of content) a :class:`NavNode` carries, in characters.
TITLE_CHARS = 200
#: Length of a :class:`NavNode` summary taken from content, in characters.
SUMMARY_CHARS = 300
#: The entry metadata key whose value, when present, is a node's summary.
SUMMARY_KEY = "summary"


@dataclass(frozen=True, slots=True)
class NavNode:
    """What a navigator sees of one node of the hierarchy.

    ``title`` is the first non-blank line of the content (at most 200 characters);
    ``summary`` is the entry's ``summary`` metadata when set, else the first 300
    characters of its content with whitespace collapsed. ``depth`` is 1 for a root
    (an entry without a parent) and grows by one per level. ``has_children`` says
    whether the node has children inside the source fence. ``subtree_text`` is the
    content of the node and all its descendants (capped; see
    ``ReasoningRAGStrategy``), filled only for navigators whose ``wants_subtree_text``
    attribute is true, else ``""``. ``seed_score`` is, in a seeded descent, the best
    BM25 score (over the whole corpus) of the query's hits at or beneath the node (0.0
    when no hit lies beneath it); None in an unseeded one.
    """

    id: str
    title: str
    summary: str
    depth: int
    has_children: bool = False
    subtree_text: str = ""
    seed_score: float | None = None

    @classmethod
    def from_content(cls, entry_id: str, content: str, depth: int, *, summary: str | None = None,
                     has_children: bool = False, subtree_text: str = "",
                     seed_score: float | None = None) -> NavNode:
        """Build a node, deriving ``title`` and (unless given non-blank) ``summary`` from ``content``."""
        title = next((line.strip() for line in content.splitlines() if line.strip()), "")[:TITLE_CHARS]
        if summary is None or not summary.strip():
            summary = " ".join(content.split())[:SUMMARY_CHARS]
        return cls(entry_id, title, summary, depth, has_children, subtree_text, seed_score)


@runtime_checkable
class TreeNavigator(Protocol):
    """Ranks the children of one node for a query.

    ``rank_children(query, node, children, model)`` returns one finite score per child,
    in the children's order (a mapping ``{child id: score}`` covering exactly the
    children is accepted too). ``node`` is None for the virtual root whose children are
    the roots of the hierarchy. Children scored ≤ 0 are not descended into; when every
    score is ≤ 0 the descent stops at ``node``. ``model`` is the provider model name the
    strategy was configured with. Optional attribute ``wants_subtree_text`` (default
    False): when true the strategy fills :attr:`NavNode.subtree_text`. Optional attribute
    ``follows_seeds`` (default False): when true, a seeded descent shows the navigator only
    the children that lead to one of the query's BM25 hits (a navigator that would score
    the others ≤ 0 saves the budget they cost).
    """

    def rank_children(self, query: str, node: NavNode | None, children: Sequence[NavNode],
                      model: str) -> Sequence[float] | Mapping[str, float]:
        """One score per child; see the class docstring."""
        ...


# -- the model-free navigator ---------------------------------------------------------------

_WORD_RE = re.compile(r"\w+")
_STOPWORDS = frozenset(
    "a about above after again against all am an and any are as at be because been before being below between "
    "both but by can could did do does doing down during each few for from further had has have having he her "
    "here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not "
    "now of off on once only or other our ours ourselves out over own same she should so some such than that the "
    "their theirs them themselves then there these they this those through to too under until up very was we "
    "were what when where which while who whom why will with would you your yours yourself yourselves".split()
)


def _stem(word: str) -> str:
    """A light English suffix stripper (plural, -ing, -ed); the same rule for queries and nodes."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    return word


def lexical_terms(text: str) -> list[str]:
    """The terms :class:`LexicalTreeNavigator` scores: words of ``text`` lower-cased, English
    stop words dropped, lightly stemmed; compound identifiers (``TAN-5326``, ``HttpClient``)
    are split into their parts and also kept whole, as the BM25 index does."""
    analysed = analyze(text)
    terms = [_stem(w) for chunk in analysed.chunks for w in _WORD_RE.findall(chunk.lower())
             if w not in _STOPWORDS]
    terms.extend(analysed.extra_terms)
    return terms


class LexicalTreeNavigator:
    """A model-free navigator: Okapi BM25 of the query against each child.

    In a seeded descent (every child carries a :attr:`NavNode.seed_score`) a child's
    score is that: the corpus-wide BM25 score of the best hit at or beneath it, whose
    statistics cover the whole corpus rather than a handful of siblings, so a flat
    corpus ranks exactly as BM25 does. Otherwise each child's document is its title,
    its summary and the text of its whole subtree
    (its own content and every descendant's, as the strategy supplies in
    :attr:`NavNode.subtree_text`), so a section scores by what lies anywhere beneath it.
    BM25 statistics (document frequency, average length) are taken over the candidate
    children of the one call, with ``idf = ln(1 + (N − df + 0.5)/(df + 0.5))``, which is
    positive: a child sharing any query term scores > 0 and a child sharing none scores
    exactly 0 (so the descent stops where no child matches). Terms come from
    :func:`lexical_terms`. ``model`` is ignored. ``k1`` (default 1.2) and ``b`` (default
    0.75) are keyword-only; :class:`ConfigurationError` for non-finite or out-of-range values.
    """

    #: Ask the strategy for :attr:`NavNode.subtree_text`.
    wants_subtree_text = True
    #: In a seeded descent, fetch only children that lead to a hit (the others would score 0).
    follows_seeds = True

    def __init__(self, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B) -> None:
        self._k1, self._b = check_bm25_parameters(k1, b)

    def __repr__(self) -> str:
        return f"LexicalTreeNavigator(k1={self._k1!r}, b={self._b!r})"

    def rank_children(self, query: str, node: NavNode | None, children: Sequence[NavNode],
                      model: str) -> list[float]:
        """BM25 score of ``query`` against each child: its seed score when every child has one,
        else BM25 over the children's title + summary + subtree text."""
        if children and all(c.seed_score is not None for c in children):
            return [float(c.seed_score) for c in children]  # type: ignore[arg-type]
        query_terms = set(lexical_terms(query))
        docs = [Counter(lexical_terms(f"{c.title}\n{c.summary}\n{c.subtree_text}")) for c in children]
        if not docs or not query_terms:
            return [0.0] * len(docs)
        lengths = [sum(d.values()) for d in docs]
        n, k1, b = len(docs), self._k1, self._b
        kbl = scoring.length_factor(n, float(sum(lengths)), k1, b)
        weights = {t: scoring.term_weight(scoring.idf(n, df), k1)
                   for t in query_terms if (df := sum(1 for d in docs if t in d)) > 0}
        scores: list[float] = []
        for doc, length in zip(docs, lengths):
            scores.append(sum(scoring.contribution(w, kbl, doc[t], length, k1, b)
                              for t, w in weights.items() if t in doc))
        return scores


# -- entry points -------------------------------------------------------------------------

T = TypeVar("T")


def _entry_points(group: str) -> dict[str, list[importlib.metadata.EntryPoint]]:
    by_name: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for ep in importlib.metadata.entry_points(group=group):
        values = by_name.setdefault(ep.name, [])
        if all(other.value != ep.value for other in values):  # the same target twice counts once
            values.append(ep)
    return by_name


def plugin_names(group: str, builtins: Mapping[str, object]) -> list[str]:
    """Sorted names available in entry-point ``group`` plus the built-in names."""
    return sorted(set(builtins) | set(_entry_points(group)))


def load_plugin(group: str, name: str, builtins: Mapping[str, Callable[[], T]], kind: str,
                check: Callable[[object], bool]) -> T:
    """Load plugin ``name``: a built-in factory, else the entry point of that name in ``group``.

    An entry point naming a class or a no-argument callable is called with no arguments;
    anything else is used as it is. ``check`` decides whether the result is a ``kind``.
    Raises :class:`StrategyUnavailableError` for an unknown name (listing the available
    ones) and :class:`ProviderConfigurationError` when two entry points share the name or
    one cannot be loaded, instantiated or is not a ``kind``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"{kind} name must be a non-blank string, got {name!r}")
    factory = builtins.get(name)
    if factory is not None:
        return factory()
    eps = _entry_points(group).get(name)
    if not eps:
        available = ", ".join(plugin_names(group, builtins)) or "none"
        raise StrategyUnavailableError(f"no {kind} named {name!r} is installed (entry-point group {group!r}); "
                                       f"available: {available}")
    if len(eps) > 1:
        raise ProviderConfigurationError(f"{len(eps)} {kind}s are named {name!r} in entry-point group {group!r}: "
                                         + "; ".join(ep.value for ep in eps))
    ep = eps[0]
    try:
        target = ep.load()
    except Exception as exc:
        raise ProviderConfigurationError(f"cannot load {kind} {name} = {ep.value}: {exc}") from exc
    built: object = target
    if isinstance(target, type) or (callable(target) and _takes_no_arguments(target) and not check(target)):
        try:
            built = target()
        except Exception as exc:
            raise ProviderConfigurationError(f"cannot instantiate {kind} {name} = {ep.value} with no arguments: "
                                             f"{exc}") from exc
    if not check(built):
        raise ProviderConfigurationError(f"{kind} {name} = {ep.value} produced {type(built).__name__}, "
                                         f"not a {kind}")
    result: T = built  # type: ignore[assignment]
    return result


def _takes_no_arguments(fn: Callable[..., object]) -> bool:
    try:
        inspect.signature(fn).bind()
    except (TypeError, ValueError):
        return False
    return True


def _is_navigator(obj: object) -> bool:
    return not isinstance(obj, type) and callable(getattr(obj, "rank_children", None))


_BUILTIN_NAVIGATORS: dict[str, Callable[[], TreeNavigator]] = {"lexical": LexicalTreeNavigator}


def available_navigators() -> list[str]:
    """Names :func:`load_navigator` accepts: ``"lexical"`` plus every installed entry point, sorted."""
    return plugin_names(NAVIGATOR_ENTRY_POINT_GROUP, _BUILTIN_NAVIGATORS)


def installed_navigators() -> list[str]:
    """Names of the navigators installed as entry points (built-ins excluded), sorted."""
    return sorted(_entry_points(NAVIGATOR_ENTRY_POINT_GROUP))


def load_navigator(name: str) -> TreeNavigator:
    """The navigator called ``name``: ``"lexical"`` (:class:`LexicalTreeNavigator`) or an entry
    point of ``tnsrag_db.tree_navigators`` (a class or factory called with no arguments).

    Raises :class:`StrategyUnavailableError` for an unknown name, listing the available
    ones, and :class:`ProviderConfigurationError` for an ambiguous or broken entry point.
    """
    return load_plugin(NAVIGATOR_ENTRY_POINT_GROUP, name, _BUILTIN_NAVIGATORS, "tree navigator", _is_navigator)
