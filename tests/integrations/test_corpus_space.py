"""Strategies by name in every integration search the corpus's own embedding space.

The corpus here is embedded with a provider that is not the process default (the shipped
model in the test environment): a strategy built by name without ``embedding=`` must use
the corpus's provider. Before, LangChain's and LlamaIndex's retrievers and the MCP server
searched the process default's (empty) space and answered nothing, silently.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tnsrag_db._indexes.vector import VectorMemoryStore
from tnsrag_db._store.store import Store
from tnsrag_db._types import MemoryEntry
from tnsrag_db.embeddings import HashingEmbedding

QUERY = "turbine blade inspection"


def _corpus(store: Store) -> None:
    VectorMemoryStore(store, HashingEmbedding(dimension=32)).add_all([
        MemoryEntry("blade", "Turbine blade inspection schedule."),
        MemoryEntry("menu", "Catering menu for the crew."),
    ])


def test_langchain_retriever_by_name(store: Store) -> None:
    from tnsrag_db.integrations.langchain import TnsragRetriever

    _corpus(store)
    for strategy in ("vector", "hybrid"):
        docs = TnsragRetriever(store=store, strategy=strategy, k=2).invoke(QUERY)
        assert [d.metadata["id"] for d in docs][:1] == ["blade"], strategy


def test_llama_index_retriever_by_name(store: Store) -> None:
    from tnsrag_db.integrations.llama_index import TnsragRetriever

    _corpus(store)
    nodes = TnsragRetriever(store=store, strategy="vector", similarity_top_k=2).retrieve(QUERY)
    assert [n.node.node_id for n in nodes][:1] == ["blade"]


def test_mcp_server_without_embedding(store: Store) -> None:
    from mcp import Client

    from tnsrag_db.integrations.mcp import create_server

    _corpus(store)
    server = create_server(store)

    async def main() -> Any:
        async with Client(server, read_timeout_seconds=120) as client:
            return await client.call_tool("search", {"query": QUERY, "strategy": "vector", "top_k": 2})

    result = asyncio.run(main())
    assert not result.is_error
    assert [d["id"] for d in result.structured_content["documents"]][:1] == ["blade"]
