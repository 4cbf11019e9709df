"""`processes/` stays importable by both processes: a pure plan, and a `linux` module light enough
for the child to import before its first frame (what the package as a whole may import is checked
in tests/test_architecture.py)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "processes"


def _imports(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (relative imports excluded)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names - {"__future__"}


def test_the_ladder_plan_is_pure() -> None:
    assert "anyio" not in _imports(PACKAGE / "ladder.py")


def test_the_linux_primitives_load_only_ctypes_os_and_signal() -> None:
    assert _imports(PACKAGE / "linux.py") <= {"ctypes", "os", "signal"}
