"""Approvals through elicitation: a call that `run_task`'s task holds for approval is asked of the
client's person; an approval lets it run, a refusal with a reason reaches the task's model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from tests.support.daemon import Daemon, demo_mcp, running_daemon, scripted
from tests.support.mcp_serve import open_client, open_http_client, start_http_server

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


def _gated_body(tmp_path: Path) -> str:
    echo = {"name": "demo__echo", "arguments": {"text": "hi"}}
    turns: list[dict[str, object]] = [
        {"tool_calls": [echo]},
        {"tool_calls": [echo]},
        {"text": "{last_tool_result}"},
    ]
    server = demo_mcp().replace("trust = []\n", 'trust = []\napproval = ["echo"]\napproval_timeout = "60s"\n')
    return scripted("gated", turns, tmp_path) + server + '[defaults]\nmodel = "gated"\n'


@pytest.fixture
def daemon(tmp_path: Path) -> object:
    with running_daemon(tmp_path, _gated_body(tmp_path)) as running:
        yield running


@asynccontextmanager
async def _client(daemon: Daemon, tmp_path: Path, transport: str, **callbacks: Any) -> AsyncIterator[Client]:
    if transport == "stdio":
        async with open_client(daemon.socket, **callbacks) as (client, _):
            yield client
        return
    server = start_http_server(daemon.socket, tmp_path / "token")
    try:
        async with open_http_client(server, **callbacks) as (client, _):
            yield client
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_person_approves_one_call_and_refuses_another_with_a_reason_the_model_reads(
    daemon: Daemon, tmp_path: Path, transport: str
) -> None:
    asked: list[str] = []
    answers = [
        types.ElicitResult(action="accept", content={"approve": True}),
        types.ElicitResult(action="accept", content={"approve": False, "reason": "not this time"}),
    ]

    async def on_elicit(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        assert params.requested_schema["required"] == ["approve"]
        asked.append(params.message)
        return answers[len(asked) - 1]

    async with _client(daemon, tmp_path, transport, elicitation_callback=on_elicit) as client:
        done = await client.call_tool("run_task", {"instruction": "ask twice", "mcp_servers": ["demo"]})
    assert not done.is_error, done.content
    assert done.structured_content is not None
    assert done.structured_content["status"] == "completed"
    assert "not this time" in str(done.structured_content["result"])
    assert len(asked) == 2
    assert all("echo" in message and "demo" in message for message in asked), asked
    transcript = daemon.call("task.transcript", {"task_id": done.structured_content["task_id"]})
    assert isinstance(transcript, dict)
    results = [step["item"] for step in transcript["steps"] if step["item"]["kind"] == "result"]
    assert (results[0]["text"], results[0]["is_error"]) == ("hi", False)  # the approved call ran
    assert results[1]["is_error"] and "denied it: not this time" in results[1]["text"]
