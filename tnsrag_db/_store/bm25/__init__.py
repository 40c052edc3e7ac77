"""BM25's write side: what every entry write keeps for the keyword index, in the entry's
own transaction, and the merge of postings into blocks.

:mod:`.analysis` (the text analysis of documents and queries: NFKC, compound identifiers,
chunks; no I/O), :mod:`.sql` (the terms of staged texts, postings, document frequencies and
corpus statistics, and the delete of locked entries with their postings) and :mod:`.merge`
(postings moved from per-entry rows into blocks, tombstones purged).

These are the store's because the store's write path runs them: BM25 is no extension of a
write but part of every entry's row (its length and lexemes) and of its delete. The read
side, the searches over what these keep, is :mod:`tnsrag_db._indexes.bm25`, a layer above,
which analyses its queries with :func:`.analysis.analyze_query`.
"""
