"""Constrained decoding on the wire: a request's response schema goes out as `response_format`,
and an endpoint that rejects it is asked again at once without it, and remembered."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from pydantic import JsonValue

from subagent.intel import open_intelligence, tool_memory
from subagent.intel.classify import ConstraintRejected, EndpointFatal, classify_status
from subagent.messages import ModelRequest, ResponseSchema, UserMessage
from tests.intel.conftest import FAST_KNOBS, RecordingSink, openai_spec
from tests.support.fake_llm import FakeLLM, Recorded, Respond, chat, error

pytestmark = pytest.mark.anyio

SCHEMA = ResponseSchema("agentd_action", {"type": "object", "properties": {"action": {"type": "string"}}})
CONSTRAINED = ModelRequest(
    system="s", messages=(UserMessage("go"),), json_actions=True, response_schema=SCHEMA
)

# Servers' own words for a response schema they do not take.
LLAMACPP_OLD_FORMAT: JsonValue = {
    "error": {
        "code": 500,
        "message": 'response_format type must be one of "text" or "json_object", but got: json_schema',
        "type": "server_error",
    }
}
LLAMACPP_CONVERSION: JsonValue = {
    "error": {"code": 400, "message": "JSON schema conversion failed:\nUnrecognized schema: {}", "type": "x"}
}
STRICT_SERVER: JsonValue = {
    "detail": [
        {
            "type": "extra_forbidden",
            "loc": ["body", "response_format"],
            "msg": "Extra inputs are not permitted",
        }
    ]
}
VLLM_XGRAMMAR: JsonValue = {
    "object": "error",
    "message": "The provided JSON schema contains features not supported by xgrammar.",
    "code": 400,
}


@pytest.fixture(autouse=True)
def forget_endpoints() -> Iterator[None]:
    tool_memory.forget_all()
    yield
    tool_memory.forget_all()


def has_format(request: Recorded) -> bool:
    return isinstance(request.json, dict) and "response_format" in request.json


async def test_a_response_schema_goes_out_as_json_schema_response_format(fake_llm: FakeLLM) -> None:
    strict = ResponseSchema("agentd_result", {"type": "object"}, strict=True)
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        await intel.complete(CONSTRAINED)
        await intel.complete(ModelRequest(system="s", messages=(UserMessage("go"),), response_schema=strict))
        await intel.complete(ModelRequest(system="s", messages=(UserMessage("go"),)))
    first, second, third = (r.json for r in fake_llm.requests)
    assert isinstance(first, dict) and isinstance(second, dict) and isinstance(third, dict)
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "agentd_action", "schema": SCHEMA.schema},
    }
    assert second["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "agentd_result", "schema": {"type": "object"}, "strict": True},
    }
    assert "response_format" not in third


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(500, LLAMACPP_OLD_FORMAT, id="llama.cpp-old-format"),
        pytest.param(400, LLAMACPP_CONVERSION, id="llama.cpp-conversion"),
        pytest.param(422, STRICT_SERVER, id="strict-server-extra-input"),
        pytest.param(400, VLLM_XGRAMMAR, id="vllm-xgrammar"),
    ],
)
async def test_a_rejected_response_schema_is_dropped_at_once_and_remembered(
    fake_llm: FakeLLM, status: int, body: JsonValue
) -> None:
    fake_llm.default = Respond(
        lambda r: error(status, body) if has_format(r) else chat('{"action": "final"}')
    )
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=sink) as intel:
        with anyio.fail_after(10):
            reply = await intel.complete(CONSTRAINED)
            assert reply.text == '{"action": "final"}'
            # The next request to this endpoint goes without a schema: no second rejection.
            await intel.complete(CONSTRAINED)
    assert [has_format(r) for r in fake_llm.requests] == [True, False, False]
    outcomes = [(f["outcome"], f.get("err")) for f in sink.results()]
    assert outcomes == [("unconstrained", "ConstraintRejected"), ("ok", None), ("ok", None)]


async def test_the_rejection_is_remembered_per_endpoint(fake_llm: FakeLLM) -> None:
    fake_llm.default = Respond(lambda r: error(500, LLAMACPP_OLD_FORMAT) if has_format(r) else chat("ok"))
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        await intel.complete(CONSTRAINED)
    assert tool_memory.rejects_constraints(openai_spec(fake_llm))
    assert not tool_memory.rejects_constraints(openai_spec(fake_llm, model="another-model"))
    # A later run in this process (a new client) starts without the schema for that endpoint.
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        await intel.complete(CONSTRAINED)
    assert [has_format(r) for r in fake_llm.requests] == [True, False, False]


async def test_an_endpoint_that_takes_the_schema_keeps_getting_it(fake_llm: FakeLLM) -> None:
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        for _ in range(3):
            await intel.complete(CONSTRAINED)
    assert [has_format(r) for r in fake_llm.requests] == [True, True, True]


async def test_a_schema_rejection_on_a_streamed_request_is_dropped_too(fake_llm: FakeLLM) -> None:
    fake_llm.default = Respond(lambda r: error(400, LLAMACPP_CONVERSION) if has_format(r) else chat("plain"))
    async with open_intelligence(
        [openai_spec(fake_llm, stream=True)], FAST_KNOBS, sink=RecordingSink()
    ) as intel:
        reply = await intel.complete(CONSTRAINED)
    assert reply.text == "plain"
    assert [has_format(r) for r in fake_llm.requests] == [True, False]


def test_schema_wordings_count_only_for_a_request_that_carried_a_schema() -> None:
    body = b'{"error": {"message": "response_format is not supported"}}'
    assert isinstance(classify_status(400, body, constrained=True), ConstraintRejected)
    unconstrained = classify_status(400, body)
    assert isinstance(unconstrained, EndpointFatal) and not isinstance(unconstrained, ConstraintRejected)
