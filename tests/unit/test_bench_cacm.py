"""The CACM loader of the benchmarks (bench/cacm.py), on the collection next to the repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.cacm import RELATION, load_cacm

#: Next to the repository, or where TNSRAG_CACM_DIR says (a git worktree elsewhere).
CACM = Path(os.environ.get("TNSRAG_CACM_DIR") or Path(__file__).resolve().parents[2].parent / "shared" / "data" / "cacm")


@pytest.mark.skipif(not (CACM / "cacm.all").exists(), reason="the CACM collection is not at ../shared/data/cacm")
def test_cacm_loads_entries_citation_edges_both_ways_and_the_judged_queries() -> None:
    entries, edges, queries, qrels = load_cacm(CACM)
    assert [e.id for e in entries] == [str(n) for n in range(1, 3205)]
    assert entries[0].content == "Preliminary Report-International Algebraic Language"  # a title only
    with_abstract = next(e for e in entries if "\n" in e.content)
    assert all(part.strip() for part in with_abstract.content.split("\n"))
    pairs = {(e.src, e.dst) for e in edges}
    assert len(edges) == len(pairs) == 12_330 and all(e.relation == RELATION for e in edges)
    assert all((dst, src) in pairs for src, dst in pairs) and all(src != dst for src, dst in pairs)
    assert {n for pair in pairs for n in pair} <= {e.id for e in entries}
    assert len(queries) == 52 and {q.id for q in queries} == set(qrels)
    assert queries[0].id == "1" and queries[0].text.startswith("What articles exist which deal with TSS")
    assert sum(len(g) for g in qrels.values()) == 796 and qrels["1"]["1410"] == 1  # "01 1410": zero-padded
