"""The wrap-up turn end to end: a real subagent against the fake OpenAI-compatible server.

When the step or token budget is about to run out, the last request the server sees carries no
tools, and the text it answers with is the run's partial result (exit 3).
"""

from __future__ import annotations

from typing import Any

import pytest

from protocol.result import TerminalStatus as S
from protocol.result import exit_code
from tests.child.conftest import demo_server, openai_endpoint, payload
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, Recorded, chat, tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


def last_message(request: Recorded) -> str:
    assert isinstance(request.json, dict)
    messages = request.json["messages"]
    assert isinstance(messages, list) and isinstance(messages[-1], dict)
    content = messages[-1]["content"]
    assert isinstance(content, str)
    return content


def offers_tools(request: Recorded) -> bool:
    assert isinstance(request.json, dict)
    return bool(request.json.get("tools"))


async def test_a_run_out_of_steps_ends_with_the_answer_to_a_tool_less_wrap_up(fake_llm: FakeLLM) -> None:
    for i in range(2):
        fake_llm.enqueue(chat(f"interim {i}", tool_calls=[tool_call("demo__counter", {}, f"c{i}")]))
    fake_llm.enqueue(chat("Wrap-up: the counter reached 2; nothing else was checked."))
    async with spawn_child(
        payload(openai_endpoint(fake_llm), demo_server(), limits={"max_steps": 3})
    ) as child:
        result = await child.result()
    assert result.status is S.EXHAUSTED_STEPS and exit_code(result) == 3
    assert result.partial and result.result == "Wrap-up: the counter reached 2; nothing else was checked."
    requests = fake_llm.requests
    assert len(requests) == 3
    assert [offers_tools(r) for r in requests] == [True, True, False]
    assert "step budget is used up" in last_message(requests[-1])


async def test_a_run_out_of_tokens_ends_with_the_answer_to_a_tool_less_wrap_up(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("", tool_calls=[tool_call("demo__counter", {}, "c0")], usage=(1500, 50)))
    fake_llm.enqueue(chat("Token wrap-up: partial answer.", usage=(1200, 20)))
    async with spawn_child(
        payload(openai_endpoint(fake_llm), demo_server(), limits={"max_tokens": 3000})
    ) as child:
        result = await child.result()
    assert result.status is S.EXHAUSTED_TOKENS and exit_code(result) == 3
    assert result.partial and result.result == "Token wrap-up: partial answer."
    requests = fake_llm.requests
    assert [offers_tools(r) for r in requests] == [True, False]
    assert "token budget is used up" in last_message(requests[-1])
    body: Any = requests[-1].json
    assert 64 <= body["max_tokens"] <= 3000 // 8  # the reserved answer size
    assert result.usage.tokens <= 3000
