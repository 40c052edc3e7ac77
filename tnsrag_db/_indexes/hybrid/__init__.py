"""BM25 and vector search fused in one statement (on complete information, or by RRF).

:mod:`.index` builds the fused statement and its plan (and the two streams' rankings in
one statement) from a BM25 index and a vector store of the same corpus; :mod:`.sql` is
the fused statement's text. The configured retriever and the strategy over it are in
:mod:`tnsrag_db._strategies.hybrid`.
"""

from tnsrag_db._indexes.hybrid.index import (
    fused_plan,
    fused_statement,
    rankings_plan,
    rankings_statement,
    split_rankings,
)

__all__ = ["fused_plan", "fused_statement", "rankings_plan", "rankings_statement", "split_rankings"]
