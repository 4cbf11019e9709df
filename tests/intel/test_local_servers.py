"""What local model servers (llama.cpp, vLLM, Ollama) answer when tool calling goes wrong, in
their own words: a refused `tools` field, and a tool call their parser could not read
."""

from __future__ import annotations

import json

import anyio
import pytest
from pydantic import JsonValue

from subagent.errors import IntelTransient
from subagent.intel import open_intelligence
from subagent.intel.classify import ToolCallUnparsed, ToolsRejected, classify_status
from subagent.messages import (
    AssistantMessage,
    ModelRequest,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from tests.intel.conftest import FAST_KNOBS, RecordingSink, openai_spec
from tests.support.fake_llm import FakeLLM, chat, error, sse

pytestmark = pytest.mark.anyio

TOOL = ToolSpec("fs__read_file", "Read a file.", {"type": "object"})
REQUEST = ModelRequest(system="s", messages=(UserMessage("read it"),), tools=(TOOL,))

# The servers' own replies (status, body), as their issue trackers and sources show them.
LLAMACPP_UNPARSED: JsonValue = {
    "error": {
        "code": 500,
        "message": "The model produced output that does not match the expected Hermes 2 Pro format",
        "type": "server_error",
    }
}
LLAMACPP_PARSE_AT: JsonValue = {
    "error": {"code": 500, "message": "Failed to parse input at pos 184: <tool_call>", "type": "server_error"}
}
LLAMACPP_ARGUMENTS: JsonValue = {
    "error": {"code": 500, "message": "Failed to parse tool call arguments as JSON", "type": "server_error"}
}
OLLAMA_UNPARSED: JsonValue = {
    "error": "error parsing tool call: raw='{\"path\": ', err=unexpected end of JSON input"
}
OLLAMA_UNPARSED_ODD_KEY: JsonValue = {
    "error parsing tool call": "invalid character 'c' looking for beginning of value"
}
OLLAMA_NO_TOOLS: JsonValue = {
    "error": {"message": "registry.ollama.ai/library/gemma3:4b does not support tools", "type": "api_error"}
}
LLAMACPP_NO_JINJA: JsonValue = {
    "error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}
}
LLAMACPP_OLD: JsonValue = {"code": 500, "message": "Unsupported param: tools", "type": "server_error"}
VLLM_NO_PARSER: JsonValue = {
    "object": "error",
    "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    "type": "BadRequestError",
    "code": 400,
}
STRICT_SERVER: JsonValue = {"detail": [{"loc": ["body", "tools"], "msg": "Extra inputs are not permitted"}]}


def body(value: JsonValue) -> bytes:
    return json.dumps(value).encode()


@pytest.mark.parametrize(
    ("status", "payload", "expected"),
    [
        pytest.param(500, LLAMACPP_UNPARSED, ToolCallUnparsed, id="llama.cpp-format-mismatch-500"),
        pytest.param(500, LLAMACPP_PARSE_AT, ToolCallUnparsed, id="llama.cpp-parse-at-pos-500"),
        pytest.param(500, LLAMACPP_ARGUMENTS, ToolCallUnparsed, id="llama.cpp-arguments-500"),
        pytest.param(500, OLLAMA_UNPARSED, ToolCallUnparsed, id="ollama-500"),
        pytest.param(500, OLLAMA_UNPARSED_ODD_KEY, ToolCallUnparsed, id="ollama-500-phrase-as-key"),
        pytest.param(400, OLLAMA_NO_TOOLS, ToolsRejected, id="ollama-model-without-tools-400"),
        pytest.param(400, LLAMACPP_NO_JINJA, ToolsRejected, id="llama.cpp-without-jinja-400"),
        pytest.param(500, LLAMACPP_NO_JINJA, ToolsRejected, id="llama.cpp-without-jinja-500"),
        pytest.param(500, LLAMACPP_OLD, ToolsRejected, id="old-llama.cpp-500"),
        pytest.param(400, VLLM_NO_PARSER, ToolsRejected, id="vllm-without-tool-parser-400"),
        pytest.param(422, STRICT_SERVER, ToolsRejected, id="strict-server-422-naming-tools"),
        pytest.param(
            500, {"error": {"message": "CUDA out of memory"}}, IntelTransient, id="other-500-transient"
        ),
    ],
)
def test_local_server_wordings_are_classified(status: int, payload: JsonValue, expected: type) -> None:
    assert type(classify_status(status, body(payload))) is expected


def test_a_context_overflow_that_mentions_tools_is_still_an_overflow() -> None:
    payload: JsonValue = {
        "error": {"message": "maximum context length is 4096 tokens; messages and tools use 5000"}
    }
    assert type(classify_status(400, body(payload))).__name__ == "EndpointOverflow"


async def test_an_unparsed_tool_call_is_a_malformed_reply_and_never_retried(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(500, LLAMACPP_UNPARSED))
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=sink) as intel:
        reply = await intel.complete(REQUEST)
    assert reply.unparsed_tool_call
    assert reply.malformed is not None and "Hermes 2 Pro format" in reply.malformed
    assert len(fake_llm.requests) == 1
    [result] = sink.results()
    assert (result["outcome"], result["err"], result["status"]) == ("malformed", "ToolCallUnparsed", 500)


async def test_an_unparsed_tool_call_in_a_stream_is_a_malformed_reply(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(
        sse([{"error": {"code": 500, "message": "Failed to parse input at pos 12: x"}}], done=False)
    )
    async with open_intelligence(
        [openai_spec(fake_llm, stream=True)], FAST_KNOBS, sink=RecordingSink()
    ) as intel:
        reply = await intel.complete(REQUEST)
    assert reply.unparsed_tool_call
    assert len(fake_llm.requests) == 1


async def test_a_rejected_tools_field_is_raised_at_once_without_opening_the_breaker(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.default = error(400, OLLAMA_NO_TOOLS)
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        for _ in range(4):
            with anyio.fail_after(5), pytest.raises(ToolsRejected, match="does not support tools"):
                await intel.complete(REQUEST)
        # Four rejections in a row: the endpoint is healthy, so it is still asked (no open breaker).
        fake_llm.default = chat("fine")
        assert (await intel.complete(ModelRequest(system="s", messages=(UserMessage("hi"),)))).text == "fine"
    assert len(fake_llm.requests) == 5


async def test_a_switched_run_sends_its_native_history_as_text(fake_llm: FakeLLM) -> None:
    history = (
        UserMessage("read it"),
        AssistantMessage("", (ToolCall("call_1", "fs__read_file", {"path": "a"}),)),
        ToolResultMessage("call_1", "fs__read_file", "contents"),
    )
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        await intel.complete(ModelRequest(system="s", messages=history, tools=(TOOL,)))
        await intel.complete(ModelRequest(system="s", messages=history, json_actions=True))
    native, text = (r.json for r in fake_llm.requests)
    assert isinstance(native, dict) and isinstance(text, dict)
    assert roles(native["messages"]) == ["system", "user", "assistant", "tool"]
    assert roles(text["messages"]) == ["system", "user", "assistant", "user"]
    assert "tools" not in text


def roles(messages: JsonValue) -> list[JsonValue]:
    assert isinstance(messages, list)
    return [m.get("role") for m in messages if isinstance(m, dict)]
