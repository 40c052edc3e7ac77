"""The public surface: ``__all__`` is sorted, complete and importable."""

from __future__ import annotations

import tnsrag_db


def test_all_is_sorted_and_importable() -> None:
    assert tnsrag_db.__all__ == sorted(tnsrag_db.__all__, key=lambda n: (n[0].islower(), n))
    for name in tnsrag_db.__all__:
        assert getattr(tnsrag_db, name) is not None


def test_all_lists_every_public_name() -> None:
    public = {n for n, v in vars(tnsrag_db).items() if not n.startswith("_") and not isinstance(v, type(tnsrag_db))
              and n != "annotations"}
    assert public == set(tnsrag_db.__all__)


def test_eight_strategies_have_spec_names() -> None:
    names = {cls.__name__ for cls in (tnsrag_db.VectorRAGStrategy, tnsrag_db.KeywordRAGStrategy,
                                      tnsrag_db.HybridRAGStrategy, tnsrag_db.GraphRAGStrategy,
                                      tnsrag_db.MultiQueryRAGStrategy, tnsrag_db.HierarchicalRAGStrategy,
                                      tnsrag_db.TemporalRAGStrategy, tnsrag_db.ReasoningRAGStrategy)}
    assert len(names) == 8
