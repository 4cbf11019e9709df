"""The Anthropic Messages adapter: request shape (blocks, merging, headers) and reply parsing."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from subagent.errors import ContextOverflow, IntelUnavailable
from subagent.intel import open_intelligence
from subagent.intel.anthropic import messages_url
from subagent.messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from tests.intel.conftest import FAST_KNOBS, RecordingSink, anthropic_spec
from tests.support.fake_llm import FakeLLM, anthropic, error, json_reply

pytestmark = pytest.mark.anyio

ADD = ToolSpec("demo__add", "Add.", {"type": "object"})
REQUEST = ModelRequest(system="s", messages=(UserMessage("hi"),))


async def complete_once(fake: FakeLLM, request: ModelRequest = REQUEST, **spec: JsonValue) -> ModelReply:
    async with open_intelligence([anthropic_spec(fake, **spec)], FAST_KNOBS, sink=RecordingSink()) as intel:
        return await intel.complete(request)


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        pytest.param("https://api.anthropic.com", "https://api.anthropic.com/v1/messages", id="bare-host"),
        pytest.param(
            "https://api.anthropic.com/", "https://api.anthropic.com/v1/messages", id="trailing-slash"
        ),
        pytest.param("http://proxy:8080/v1", "http://proxy:8080/v1/messages", id="already-v1"),
        pytest.param("http://proxy:8080/v1/", "http://proxy:8080/v1/messages", id="already-v1-slash"),
    ],
)
def test_messages_url_appends_v1_only_when_missing(base_url: str, url: str) -> None:
    assert messages_url(base_url) == url


async def test_request_has_top_level_system_blocks_merged_turns_and_api_headers(fake_llm: FakeLLM) -> None:
    transcript: tuple[Message, ...] = (
        UserMessage("instruction"),
        UserMessage("seed"),
        AssistantMessage("let me add", (ToolCall("tu_1", "demo__add", {"a": 1}),)),
        ToolResultMessage("tu_1", "demo__add", "oops", is_error=True),
        UserMessage("observation"),
        AssistantMessage("", (ToolCall("tu_2", "demo__add", None, "bad", raw_arguments="{x"),)),
        ToolResultMessage("tu_2", "demo__add", "bad arguments", is_error=True),
    )
    request = ModelRequest(system="be brief", messages=transcript, tools=(ADD,))
    await complete_once(fake_llm, request, api_key="sk-ant-test")

    [recorded] = fake_llm.requests
    assert recorded.path == "/v1/messages"
    assert recorded.headers["x-api-key"] == "sk-ant-test"
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in recorded.headers
    assert recorded.json == {
        "model": "fake-claude",
        "max_tokens": 4096,
        "system": "be brief",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "instruction"}, {"type": "text", "text": "seed"}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "let me add"},
                    {"type": "tool_use", "id": "tu_1", "name": "demo__add", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": "oops", "is_error": True},
                    {"type": "text", "text": "observation"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "tu_2", "name": "demo__add", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu_2",
                        "content": "bad arguments",
                        "is_error": True,
                    }
                ],
            },
        ],
        "tools": [{"name": "demo__add", "description": "Add.", "input_schema": {"type": "object"}}],
    }


async def test_tool_results_open_a_merged_user_message(fake_llm: FakeLLM) -> None:
    transcript: tuple[Message, ...] = (
        UserMessage("go"),
        AssistantMessage("", (ToolCall("tu_1", "demo__add", {}),)),
        UserMessage("steering injected before the result"),
        ToolResultMessage("tu_1", "demo__add", "5"),
    )
    await complete_once(fake_llm, ModelRequest(system="", messages=transcript), max_output_tokens=50)
    [recorded] = fake_llm.requests
    assert isinstance(recorded.json, dict)
    assert "system" not in recorded.json
    assert recorded.json["max_tokens"] == 50
    assert recorded.json["messages"][-1] == {  # type: ignore[index]
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "5"},
            {"type": "text", "text": "steering injected before the result"},
        ],
    }


async def test_text_and_tool_use_blocks_and_usage_are_parsed(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(anthropic("adding", tool_uses=[("tu_9", "demo__add", {"a": 2})], usage=(30, 7)))
    reply = await complete_once(fake_llm)
    assert reply == ModelReply(
        text="adding",
        tool_calls=(ToolCall("tu_9", "demo__add", {"a": 2}),),
        usage=TokenUsage(30, 7),
        finish_reason="tool_use",
        model="fake-claude",
    )


async def test_cache_tokens_count_as_input_and_cache_reads_are_priced_apart(fake_llm: FakeLLM) -> None:
    usage: JsonValue = {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 3}
    fake_llm.enqueue(json_reply({"content": [{"type": "text", "text": "x"}], "usage": usage}))
    assert (await complete_once(fake_llm)).usage == TokenUsage(105, 3, cached_in=100)


async def test_refusal_stop_reason_is_a_refusal(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(anthropic("", stop_reason="refusal"))
    reply = await complete_once(fake_llm)
    assert reply.refusal == "refused"


async def test_a_body_without_content_is_malformed(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(json_reply({"type": "message"}))
    assert (await complete_once(fake_llm)).malformed == "the reply has no content list"


async def test_prompt_too_long_is_context_overflow(fake_llm: FakeLLM) -> None:
    body: JsonValue = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long"},
    }
    fake_llm.enqueue(error(400, body))
    with pytest.raises(ContextOverflow):
        await complete_once(fake_llm)


async def test_529_overloaded_is_retried(fake_llm: FakeLLM) -> None:
    fake_llm.default = error(529, {"type": "error", "error": {"type": "overloaded_error"}})
    with pytest.raises(IntelUnavailable, match=r"HTTP 529"):
        await complete_once(fake_llm)
    assert len(fake_llm.requests) == 3
