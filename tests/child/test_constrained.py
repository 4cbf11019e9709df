"""Constrained JSON actions and parroting, end to end through the real child against a real HTTP
server playing the model: a server whose tool-call parser fails, a model that writes valid
actions only under a response schema, a server that rejects the schema, a model that parrots."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import JsonValue

from protocol.result import TerminalStatus as S
from tests.child.conftest import demo_server, openai_endpoint, payload
from tests.support.child import spawn_child
from tests.support.fake_llm import FakeLLM, Recorded, Respond, chat, error

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

LLAMACPP_UNPARSED: JsonValue = {
    "error": {
        "code": 500,
        "message": "Failed to parse tool call arguments as JSON: [json.exception]",
        "type": "x",
    }
}
ADD = json.dumps({"action": "tool", "tool": "demo__add", "arguments": {"a": 2, "b": 3}})
FIVE = json.dumps({"action": "final", "result": "five"})


def body(request: Recorded) -> dict[str, Any]:
    assert isinstance(request.json, dict)
    return request.json


def constrained(request: Recorded) -> bool:
    return "response_format" in body(request)


def conversation(request: Recorded) -> list[Any]:
    """The messages after the system prompt (which changes when a run switches tool mode)."""
    return [m for m in body(request)["messages"] if m["role"] != "system"]


async def test_a_tool_call_parse_failure_asks_the_same_turn_again_constrained(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(500, LLAMACPP_UNPARSED), chat(ADD), chat(FIVE))
    async with spawn_child(payload(openai_endpoint(fake_llm), demo_server())) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.result == "five"
        assert result.usage.steps == 2  # no turn lost to the server's parse failure
        assert result.usage.model_calls == 3
        kinds = [e.fields["kind"] for e in child.events_named("loop.error")]
        assert kinds == ["tool_call_unparsed"]
    native, again, after_tool = fake_llm.requests
    assert "tools" in body(native) and not constrained(native)
    assert "tools" not in body(again) and constrained(again)
    assert conversation(again) == conversation(native)
    schema = json.dumps(body(again)["response_format"]["json_schema"]["schema"])
    assert '"demo__add"' in schema  # the tool's name, constrained with its input schema
    assert constrained(after_tool)


async def test_a_model_that_writes_valid_actions_only_under_a_schema_completes_in_one_step(
    fake_llm: FakeLLM,
) -> None:
    # Free, it writes a broken object; constrained, the grammar holds it to a valid action.
    fake_llm.default = Respond(lambda r: chat(FIVE) if constrained(r) else chat('{"final", "five"}'))
    async with spawn_child(payload(openai_endpoint(fake_llm, tool_mode="json"))) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.result == "five"
        assert result.usage.steps == 1
    assert [constrained(r) for r in fake_llm.requests] == [True]


async def test_a_server_that_rejects_the_schema_is_asked_again_at_once_and_remembered(
    fake_llm: FakeLLM,
) -> None:
    rejected = error(400, {"error": {"message": "Unsupported value: 'response_format.type' json_schema"}})
    fake_llm.enqueue(rejected, chat(ADD), chat(FIVE))
    async with spawn_child(payload(openai_endpoint(fake_llm, tool_mode="json"), demo_server())) as child:
        result = await child.result()
        assert result.status is S.COMPLETED and result.result == "five"
        assert result.usage.steps == 2  # the rejection cost no turn
        outcomes = [e.fields["outcome"] for e in child.events_named("intel.result")]
        assert outcomes == ["unconstrained", "ok", "ok"]
    assert [constrained(r) for r in fake_llm.requests] == [True, False, False]
    first, resent, _ = fake_llm.requests
    assert conversation(first) == conversation(resent)


def parrot(request: Recorded) -> Any:
    """A model that answers its first turn with nothing, then repeats the last message it got."""
    messages = body(request)["messages"]
    return chat("" if len(messages) <= 2 else str(messages[-1]["content"]))


async def test_a_model_that_parrots_the_feedback_is_re_asked_once_then_stalls(fake_llm: FakeLLM) -> None:
    fake_llm.default = Respond(parrot)
    async with spawn_child(payload(openai_endpoint(fake_llm))) as child:
        result = await child.result()
        assert result.status is S.STALLED
        assert result.error is not None and result.error.kind == "parroted_feedback"
        assert "repeated agentd's own message" in result.error.message
        assert result.result is None and not result.partial
        kinds = [e.fields["kind"] for e in child.events_named("loop.error")]
        assert kinds == ["vacuous_final", "parroted_feedback", "parroted_feedback"]
    _empty, echo, again = fake_llm.requests
    # Every message agentd wrote is marked as agentd's, so an echo of it is recognisable.
    assert all(str(conversation(r)[-1]["content"]).startswith("[agentd] ") for r in (echo, again))
