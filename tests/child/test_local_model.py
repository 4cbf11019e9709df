"""A small local model's endpoint as docs/models.md configures it (`tool_mode = "json"`,
`temperature = 0`), end to end through the real child against a real HTTP server playing the
model: every request carries the temperature and the action union, and the system prompt lays
out the tools, where facts come from and a worked exchange."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol.result import TerminalStatus as S
from subagent.loop.action import GROUNDING
from tests.child.conftest import demo_server, openai_endpoint, payload
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, Recorded, chat

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

ADD = json.dumps({"action": "tool", "tool": "demo__add", "arguments": {"a": 2, "b": 3}})
FIVE = json.dumps({"action": "final", "result": "5"})


def body(request: Recorded) -> dict[str, Any]:
    assert isinstance(request.json, dict)
    return request.json


def system(request: Recorded) -> str:
    (first, *_) = body(request)["messages"]
    assert first["role"] == "system"
    return str(first["content"])


async def test_every_request_carries_the_temperature_the_union_and_the_laid_out_tools(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.enqueue(chat(ADD), chat(FIVE))
    endpoint = openai_endpoint(fake_llm, tool_mode="json", temperature=0)
    async with spawn_child(payload(endpoint, demo_server())) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.result == "5"
    first, second = fake_llm.requests
    for request in (first, second):
        assert body(request)["temperature"] == 0
        assert body(request)["response_format"]["type"] == "json_schema"
        assert "tools" not in body(request)
    prompt = system(first)
    assert '- demo__add {"a": integer, "b": integer}' in prompt
    assert GROUNDING in prompt and "Example (a different task" in prompt


async def test_a_made_up_subagent_handle_is_told_to_the_model_and_the_run_goes_on(fake_llm: FakeLLM) -> None:
    # A small model cancels "a subagent" by a name it made up (SmolLM2-135M did, on the rig of
    # docs/models.md): the handle is not one the channel can carry, and the model is told so.
    cancel = {"action": "tool", "tool": "subagent_cancel", "arguments": {"handle": "files__stat_4000"}}
    fake_llm.enqueue(chat(json.dumps(cancel)), chat(FIVE))
    endpoint = openai_endpoint(fake_llm, tool_mode="json", temperature=0)
    async with spawn_child(payload(endpoint, demo_server())) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.result == "5", result
    observation = body(fake_llm.requests[1])["messages"][-1]["content"]
    assert "invalid arguments for `subagent_cancel`: handle:" in observation
    assert "not a handle subagent_spawn returned" in observation
