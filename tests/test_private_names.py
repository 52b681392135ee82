"""No module of ``rehydrate`` touches another module's private names.

A private name (``_x``) is its module's business: it may change with no notice, so code elsewhere
that reaches for it (``scheduler._counters``, ``Scheduler._run_now``, ``from rehydrate._scheduler
import _foo``) breaks silently when it does. What another module needs is public in the module
that owns it (a private module's public names are the package's internals: ``rehydrate._admin``'s
``change_schedule``); what users need is public in ``rehydrate``.

The check reads the source (``ast``): in a module, ``obj._x`` is fine when the module itself
defines ``_x`` (an attribute it sets on ``self``/``cls``, a method or field of a class of its own,
a global); otherwise, when another rehydrate module defines ``_x``, it is that module's private
name, reached from outside. Private names of other libraries (``os._exit``, a namedtuple's
``_replace``) are theirs to judge. Importing a private *module* (``rehydrate._scheduler``) is
fine inside the package; importing a private *name* from another module is not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rehydrate"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _defined(tree: ast.Module) -> set[str]:
    """The private names a module defines: its functions, classes, methods, globals, the
    attributes it sets on ``self``/``cls`` or declares in a class body, and the parameters and
    keyword arguments it names (an attrs field ``_x`` is passed as ``x``, and read as ``_x``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.alias) and node.asname is not None:
            names.add(node.asname)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)  # setattr(obj, "_x", ...), __slots__ = ("_x",), __dict__ keys
    return {name for name in names if _private(name)}


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    return {
        _module_name(path): (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _is_module(dotted: str) -> bool:
    relative = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    base = PACKAGE / relative
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _trespasses(modules: dict[str, tuple[Path, ast.Module]]) -> list[str]:
    defined = {name: _defined(tree) for name, (_, tree) in modules.items()}
    everywhere = set().union(*defined.values())
    found = []
    for name, (path, tree) in modules.items():
        own = defined[name]
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rehydrate"):
                for alias in node.names:
                    if _private(alias.name) and not _is_module(f"{node.module}.{alias.name}"):
                        found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                if node.attr in own or node.attr not in everywhere:
                    continue  # its own name, or not rehydrate's (os._exit, a namedtuple's _replace)
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_touches_another_modules_private_names() -> None:
    assert _trespasses(_modules()) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from rehydrate._scheduler import _only\n", "from rehydrate._scheduler import _only"),
        ("def f(scheduler):\n    return scheduler._counters\n", "scheduler._counters"),
        ("def f(Scheduler):\n    return Scheduler._run_now\n", "Scheduler._run_now"),
    ],
)
def test_the_check_sees_a_trespass(source: str, expected: str) -> None:
    """The rule catches what it is for: a module written the way the dashboard once was."""
    modules = _modules()
    modules["rehydrate.web._trespass_probe"] = (PACKAGE / "web" / "_trespass_probe.py", ast.parse(source))
    found = _trespasses(modules)
    assert any(line.endswith(expected) and "_trespass_probe.py" in line for line in found), found


def test_the_check_allows_a_modules_own_names_and_private_modules() -> None:
    own = ast.parse(
        "from rehydrate.cli import _common\n"
        "class A:\n    def __init__(self):\n        self._x = 1\n"
        "    def same(self, other):\n        return other._x\n"
    )
    assert "_x" in _defined(own)
    assert _is_module("rehydrate.cli._common")
    assert not _is_module("rehydrate._scheduler._only")
