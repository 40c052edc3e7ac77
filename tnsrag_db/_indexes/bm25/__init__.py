"""True Okapi BM25 over a corpus: the index (:mod:`.index`), its statements (:mod:`.sql`)
and the formula as pure functions (:mod:`.scoring`).

The names the single ``bm25`` module had stay importable from here; the pruning
constants are read from :mod:`tnsrag_db._indexes.bm25.sql` (patch them there).
"""

from __future__ import annotations

from tnsrag_db._indexes.bm25.index import BM25Index
from tnsrag_db._indexes.bm25.scoring import DEFAULT_B as DEFAULT_B
from tnsrag_db._indexes.bm25.scoring import DEFAULT_K1 as DEFAULT_K1
from tnsrag_db._indexes.bm25.scoring import check_bm25_parameters as check_bm25_parameters
from tnsrag_db._indexes.bm25.sql import FILTER_PROBE_MAX as FILTER_PROBE_MAX
from tnsrag_db._indexes.bm25.sql import PROBE_COST as PROBE_COST
from tnsrag_db._indexes.bm25.sql import PRUNE_MIN_DF as PRUNE_MIN_DF
from tnsrag_db._indexes.bm25.sql import PRUNE_RATIO as PRUNE_RATIO

__all__ = ["DEFAULT_B", "DEFAULT_K1", "BM25Index"]
