"""The house rules that keep the package readable: every module declares its public API
(`__all__`, each name defined or imported there), and every runnable example in a docstring
runs and prints what it says (doctest)."""

from __future__ import annotations

import ast
import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "schedlab"
MODULES = sorted(PACKAGE.rglob("*.py"))
# optional extras: a module that needs one is checked only where it is installed
EXTRAS = ("torch", "starlette", "uvicorn", "dask", "distributed", "mkdocs")


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            return list(ast.literal_eval(node.value))
    return None


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level: definitions, assignments, imports (also under if)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_every_module_declares_its_public_api(path):
    tree = ast.parse(path.read_text())
    declared = _declared_all(tree)
    assert declared is not None, f"{_name(path)} has no __all__"
    missing = sorted(set(declared) - _bound_names(tree))
    assert not missing, f"{_name(path)}.__all__ names what it does not define: {missing}"


WITH_EXAMPLES = [p for p in MODULES if ">>>" in p.read_text()]


@pytest.mark.parametrize("path", WITH_EXAMPLES, ids=_name)
def test_docstring_examples_run(path):
    try:
        module = importlib.import_module(_name(path))
    except ImportError as e:
        if e.name and e.name.split(".")[0] in EXTRAS:
            pytest.skip(f"{_name(path)} needs the optional {e.name} (an extra this install lacks)")
        raise
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
