"""The public surface: ``__all__`` is sorted, complete and importable."""

from __future__ import annotations

import tnsrag_db


def test_all_is_sorted_and_importable() -> None:
    assert tnsrag_db.__all__ == sorted(tnsrag_db.__all__, key=lambda n: (n[0].islower(), n))
    for name in tnsrag_db.__all__:
        assert getattr(tnsrag_db, name) is not None


def test_all_lists_every_public_name() -> None:
    for name in tnsrag_db.__all__:  # names load on first access (PEP 562): load them all first
        getattr(tnsrag_db, name)
    assert set(tnsrag_db._EXPORTS) == set(tnsrag_db.__all__)
    public = {n for n, v in vars(tnsrag_db).items() if not n.startswith("_") and not isinstance(v, type(tnsrag_db))
              and n != "annotations"}
    assert public == set(tnsrag_db.__all__)


def test_eight_strategies_have_spec_names() -> None:
    names = {cls.__name__ for cls in (tnsrag_db.VectorRAGStrategy, tnsrag_db.KeywordRAGStrategy,
                                      tnsrag_db.HybridRAGStrategy, tnsrag_db.GraphRAGStrategy,
                                      tnsrag_db.MultiQueryRAGStrategy, tnsrag_db.HierarchicalRAGStrategy,
                                      tnsrag_db.TemporalRAGStrategy, tnsrag_db.ReasoningRAGStrategy)}
    assert len(names) == 8


def test_import_loads_no_database_stack() -> None:
    import subprocess
    import sys

    code = ("import sys, tnsrag_db; print(sorted(m for m in ('sqlalchemy', 'alembic', 'psycopg', 'numpy') "
            "if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


def test_every_error_class_is_exported() -> None:
    import inspect

    from tnsrag_db import _errors as errors

    classes = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__}
    # Before: DeadlockError and ConstraintViolationError, which the docs present, were missing.
    assert classes and classes <= set(tnsrag_db.__all__), sorted(classes - set(tnsrag_db.__all__))
    assert set(errors.__all__) == classes


def test_public_subpackages_export_what_they_list() -> None:
    """Each documented subpackage's ``__all__`` names load (its lazy names included), and the
    top level lists the names the docs use instead of private module paths."""
    import importlib

    for package in ("tnsrag_db.admin", "tnsrag_db.evaluation", "tnsrag_db.explain", "tnsrag_db.embeddings",
                    "tnsrag_db.tenancy", "tnsrag_db.declarative"):
        module = importlib.import_module(package)
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{package}.{name}"
    from tnsrag_db._store.embedded.resolve import keep_running
    from tnsrag_db.admin import keep_running as public

    assert public is keep_running
    assert {"FileLoader", "chunker_for", "build_strategy", "DistinctContentRAGStrategy", "MMRRAGStrategy",
            "ConnectionHooks", "IndexBuildDeferred"} <= set(tnsrag_db.__all__)


def _type_checking_imports(package: str) -> dict[str, str]:
    """Name -> module of the ``if TYPE_CHECKING:`` imports of ``package``'s ``__init__``."""
    import ast
    import importlib
    from pathlib import Path

    path = Path(importlib.import_module(package).__file__ or "")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                 and not isinstance(node.test, ast.UnaryOp))
    return {alias.asname or alias.name: node.module for node in block.body
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


def test_lazy_packages_tell_type_checkers_what_they_load() -> None:
    """Each package whose names load on first use (tnsrag_db._lazy) imports exactly the same
    names from the same modules for type checkers, and ``__all__`` lists them."""
    import importlib

    for package, homes in (("tnsrag_db", "_EXPORTS"), ("tnsrag_db.admin", "_HOMES"),
                           ("tnsrag_db._indexes.graph", "_HOMES")):
        module = importlib.import_module(package)
        lazy = getattr(module, homes)
        assert _type_checking_imports(package) == lazy, package
        assert set(module.__all__) == set(lazy), package
        for name in lazy:
            assert getattr(module, name) is getattr(importlib.import_module(lazy[name]), name)
        assert set(lazy) <= set(dir(module))
