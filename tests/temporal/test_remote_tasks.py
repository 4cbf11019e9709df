"""Tasks run on Temporal workers through the front door (e2e: a real dev server, `agentd serve`
with `[executor] kind = "temporal"`, `agentd worker` processes, subagents and a stdio MCP server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import demo_mcp, running_daemon, scripted
from tests.support.temporal import running_worker, temporal_server

pytestmark = pytest.mark.processes

ADD_TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__add", "arguments": {"a": 20, "b": 22}}]},
    {"text": "The answer is {last_tool_result}."},
]


def test_a_task_submitted_to_the_front_door_completes_on_a_worker_with_its_events_and_tree(
    tmp_path: Path,
) -> None:
    with temporal_server(tmp_path) as server:
        body = (
            scripted("adder", ADD_TURNS, tmp_path)
            + demo_mcp()
            + '[defaults]\nmodel = "adder"\nmcp = ["demo"]\n'
            + server.executor_toml()
        )
        with running_daemon(tmp_path, body) as daemon, running_worker(tmp_path, daemon.config) as worker:
            task_id = daemon.submit("add 20 and 22")
            view = daemon.wait(task_id, timeout_s=90)
            assert view.status is S.COMPLETED, view
            assert view.result == "The answer is 42."
            assert (view.exit_code, view.usage.steps) == (0, 2)
            assert (view.executor, view.worker) == ("temporal", worker.identity)
            logs = daemon.cli("logs", task_id, "--json")
            events = [json.loads(line) for line in logs.stdout.splitlines()]
            names = [e["event"] for e in events]
            assert names[0] == "task.attempt"
            assert events[0]["fields"] == {"attempt": 1, "worker": worker.identity}
            assert {"subagent.ready", "loop.start", "tool.call", "tool.result", "loop.final"} <= set(names)
            assert "subagent.exit" in names
            tree = daemon.call("task.tree", {"task_id": task_id})
            assert isinstance(tree, list) and len(tree) == 1
            assert isinstance(tree[0], dict) and tree[0]["status"] == "completed"
            # The subagent ran on the worker, not under the front door.
            assert any(line.get("event") == "subagent.spawn" for line in worker.log())
            assert not any(line.get("event") == "subagent.spawn" for line in daemon.log())
            (workflow,) = server.workflows()
            assert workflow["execution"]["workflowId"] == f"agentd-task-{task_id}"  # type: ignore[index]
