"""`agentd mcp serve`'s boundaries: another user's tasks, a server inside a task, a client that
goes away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import psutil
import pytest
from mcp import Client, MCPError

from agentd.api.async_port import DaemonPort
from mcp_serve.server import build_server
from tests.support.as_user import forked_as
from tests.support.daemon import running_daemon, scripted, start_daemon, write_config
from tests.support.leaks import wait_no_descendants
from tests.support.mcp_serve import serve_parameters
from tests.support.privilege import AS_ANOTHER_USER

NOGROUP = 65534
WAIT_S = 30.0

pytestmark = pytest.mark.processes


def _slow(tmp_path: Path) -> str:
    return scripted("slow", [{"text": "late", "delay_s": 60}], tmp_path) + '[defaults]\nmodel = "slow"\n'


def _what_another_user_sees(socket: str, root_task: str) -> dict[str, Any]:
    """As the other user: the MCP server's tools and resources over the SDK's in-memory transport."""

    async def look() -> dict[str, Any]:
        server = build_server(DaemonPort(socket), inside_task=False, version="")
        async with Client(server, mode="legacy", read_timeout_seconds=WAIT_S) as client:
            own = await client.call_tool("submit_task", {"instruction": "nobody's"})
            listed = await client.call_tool("list_tasks", {})
            resources = await client.list_resources()
            got = await client.call_tool("get_task", {"task_id": root_task})
            cancelled = await client.call_tool("cancel_task", {"task_id": root_task})
            try:
                await client.read_resource(f"agentd://tasks/{root_task}")
                read = "read"
            except MCPError as exc:
                read = str(exc)
            assert listed.structured_content is not None and own.structured_content is not None
            return {
                "listed": [t["task_id"] for t in listed.structured_content["tasks"]],
                "resources": [str(r.uri) for r in resources.resources],
                "get": [got.is_error, got.content[0].text],  # type: ignore[union-attr]
                "cancel": [cancelled.is_error, cancelled.content[0].text],  # type: ignore[union-attr]
                "read": read,
                "own": own.structured_content["task_id"],
            }

    return anyio.run(look)


@AS_ANOTHER_USER
def test_another_user_sees_none_of_the_first_users_tasks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    socket = run / "agentd.sock"
    config = write_config(tmp_path, _slow(tmp_path), daemon=f'socket_group = "{NOGROUP}"\n', socket=socket)
    daemon = start_daemon(tmp_path, config, socket=socket)
    try:
        root_task = daemon.submit("root's task")
        # The child cannot read the interpreter's directory: what the SDK imports late (to check a
        # tool's output schema) is imported here, before the fork.
        assert jsonschema.validators.validator_for({})
        seen = forked_as(lambda: _what_another_user_sees("agentd.sock", root_task), cwd=run)
        assert seen["listed"] == [seen["own"]]
        assert [uri for uri in seen["resources"] if root_task in uri] == []
        assert f"agentd://tasks/{seen['own']}" in seen["resources"]
        for refused in ("get", "cancel"):
            assert seen[refused][0] is True
            assert root_task in seen[refused][1] and "no task" in seen[refused][1].lower()
        assert root_task in seen["read"]
        view = daemon.call("task.get", {"task_id": root_task})
        assert isinstance(view, dict) and view["state"] != "terminal"  # nobody did not cancel it
    finally:
        assert daemon.stop() == 0


def test_inside_a_task_run_task_is_refused_and_points_to_subagent_spawn(tmp_path: Path) -> None:
    socket = tmp_path / "agentd.sock"
    escape: list[dict[str, object]] = [
        {"tool_calls": [{"name": "agentd__run_task", "arguments": {"instruction": "outside the budget"}}]},
        {"text": "{last_tool_result}"},
    ]
    serve = json.dumps([sys.executable, "-m", "agentd", "mcp", "serve", "--socket", str(socket)])
    body = (
        scripted("inner", escape, tmp_path)
        + f"[mcp.agentd]\ncommand = {serve}\ntrust = []\n"
        + '[defaults]\nmodel = "inner"\n'
    )
    with running_daemon(tmp_path, body, socket=socket) as daemon:
        task_id = daemon.submit("try to start a root task", mcp=["agentd"])
        view = daemon.wait(task_id, timeout_s=60)
        assert view.status == "completed", view
        assert "subagent_spawn" in str(view.result)
        tasks = daemon.call("task.list", {})
        assert isinstance(tasks, list) and [t["task_id"] for t in tasks] == [task_id]


def _frame(message: dict[str, object]) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode()


def test_a_client_that_goes_away_leaves_nothing_running(tmp_path: Path) -> None:
    with running_daemon(tmp_path, _slow(tmp_path)) as daemon:
        server = subprocess.Popen(
            [serve_parameters(daemon.socket).command, *serve_parameters(daemon.socket).args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ},
        )
        assert server.stdin is not None and server.stdout is not None
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }
        server.stdin.write(_frame({"id": 1, "method": "initialize", "params": hello}))
        server.stdin.write(_frame({"method": "notifications/initialized"}))
        call = {"name": "run_task", "arguments": {"instruction": "long"}, "_meta": {"progressToken": 7}}
        server.stdin.write(_frame({"id": 2, "method": "tools/call", "params": call}))
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["id"] == 1
        deadline = time.monotonic() + WAIT_S
        while not (tasks := daemon.call("task.list", {"state": "running"})):
            assert time.monotonic() < deadline, "run_task's task never started"
            time.sleep(0.05)
        assert isinstance(tasks, list)
        (task,) = tasks
        server.stdin.close()  # the client goes away mid-call
        assert server.wait(timeout=WAIT_S) == 0
        server.stdout.close()
        assert daemon.wait(task["task_id"], timeout_s=WAIT_S).status == "cancelled"
        daemons = {daemon.pid, *(p.pid for p in psutil.Process(daemon.pid).children(recursive=True))}
        assert [p.cmdline() for p in wait_no_descendants(timeout_s=0.5) if p.pid not in daemons] == []
