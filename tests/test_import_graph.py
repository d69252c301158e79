"""No import circle in ``src/fedvote`` (issue 44), counting imports inside functions too.

Every module is parsed with :mod:`ast` (nothing is imported); an edge a → b is any
``import``/``from … import`` of ``b`` anywhere in ``a`` — at the top, inside a function or
a class — except under ``if TYPE_CHECKING:``, which never runs. ``from p import x`` is an
edge to ``p.x`` when that is a module, else to ``p``. A circle is a strongly connected
component of more than one module; the test names every one it finds.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fedvote"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.Module, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The fedvote modules ``module`` imports anywhere but under ``if TYPE_CHECKING:``."""
    found: set[str] = set()
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    found.add(sub)
                elif target in modules:
                    found.add(target)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every module of ``src/fedvote`` → the fedvote modules it imports."""
    paths = sorted(PACKAGE.rglob("*.py"))
    names = {_module_name(path): path for path in paths}
    modules = set(names)
    return {
        name: _imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", modules)
        for name, path in names.items()
    }


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:  # iterative, so deep graphs do not hit the recursion limit
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(circles)


def test_the_checker_finds_a_circle_and_its_members() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking_ones() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from fedvote import b\n"
        "def f():\n    import fedvote.c\n    from fedvote.d import thing\n"
    )
    modules = {"fedvote.a", "fedvote.b", "fedvote.c", "fedvote.d"}
    assert _imported(tree, "fedvote.a", False, modules) == {"fedvote.c", "fedvote.d"}


def test_src_fedvote_has_no_import_circle() -> None:
    graph = import_graph()
    assert "fedvote.runner" in graph and graph["fedvote.runner"]
    circles = import_circles(graph)
    assert not circles, "import circles: " + "; ".join(" ↔ ".join(circle) for circle in circles)
