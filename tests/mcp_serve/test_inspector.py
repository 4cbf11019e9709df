"""The MCP Inspector's command-line client (`@modelcontextprotocol/inspector-cli`, a TypeScript
SDK client) lists agentd's tools and runs a task through `agentd mcp serve`, over stdio and HTTP.

Skipped, naming the package, when node or its install under tests/npm is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.mcp_serve import start_http_server
from tests.support.npm_servers import PACKAGES

PACKAGE = "@modelcontextprotocol/inspector-cli"
CLI = PACKAGES / "inspector-cli" / "build" / "cli.js"
WAIT_S = 60.0

pytestmark = pytest.mark.processes


def _node() -> str:
    node = shutil.which("node")
    if node is None or not CLI.is_file():
        pytest.skip(
            f"{PACKAGE} is not installed (node and `npm ci --prefix tests/npm`, as scripts/check runs)"
        )
    return node


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    body = scripted("fast", [{"text": "forty-two"}], tmp_path) + '[defaults]\nmodel = "fast"\n'
    with running_daemon(tmp_path, body) as running:
        yield running


def _inspect(target: list[str], *method: str) -> dict[str, object]:
    command = [_node(), str(CLI), "--cli", *target, "--method", *method]
    # It finds its own package.json by a path it checks relative to the working directory but
    # imports relative to itself: the two agree only when run from its build directory.
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL, cwd=CLI.parent
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def _lists_and_runs(target: list[str]) -> None:
    listed = _inspect(target, "tools/list")
    tools = listed["tools"]
    assert isinstance(tools, list)
    assert {"run_task", "submit_task", "get_task"} <= {tool["name"] for tool in tools}
    done = _inspect(target, "tools/call", "--tool-name", "run_task", "--tool-arg", "instruction=answer")
    assert done.get("isError") in (None, False), done
    outcome = done["structuredContent"]
    assert isinstance(outcome, dict)
    assert (outcome["status"], outcome["result"]) == ("completed", "forty-two")


def test_the_inspector_lists_the_tools_and_runs_a_task_over_stdio(daemon: Daemon) -> None:
    _node()
    _lists_and_runs([sys.executable, "-m", "agentd", "mcp", "serve", "--socket", str(daemon.socket)])


def test_the_inspector_lists_the_tools_and_runs_a_task_over_http(daemon: Daemon, tmp_path: Path) -> None:
    _node()
    server = start_http_server(daemon.socket, tmp_path / "token")
    try:
        bearer = f"Authorization: Bearer {server.token}"
        _lists_and_runs([server.url, "--transport", "http", "--header", bearer])
    finally:
        assert server.stop() == 0
