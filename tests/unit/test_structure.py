"""The package's shape, checked from its source with ``ast`` (nothing is imported):

* the layers, in the order the package docstring gives (:data:`LAYERS`): no module imports
  from a layer above its own, at module level, inside a function or under
  ``if TYPE_CHECKING:`` (an annotation is a dependency too);
* no import cycles among ``tnsrag_db`` modules (module-level imports only: an import inside
  a function or under ``if TYPE_CHECKING:`` runs later and is allowed), and none at all,
  deferred imports included, inside the database and store layers;
* the CLI and the declarative layer import no private module of another layer
  (``tnsrag_db.<pkg>._<mod>``: a module with a ``_`` name below another package; the
  top-level ``tnsrag_db._<mod>`` modules such as ``_validate`` are the package's shared
  internals, meant for every layer);
* strategy modules name no table in SQL (the indexes own all SQL).

Each check is a function of a source tree, tested on a small synthetic tree as well, so a
check that no longer finds anything fails here. ``KNOWN_*`` sets list today's violations
in modules other engineers are restructuring right now; THE LEAD EMPTIES THEM AT MERGE.
A listed violation that no longer exists fails the test too, so the lists cannot go stale.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypeVar

import pytest

PACKAGE = "tnsrag_db"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
#: The layers, bottom up: each module prefix with the layers below it that it may import
#: (the longest matching prefix places a module; the package's own ``__init__`` is outside).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tnsrag_db._counts", "tnsrag_db._lazy", "tnsrag_db._validate", "tnsrag_db._plugins", "tnsrag_db._errors", "tnsrag_db._types",
     "tnsrag_db._telemetry"),
    ("tnsrag_db.explain",),
    ("tnsrag_db._db",),
    ("tnsrag_db._store", "tnsrag_db.embeddings", "tnsrag_db._chunking"),
    ("tnsrag_db._indexes",),
    ("tnsrag_db._strategies",),
    ("tnsrag_db._pipeline", "tnsrag_db.declarative", "tnsrag_db.admin", "tnsrag_db._loaders", "tnsrag_db.evaluation",
     "tnsrag_db.integrations", "tnsrag_db.tenancy"),
    ("tnsrag_db._cli",),
)
#: Deferred imports (inside a function or under ``TYPE_CHECKING``) make no circle either, in
#: the whole package: a module imported lazily is still a module depended on.
NO_LAZY_CYCLES = ("tnsrag_db",)
#: Today's deferred circles, each named by its modules (emptied as they are broken).
KNOWN_LAZY_CYCLES: set[frozenset[str]] = set()
#: The layers that may import only public modules of other layers.
BOUNDARY_LAYERS = ("tnsrag_db._cli", "tnsrag_db.declarative")
#: Strategy modules that may mention tables (none of them runs SQL today).
STRATEGY_EXEMPT = {"base", "compose", "registry"}
K = TypeVar("K")
TABLES = ("entries", "bm25_postings", "bm25_df", "bm25_stats", "embeddings", "edges", "embedding_spaces", "corpora")

# Today's violations outside this branch's files (issue 15 is fixing them in parallel).
# The lead empties these sets at merge.
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()
KNOWN_STRATEGY_TABLES: set[tuple[str, str]] = set()


# -- reading a source tree ------------------------------------------------------------------

def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module below ``root`` by dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(body: list[ast.stmt], lazy: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body``; with ``lazy`` false only those that run when the
    module is imported (not in functions, not under ``if TYPE_CHECKING:``)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if lazy:
                yield from (n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            if lazy:
                yield from _import_nodes(node.body, lazy)
            yield from _import_nodes(node.orelse, lazy)
        else:  # class bodies, try/with/if/for blocks run at import
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    yield from _import_nodes([s for s in block if isinstance(s, ast.stmt)], lazy)
                    for handler in block:
                        if isinstance(handler, ast.ExceptHandler):
                            yield from _import_nodes(handler.body, lazy)


def imports(name: str, path: Path, known: dict[str, Path], lazy: bool) -> list[tuple[str, int]]:
    """``(module, line)`` of each import of module ``name`` of the tree ``known``: a
    ``from x import y`` names ``x.y`` when that is a module, else ``x``, and the packages
    above it that do not hold ``name``; modules outside the tree are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, int]] = []
    for node in _import_nodes(tree.body, lazy):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        # Importing a.b.c runs the packages a and a.b first: those of them that do not
        # contain this module (which are imported before it) are imported by it too.
        # (A module importing itself finds itself in sys.modules: no edge.)
        own = {".".join(name.split(".")[:n]) for n in range(1, name.count(".") + 2)}
        for target in dict.fromkeys(targets):
            parents = [".".join(target.split(".")[:n]) for n in range(1, target.count(".") + 1)]
            out.extend((p, node.lineno) for p in parents if p in known and p not in own)
            if target in known and target != name:
                out.append((target, node.lineno))
    return out


# -- the checks -----------------------------------------------------------------------------

def layer_of(name: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The index in ``layers`` of the layer holding module ``name`` (longest prefix), or None."""
    best: tuple[int, int] | None = None
    for number, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (number, len(prefix))
    return None if best is None else best[0]


def upward_imports(root: Path, package: str, layers: tuple[tuple[str, ...], ...]) -> dict[tuple[str, str], str]:
    """``(module, imported module)`` for each import, deferred and annotation-only ones
    included, of a module of a higher layer than the importing module's, with where it is;
    and ``(module, "unplaced")`` for a module no layer holds (the package itself aside)."""
    known = modules(root, package)
    out: dict[tuple[str, str], str] = {}
    for name, path in known.items():
        own = layer_of(name, layers)
        if own is None:
            if name != package:
                out[(name, "unplaced")] = f"{path.name}: in no layer"
            continue
        for target, line in imports(name, path, known, lazy=True):
            other = layer_of(target, layers)
            if other is not None and other > own:
                out.setdefault((name, target), f"{path.name}:{line} imports {target}")
    return out


def import_cycles(root: Path, package: str, *, lazy: bool = False,
                  within: tuple[str, ...] | None = None) -> dict[frozenset[str], str]:
    """Each import cycle (a strongly connected component of the module-level import graph,
    or with ``lazy`` of every import, deferred ones included) with one path around it,
    ``a:3 -> b:7 -> a`` (the importing line at each step); with ``within``, only among the
    modules under those prefixes."""
    known = modules(root, package)
    if within is not None:
        keep = {m for m in known if any(m == w or m.startswith(w + ".") for w in within)}
        known_all = known
        graph = {m: {t: line for t, line in imports(m, known_all[m], known_all, lazy=lazy) if t in keep}
                 for m in keep}
    else:
        graph = {m: {t: line for t, line in imports(m, p, known, lazy=lazy)} for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; the graph is small
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    out: dict[frozenset[str], str] = {}
    for component in components:
        start = min(component)
        if len(component) == 1 and start not in graph[start]:
            continue
        # Shortest way from start back to start inside the component (breadth first).
        came: dict[str, str] = {}
        frontier, end = [start], None
        while frontier and end is None:
            following = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w not in component or w in came:
                        continue
                    came[w] = v
                    if w == start:
                        end = v
                        break
                    following.append(w)
                if end is not None:
                    break
            frontier = following
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(came[path[-1]])
        path.reverse()  # start -> ... -> start
        steps = [f"{a}:{graph[a][b]}" for a, b in zip(path, path[1:], strict=False)]
        out[frozenset(component)] = " -> ".join(steps + [start])
    return out


def private_imports(root: Path, package: str, layers: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """``(importing module's path, imported module)`` for each import, lazy ones included,
    by a module of ``layers`` of a private module of another package, with where it is."""
    known = modules(root, package)
    out: dict[tuple[str, str], str] = {}
    for name, path in known.items():
        layer = next((lay for lay in layers if name == lay or name.startswith(lay + ".")), None)
        if layer is None:
            continue
        for target, line in imports(name, path, known, lazy=True):
            below = target.split(".")[2:]  # what follows tnsrag_db.<pkg>
            if target == layer or target.startswith(layer + ".") or not any(p.startswith("_") for p in below):
                continue
            out.setdefault((path.relative_to(root).as_posix(), target), f"{path.name}:{line} imports {target}")
    return out


_SQL = re.compile(r"\b(?:SELECT|INSERT\s+INTO|UPDATE|DELETE\s+FROM|FROM|JOIN)\b")


def _strings(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Every string literal but docstrings, an f-string as one text (``{}`` for its fields)."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    inside_fstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside_fstrings.update(id(v) for v in node.values)
            yield "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values), node.lineno
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and id(node) not in inside_fstrings):
            yield node.value, node.lineno


def strategy_tables(root: Path, package: str = "_strategies") -> dict[tuple[str, str], str]:
    """``(strategy module's path, table)`` for each table a strategy module's SQL names
    (a string with an upper-case SQL keyword in which the table's name stands as a word)."""
    tables = re.compile(r"(?<![:\w])(" + "|".join(TABLES) + r")(?!\w)")
    out: dict[tuple[str, str], str] = {}
    for path in sorted((root / package).glob("*.py")):
        if path.stem in STRATEGY_EXEMPT:
            continue
        for text, line in _strings(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if _SQL.search(text):
                for table in tables.findall(text):
                    out.setdefault((path.relative_to(root).as_posix(), table), f"{path.name}:{line}")
    return out


def _compare(found: Mapping[K, object], known: set[K], what: str) -> list[str]:
    """What ``found`` has beyond ``known``, and what ``known`` lists that is not found."""
    problems = [f"{what}: {key!r} ({found[key]})" for key in sorted(found, key=repr) if key not in known]
    problems += [f"listed in KNOWN but gone (remove it from the list): {key!r}" for key in sorted(known, key=repr)
                 if key not in found]
    return problems


# -- the package ----------------------------------------------------------------------------

def test_no_import_cycles() -> None:
    problems = _compare(import_cycles(ROOT, PACKAGE), KNOWN_CYCLES, "import cycle")
    assert not problems, "\n".join(problems)


def test_nothing_imports_from_a_layer_above_its_own() -> None:
    assert upward_imports(ROOT, PACKAGE, LAYERS) == {}


def test_the_package_docstring_gives_the_same_layer_order() -> None:
    doc = ast.get_docstring(ast.parse((ROOT / "__init__.py").read_text(encoding="utf-8"))) or ""
    order = [p.removeprefix("tnsrag_db.") for layer in LAYERS for p in layer]
    positions = [doc.find(f"``{name}``") for name in order]
    assert -1 not in positions, [n for n, at in zip(order, positions) if at == -1]
    layer_starts = [min(doc.find(f"``{p.removeprefix('tnsrag_db.')}``") for p in layer) for layer in LAYERS]
    assert layer_starts == sorted(layer_starts)


def test_no_import_circle_even_through_deferred_imports() -> None:
    problems = _compare(import_cycles(ROOT, PACKAGE, lazy=True, within=NO_LAZY_CYCLES), KNOWN_LAZY_CYCLES,
                        "import circle through deferred imports")
    assert not problems, "\n".join(problems)


def test_cli_and_declarative_import_no_private_module_of_another_layer() -> None:
    found = private_imports(ROOT, PACKAGE, BOUNDARY_LAYERS)
    problems = _compare(found, KNOWN_PRIVATE_IMPORTS, "private import")
    assert not problems, "\n".join(problems)


def test_strategies_name_no_table_in_sql() -> None:
    problems = _compare(strategy_tables(ROOT), KNOWN_STRATEGY_TABLES, "table in strategy SQL")
    assert not problems, "\n".join(problems)


# -- the checks themselves, on a synthetic tree ----------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_a_cycle_is_found_with_its_path_and_lazy_imports_are_not(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import x\n",
        "b.py": "import os\nfrom pkg import c\nx = 1\n",
        "c.py": "from . import a\n",
        "lazy.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import late\n",
        "late.py": "def f():\n    from pkg import lazy\n",
        "sub/__init__.py": "from pkg.sub.leaf import y\n",
        "sub/leaf.py": "y = 2\n",
    })
    cycles = import_cycles(root, "pkg")
    assert cycles == {frozenset({"pkg.a", "pkg.b", "pkg.c"}): "pkg.a:1 -> pkg.b:2 -> pkg.c:1 -> pkg.a"}


def test_importing_a_submodule_imports_its_packages(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "x.py": "try:\n    import pkg.sub.leaf\nexcept ImportError:\n    pass\n",
        "sub/__init__.py": "from pkg import x\n",
        "sub/leaf.py": "import pkg.sub.other\n",  # pkg.sub is already imported: no edge to it
        "sub/other.py": "y = 1\n",
        "own/__init__.py": "from pkg.own.part import y\n",
        "own/part.py": "from pkg.own import z\ny = 1\n",  # its package's __init__ imports it: a cycle
    })
    assert import_cycles(root, "pkg") == {
        frozenset({"pkg.x", "pkg.sub"}): "pkg.sub:1 -> pkg.x:2 -> pkg.sub",
        frozenset({"pkg.own", "pkg.own.part"}): "pkg.own:1 -> pkg.own.part:1 -> pkg.own",
    }


def test_imports_from_a_higher_layer_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "", "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import H\n",
        "mid.py": "def f():\n    from pkg.high import g\n", "high.py": "from pkg import low, mid\n", "stray.py": "",
    })
    layers = (("pkg.low",), ("pkg.mid",), ("pkg.high",))
    assert upward_imports(root, "pkg", layers) == {
        ("pkg.low", "pkg.high"): "low.py:3 imports pkg.high", ("pkg.mid", "pkg.high"): "mid.py:2 imports pkg.high",
        ("pkg.stray", "unplaced"): "stray.py: in no layer"}
    assert import_cycles(root, "pkg", lazy=True, within=("pkg.mid", "pkg.high")) == {
        frozenset({"pkg.high", "pkg.mid"}): "pkg.high:1 -> pkg.mid:2 -> pkg.high"}
    assert import_cycles(root, "pkg") == {}  # module-level imports alone make no circle


def test_private_imports_across_layers_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "", "_shared.py": "", "store/__init__.py": "", "store/_rows.py": "", "store/rows.py": "",
        "cli/__init__.py": "from pkg.cli import _common\nfrom pkg import _shared\nfrom pkg.store import rows\n",
        "cli/_common.py": "def f():\n    from pkg.store._rows import r\n",
        "other.py": "from pkg.store import _rows\n",
    })
    assert private_imports(root, "pkg", ("pkg.cli",)) == {
        ("cli/_common.py", "pkg.store._rows"): "_common.py:2 imports pkg.store._rows"}


def test_table_names_in_strategy_sql_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "strategies/base.py": "SQL = 'SELECT id FROM entries'\n",
        "strategies/walk.py": ('"""Walks the edges of the entries."""\n'
                               "A = f'SELECT * FROM {s}.edges JOIN x'\n"
                               "B = 'no SQL: the entries here are words'\n"
                               "C = 'SELECT :entries AS n'\n"
                               "D = ('SELECT 1 '\n     'FROM bm25_df')\n"),
    })
    assert strategy_tables(root, "strategies") == {("strategies/walk.py", "edges"): "walk.py:2",
                                      ("strategies/walk.py", "bm25_df"): "walk.py:5"}


@pytest.mark.parametrize("found, known, stale", [({"a": "x"}, {"a"}, False), ({}, {"a"}, True)])
def test_a_known_violation_that_is_gone_fails(found: dict[str, str], known: set[str], stale: bool) -> None:
    assert bool(_compare(found, known, "v")) is stale
    assert _compare({"b": "y"}, set(), "v") == ["v: 'b' (y)"]
