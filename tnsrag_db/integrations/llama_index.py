"""A LlamaIndex retriever over any tnsrag_db strategy (install the ``[llamaindex]`` extra).

:class:`TnsragRetriever` returns ``NodeWithScore`` objects: a ``TextNode`` whose ``id_`` is
the entry id, whose text is the entry's content and whose metadata is the entry's own
metadata, what the strategy added (``depth``, ``path``, ``childOf``, ...), ``tier`` and
``source`` (when set); the strategy's score is ``NodeWithScore.score``.

As LlamaIndex's own nodes do:

* the library's bookkeeping keys (:data:`BOOKKEEPING_KEYS`: ``tier``, ``entryId``,
  ``depth``, ``path``, ``childOf``, ``duplicateIds`` and ``root``, the folder ``tnsrag
  ingest`` read a file from) are listed in ``excluded_llm_metadata_keys`` and
  ``excluded_embed_metadata_keys``, so a prompt (``MetadataMode.LLM``) or an embedding text
  shows the entry's own metadata and ``source`` but not them;
* ``relationships`` carry ``PARENT`` (the entry's parent id) and ``SOURCE`` (the entry's
  source, else the root of its parent chain), so ``node.parent_node`` and
  ``node.ref_doc_id`` are set. They are read from the corpus (one recursive query per
  retrieval) when the retriever knows its store: a strategy given as an object without
  ``store=`` gives nodes a ``SOURCE`` from the entry's source alone and no ``PARENT``.

``aretrieve`` awaits the strategy's own ``aretrieve`` (psycopg's async connections) when
it has one, else runs the sync retrieval in the event loop's default thread pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import IndexNode, NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from tnsrag_db._db.aio import arun
from tnsrag_db._db.statement import Plan
from tnsrag_db._errors import ConfigurationError, InvalidFilterError
from tnsrag_db._indexes.hierarchy import HierarchyIndex
from tnsrag_db._store.store import Store
from tnsrag_db._strategies.base import RAGStrategy, aretrieve_with
from tnsrag_db._types import RAGContext, RetrievedDocument, validate_filters
from tnsrag_db.embeddings import EmbeddingFunction
from tnsrag_db.integrations._core import (
    SerialEmbedding,
    StrategyCache,
    argument,
    check_text_query,
    document_record,
    search_context,
)

__all__ = ["BOOKKEEPING_KEYS", "LlamaIndexEmbedding", "TnsragRetriever", "to_library_filters", "to_node"]

#: Metadata keys the library fills in for its own bookkeeping, hidden from the LLM and
#: embedding views of a node (they stay in ``node.metadata``).
BOOKKEEPING_KEYS = ("tier", "entryId", "depth", "path", "childOf", "duplicateIds", "root")

#: An entry's parent id and the root of its chain (see :meth:`HierarchyIndex.lineage_statement`).
_Lineage = dict[str, tuple[str | None, str]]


def to_node(doc: RetrievedDocument, lineage: _Lineage | None = None) -> NodeWithScore:
    """A LlamaIndex node with score for a library result (see the module docstring);
    ``lineage`` maps entry ids to their parent id and root id (None: not read)."""
    record = document_record(doc)
    metadata: dict[str, Any] = dict(record["metadata"])
    metadata["tier"] = record["tier"]
    if record["source"] is not None:
        metadata["source"] = record["source"]
    hidden = [k for k in BOOKKEEPING_KEYS if k in metadata]
    relationships: dict[NodeRelationship, RelatedNodeInfo | list[RelatedNodeInfo]] = {}
    entry_id = record["id"]
    parent, root = (lineage or {}).get(entry_id, (None, entry_id))
    if parent is not None:
        relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id=parent)
    # The document a node comes from: its source, else the root of its chain (a root entry
    # without a source is a document itself and has no SOURCE).
    ref_doc = record["source"] if record["source"] is not None else (root if root != entry_id else None)
    if ref_doc is not None:
        relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=ref_doc)
    node = TextNode(id_=entry_id, text=doc.content, metadata=metadata, relationships=relationships,
                    excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=list(hidden))
    return NodeWithScore(node=node, score=doc.score)


def to_library_filters(filters: MetadataFilters | Mapping[str, str] | None) -> dict[str, str]:
    """LlamaIndex ``MetadataFilters`` (or a plain ``{key: "value"}`` dict) as the library's
    exact filters, all of which must match.

    Accepted: ``MetadataFilter``\\ s with operator ``EQ`` (``==``) and a string value, under
    condition ``AND`` (``OR`` with a single filter is the same). Everything else cannot be
    an exact match and raises :class:`~tnsrag_db._errors.InvalidFilterError` naming the
    filter: other operators, non-string values, ``OR`` over several filters, ``NOT``, nested
    ``MetadataFilters``, and two different values for one key (no entry could match both).
    """
    if filters is None:
        return {}
    if not isinstance(filters, MetadataFilters):
        if not isinstance(filters, Mapping):
            raise InvalidFilterError(f"filters must be MetadataFilters or a dict of metadata key to string value, "
                                     f"got {type(filters).__name__}")
        return dict(validate_filters(filters))
    items = list(filters.filters)
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.NOT or (condition != FilterCondition.AND and len(items) > 1):
        raise InvalidFilterError(f"filter condition {condition.value!r} over {len(items)} filters is not supported: "
                                 "tnsrag_db filters are exact string matches, all of which must match (AND)")
    out: dict[str, str] = {}
    for item in items:
        if isinstance(item, MetadataFilters):
            raise InvalidFilterError(f"nested MetadataFilters ({item!r}) are not supported: give one level of "
                                     "exact filters under AND")
        if not isinstance(item, MetadataFilter):
            raise InvalidFilterError(f"filters must hold MetadataFilter objects, got {type(item).__name__}")
        if item.operator != FilterOperator.EQ:
            raise InvalidFilterError(f"filter on {item.key!r} uses operator {item.operator.value!r}: only exact "
                                     "matches ('==') are supported")
        if not isinstance(item.value, str):
            raise InvalidFilterError(f"filter value for {item.key!r} must be a string (exact match), got "
                                     f"{type(item.value).__name__} {item.value!r}")
        if item.key in out and out[item.key] != item.value:
            raise InvalidFilterError(f"filters ask {item.key!r} to equal both {out[item.key]!r} and "
                                     f"{item.value!r}: no entry can match")
        out[item.key] = item.value
    return dict(validate_filters(out))


class LlamaIndexEmbedding:
    """A LlamaIndex embed model (``BaseEmbedding``) as a library embedding function: queries
    through ``get_query_embedding``, stored texts through ``get_text_embedding_batch``. Its
    name (the embedding space it reads and writes) is
    ``llamaindex:<module>.<class>:<model_name>``: write a corpus with
    ``VectorMemoryStore(store, LlamaIndexEmbedding(model))`` and a retriever given the same
    model as ``embedding=`` searches those vectors."""

    def __init__(self, model: BaseEmbedding) -> None:
        self._model = model
        cls = type(model)
        self.name = f"llamaindex:{cls.__module__}.{cls.__qualname__}:{model.model_name}"

    def __call__(self, text: str) -> list[float]:
        return self._model.get_query_embedding(text)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return self._model.get_text_embedding_batch(list(texts))


class TnsragRetriever(BaseRetriever):
    """A LlamaIndex retriever over one tnsrag_db strategy.

    ``strategy`` is a strategy name (default ``"hybrid"``, built over ``store`` with the
    provider of the corpus's own space or ``embedding``: a library embedding function or a
    LlamaIndex embed model such as ``MockEmbedding``) or any ``RAGStrategy`` object (then
    ``store`` is optional and only used to read node relationships).
    ``similarity_top_k`` (default 4) results; ``filters``: ``MetadataFilters`` of exact
    (``EQ``, string) filters under ``AND``, or a plain ``{key: "value"}`` dict (see
    :func:`to_library_filters`); ``min_score``: inclusive threshold (default None: no score
    floor, as LlamaIndex's vector retrievers have none); ``as_of``: the instant the
    retrieval answers at (a timezone-aware datetime: the entries valid, recorded and not
    expired then; default None: now). ``callback_manager``,
    ``object_map``, ``objects`` and ``verbose`` are ``BaseRetriever``'s. Bad settings raise
    the library's :class:`~tnsrag_db._errors.ValidationError` (naming the argument) or
    :class:`~tnsrag_db._errors.ConfigurationError` at construction.
    """

    def __init__(self, store: Store | None = None, strategy: str | RAGStrategy = "hybrid", *,
                 similarity_top_k: int = 4, filters: MetadataFilters | Mapping[str, str] | None = None,
                 min_score: float | None = None, as_of: datetime | None = None,
                 embedding: EmbeddingFunction | Callable[[str], object] | BaseEmbedding | None = None,
                 callback_manager: CallbackManager | None = None, object_map: dict[str, Any] | None = None,
                 objects: list[IndexNode] | None = None, verbose: bool = False) -> None:
        with argument("filters"):
            exact = to_library_filters(filters)
        self._context: RAGContext = search_context(similarity_top_k, exact, min_score,
                                                   top_k_name="similarity_top_k")
        with argument("as_of"):
            self._context = self._context.with_as_of(as_of)
        if store is not None and not isinstance(store, Store):
            raise ConfigurationError(f"store must be a Store, got {type(store).__name__}")
        if isinstance(embedding, BaseEmbedding):
            embedding = LlamaIndexEmbedding(embedding)
        if isinstance(strategy, str):
            if store is None:
                raise ConfigurationError(f"strategy {strategy!r} is a name: give the store to build it over")
            with argument("strategy"):
                self._strategy: RAGStrategy = StrategyCache(store, SerialEmbedding(embedding, store=store)).get(strategy)
        elif isinstance(strategy, RAGStrategy):
            self._strategy = strategy
        else:
            raise ConfigurationError(f"strategy must be a strategy name or a RAGStrategy, got "
                                     f"{type(strategy).__name__}")
        self._hierarchy = HierarchyIndex(store) if store is not None else None
        super().__init__(callback_manager=callback_manager, object_map=object_map, objects=objects,
                         verbose=verbose)

    @property
    def strategy(self) -> RAGStrategy:
        """The strategy every retrieval runs."""
        return self._strategy

    @property
    def context(self) -> RAGContext:
        """``similarity_top_k``, ``filters`` and ``min_score`` as the library's context."""
        return self._context

    def _lineage_plan(self, docs: list[RetrievedDocument]) -> Plan[_Lineage | None]:
        ids = [d.metadata["entryId"] for d in docs if "entryId" in d.metadata]
        if self._hierarchy is None or not ids:
            return None
        rows = yield self._hierarchy.lineage_statement(ids)
        return {r.entry_id: (r.parent_id, r.root_id) for r in rows}

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        docs = self._strategy.retrieve(check_text_query(query_bundle.query_str), self._context)
        lineage = None if self._hierarchy is None else self._hierarchy.store.run(self._lineage_plan(docs))
        return [to_node(d, lineage) for d in docs]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """:meth:`_retrieve` awaited: the strategy's ``aretrieve`` (or its ``retrieve`` in a worker
        thread, :func:`~tnsrag_db._strategies.base.aretrieve_with`), the lineage on an async connection."""
        docs = await aretrieve_with(self._strategy, check_text_query(query_bundle.query_str), self._context)
        lineage = None if self._hierarchy is None else await arun(self._hierarchy.store, self._lineage_plan(docs))
        return [to_node(d, lineage) for d in docs]
