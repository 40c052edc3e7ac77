"""The eight retrieval strategies and what composes them.

One module per strategy: :mod:`.vector`, :mod:`.keyword`, :mod:`.hybrid`, :mod:`.graph`,
:mod:`.hierarchical`, :mod:`.temporal`, :mod:`.multi_query`, :mod:`.reasoning`; wrappers
over any strategy: :mod:`.distinct` (one result per distinct content) and :mod:`.mmr`
(maximal marginal relevance). Shared parts: :mod:`.base` (the ``RAGStrategy`` protocol
and result building), :mod:`.fusion` (reciprocal rank fusion), :mod:`.expansion` (query
expanders, RM3), :mod:`.navigation` (tree navigators for reasoning), :mod:`.explain`
(assembling explanations in one snapshot). :mod:`.compose` and :mod:`.registry` build a
strategy by name, as the CLI, the MCP server and the integrations do. Strategies name no
table: the indexes own all SQL.
"""
