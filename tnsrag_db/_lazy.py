"""Public names that load on first use (PEP 562), for a package's ``__init__``.

A package lists each public name with the module that defines it, as a literal dict, and
takes its ``__getattr__`` and ``__dir__`` from :func:`lazy_names`; its ``TYPE_CHECKING``
block imports the same names for type checkers. ``import tnsrag_db`` then loads none of
the database stack, and the command line's keyword query imports only what it runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public names are the keys of
    ``homes`` (name -> absolute module name). A name is imported from its module on its
    first lookup and stored in the package, so later lookups do not come here."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
