"""Adapters to agent frameworks, each behind an optional extra.

* :mod:`tnsrag_db.integrations.mcp`: an MCP server over one corpus (``[mcp]``)
* :mod:`tnsrag_db.integrations.langchain`: a LangChain retriever and vector store (``[langchain]``)
* :mod:`tnsrag_db.integrations.llama_index`: a LlamaIndex retriever (``[llamaindex]``)

Importing this package imports none of them.
"""
