"""The rooms of the code base and the one-way dependencies between them (docs/architecture.md).

Reads every module's imports with `ast` — top-level, function-level and `TYPE_CHECKING` ones
alike — and checks: no import cycle between modules; each package imports only what its room
may (protocol stays pure, processes stays below everything, the supervisor never imports the
subagent, `mcp` or an HTTP client); and inside `agentd/` every import points down the floors.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "processes", "subagent", "agentd", "mcp_serve", "dashboard")

# Third-party imports each top-level package may use (the standard library is always allowed).
ALLOWED_THIRD_PARTY = {
    # jsonschema only inside protocol/contract.py's functions (docs/decisions.md).
    "protocol": {"pydantic", "jsonschema", "referencing"},
    "processes": {"anyio"},
    "subagent": {
        "anyio",
        "pydantic",
        "pydantic_core",
        "httpx2",
        "httpx",
        "mcp",
        "mcp_types",
        "jsonschema",
        "structlog",
        "psutil",
        # subagent/tracing.py and spans.py only (the API comes with mcp; the SDK is the `otel` extra).
        "opentelemetry",
    },
    # prometheus_client only under agentd/metrics/ (the `metrics` extra); rich only in the CLI's `top`;
    # cronsim evaluates cron expressions (agentd/config/cron.py, agentd/scheduling/plan.py).
    "agentd": {
        "anyio",
        "pydantic",
        "structlog",
        "psutil",
        "jsonschema",
        "cronsim",
        "prometheus_client",
        "rich",
        "opentelemetry",
        # agentd/executors/temporal_*.py only (the `temporal` extra), imported lazily.
        "temporalio",
    },
    # `agentd mcp serve`: the MCP server a client starts, speaking MCP on stdio and the daemon's
    # socket API through agentd's own client (never the daemon's code); `--http` serves the SDK's
    # app with uvicorn, which the `mcp` package brings.
    "mcp_serve": {"anyio", "pydantic", "pydantic_core", "mcp", "mcp_types", "uvicorn"},
    # `agentd web`: an HTTP server of pages and JSON over the daemon's socket API, through agentd's
    # own client; starlette and uvicorn are the `web` extra (docs/decisions.md).
    "dashboard": {"anyio", "pydantic", "starlette", "uvicorn"},
}
# Which first-party packages each may import.
ALLOWED_FIRST_PARTY = {
    "protocol": {"protocol"},
    "processes": {"processes"},
    "subagent": {"subagent", "protocol", "processes"},
    "agentd": {"agentd", "protocol", "processes"},
    "mcp_serve": {"mcp_serve", "protocol", "agentd"},
    "dashboard": {"dashboard", "protocol", "agentd"},
}
# The only agentd modules mcp_serve may import: the socket API's client and the errors it raises.
# The only agentd modules the client programs (mcp_serve, dashboard) may import: the socket API's
# clients and the errors they raise.
CLIENT_PROGRAMS_MAY_IMPORT_FROM_AGENTD = frozenset(
    {"agentd.api.client", "agentd.api.async_port", "agentd.api.listen_address", "agentd.errors"}
)

# agentd's floors, top to bottom: a module may import its own room and any room on a lower floor.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"__main__"}),
    frozenset({"cli"}),
    frozenset({"worker"}),
    frozenset({"daemon"}),
    frozenset({"api", "service"}),
    frozenset({"admission", "root_payload", "options"}),
    frozenset({"scheduling", "triggers", "executors"}),
    frozenset({"supervision"}),
    frozenset({"config", "journal", "spawning"}),
    frozenset({"private_dirs", "logs", "metrics", "tracing", "off_loop"}),
    frozenset({"errors"}),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# Programs shipped as package data (agentd/config/bundled.py): run as processes of their own,
# never imported, so no room's rules apply to them.
BUNDLED = REPO / "agentd" / "examples"


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if not path.is_relative_to(BUNDLED)
    }


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every module `name` imports, resolved to the most specific module that exists."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield candidate if candidate in MODULES else base


GRAPH = {name: sorted(set(_imports(name, path))) for name, path in MODULES.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _floor(room: str) -> int | None:
    for index, rooms in enumerate(FLOORS):
        if room in rooms:
            return index
    return None


def test_every_agentd_room_is_on_a_floor() -> None:
    rooms = {_room(m) for m in MODULES if m.startswith("agentd.")}
    assert {r for r in rooms if _floor(r) is None} == set()


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_what_its_room_allows(package: str) -> None:
    stdlib = sys.stdlib_module_names
    wrong = []
    for module, imported in GRAPH.items():
        if module.split(".")[0] != package:
            continue
        for target in imported:
            top = target.split(".")[0]
            if top in stdlib or top == "__future__":
                continue
            if top in PACKAGES:
                if top not in ALLOWED_FIRST_PARTY[package]:
                    wrong.append(f"{module} imports {target}")
            elif top not in ALLOWED_THIRD_PARTY[package]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


@pytest.mark.parametrize("program", ["mcp_serve", "dashboard"])
def test_the_client_programs_use_only_the_api_clients_of_agentd(program: str) -> None:
    reached = {
        target
        for module, imported in GRAPH.items()
        if module.split(".")[0] == program
        for target in imported
        if target.split(".")[0] == "agentd"
    }
    assert reached <= CLIENT_PROGRAMS_MAY_IMPORT_FROM_AGENTD, reached - CLIENT_PROGRAMS_MAY_IMPORT_FROM_AGENTD


@pytest.mark.parametrize("program", ["mcp_serve", "dashboard"])
def test_no_package_imports_a_client_program_but_itself(program: str) -> None:
    # agentd runs each as a program of its own (`agentd mcp serve` execs `python -m mcp_serve`,
    # `agentd web` execs `python -m dashboard`).
    importers = {
        module
        for module, imported in GRAPH.items()
        if module.split(".")[0] != program and any(t.split(".")[0] == program for t in imported)
    }
    assert importers == set()


def test_agentd_imports_point_down_the_floors() -> None:
    upward = []
    for module, imported in GRAPH.items():
        if not module.startswith("agentd."):
            continue
        here = _floor(_room(module))
        for target in imported:
            if not target.startswith("agentd.") or _room(target) == _room(module):
                continue
            there = _floor(_room(target))
            if here is not None and there is not None and there <= here:
                upward.append(f"{module} imports {target}")
    assert upward == []


def test_no_module_import_cycle_type_checking_imports_included() -> None:
    first_party = {m: [t for t in ts if t in MODULES and t != m] for m, ts in GRAPH.items()}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in first_party[node]:
            if state.get(nxt) == 1:
                cycles.append(" → ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(first_party):
        if module not in state:
            visit(module)
    assert cycles == []


ERROR_ROOTS = {"agentd": ("agentd.errors", "AgentdError"), "subagent": ("subagent.errors", "AgentError")}


@pytest.mark.parametrize("package", sorted(ERROR_ROOTS))
def test_every_exception_a_package_defines_is_in_its_drawn_error_tree(package: str) -> None:
    root_module, root_name = ERROR_ROOTS[package]
    errors = importlib.import_module(root_module)
    root = getattr(errors, root_name)
    drawn = errors.__doc__ or ""
    outside, undrawn = [], []
    for name in MODULES:
        if name.split(".")[0] != package or name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == name):
                continue
            if not issubclass(cls, root):
                outside.append(f"{name}.{cls.__name__}")
            if not re.search(rf"\b{re.escape(cls.__name__)}\b", drawn):
                undrawn.append(f"{name}.{cls.__name__}")
    assert outside == [], f"not under {root_name}"
    assert undrawn == [], f"not drawn in {root_module}'s docstring"


def test_temporalio_is_imported_only_by_the_temporal_executor_modules() -> None:
    importers = {m for m, ts in GRAPH.items() if any(t.split(".")[0] == "temporalio" for t in ts)}
    assert importers and all(m.startswith("agentd.executors.temporal_") for m in importers), importers


def test_a_plain_install_without_temporalio_imports_the_daemon_the_worker_and_the_cli() -> None:
    # The `temporal` extra is optional: its modules are imported inside functions, only when
    # `[executor] kind = "temporal"` asks for them.
    code = (
        "import sys; sys.modules['temporalio'] = None\n"
        "import agentd.daemon, agentd.worker, agentd.cli.main, agentd.api.daemon_backend, agentd.options\n"
        "assert not any(m.startswith('agentd.executors.temporal_') for m in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
