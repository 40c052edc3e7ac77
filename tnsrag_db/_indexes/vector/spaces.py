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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tnsrag_db._validate import is_int
from tnsrag_db._db.statement import Statement
from tnsrag_db.embeddings import EmbeddingFunction, ValidatingEmbedding, embedding_install_hint, resolve_embedding
from tnsrag_db._errors import EmbeddingValidationError, ProviderConfigurationError
from tnsrag_db._store.store import Store

__all__ = ["EmbeddingSpace", "bind_embedding", "count_with_vectors", "list_spaces", "query_embedding", "query_space",
           "space_fill_note"]

#: A space row's id and index name (alias ``s``; binds ``:schema``). The name is the recorded
#: one, else that of a valid index the catalog holds under the space's index name: a build
#: whose process died after PostgreSQL finished the index, but before it was recorded,
#: left the space searched by exact scans until someone built it again.
_SPACE_COLUMNS = """\
s.space_id,
coalesce(s.index_name, (
    SELECT 'ix_embeddings_hnsw_' || s.space_id::text FROM pg_index i
    WHERE i.indexrelid = to_regclass(:schema || '.ix_embeddings_hnsw_' || s.space_id::text) AND i.indisvalid
)) AS index_name"""

#: The space of one (corpus, provider, dimension).
_SELECT_SPACE = f"""\
SELECT {_SPACE_COLUMNS}
FROM embedding_spaces s
WHERE s.corpus = :c AND s.provider = :p AND s.dimension = :d"""

# Select first (above): an INSERT ... ON CONFLICT would burn an identity value on every write.
_INSERT_SPACE = """\
INSERT INTO embedding_spaces (corpus, provider, dimension) VALUES (:c, :p, :d)
ON CONFLICT (corpus, provider, dimension) DO NOTHING
RETURNING space_id, index_name"""


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


def read_space(conn: Connection, store: Store, provider: str, dimension: int) -> Space | None:
    """:func:`space_statement` run on ``conn``."""
    statement = space_statement(store, provider, dimension)
    return space_from_rows(conn.execute(sa.text(statement.sql), dict(statement.params)).all(), dimension)


def ensure_space(conn: Connection, store: Store, provider: str, dimension: int) -> Space:
    """The space row for ``dimension``, created if missing (race-safe). Needs the corpus row."""
    params = _space_params(store, provider, dimension)
    row = conn.execute(sa.text(_SELECT_SPACE), params).one_or_none()
    if row is None:
        row = conn.execute(sa.text(_INSERT_SPACE), params).one_or_none()
        if row is None:  # a concurrent writer created it; a new statement sees its committed row
            row = conn.execute(sa.text(_SELECT_SPACE), params).one()
    return Space(int(row.space_id), dimension, row.index_name)


def provider_dimensions(conn: Connection, store: Store, provider: str) -> list[int]:
    """The dimensions of ``provider``'s spaces in ``store``'s corpus."""
    return [int(d) for d in conn.execute(sa.text(
        "SELECT dimension FROM embedding_spaces WHERE corpus = :c AND provider = :p"),
        {"c": store.corpus, "p": provider}).scalars().all()]


def _space_params(store: Store, provider: str, dimension: int) -> dict[str, Any]:
    return {"c": store.corpus, "p": provider, "d": dimension, "schema": store.schema}


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


def list_spaces(store: Store) -> list[EmbeddingSpace]:
    """The embedding spaces of ``store``'s corpus, oldest first, with their vector counts."""
    with store.session.transaction() as conn:
        entries = int(conn.execute(sa.text("SELECT count(*) FROM entries WHERE corpus = :c"),
                                   {"c": store.corpus}).scalar_one())
        rows = conn.execute(sa.text(
            "SELECT s.space_id, s.provider, s.dimension, s.created_at, s.index_name, "
            "(SELECT count(*) FROM embeddings e WHERE e.corpus = s.corpus AND e.space_id = s.space_id) AS n "
            "FROM embedding_spaces s WHERE s.corpus = :c ORDER BY s.created_at, s.space_id"),
            {"c": store.corpus}).all()
    return [EmbeddingSpace(int(r.space_id), r.provider, int(r.dimension), int(r.n), entries, r.created_at,
                           r.index_name) for r in rows]


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
    provider = None if name is None else ValidatingEmbedding(resolve_embedding(name)).name
    space = query_space(store, provider, spaces=spaces)
    shown = name or (space.provider if space is not None else None)
    fill = (f"tnsrag embed --corpus {store.corpus} --embedding {shown}" if shown
            else f"tnsrag embed --corpus {store.corpus} --embedding NAME")
    if space is None:
        entries = store.count()
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


def query_embedding(store: Store, name: str | None = None, *,
                    spaces: Sequence[EmbeddingSpace] | None = None) -> ValidatingEmbedding:
    """The provider that embeds queries of ``store``'s corpus, bound to the space it searches.

    ``name`` (a provider name as :func:`~tnsrag_db.embeddings.resolve_embedding` takes
    it) picks the space explicitly; without it the space is :func:`query_space`'s and
    the provider the one whose name that space stores. A corpus without spaces uses the
    default provider (the shipped model when installed, else the hash fallback).

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
        return bind_embedding(store, resolve_embedding(None), spaces=spaces)
    try:
        provider = resolve_embedding(space.provider)
    except ProviderConfigurationError as exc:
        raise ProviderConfigurationError(
            f"corpus {store.corpus!r} was embedded with provider {space.provider}, which is not installed here; "
            f"install {embedding_install_hint(space.provider)}") from exc
    wrapped = bind_embedding(store, provider, spaces=spaces)
    if wrapped.dimension != space.dimension:  # pragma: no cover - bind_embedding rejects it first
        raise EmbeddingValidationError(
            f"embedding provider {wrapped.name} returns {wrapped.dimension}-dimensional vectors; the space "
            f"holds {space.dimension}")
    return wrapped
