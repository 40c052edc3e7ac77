"""No import circle among the database layer (tnsrag_db.db) and the store (tnsrag_db.store).

The graph is read from the sources with ``ast``: every ``import`` of a ``tnsrag_db`` module,
at module level or inside a function (a deferred import is still a dependency), except
those under ``if TYPE_CHECKING:`` (annotations only, never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tnsrag_db"
LAYERS = ("tnsrag_db.db", "tnsrag_db.store")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, here: str, is_package: bool, modules: set[str]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".") if is_package else here.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # ``from pkg import sub`` depends on the submodule when there is one.
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name in modules}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", modules)
            for name, path in paths.items()}


def _cycles(graph: dict[str, set[str]], nodes: set[str]) -> list[list[str]]:
    """Every strongly connected component of more than one module (or a self-import) within ``nodes``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v] & nodes):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(nodes):
        if v not in index:
            connect(v)
    return found


def _in_layers(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in LAYERS)


def test_the_graph_sees_imports() -> None:
    graph = _graph()
    assert "tnsrag_db.db.engine" in graph["tnsrag_db.db.session"]
    assert "tnsrag_db.store.write" in graph["tnsrag_db.store.store"]
    assert "tnsrag_db.db.engine" in graph["tnsrag_db.store.embedded.server"]  # a deferred import counts


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph, set(graph)) == [["a", "b", "c"]]


def test_no_import_circle_among_db_and_store() -> None:
    graph = _graph()
    layers = {name for name in graph if _in_layers(name)}
    assert _cycles(graph, layers) == []


def test_the_database_layer_imports_nothing_above_it() -> None:
    graph = _graph()
    upward = {(name, dep) for name in graph if name.startswith("tnsrag_db.db")
              for dep in graph[name] if _in_layers(dep) and not dep.startswith("tnsrag_db.db")}
    assert upward == set()
