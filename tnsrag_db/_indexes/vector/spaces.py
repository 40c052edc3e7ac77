"""The embedding spaces of a corpus: which provider filled each, and which one a query uses.

A corpus keeps one embedding space per (provider name, dimension) in the table
``embedding_spaces``; the provider name is what the space remembers about the model
that filled it. A space is *complete* when it holds a vector for every entry of the
corpus.

Which space a query uses (:func:`query_space`), unless a provider is named explicitly:
the newest complete space; if none is complete (say, entries written without vectors),
the one with the most vectors (the newest on a tie). So while ``tnsrag embed`` fills a
new space, queries keep using the old complete one, and switch once the new one is full.

:func:`bind_embedding` ties a provider to the space it reads or writes: it learns the
provider's dimension (declared ``dimension`` attribute, else one probe embedding) and
refuses, with :class:`EmbeddingValidationError` and before anything is written, a
provider whose dimension differs from that of the corpus's space of the same name.

:class:`ProviderSpaces` is what a :class:`~tnsrag_db._indexes.vector.VectorMemoryStore`
knows of its provider's spaces (a cache, and the plans that read or create them). Every
read here is a :data:`~tnsrag_db._db.statement.Plan` (or a function running one on the
store's read runner), so a query lists and chooses spaces in its own plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tnsrag_db._db.revisions import COMPAT_FUNCTION, serves_releases_before
from tnsrag_db._db.statement import Plan, Rows, Statement
from tnsrag_db._errors import ConfigurationError, EmbeddingValidationError, ProviderConfigurationError
from tnsrag_db._store.reads import count_plan
from tnsrag_db._validate import check_number, is_int
from tnsrag_db.embeddings import (
    SHIPPED_MODEL_NAME,
    EmbeddingFunction,
    ValidatingEmbedding,
    embedding_install_hint,
    resolve_embedding,
    shipped_model_available,
)

if TYPE_CHECKING:
    from tnsrag_db._store.store import Store

__all__ = ["CONTEXT_REVISION", "SPACE_RECHECK_SECONDS", "default_embedding_name", "EmbeddingSpace", "ProviderSpaces", "Space", "bind_embedding",
           "count_with_vectors", "ensure_space_plan", "list_spaces", "list_spaces_plan", "query_embedding",
           "query_space", "space_fill_note", "space_fill_note_plan"]

#: Default seconds a vector view trusts its cached "no HNSW index yet" state of a space
#: (:class:`ProviderSpaces`' ``recheck_seconds``).
SPACE_RECHECK_SECONDS = 5.0

#: The space of one (corpus, provider, dimension): its id and index name (binds ``:schema``).
#: The name is the recorded one, else that of a valid index the catalog holds under the
#: space's index name: a build whose process died after PostgreSQL finished the index, but
#: before it was recorded, left the space searched by exact scans until someone built it
#: again. The catalog is read in a CTE of its own, not in a subquery correlated with the
#: space row: Citus runs such a CTE on the coordinator and routes the rest to the corpus'
#: shard, but refuses a catalog table joined to a distributed one.
_SELECT_SPACE = """\
WITH ix AS MATERIALIZED (
  SELECT CAST(c.relname AS text) AS relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  WHERE c.relnamespace = to_regnamespace(:schema) AND c.relname LIKE 'ix\\_embeddings\\_hnsw\\_%' AND i.indisvalid
)
SELECT s.space_id,
  coalesce(s.index_name, (SELECT x.relname FROM ix x WHERE x.relname = 'ix_embeddings_hnsw_' || s.space_id::text))
    AS index_name
FROM embedding_spaces s
WHERE s.corpus = :c AND s.provider = :p AND s.dimension = :d"""

# Select first (above): an INSERT ... ON CONFLICT would burn an identity value on every write.
_INSERT_SPACE = """\
INSERT INTO embedding_spaces (corpus, provider, dimension) VALUES (:c, :p, :d)
ON CONFLICT (corpus, provider, dimension) DO NOTHING
RETURNING space_id, index_name"""

_PROVIDER_DIMENSIONS = "SELECT dimension FROM embedding_spaces WHERE corpus = :c AND provider = :p"


@dataclass(frozen=True, slots=True)
class Space:
    """One embedding space of a view: its id, dimension and HNSW index (None: exact scans)."""

    space_id: int
    dimension: int
    index_name: str | None


def space_statement(store: Store, provider: str, dimension: int) -> Statement:
    """The statement that reads the space of ``provider`` at ``dimension`` (no row: none yet)."""
    return Statement(_SELECT_SPACE, _space_params(store, provider, dimension), ("space_id", "index_name"))


def space_from_rows(rows: Sequence[Any], dimension: int) -> Space | None:
    """The :class:`Space` of :func:`space_statement`'s rows."""
    return Space(int(rows[0].space_id), dimension, rows[0].index_name) if rows else None


def ensure_space_plan(store: Store, provider: str, dimension: int) -> Plan[Space]:
    """The space row for ``dimension``, created if missing (race-safe), as a plan to run on a
    write transaction's connection (it may INSERT; the corpus row must exist)."""
    statement = space_statement(store, provider, dimension)
    rows: Rows = yield statement
    if not rows:
        rows = yield Statement(_INSERT_SPACE, statement.params, ("space_id", "index_name"))
        if not rows:  # a concurrent writer created it; a new statement sees its committed row
            rows = yield statement
    space = space_from_rows(rows, dimension)
    assert space is not None
    return space


def provider_dimensions_plan(store: Store, provider: str) -> Plan[list[int]]:
    """The dimensions of ``provider``'s spaces in ``store``'s corpus."""
    rows: Rows = yield Statement(_PROVIDER_DIMENSIONS, {"c": store.corpus, "p": provider}, ("dimension",))
    return [int(r.dimension) for r in rows]


def _space_params(store: Store, provider: str, dimension: int) -> dict[str, Any]:
    return {"c": store.corpus, "p": provider, "d": dimension, "schema": store.schema}


class ProviderSpaces:
    """The embedding spaces one provider name fills in one store's corpus, as a vector view
    knows them: a cache of :class:`Space` by dimension, and the plans that read (or, on a
    write's connection, create) them.

    An indexed space never changes, so it is answered from the cache; an unindexed one is
    re-read by :meth:`query_plan` at most every ``recheck_seconds`` (default
    :data:`SPACE_RECHECK_SECONDS`, at least 0; 0 re-reads it at every query): another
    process may build its index meanwhile, and until then queries take the exact path,
    which is correct, only slower. Raises :class:`ConfigurationError` for a bad
    ``recheck_seconds``. Thread-safe as far as its cache goes (entries are replaced whole).
    """

    def __init__(self, store: Store, provider: str, *,
                 recheck_seconds: float = SPACE_RECHECK_SECONDS) -> None:
        self._store = store
        self._provider = provider
        self._recheck = check_number(recheck_seconds, "space_recheck_seconds", minimum=0, error=ConfigurationError)
        self._spaces: dict[int, Space] = {}
        self._checked: dict[int, float] = {}

    @property
    def corpus(self) -> str:
        """The corpus whose spaces these are."""
        return self._store.corpus

    @property
    def recheck_seconds(self) -> float:
        """Seconds a cached unindexed space is trusted by :meth:`query_plan`."""
        return self._recheck

    def remember(self, dimension: int, space: Space | None) -> Space | None:
        """Cache ``space`` as the space of ``dimension`` (None forgets it); returns it."""
        if space is None:
            self._spaces.pop(dimension, None)
        else:
            self._spaces[dimension] = space
        return space

    def query_plan(self, dimension: int) -> Plan[Space | None]:
        """The space a query of ``dimension`` searches, as a plan: no statement when the cache
        answers (an indexed space, or an unindexed one read less than ``recheck_seconds`` ago)."""
        cached = self._spaces.get(dimension)
        now = time.monotonic()
        checked = self._checked.get(dimension)  # None: cached by a write, never read by a query
        if cached is not None and (cached.index_name is not None
                                   or (checked is not None and now - checked < self._recheck)):
            return cached
        rows: Rows = yield space_statement(self._store, self._provider, dimension)
        space = self.remember(dimension, space_from_rows(rows, dimension))
        self._checked[dimension] = now
        return space

    def lookup_plan(self, dimension: int) -> Plan[Space | None]:
        """The space of ``dimension``: an indexed one from the cache, else read now (another
        process may have built its index)."""
        cached = self._spaces.get(dimension)
        if cached is not None and cached.index_name is not None:
            return cached
        rows: Rows = yield space_statement(self._store, self._provider, dimension)
        return self.remember(dimension, space_from_rows(rows, dimension))

    def current_plan(self, dimension: int | None) -> Plan[Space | None]:
        """The view's space: of ``dimension`` when known, else of the provider's only
        dimension in the corpus; None before the first write (or with several dimensions)."""
        if dimension is None:
            dims = yield from provider_dimensions_plan(self._store, self._provider)
            if len(dims) != 1:
                return None
            dimension = dims[0]
        return (yield from self.lookup_plan(dimension))

    def ensure_plan(self, dimension: int) -> Plan[Space]:
        """:func:`ensure_space_plan` of this provider, remembered (run it on a write's connection)."""
        space = yield from ensure_space_plan(self._store, self._provider, dimension)
        self._spaces[dimension] = space
        return space


@dataclass(frozen=True, slots=True)
class EmbeddingSpace:
    """One embedding space of a corpus, with its fill level."""

    space_id: int
    provider: str
    dimension: int
    #: Vectors stored in the space.
    vectors: int
    #: Entries in the corpus.
    entries: int
    created_at: datetime
    #: The HNSW index the library built for it, or None.
    index_name: str | None

    @property
    def complete(self) -> bool:
        """True when the space has a vector for every entry of the corpus."""
        return self.vectors >= self.entries


_WITH_VECTORS_SQL = """\
SELECT count(DISTINCT x.entry_id) AS n
FROM embeddings x
JOIN embedding_spaces s ON s.corpus = x.corpus AND s.space_id = x.space_id
WHERE x.corpus = :c AND s.provider = :p AND x.entry_id = ANY(:ids)"""


def count_with_vectors(store: Store, provider: str, entry_ids: Sequence[str]) -> int:
    """How many of ``entry_ids`` have a vector of ``provider`` (in any of its spaces) in ``store``'s corpus."""
    rows = store.read(_WITH_VECTORS_SQL, {"c": store.corpus, "p": provider, "ids": list(entry_ids)})
    return int(rows[0].n)


# Every space with its vector count and the corpus's entry count, in one statement (one
# snapshot: the counts agree with each other).
_LIST_SPACES_SQL = """\
SELECT s.space_id, s.provider, s.dimension, s.created_at, s.index_name,
       (SELECT count(*) FROM embeddings e WHERE e.corpus = s.corpus AND e.space_id = s.space_id) AS n,
       (SELECT count(*) FROM entries x WHERE x.corpus = s.corpus) AS entries
FROM embedding_spaces s WHERE s.corpus = :c ORDER BY s.created_at, s.space_id"""


def list_spaces_plan(corpus: str) -> Plan[list[EmbeddingSpace]]:
    """The embedding spaces of ``corpus``, oldest first, with their vector counts (one statement)."""
    rows: Rows = yield Statement(_LIST_SPACES_SQL, {"c": corpus},
                                 ("space_id", "provider", "dimension", "created_at", "index_name", "n", "entries"))
    return [EmbeddingSpace(int(r.space_id), r.provider, int(r.dimension), int(r.n), int(r.entries), r.created_at,
                           r.index_name) for r in rows]


def list_spaces(store: Store) -> list[EmbeddingSpace]:
    """The embedding spaces of ``store``'s corpus, oldest first, with their vector counts."""
    return store.run(list_spaces_plan(store.corpus))


def query_space(store: Store, provider: str | None = None, *,
                spaces: Sequence[EmbeddingSpace] | None = None) -> EmbeddingSpace | None:
    """The space a query of ``store``'s corpus uses (see the module doc); None when it has none.

    With ``provider``, the space of that provider name (the newest, should it have spaces
    of several dimensions), or None when it has none. ``spaces`` (keyword-only) are the
    corpus's spaces as :func:`list_spaces` gave them, for a caller that needs them for
    more than one answer (each listing counts the corpus's vectors); None lists them.
    """
    spaces = list_spaces(store) if spaces is None else spaces
    if provider is not None:
        named = [s for s in spaces if s.provider == provider]
        return named[-1] if named else None
    complete = [s for s in spaces if s.complete]
    if complete:
        return complete[-1]
    if not spaces:
        return None
    return max(reversed(spaces), key=lambda s: s.vectors)


def space_fill_note(store: Store, name: str | None = None, *,
                    spaces: Sequence[EmbeddingSpace] | None = None) -> str | None:
    """A note for a vector query of ``store``'s corpus whose space lacks vectors for some
    entries (an ingest still embedding, or one interrupted), saying how many it holds and
    how to fill the rest; None when the space is complete or the corpus has no entries.

    The space is the one a query uses: :func:`query_space`'s, or with ``name`` (a provider
    name as :func:`~tnsrag_db.embeddings.resolve_embedding` takes it) that provider's.
    ``spaces`` as :func:`query_space` takes them.
    """
    return store.run(space_fill_note_plan(store, name, spaces=spaces))


def space_fill_note_plan(store: Store, name: str | None = None, *,
                         spaces: Sequence[EmbeddingSpace] | None = None) -> Plan[str | None]:
    """:func:`space_fill_note` as a plan (the spaces listed first unless given, the corpus's
    entries counted when it has no space of the provider)."""
    provider = None if name is None else ValidatingEmbedding(resolve_embedding(name)).name
    if spaces is None:
        spaces = yield from list_spaces_plan(store.corpus)
    space = query_space(store, provider, spaces=spaces)
    shown = name or (space.provider if space is not None else None)
    fill = (f"tnsrag embed --corpus {store.corpus} --embedding {shown}" if shown
            else f"tnsrag embed --corpus {store.corpus} --embedding NAME")
    if space is None:
        entries = yield from count_plan(store.corpus)
        if entries == 0:
            return None
        return (f"corpus {store.corpus!r} holds no vectors{f' of {provider}' if provider else ''} yet for its "
                f"{entries} entries: vector search finds none of them (embedding in progress, or interrupted: "
                f"run the ingest again, or {fill})")
    if space.complete:
        return None
    return (f"embedding space {space.provider} ({space.dimension}-d) holds vectors for {space.vectors} of "
            f"{space.entries} entries of corpus {store.corpus!r}: vector search sees only those (embedding in "
            f"progress, or interrupted: run the ingest again, or {fill})")


def _declared_dimension(fn: object) -> int | None:
    value: Any = getattr(fn, "dimension", None)
    return value if is_int(value) and value >= 1 else None


def bind_embedding(store: Store, embedding: EmbeddingFunction | Callable[[str], object], *,
                   spaces: Sequence[EmbeddingSpace] | None = None) -> ValidatingEmbedding:
    """``embedding`` wrapped with its dimension fixed, checked against ``store``'s spaces.

    Raises :class:`EmbeddingValidationError` when the corpus already has a space for the
    provider's name with another dimension (a provider must give a new model a new
    name), and whatever the provider raises on its probe embedding. ``spaces`` as
    :func:`query_space` takes them.
    """
    wrapped = ValidatingEmbedding(embedding, dimension=_declared_dimension(embedding))
    if wrapped.dimension is None:
        wrapped("dimension probe")
    dimension = wrapped.dimension
    assert dimension is not None
    known = list_spaces(store) if spaces is None else spaces
    others = sorted({s.dimension for s in known if s.provider == wrapped.name} - {dimension})
    if others:
        raise EmbeddingValidationError(
            f"embedding provider {wrapped.name} returns {dimension}-dimensional vectors, but corpus "
            f"{store.corpus!r} has its space for {wrapped.name} at dimension {', '.join(map(str, others))}; "
            f"a provider that changed its model needs a new name")
    return wrapped


#: The first schema revision of the releases that read a contextual space
#: (``<model>+context1``, the default of a new corpus): a release of head 0010 or before
#: knows no such provider name.
CONTEXT_REVISION = "0011"


def default_embedding_name(store: Store) -> str | None:
    """The provider name a corpus of ``store``'s schema without an embedding space is
    embedded with, for :func:`~tnsrag_db.embeddings.resolve_embedding`: None (its default,
    the shipped model with each entry's context), or the plain shipped model while the
    schema still serves a release that reads no contextual space (a rolling upgrade before
    ``tnsrag db upgrade --finish``): that release, beside this one, would find no provider
    for the new corpus's space, and its vector and hybrid queries would fail."""
    if not shipped_model_available():
        return None  # the hash fallback either way
    floor = store.read(f"SELECT serves_from FROM {COMPAT_FUNCTION}() AS f", {})[0].serves_from
    return SHIPPED_MODEL_NAME if serves_releases_before(str(floor), CONTEXT_REVISION) else None


def query_embedding(store: Store, name: str | None = None, *,
                    spaces: Sequence[EmbeddingSpace] | None = None) -> ValidatingEmbedding:
    """The provider that embeds queries of ``store``'s corpus, bound to the space it searches.

    ``name`` (a provider name as :func:`~tnsrag_db.embeddings.resolve_embedding` takes
    it) picks the space explicitly; without it the space is :func:`query_space`'s and
    the provider the one whose name that space stores. A corpus without spaces uses the
    default provider (:func:`default_embedding_name`).

    Raises :class:`ProviderConfigurationError` naming the provider and what to install
    when the space's provider is not installed, or when ``name`` has no space in the
    corpus; :class:`EmbeddingValidationError` as :func:`bind_embedding` does. ``spaces``
    as :func:`query_space` takes them (the corpus's spaces are listed once per call).
    """
    spaces = list_spaces(store) if spaces is None else spaces  # one count per call, shared below
    if name is not None:
        provider = resolve_embedding(name)
        wrapped = bind_embedding(store, provider, spaces=spaces)
        space = query_space(store, wrapped.name, spaces=spaces)
        if space is None:
            have = ", ".join(sorted({s.provider for s in spaces})) or "none"
            raise ProviderConfigurationError(
                f"corpus {store.corpus!r} has no embedding space for provider {wrapped.name} (spaces: {have}); "
                f"fill one with: tnsrag embed --corpus {store.corpus} --embedding {name}")
        return wrapped
    space = query_space(store, spaces=spaces)
    if space is None:
        return bind_embedding(store, resolve_embedding(default_embedding_name(store)), spaces=spaces)
    try:
        provider = resolve_embedding(space.provider)
    except ProviderConfigurationError as exc:
        raise ProviderConfigurationError(
            f"corpus {store.corpus!r} was embedded with provider {space.provider}, which is not installed here; "
            f"install {embedding_install_hint(space.provider)}, or search it with the keyword strategy, "
            f"which needs no embedding") from exc
    wrapped = bind_embedding(store, provider, spaces=spaces)
    if wrapped.dimension != space.dimension:  # pragma: no cover - bind_embedding rejects it first
        raise EmbeddingValidationError(
            f"embedding provider {wrapped.name} returns {wrapped.dimension}-dimensional vectors; the space "
            f"holds {space.dimension}")
    return wrapped
