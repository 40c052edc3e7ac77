"""How strategies build their explanations (the values are :mod:`tnsrag_db.explain`'s).

:func:`explain_with` explains any strategy (its own ``explain``, else its results with
:class:`~tnsrag_db.explain.UnexplainedScore`); :mod:`.assemble` holds what strategies
build explanations with (:func:`explanation_of`, :func:`by_entry`, :func:`prefixed`);
:mod:`.transaction` the one snapshot an explanation reads (:func:`snapshot`).
"""

from __future__ import annotations

from tnsrag_db._strategies.explain.assemble import by_entry, explain_with, explanation_of, prefixed
from tnsrag_db._strategies.explain.transaction import snapshot

__all__ = ["by_entry", "explain_with", "explanation_of", "prefixed", "snapshot"]
