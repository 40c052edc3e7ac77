"""LangChain adapters: langchain-tests' standard suites plus behaviour of our own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests, VectorStoreIntegrationTests
from pydantic import ValidationError as PydanticValidationError

from tnsrag_db.errors import InvalidEntryError, InvalidFilterError, ValidationError
from tnsrag_db.indexes.bm25 import BM25Index
from tnsrag_db.integrations.langchain import (
    NON_STRING_METADATA_KEY,
    TnsragRetriever,
    TnsragVectorStore,
    to_library_filters,
)
from tnsrag_db.store.store import Store
from tnsrag_db.strategies.keyword import KeywordRAGStrategy
from tnsrag_db.types import MemoryEntry, MemoryTier

# The standard suites' async tests carry no asyncio mark (pytest-asyncio runs in strict
# mode): the classes get it, and its warning for their sync tests is silenced.
STANDARD = [pytest.mark.asyncio, pytest.mark.filterwarnings(
    "ignore:The test <Function .* is marked with '@pytest.mark.asyncio' but it is not an async function")]


@STANDARD[0]
@STANDARD[1]
class TestStandardVectorStore(VectorStoreIntegrationTests):
    """langchain-tests' VectorStore suite (sync and async), each test on an empty corpus."""

    @pytest.fixture
    def vectorstore(self, make_store: Callable[..., Store]) -> Iterator[VectorStore]:
        yield TnsragVectorStore(make_store(), self.get_embeddings())


@STANDARD[0]
@STANDARD[1]
class TestStandardRetriever(RetrieversIntegrationTests):
    """langchain-tests' retriever suite, over a corpus with a handful of matching entries."""

    @pytest.fixture(autouse=True)
    def _corpus(self, store: Store) -> None:
        BM25Index(store).add_all([MemoryEntry(f"doc{i}", f"agents share memory note {i}") for i in range(6)])
        self._store = store

    @property
    def retriever_constructor(self) -> type[TnsragRetriever]:
        return TnsragRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"store": self._store, "strategy": "keyword"}

    @property
    def retriever_query_example(self) -> str:
        return "agents memory"
