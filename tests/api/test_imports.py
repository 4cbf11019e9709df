"""The API package and the wire contracts import each other without a cycle, counting imports
under `TYPE_CHECKING` too: each module can be read (and loaded) after the ones it names."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agentd/api", "protocol")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every module of `known` that `path` imports, wherever the import statement sits."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found & known


def test_the_api_and_protocol_modules_form_no_import_cycle() -> None:
    paths = [p for package in PACKAGES for p in (REPO / package).glob("*.py") if p.name != "__init__.py"]
    known = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imports(p, known) - {_module_name(p)} for p in paths}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None
    assert set(order) == known
