"""LangChain adapters (install the ``[langchain]`` extra): a retriever over any strategy and
a vector store.

* :class:`TnsragRetriever` runs any of the eight strategies (by name over a ``Store``, or
  any ``RAGStrategy`` object) with ``k``, ``filters`` and ``min_score`` as fields (each
  may be overridden per call: ``retriever.invoke(q, k=3)``). ``Document.metadata`` holds
  the entry's own metadata and what the strategy added, then ``id``, ``score``,
  ``tier`` and ``source`` (these four win over an entry key of the same name);
  ``Document.id`` is the entry id.
* :class:`TnsragVectorStore` stores LangChain documents as entries with their vectors
  (LangChain ``Embeddings``), searches by cosine similarity and maps ``filter=`` dicts
  to the library's exact filters.

The retriever's async form (``ainvoke``) awaits the strategy's ``aretrieve`` (psycopg's
async connections, see :mod:`tnsrag_db._db.aio`) when the strategy has one; otherwise the
strategy's ``retrieve`` runs in the event loop's default thread pool, as the vector
store's async forms (``asimilarity_search``, ...) do (LangChain's ``run_in_executor``):
they do not block the loop but take a thread each.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from tnsrag_db._db.as_of import as_of as answering_at
from tnsrag_db._errors import InvalidEntryError, InvalidFilterError, ValidationError
from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store, connect
from tnsrag_db._strategies.base import RAGStrategy, aretrieve_with
from tnsrag_db._strategies.mmr import (
    DEFAULT_FETCH_K,
    DEFAULT_LAMBDA_MULT,
    check_lambda_mult,
    maximal_marginal_relevance,
)
from tnsrag_db._types import (
    MAX_RESULTS,
    MemoryEntry,
    MemoryTier,
    RAGContext,
    RetrievedDocument,
    parse_instant,
    validate_filters,
)
from tnsrag_db._validate import check_int, check_query_text, is_int
from tnsrag_db.integrations._core import (
    SerialEmbedding,
    StrategyCache,
    argument,
    check_text_query,
    document_record,
    new_entry_id,
    search_context,
)

__all__ = ["NON_STRING_METADATA_KEY", "TnsragRetriever", "TnsragVectorStore", "decode_metadata", "to_document",
           "to_library_filters"]

#: Entry metadata key under which :class:`TnsragVectorStore` keeps a document's non-string
#: metadata values, as one JSON object (entry metadata maps strings to strings).
NON_STRING_METADATA_KEY = "langchain:json"


def decode_metadata(stored: Mapping[str, str]) -> dict[str, Any]:
    """Entry metadata as LangChain metadata: the non-string values that
    :class:`TnsragVectorStore` packed under :data:`NON_STRING_METADATA_KEY` unpacked again
    (numbers, lists, ... as added), every other key as it is. Used by the vector store
    and the retriever alike, so both return a document's metadata the same way."""
    metadata: dict[str, Any] = dict(stored)
    packed = metadata.get(NON_STRING_METADATA_KEY)
    if packed is None:
        return metadata
    try:
        values = json.loads(packed)
    except ValueError:
        values = None
    if isinstance(values, dict):
        del metadata[NON_STRING_METADATA_KEY]
        metadata.update(values)
    # Anything else under the key was not written by the vector store: kept as it is.
    return metadata


def to_document(doc: RetrievedDocument) -> Document:
    """A LangChain document for a library result (see the module docstring for its metadata)."""
    record = document_record(doc)
    metadata = decode_metadata(record["metadata"])
    metadata.update(id=record["id"], score=record["score"], tier=record["tier"], source=record["source"])
    return Document(page_content=doc.content, metadata=metadata, id=record["id"])


class TnsragRetriever(BaseRetriever):
    """A LangChain retriever over one tnsrag_db strategy.

    ``strategy`` is a strategy name (``"hybrid"`` by default; built over ``store``, embedding
    queries with the provider of the corpus's own space, or with ``embedding``) or any ``RAGStrategy`` object (then
    ``store`` is not needed); ``embedding`` may also be a LangChain ``Embeddings``, whose
    vectors a :class:`TnsragVectorStore` with the same one wrote. ``k`` (default 4) is the
    number of results, ``filters`` exact metadata filters (tier, entryId, source or an
    entry's own keys), ``min_score`` the inclusive threshold (default None: no score floor,
    LangChain's convention, so ``k`` results come back whenever ``k`` entries match, even
    with negative cosine similarities). Metadata packed by :class:`TnsragVectorStore` is
    decoded as the vector store decodes it (:func:`decode_metadata`). Invalid settings raise at construction (pydantic's
    ``ValidationError`` carrying the library's message); invalid per-call overrides raise
    the library's :class:`~tnsrag_db._errors.ValidationError`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: Store | None = None
    strategy: Any = "hybrid"
    k: int = 4
    filters: dict[str, str] = Field(default_factory=dict)
    min_score: float | None = None
    embedding: Any = None
    #: The instant the retrieval answers at (a timezone-aware datetime; None: now).
    as_of: datetime | None = None

    _resolved: RAGStrategy | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> TnsragRetriever:
        search_context(self.k, self.filters, self.min_score, top_k_name="k").with_as_of(self.as_of)
        if isinstance(self.strategy, str):
            if self.store is None:
                raise ValueError(f"strategy {self.strategy!r} is a name: give the store to build it over")
            embedding = self.embedding
            if isinstance(embedding, Embeddings):  # the space a TnsragVectorStore with it writes
                embedding = _LangChainEmbedding(embedding, None)
            with argument("strategy"):
                self._resolved = StrategyCache(self.store, SerialEmbedding(embedding, store=self.store)).get(self.strategy)
        elif isinstance(self.strategy, RAGStrategy):
            self._resolved = self.strategy
        else:
            raise ValueError(f"strategy must be a strategy name or a RAGStrategy, got {type(self.strategy).__name__}")
        return self

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, filters: Mapping[str, str] | None = None,
                                min_score: float | None = None, as_of: datetime | None = None) -> list[Document]:
        text, context = self._request(query, k, filters, min_score, as_of)
        assert self._resolved is not None
        return [to_document(d) for d in self._resolved.retrieve(text, context)]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, filters: Mapping[str, str] | None = None,
                                       min_score: float | None = None, as_of: datetime | None = None) -> list[Document]:
        text, context = self._request(query, k, filters, min_score, as_of)
        assert self._resolved is not None
        return [to_document(d) for d in await aretrieve_with(self._resolved, text, context)]

    def _request(self, query: str, k: int | None, filters: Mapping[str, str] | None, min_score: float | None,
                 as_of: datetime | None) -> tuple[str, RAGContext]:
        """The checked query and the search's context: the call's arguments over the retriever's."""
        text = check_text_query(query)
        context = search_context(self.k if k is None else k, self.filters if filters is None else filters,
                                 self.min_score if min_score is None else min_score, top_k_name="k")
        return text, context.with_as_of(self.as_of if as_of is None else as_of)


def _nothing_asked(k: object) -> bool:
    """True for ``k == 0`` (LangChain's stores answer it with no documents); other values are
    checked by the search itself."""
    return is_int(k) and k == 0


def to_library_filters(filter: Mapping[str, Any] | None) -> dict[str, str]:
    """A LangChain ``filter=`` dict as the library's exact filters (all must match).

    Only ``{key: "value"}`` pairs are accepted: an operator (``{"$and": ...}``,
    ``{"k": {"$eq": ...}}``), a non-string value or a blank key or value raises
    :class:`~tnsrag_db._errors.InvalidFilterError` saying so.
    """
    if filter is None:
        return {}
    if not isinstance(filter, Mapping):
        raise InvalidFilterError(f"filter must be a dict of metadata key to string value, got {type(filter).__name__}")
    out: dict[str, str] = {}
    for key, value in filter.items():
        if isinstance(key, str) and key.startswith("$"):
            raise InvalidFilterError(f"filter operator {key!r} is not supported: tnsrag_db filters are exact "
                                     "string matches on metadata keys, all of which must match")
        if isinstance(value, Mapping):
            raise InvalidFilterError(f"filter on {key!r} uses operators {sorted(map(str, value))}: only exact "
                                     "string values are supported")
        if not isinstance(value, str):
            raise InvalidFilterError(f"filter value for {key!r} must be a string (exact match), got "
                                     f"{type(value).__name__} {value!r}")
        out[key] = value
    return dict(validate_filters(out))


class _LangChainEmbedding:
    """A LangChain ``Embeddings`` as a library embedding function: queries through
    ``embed_query``, stored texts through ``embed_documents``."""

    def __init__(self, embeddings: Embeddings, name: str | None) -> None:
        self._embeddings = embeddings
        if name is None:
            model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
            cls = type(embeddings)
            name = f"langchain:{cls.__module__}.{cls.__qualname__}" + (f":{model}" if isinstance(model, str) else "")
        self.name = name

    def __call__(self, text: str) -> list[float]:
        return self._embeddings.embed_query(text)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embeddings.embed_documents(list(texts))


_RESERVED = ("tier", "entryId", NON_STRING_METADATA_KEY)


def _entry(text: str, metadata: Mapping[str, Any] | None, entry_id: str, tier: MemoryTier, index: int) -> MemoryEntry:
    where = f"document {index} (id {entry_id!r})"
    md = dict(metadata or {})
    source = md.pop("source", None)
    if source is not None and not isinstance(source, str):
        raise InvalidEntryError(f"{where}: metadata 'source' must be a string, got {type(source).__name__}",
                                entry_id=entry_id, index=index)
    expiry = _expiry(md.pop(EXPIRES_AT_KEY, None), md.pop(TTL_KEY, None), where, entry_id, index)
    for key, name in ((VALID_FROM_KEY, "valid_from"), (VALID_UNTIL_KEY, "valid_until")):
        expiry.update(_instant(md.pop(key, None), key, name, where, entry_id, index))
    strings: dict[str, str] = {}
    others: dict[str, Any] = {}
    for key, value in md.items():
        if key in _RESERVED:
            raise InvalidEntryError(f"{where}: metadata key {key!r} is reserved ({', '.join(_RESERVED)})",
                                    entry_id=entry_id, index=index)
        if isinstance(value, str):
            strings[key] = value
        else:
            others[key] = value
    if others:
        try:
            strings[NON_STRING_METADATA_KEY] = json.dumps(others, ensure_ascii=False, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidEntryError(f"{where}: metadata values must be strings or JSON values: {exc}",
                                    entry_id=entry_id, index=index) from None
    return MemoryEntry(entry_id, text, tier, source=source, metadata=strings, **expiry)


#: The metadata keys of a document's expiry (taken out of its metadata, see :class:`TnsragVectorStore`).
EXPIRES_AT_KEY, TTL_KEY = "expiresAt", "ttlSeconds"
VALID_FROM_KEY, VALID_UNTIL_KEY = "validFrom", "validUntil"


def _instant(value: object, key: str, name: str, where: str, entry_id: str, index: int) -> dict[str, Any]:
    """``{name: instant}`` from a document's metadata value (ISO-8601 text or a datetime), or nothing."""
    if isinstance(value, str):
        try:
            return {name: parse_instant(value)}
        except ValidationError as exc:
            raise InvalidEntryError(f"{where}: metadata {key!r}: {exc}", entry_id=entry_id, index=index) from None
    return {} if value is None else {name: value}  # a datetime, checked by MemoryEntry


def _expiry(expires: object, ttl: object, where: str, entry_id: str, index: int) -> dict[str, Any]:
    """``expires_at`` and ``ttl`` of an entry from its document's metadata values."""
    out: dict[str, Any] = {}
    if isinstance(expires, str):
        try:
            out["expires_at"] = parse_instant(expires)
        except ValidationError as exc:
            raise InvalidEntryError(f"{where}: metadata {EXPIRES_AT_KEY!r}: {exc}", entry_id=entry_id,
                                    index=index) from None
    elif expires is not None:
        out["expires_at"] = expires  # a datetime, checked by MemoryEntry
    if ttl is not None:
        out["ttl"] = ttl
    return out


def _document(row: Any) -> Document:
    raw = row.metadata
    metadata = decode_metadata(json.loads(raw) if isinstance(raw, str) else (raw or {}))
    if row.source is not None:
        metadata["source"] = row.source
    return Document(page_content=row.content, metadata=metadata, id=row.entry_id)


class TnsragVectorStore(VectorStore):
    """A LangChain vector store over one corpus.

    Documents become entries (``id``: the given one, else a random UUID; tier ``tier``,
    default ``SEMANTIC``) with their vector from ``embedding.embed_documents``, in the
    embedding space named ``embedding_name`` (default: the ``Embeddings`` class and its
    ``model``). Metadata: ``source`` becomes the entry's source; ``expiresAt`` (an ISO-8601
    instant with a zone, or a timezone-aware ``datetime``) or ``ttlSeconds`` (a number) its
    expiry (the entry is found by nothing after it; docs/memory.md); other string values are
    entry metadata (filterable); non-string JSON values (numbers, lists, ...) are kept
    in one JSON string under :data:`NON_STRING_METADATA_KEY`, returned as they were but
    not filterable; the keys ``tier`` and ``entryId`` are reserved. Search results carry
    the document's metadata as added (no score: use ``similarity_search_with_score``,
    whose score is the cosine similarity in [-1, 1], higher is better). No score
    threshold by default. The caller keeps ``store`` (and closes it).
    """

    def __init__(self, store: Store, embedding: Embeddings, *, tier: MemoryTier | str = MemoryTier.SEMANTIC,
                 embedding_name: str | None = None) -> None:
        if not isinstance(store, Store):
            raise ValidationError(f"store must be a Store, got {type(store).__name__}")
        self._store = store
        self._embeddings = embedding
        self._tier = MemoryTier.parse(tier)
        self._vectors = VectorMemoryStore(store, _LangChainEmbedding(embedding, embedding_name))

    @property
    def store(self) -> Store:
        """The corpus this vector store writes and searches."""
        return self._store

    @property
    def embeddings(self) -> Embeddings:
        return self._embeddings

    # -- writes -----------------------------------------------------------------------
    def add_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Upsert ``texts`` (one transaction, embedded with ``embed_documents``); returns their ids.

        ``ids[i]`` names text i; a missing list or a ``None`` in it (``add_documents`` passes
        one for documents without ``id``) gets a random UUID. ``tier=`` overrides the store's tier.

        One bad text, metadata or id rejects the whole call (library errors name the
        document) and nothing is written.
        """
        batch = list(texts)
        for what, values in (("metadatas", metadatas), ("ids", ids)):
            if values is not None and len(values) != len(batch):
                raise ValidationError(f"got {len(values)} {what} for {len(batch)} texts")
        chosen = [(ids[i] if ids is not None and ids[i] is not None else new_entry_id()) for i in range(len(batch))]
        tier = MemoryTier.parse(kwargs.get("tier", self._tier))
        entries = [_entry(t, metadatas[i] if metadatas else None, str(chosen[i]), tier, i) for i, t in enumerate(batch)]
        self._vectors.add_all(entries)
        return [str(i) for i in chosen]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the entries with ``ids`` (missing ones are ignored), or with ``filter=`` every
        entry matching it (both: both). Neither (``delete()``): every entry of the corpus, as
        LangChain's ``VectorStore.delete`` documents for ``ids=None`` ("delete all"), entries
        written by other means included. Returns True."""
        flt = kwargs.get("filter")
        if ids is not None and (isinstance(ids, str) or not all(isinstance(i, str) for i in ids)):
            raise ValidationError(f"ids must be a list of entry id strings, got {ids!r}")
        if ids is None and flt is None:
            self._store.clear()
            return True
        if flt is not None:
            self._store.delete_where(to_library_filters(flt))
        if ids:
            self._store.delete_many(list(ids))
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents with these ids that exist, in the order asked."""
        found = self._store.get_many(list(ids))
        docs = []
        for entry_id in ids:
            entry = found.get(entry_id)
            if entry is not None:
                docs.append(_document(_EntryRow(entry)))
        return docs

    # -- search -----------------------------------------------------------------------
    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents most similar to ``query`` (``filter=``: exact metadata filters)."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Like :meth:`similarity_search`, each with its cosine similarity (in [-1, 1], higher is better)."""
        check_query_text(query)
        if _nothing_asked(k):
            return []
        return self._by_vector(self._embeddings.embed_query(query), k, kwargs.get("filter"), kwargs.get("as_of"))

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents most similar to a query vector."""
        if _nothing_asked(k):
            return []
        return [doc for doc, _ in self._by_vector(embedding, k, kwargs.get("filter"), kwargs.get("as_of"))]

    def _by_vector(self, vector: Sequence[float], k: int, flt: Mapping[str, Any] | None,
                   as_of: datetime | None = None) -> list[tuple[Document, float]]:
        return [(_document(r), float(r.score)) for r in self._rows(vector, k, flt, as_of)]

    def _rows(self, vector: Sequence[float], k: int, flt: Mapping[str, Any] | None,
              as_of: datetime | None = None) -> list[Any]:
        with answering_at(as_of):  # as_of=: the entries valid, recorded and not expired then
            rows, _ = self._store.run(self._vectors.documents_plan(vector, k, filters=to_library_filters(flt),
                                                                    min_score=-1.0))
        return list(rows)

    # -- maximal marginal relevance ---------------------------------------------------
    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = DEFAULT_FETCH_K,
                                      lambda_mult: float = DEFAULT_LAMBDA_MULT, **kwargs: Any) -> list[Document]:
        """``k`` documents chosen by maximal marginal relevance among the ``fetch_k`` (default
        20) most similar to ``query`` (``filter=``: exact metadata filters): each next one
        maximises ``lambda_mult × similarity to the query − (1 − lambda_mult) × its highest
        similarity to those already chosen``; ``lambda_mult`` (default 0.5, in [0, 1]) 1 is
        plain similarity order, 0 the most diverse. At most ``min(k, fetch_k)`` documents
        (LangChain's rule). The candidates' stored vectors are used (not embedded again).
        Raises :class:`~tnsrag_db._errors.ValidationError` for a bad ``k``, ``fetch_k`` or
        ``lambda_mult``, :class:`~tnsrag_db._errors.InvalidFilterError` for a bad filter."""
        check_query_text(query)
        self._check_mmr(k, fetch_k, lambda_mult)
        if _nothing_asked(k):
            return []
        return self.max_marginal_relevance_search_by_vector(self._embeddings.embed_query(query), k, fetch_k,
                                                            lambda_mult, **kwargs)

    def max_marginal_relevance_search_by_vector(self, embedding: list[float], k: int = 4,
                                                fetch_k: int = DEFAULT_FETCH_K,
                                                lambda_mult: float = DEFAULT_LAMBDA_MULT,
                                                **kwargs: Any) -> list[Document]:
        """:meth:`max_marginal_relevance_search` for a query vector."""
        self._check_mmr(k, fetch_k, lambda_mult)
        if _nothing_asked(k):
            return []
        rows = self._rows(embedding, fetch_k, kwargs.get("filter"), kwargs.get("as_of"))
        if not rows:
            return []
        query = np.asarray(embedding, dtype=np.float32)
        stored = self._vectors.stored_vectors([r.entry_id for r in rows], int(query.shape[0]))
        # A candidate deleted between the two reads has no vector left: it is not returned.
        rows = [r for r in rows if r.entry_id in stored]
        candidates = np.vstack([stored[r.entry_id] for r in rows]) if rows else np.zeros((0, query.shape[0]))
        picks = maximal_marginal_relevance(query, candidates, k, lambda_mult)
        return [_document(rows[i]) for i in picks]

    @staticmethod
    def _check_mmr(k: object, fetch_k: object, lambda_mult: object) -> None:
        check_int(k, "k", minimum=0, maximum=MAX_RESULTS)
        check_int(fetch_k, "fetch_k", minimum=1, maximum=MAX_RESULTS)
        check_lambda_mult(lambda_mult)

    def _select_relevance_score_fn(self) -> Any:
        # Cosine similarity in [-1, 1] to a relevance in [0, 1].
        return lambda score: (score + 1.0) / 2.0 if math.isfinite(score) else 0.0

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict[str, Any]] | None = None, *,
                   ids: list[str] | None = None, store: Store | None = None, url: str | None = None,
                   corpus: str = "default", **kwargs: Any) -> TnsragVectorStore:
        """A vector store holding ``texts``: over ``store``, or over a new store on ``url``
        (default: the embedded server) and ``corpus`` that the caller closes (``vs.store.close()``)."""
        target = store if store is not None else connect(url, corpus=corpus)
        vs = cls(target, embedding, **{k: v for k, v in kwargs.items() if k in ("tier", "embedding_name")})
        vs.add_texts(texts, metadatas, ids=list(ids) if ids is not None else None)
        return vs


class _EntryRow:
    """An entry in the shape of a search row (for :func:`_document`)."""

    def __init__(self, entry: MemoryEntry) -> None:
        self.entry_id = entry.id
        self.content = entry.content
        self.source = entry.source
        self.metadata = dict(entry.metadata)
