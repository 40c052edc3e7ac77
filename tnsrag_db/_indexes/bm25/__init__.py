"""True Okapi BM25 over a corpus: the index (:mod:`.index`), its statements (:mod:`.sql`)
and the formula as pure functions (:mod:`.scoring`).

:class:`BM25Index` (in :mod:`.index`) holds the searches, the plan and statement builders,
the term statistics and the tuning options of its pruned scoring; :mod:`.sql` renders the
statements' text from a prefix and a filter (every value bound); :mod:`.scoring` is the
same formula in Python, the very summands of the database's scores. What a write keeps
for these searches (postings, document frequencies, statistics, the merge into blocks) is
the store's, :mod:`tnsrag_db._store.bm25`: the store's write path runs it, a layer below.
"""

from __future__ import annotations

from tnsrag_db._indexes.bm25.index import BM25Index
from tnsrag_db._indexes.bm25.scoring import (
    DEFAULT_B as DEFAULT_B,
    DEFAULT_K1 as DEFAULT_K1,
    check_bm25_parameters as check_bm25_parameters,
)

__all__ = ["DEFAULT_B", "DEFAULT_K1", "BM25Index"]
