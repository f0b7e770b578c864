"""No module re-exports another's names (STYLE.md 10): a name is imported from the module that
defines it. A module's ``__all__`` lists only names the module defines, the explicit
re-export idioms (``import x as x``, ``from m import a as a``) appear nowhere, and no module
(tests included) imports a name from a module of the project that only imported it."""
from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("chalicelib", "sagegate", "emulator", "bench")
ALLOWED: dict[str, set[str]] = {}
"""Module (its path under the project) -> names it may hand on; empty: none may."""


def re_exports(source: str) -> list[str]:
    """What ``source`` hands on rather than defines: each name of its ``__all__`` that it does
    not define at module level, and each explicit re-export import."""
    tree = ast.parse(source)
    found = [f"{alias.name} as {alias.asname}" for node in ast.walk(tree)
             if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names
             if alias.asname is not None and alias.asname == alias.name]
    listed = _all_names(tree)
    if listed:
        defined = _defined(tree)
        found += [f"__all__ lists {name}" for name in listed if name not in defined]
    return found


def _all_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) \
                and any(isinstance(target, ast.Name) and target.id == "__all__"
                        for target in _targets(node)) \
                and isinstance(node.value, ast.List | ast.Tuple):
            names += [str(item.value) for item in node.value.elts
                      if isinstance(item, ast.Constant)]
    return names


def _targets(node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _defined(tree: ast.Module) -> set[str]:
    """The names the module's own statements bind (functions, classes, assignments), at
    module level or under a module-level ``if``/``try``."""
    defined: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            defined |= {name.id for target in _targets(node) for name in ast.walk(target)
                        if isinstance(name, ast.Name)}
    return defined


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    statements: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        statements.append(node)
        if isinstance(node, ast.If | ast.Try):
            pending += [*node.body, *node.orelse]
        if isinstance(node, ast.Try):
            pending += [*node.finalbody,
                        *(statement for handler in node.handlers for statement in handler.body)]
    return statements


def test_the_guard_sees_each_kind_of_re_export() -> None:
    assert re_exports("from m import a as a\n") == ["a as a"]
    assert re_exports("import x as x\n") == ["x as x"]
    assert re_exports("from m import a, b\n__all__ = ['a', 'c']\nc = 1\n") == ["__all__ lists a"]
    assert re_exports("import xml.etree.ElementTree as ElementTree\nfrom m import a as b\n"
                      "__all__ = ['f', 'C', 'X']\ndef f(): ...\nclass C: ...\n"
                      "if True:\n    X = 1\n") == []


def test_no_module_re_exports_a_name_it_does_not_define() -> None:
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = str(path.relative_to(ROOT))
            found = [item for item in re_exports(path.read_text(encoding="utf-8"))
                     if item.removeprefix("__all__ lists ").split(" as ")[0]
                     not in ALLOWED.get(module, set())]
            if found:
                offenders[module] = found
    assert offenders == {}


@functools.cache
def _bindings(module: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """The names a project module defines and those it imports; None: not a module here."""
    path = ROOT.joinpath(*module.split("."))
    path = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    return frozenset(_defined(tree)), frozenset(imported)


Bindings = Callable[[str], "tuple[frozenset[str], frozenset[str]] | None"]


def second_hand_imports(source: str, bindings_of: Bindings = _bindings) -> list[str]:
    """Each ``from m import a`` of ``source`` where ``m``, a project module, imported ``a``
    rather than defining it (a submodule ``m.a`` is its own)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                and node.module.split(".")[0] in (*PACKAGES, "tests")):
            continue
        bindings = bindings_of(node.module)
        for alias in node.names:
            if bindings is not None and alias.name not in bindings[0] \
                    and alias.name in bindings[1] \
                    and bindings_of(f"{node.module}.{alias.name}") is None:
                found.append(f"{alias.name} from {node.module}")
    return found


def test_no_module_imports_a_name_second_hand() -> None:
    offenders = {}
    for package in (*PACKAGES, "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            found = second_hand_imports(path.read_text(encoding="utf-8"))
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    found = second_hand_imports((ROOT / "app.py").read_text(encoding="utf-8"))
    if found:
        offenders["app.py"] = found
    assert offenders == {}


def test_the_guard_sees_a_name_imported_second_hand() -> None:
    modules = {"chalicelib.a": (frozenset({"Defined"}), frozenset({"Imported", "sub"})),
               "chalicelib.a.sub": (frozenset(), frozenset())}
    source = "from chalicelib.a import Defined, Imported, sub\nfrom os import path\n"
    assert second_hand_imports(source, modules.get) == ["Imported from chalicelib.a"]
