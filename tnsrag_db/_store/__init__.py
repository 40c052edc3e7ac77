"""A corpus in the library's schema: the ``Store`` and everything it writes and reads.

The modules: :mod:`.store` (``Store`` and ``connect``: one corpus over one pool of connections),
:mod:`.aio` (``AsyncStore``), :mod:`.corpus` (the corpus row, its write lock and the
``Writer``'s transactions), :mod:`.write` (the steps of one write: validate, stage,
terms, classify, rewrite, postings, and the ``WriteExtension`` protocol indexes join a
write with), :mod:`.staging` (the per-connection stage tables), :mod:`.sql` (the entry write
statements and the write path's planner settings), :mod:`.bm25` (BM25's write side: text
analysis, the postings, document frequency and statistics statements, the merge of postings
into blocks), :mod:`.reads` (entry columns and the plans of ``get``, ``count`` and friends),
:mod:`.filters` (metadata filters as SQL), :mod:`.maintenance` (orphan HNSW indexes), :mod:`.citus` (the
distributed layout script), and :mod:`.embedded` (the embedded PostgreSQL server, its
keeper process, memory sizing and the warm model).
"""
