"""The indexes over a corpus, each owning the SQL of its searches and writes.

:mod:`.bm25` (Okapi BM25 from tsvector-derived statistics), :mod:`.vector` (pgvector
embedding spaces, exact and HNSW search, ingest), :mod:`.graph` (typed, weighted edges and
their recursive walks), :mod:`.hierarchy` (parent ids, trees and their problems) and
:mod:`.temporal` (time windows and decay). Each builds its statements as plans
(``tnsrag_db._db.statement``) that the store's one read runner sends.
"""
