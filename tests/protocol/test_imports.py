"""What `protocol` may import (the rooms as a whole are checked in tests/test_architecture.py).

`protocol` is shared by both processes and pure: pydantic and the standard library only, with one
recorded exception (docs/decisions.md): `jsonschema`, imported inside `protocol.contract`'s
functions. The source is parsed, not imported.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALLOWED = frozenset(sys.stdlib_module_names) | {"pydantic", "protocol"}
LAZY_ONLY = {"jsonschema", "referencing"}  # referencing: the registry jsonschema resolves with


def _imports(tree: ast.AST, *, lazy: bool = False) -> Iterator[tuple[str, bool]]:
    """Every imported top-level package, and whether the import runs only when called (or never)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name.partition(".")[0], lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.partition(".")[0], lazy
        else:
            deferred = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or (
                isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            )
            yield from _imports(node, lazy=lazy or deferred)


def _modules(package: str) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted((REPO / package).rglob("*.py")):
        yield path.relative_to(REPO), ast.parse(path.read_text(), str(path))


def test_protocol_imports_only_pydantic_and_the_standard_library_and_jsonschema_lazily() -> None:
    found = {
        (str(path), name, lazy)
        for path, tree in _modules("protocol")
        for name, lazy in _imports(tree)
        if name not in ALLOWED and not (lazy and name in LAZY_ONLY)
    }
    assert found == set()
