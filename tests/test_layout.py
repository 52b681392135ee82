"""The package's layout: its modules import one another without a cycle.

A cycle is a design knot even when it works at run time: two modules that import each other are one
module in two files, and which of them may be read (or changed, or imported) first depends on the
other. So every import of a ``rehydrate`` module counts, wherever it is: at the top of a module,
inside a function (a lazy import is still a dependency), and by name at run time
(``importlib.import_module`` of a module named in a string constant of the importing module: the
package's lazy exports, ``open_store``'s schemes, the command modules of ``rehydrate.cli``). Only
imports under ``if TYPE_CHECKING:`` do not count: they are annotations, never run.

An import names one module: ``import a.b.c`` and ``from a.b import c`` (``c`` a module) import
``a.b.c``, not the packages ``a`` and ``a.b`` that Python imports first (a package's
``__init__`` may re-export its modules without a cycle).

The graph is read from the source with :mod:`ast`: nothing is imported, so the test takes
milliseconds and sees the lazy imports too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs

import rehydrate

PACKAGE = Path(rehydrate.__file__).parent


@attrs.frozen
class Import:
    """An edge of the graph: where the importing module names the imported one."""

    target: str
    line: int


def _modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (a directory), by its dotted name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree``, but those under ``if TYPE_CHECKING:`` (its ``else`` still runs)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for node in child.orelse:
                yield node
                yield from _statements(node)
            continue
        yield child
        yield from _statements(child)


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """What module ``name`` imports of ``modules``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    dynamic = False
    strings: list[tuple[str, int]] = []
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno) for alias in node.names if alias.name in modules]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, up level - 1
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in modules else source
                if target in modules:
                    found.append(Import(target, node.lineno))
        elif isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
                isinstance(func, ast.Name) and func.id == "import_module"
            ):
                dynamic = True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append((node.value.partition(":")[0], node.lineno))
    if dynamic:  # imported by name: the module names among its string constants
        found += [Import(text, line) for text, line in strings if text in modules]
    return [edge for edge in found if edge.target != name]


def import_graph(package: Path) -> dict[str, list[Import]]:
    """module -> what it imports of ``package``."""
    modules = _modules(package)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, list[Import]]) -> list[str]:
    """One cycle through each knot of ``graph`` (a set of modules that all reach one another),
    spelled ``a (line 3) -> b (line 9) -> a``: the line where each imports the next."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    knots: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for edge in graph.get(node, []):
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            knot = set()
            while True:
                member = stack.pop()
                knot.add(member)
                if member == node:
                    break
            if len(knot) > 1:
                knots.append(knot)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_through(min(knot), knot, graph) for knot in knots]


def _cycle_through(start: str, knot: set[str], graph: dict[str, list[Import]]) -> str:
    """The shortest cycle from ``start`` back to it, within ``knot``."""
    paths: dict[str, list[tuple[str, int]]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in graph[node]:
                if edge.target not in knot:
                    continue
                path = [*paths[node], (node, edge.line)]
                if edge.target == start:
                    return " -> ".join(f"{module} (line {line})" for module, line in path) + f" -> {start}"
                if edge.target not in paths:
                    paths[edge.target] = path
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - a knot has one


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles (move what both need to the module below them):\n" + "\n".join(found)


def test_the_graph_sees_every_kind_of_import() -> None:
    """What the test above relies on, on the package itself: lazy imports, imports by name and
    ``from package import module`` are edges; imports for annotations only are not."""
    graph = {name: {edge.target for edge in edges} for name, edges in import_graph(PACKAGE).items()}
    assert "rehydrate._scheduler" in graph["rehydrate.cli._worker"]  # inside a function
    assert "rehydrate.cli._verbs" in graph["rehydrate.cli._main"]  # by name (its command modules)
    assert "rehydrate._scheduler" in graph["rehydrate"]  # by name (a lazy export)
    assert "rehydrate.cli._common" in graph["rehydrate.cli._main"]  # from rehydrate.cli import _common
    assert "rehydrate.abc" not in graph["rehydrate.cli._verbs"]  # under TYPE_CHECKING only


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    """A lazy cycle (one import inside a function) is a cycle; one through TYPE_CHECKING is not."""
    package = tmp_path / "pkg"
    package.mkdir()
    files = {
        "__init__.py": "from pkg import low\n",
        "low.py": "import os\n",
        "high.py": "from pkg.low import x\n\n\ndef f():\n    from pkg import top\n",
        "top.py": "import pkg.high\n",
        "typed.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg import user\n",
        "user.py": "import pkg.typed\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    assert cycles(import_graph(package)) == ["pkg.high (line 5) -> pkg.top (line 1) -> pkg.high"]
    (package / "typed.py").write_text("from pkg import user\n")
    assert sorted(cycles(import_graph(package))) == [
        "pkg.high (line 5) -> pkg.top (line 1) -> pkg.high",
        "pkg.typed (line 1) -> pkg.user (line 1) -> pkg.typed",
    ]


#: The scheduling layer: what a schedule is and how its occurrences run, written once, above the
#: store contract, on its primitives.
SCHEDULING = frozenset(
    {"rehydrate._schedules", "rehydrate._occurrences", "rehydrate._scheduler", "rehydrate._admin"}
)


def test_the_stores_and_the_core_know_nothing_of_schedules() -> None:
    """Nothing under ``rehydrate/stores/`` or ``rehydrate/_core/`` imports the scheduling layer,
    not even for annotations, nor through what it imports: a store implements the contract's
    primitives, and a schedule's rules (a run's end, a change made while it runs, a removal
    during a run) are the scheduling layer's alone."""
    graph = import_graph(PACKAGE)
    below = [name for name in graph if name.startswith(("rehydrate.stores", "rehydrate._core"))]
    assert below  # (the test sees them)
    found = []
    for name in below:
        tree = ast.parse(_modules(PACKAGE)[name].read_text(encoding="utf-8"))
        for node in ast.walk(tree):  # every import, those for annotations included
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or "", *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            found += [f"{name} (line {node.lineno}) imports {t}" for t in targets if t in SCHEDULING]
        # And through what it imports, however far.
        seen, todo = {name}, [name]
        while todo:
            for edge in graph[todo.pop()]:
                if edge.target in SCHEDULING:
                    found.append(f"{name} reaches {edge.target}")
                elif edge.target not in seen:
                    seen.add(edge.target)
                    todo.append(edge.target)
    assert not found, "\n".join(sorted(set(found)))
