"""The JSON-action fallback and the output contract, end to end through the real child."""

from __future__ import annotations

import json

import pytest

from protocol.result import TerminalStatus as S
from tests.child.conftest import demo_server, openai_endpoint, payload
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, chat

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_an_endpoint_without_tool_calling_works_through_json_actions(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(
        chat('I will add them. {"action": "tool", "tool": "demo__add", "arguments": {"a": 2, "b": 3}}'),
        chat('{"action": "final", "result": "five"}'),
    )
    endpoint = openai_endpoint(fake_llm, tool_mode="json")
    async with spawn_child(payload(endpoint, demo_server())) as child:
        result = await child.result()
        assert result.status is S.COMPLETED
        assert result.result == "five"
    first, second = (r.json for r in fake_llm.requests)
    assert isinstance(first, dict)
    assert isinstance(second, dict)
    assert "tools" not in first
    assert "demo__add" in json.dumps(first["messages"])  # the catalogue rides in the system text
    messages = second["messages"]
    assert isinstance(messages, list)
    last = messages[-1]
    assert isinstance(last, dict)
    assert last == {"role": "user", "content": "Result of tool `demo__add`:\n5"}


async def test_a_json_contract_is_verified_and_a_bad_final_costs_a_step(fake_llm: FakeLLM) -> None:
    schema = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}
    fake_llm.enqueue(chat('{"total": 5}'), chat('{"sum": 5}'))
    contract = {"format": "json", "schema": schema}
    async with spawn_child(payload(openai_endpoint(fake_llm), output_contract=contract)) as child:
        result = await child.result()
        assert result.status is S.COMPLETED
        assert result.result == {"sum": 5}
        assert result.usage.steps == 2
        assert [e.fields["kind"] for e in child.events_named("loop.error")] == ["verify_failed"]
