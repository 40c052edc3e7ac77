"""The walking strategies build no SQL: their modules name no table and touch no connection."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tnsrag_db
from tnsrag_db._db.schema import metadata

STRATEGIES = Path(tnsrag_db.__file__).parent / "_strategies"
# GraphRAGStrategy.explain still reads its BM25 seeds with their term figures on one snapshot
# connection (BM25Index.explain_scores takes the connection).
EXPLAIN_ONLY = {"graph": {".execute(", "sa.text("}}


@pytest.mark.parametrize("module", ["graph", "hierarchical", "temporal", "reasoning", "multi_query"])
def test_strategy_module_names_no_table(module: str) -> None:
    source = (STRATEGIES / f"{module}.py").read_text()
    tables = sorted(metadata.tables)
    assert tables and "entries" in {t.split(".")[-1] for t in tables}
    for table in (t.split(".")[-1] for t in tables):
        assert not re.search(rf"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+{re.escape(table)}\b", source, re.IGNORECASE), \
            f"{module}.py names the table {table}"
    for io in ("transaction()", ".execute(", "sa.text("):
        assert io not in source or io in EXPLAIN_ONLY.get(module, set()), f"{module}.py uses {io}"
