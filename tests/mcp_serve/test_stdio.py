"""`agentd mcp serve` over stdio: the SDK's client against a real daemon running scripted tasks."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import MCPDeprecationWarning, MCPError

from tests.support.daemon import Daemon, demo_mcp, running_daemon, scripted
from tests.support.mcp_serve import open_client

TOOLS = {
    "run_task",
    "submit_task",
    "get_task",
    "cancel_task",
    "list_tasks",
    "approve_call",
    "deny_call",
    "task_transcript",
}


def _body(tmp_path: Path) -> str:
    fast = scripted("fast", [{"text": "forty-two"}], tmp_path)
    slow = scripted("slow", [{"text": "late", "delay_s": 60}], tmp_path)
    brief = scripted("brief", [{"text": "done soon", "delay_s": 2}], tmp_path)
    echo: list[dict[str, object]] = [
        {"tool_calls": [{"name": "demo__echo", "arguments": {"text": "hi"}}]},
        {"text": "forty-two"},
    ]
    return (
        fast + slow + brief + scripted("tools", echo, tmp_path) + demo_mcp() + '[defaults]\nmodel = "fast"\n'
    )


@pytest.fixture
def daemon(tmp_path: Path) -> object:
    with running_daemon(tmp_path, _body(tmp_path)) as running:
        yield running


pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_the_tools_are_listed_with_schemas_in_both_eras(daemon: Daemon) -> None:
    for mode in ("legacy", "auto"):
        async with open_client(daemon.socket, mode=mode) as (client, _):
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            run = next(tool for tool in listed.tools if tool.name == "run_task")
            assert run.input_schema["required"] == ["instruction"]
            assert run.output_schema is not None


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_run_task_completes_with_progress_and_returns_the_outcome_as_data(
    daemon: Daemon, mode: str
) -> None:
    lines: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        lines.append(message)

    async with open_client(daemon.socket, mode=mode) as (client, _):
        done = await client.call_tool(
            "run_task",
            {"instruction": "answer", "model": "tools", "mcp_servers": ["demo"]},
            progress_callback=on_progress,
        )
    assert not done.is_error
    assert done.structured_content is not None
    outcome = done.structured_content
    assert set(outcome) == {"task_id", "status", "exit_code", "result", "usage"}
    assert (outcome["status"], outcome["exit_code"], outcome["result"]) == ("completed", 0, "forty-two")
    assert json.loads(done.content[0].text) == outcome  # type: ignore[union-attr]
    # Delivered in tasks of their own, so in any order: each line carries the tally so far.
    assert "tool call demo__echo · 0 steps, 1 tool call, 0 tokens" in lines, lines
    assert any(m and m.startswith("step 2 done · 2 steps, 1 tool call, ") for m in lines), lines


async def test_cancelling_the_request_cancels_the_task(daemon: Daemon) -> None:
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with open_client(daemon.socket) as (client, _), anyio.create_task_group() as group:
        arguments = {"instruction": "take your time", "model": "slow"}
        group.start_soon(partial(client.call_tool, "run_task", arguments, progress_callback=on_progress))
        with anyio.fail_after(30):
            await started.wait()
        group.cancel_scope.cancel()  # the SDK sends notifications/cancelled for the request
    tasks = daemon.call("task.list", {})
    assert isinstance(tasks, list) and len(tasks) == 1 and isinstance(tasks[0], dict)
    assert daemon.wait(str(tasks[0]["task_id"]), timeout_s=30).status == "cancelled"


async def test_submit_then_subscribe_tells_of_the_end_and_the_result_is_readable(daemon: Daemon) -> None:
    async with open_client(daemon.socket) as (client, heard):
        started = await client.call_tool("submit_task", {"instruction": "a moment", "model": "brief"})
        assert started.structured_content is not None
        task_id = started.structured_content["task_id"]
        uri = started.structured_content["uri"]
        assert uri == f"agentd://tasks/{task_id}"
        assert started.structured_content["result_uri"] == f"{uri}/result"
        with pytest.warns(MCPDeprecationWarning):  # the 2025-11-25 era's subscription
            await client.session.subscribe_resource(uri)
        listed = await client.list_resources()
        assert uri in {str(r.uri) for r in listed.resources}
        listed_changes = heard.list_changed  # the task was listed: what changes now is its end
        state = ""
        with anyio.fail_after(30):
            while state != "terminal":  # each `updated` says: read it again
                await heard.next_update()
                read = await client.read_resource(uri)
                state = json.loads(read.contents[0].text)["state"]  # type: ignore[union-attr]
        await heard.list_change_after(listed_changes)  # the task ended
        result = await client.read_resource(f"{uri}/result")
        document = json.loads(result.contents[0].text)  # type: ignore[union-attr]
        assert (document["task_id"], document["status"], document["result"]) == (
            task_id,
            "completed",
            "done soon",
        )


async def test_a_daemon_refusal_is_an_error_result_and_bad_arguments_a_protocol_error(daemon: Daemon) -> None:
    async with open_client(daemon.socket) as (client, _):
        refused = await client.call_tool("run_task", {"instruction": "x", "model": "nosuch"})
        assert refused.is_error
        assert "nosuch" in refused.content[0].text  # type: ignore[union-attr]
        missing = await client.call_tool("get_task", {"task_id": "t999"})
        assert missing.is_error
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("launch_rockets", {})
        assert unknown.value.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as bad:
            await client.call_tool("run_task", {"instruction": "x", "max_steps": 0})
        assert bad.value.code == types.INVALID_PARAMS
        assert "max_steps" in str(bad.value)


async def test_without_a_daemon_every_call_says_so_and_how_to_start_it(tmp_path: Path) -> None:
    async with open_client(tmp_path / "absent.sock") as (client, _):
        done = await client.call_tool("list_tasks", {})
        assert done.is_error
        assert "agentd serve" in done.content[0].text  # type: ignore[union-attr]
        with pytest.raises(MCPError) as read:
            await client.read_resource("agentd://approvals")
        assert "agentd serve" in str(read.value)


def _gated_body(tmp_path: Path) -> str:
    echo = {"name": "demo__echo", "arguments": {"text": "hi"}}
    turns: list[dict[str, object]] = [
        {"tool_calls": [echo]},
        {"tool_calls": [echo]},
        {"text": "{last_tool_result}"},
    ]
    server = demo_mcp().replace("trust = []\n", 'trust = []\napproval = ["echo"]\napproval_timeout = "60s"\n')
    return scripted("gated", turns, tmp_path) + server + '[defaults]\nmodel = "gated"\n'


async def test_waiting_calls_are_a_resource_approved_and_denied_with_a_reason_the_model_reads(
    tmp_path: Path,
) -> None:
    with running_daemon(tmp_path, _gated_body(tmp_path)) as daemon:
        async with open_client(daemon.socket) as (client, heard):
            started = await client.call_tool(
                "submit_task", {"instruction": "ask twice", "mcp_servers": ["demo"]}
            )
            assert started.structured_content is not None
            task_id = started.structured_content["task_id"]
            with pytest.warns(MCPDeprecationWarning):
                await client.session.subscribe_resource("agentd://approvals")

            async def waiting_calls() -> list[dict[str, str]]:
                read = await client.read_resource("agentd://approvals")
                calls: list[dict[str, str]] = json.loads(read.contents[0].text)  # type: ignore[union-attr]
                return calls

            for decision in ("approve_call", "deny_call"):
                while not (waiting := await waiting_calls()):
                    assert await heard.next_update() == "agentd://approvals"
                (call,) = waiting
                assert (call["task_id"], call["tool"]) == (task_id, "echo")
                arguments = {"task_id": task_id, "call": call["call"]}
                if decision == "deny_call":
                    arguments["reason"] = "not this time"
                decided = await client.call_tool(decision, arguments)
                assert not decided.is_error, decided.content
            view = daemon.wait(task_id, timeout_s=30)
            assert "not this time" in str(view.result)
            transcript = await client.call_tool("task_transcript", {"task_id": task_id})
            assert transcript.structured_content is not None
            assert len(transcript.structured_content["steps"]) >= 3
