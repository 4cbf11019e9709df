"""The OpenAI-compatible adapter over real HTTP: request shape, reply parsing, encode-once."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from protocol.spawn import LoopKnobs
from subagent.errors import IntelUnavailable
from subagent.intel import open_intelligence
from subagent.intel import openai_wire as wire
from subagent.intel.openai import OpenAIChat
from subagent.intel.transport import open_client
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
from tests.intel.conftest import FAST_KNOBS, RecordingSink, openai_spec
from tests.support.fake_llm import FakeLLM, Hang, Reply, chat, json_reply, tool_call

pytestmark = pytest.mark.anyio

ADD = ToolSpec("demo__add", "Add two numbers.", {"type": "object", "properties": {"a": {"type": "number"}}})
TRANSCRIPT: tuple[Message, ...] = (
    UserMessage("add 2 and 3"),
    AssistantMessage("", (ToolCall("call_1", "demo__add", {"a": 2, "b": 3}),)),
    ToolResultMessage("call_1", "demo__add", "5"),
    AssistantMessage("", (ToolCall("call_2", "demo__add", None, "not JSON", raw_arguments="{oops"),)),
    ToolResultMessage("call_2", "demo__add", "bad arguments", is_error=True),
)


async def complete_once(fake: FakeLLM, request: ModelRequest, **spec: JsonValue) -> ModelReply:
    async with open_intelligence([openai_spec(fake, **spec)], FAST_KNOBS, sink=RecordingSink()) as intel:
        return await intel.complete(request)


async def test_request_carries_model_system_first_messages_tools_and_bearer_key(fake_llm: FakeLLM) -> None:
    request = ModelRequest(system="be brief", messages=TRANSCRIPT, tools=(ADD,), max_output_tokens=99)
    await complete_once(fake_llm, request, api_key="sk-test", headers={"x-extra": "1"})

    [recorded] = fake_llm.requests
    assert (recorded.method, recorded.path) == ("POST", "/v1/chat/completions")
    assert recorded.headers["authorization"] == "Bearer sk-test"
    assert recorded.headers["x-extra"] == "1"
    assert recorded.json == {
        "model": "fake-model",
        "max_tokens": 99,
        "tool_choice": "auto",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "add 2 and 3"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "demo__add", "arguments": '{"a":2,"b":3}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "5"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "demo__add", "arguments": "{oops"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "bad arguments"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": ADD.name,
                    "description": ADD.description,
                    "parameters": ADD.input_schema,
                },
            }
        ],
    }


async def test_no_key_means_no_authorization_header_and_no_tools_means_no_tool_choice(
    fake_llm: FakeLLM,
) -> None:
    await complete_once(fake_llm, ModelRequest(system="", messages=(UserMessage("hi"),)))
    [recorded] = fake_llm.requests
    assert "authorization" not in recorded.headers
    assert recorded.json == {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


async def test_plain_text_reply_with_usage(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("hello there", usage=(123, 45)))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert reply == ModelReply(
        text="hello there", usage=TokenUsage(123, 45), finish_reason="stop", model="fake-model"
    )


async def test_tool_calls_are_parsed_and_a_missing_id_is_generated(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(
        chat(
            tool_calls=[tool_call("demo__add", {"a": 1}, "call_x"), tool_call("note_read", "", call_id=None)]
        )
    )
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    first, second = reply.tool_calls
    assert first == ToolCall("call_x", "demo__add", {"a": 1})
    assert second.name == "note_read"
    assert second.arguments == {}
    assert second.id.startswith("call_")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        pytest.param("{not json", "not valid JSON", id="invalid-json"),
        pytest.param("[1, 2]", "JSON array, not an object", id="array"),
        pytest.param('"text"', "JSON string, not an object", id="string"),
    ],
)
async def test_tool_call_arguments_that_are_not_a_json_object_become_an_arguments_error(
    fake_llm: FakeLLM, arguments: str, problem: str
) -> None:
    fake_llm.enqueue(chat(tool_calls=[tool_call("demo__add", arguments)]))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    [call] = reply.tool_calls
    assert call.arguments is None
    assert call.arguments_error is not None and problem in call.arguments_error
    assert call.raw_arguments == arguments


async def test_raw_arguments_are_capped_at_2000_chars(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat(tool_calls=[tool_call("demo__add", "{" + "x" * 5000)]))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert len(reply.tool_calls[0].raw_arguments) == 2000


@pytest.mark.parametrize(
    ("behaviour", "description"),
    [
        pytest.param(Reply(200, b"<html>oops</html>"), "not JSON", id="not-json"),
        pytest.param(json_reply({"id": "x"}), "no choices", id="no-choices"),
        pytest.param(json_reply({"choices": []}), "no choices", id="empty-choices"),
        pytest.param(json_reply([1, 2]), "not a JSON object", id="array-body"),
        pytest.param(json_reply({"choices": [{"message": "hi"}]}), "no message", id="message-not-object"),
        pytest.param(
            json_reply({"choices": [{"message": {"content": 5}}]}), "not text", id="content-not-text"
        ),
        pytest.param(
            json_reply({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}),
            "no function name",
            id="tool-call-without-name",
        ),
    ],
)
async def test_an_unparsable_reply_is_returned_as_malformed_not_raised(
    fake_llm: FakeLLM, behaviour: Reply, description: str
) -> None:
    fake_llm.enqueue(behaviour)
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=sink) as intel:
        reply = await intel.complete(ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert reply.malformed is not None and description in reply.malformed
    assert "oops" not in reply.malformed
    assert [r["outcome"] for r in sink.results()] == ["malformed"]
    assert len(fake_llm.requests) == 1


async def test_refusal_field_becomes_the_reply_refusal(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat(None, refusal="I can't help with that."))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert (reply.refusal, reply.text) == ("I can't help with that.", "")


async def test_content_filter_finish_is_a_refusal(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("partial", finish_reason="content_filter"))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert reply.refusal == "content filtered"
    assert reply.finish_reason == "content_filter"


async def test_missing_usage_is_estimated_from_sizes_and_marked_so(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("x" * 40, usage=None))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("y" * 400),)))
    assert reply.usage is not None and reply.usage.estimated
    assert reply.usage.tokens_out == 10
    assert reply.usage.tokens_in >= 100
    [recorded] = fake_llm.requests
    assert reply.usage.tokens_in == len(recorded.body) // 4


async def test_cached_prompt_tokens_are_reported_apart(fake_llm: FakeLLM) -> None:
    usage: JsonValue = {
        "prompt_tokens": 50,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 40},
    }
    fake_llm.enqueue(
        json_reply({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}], "usage": usage})
    )
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert reply.usage is not None and (reply.usage.cached_in, reply.usage.estimated) == (40, False)


async def test_content_given_as_text_parts_is_joined(fake_llm: FakeLLM) -> None:
    parts: JsonValue = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    fake_llm.enqueue(json_reply({"choices": [{"message": {"content": parts}, "finish_reason": "stop"}]}))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert reply.text == "ab"


def count_encodings(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """Record every message the OpenAI adapter encodes (the list fills as it does)."""
    encoded: list[Message] = []
    real_encode = wire.encode_message

    def counting_encode(message: Message) -> bytes:
        encoded.append(message)
        return real_encode(message)

    monkeypatch.setattr("subagent.intel.openai.encode_message", counting_encode)
    return encoded


async def test_each_message_is_encoded_once_across_a_growing_transcript(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = count_encodings(monkeypatch)
    async with open_client() as client:
        adapter = OpenAIChat(openai_spec(fake_llm), client)
        transcript: tuple[Message, ...] = ()
        for turn in range(5):
            transcript = (*transcript, UserMessage(f"observation {turn}"), AssistantMessage(f"step {turn}"))
            body = adapter.prepare(ModelRequest(system="s", messages=transcript)).payload
            assert body.count(b'"role":"assistant"') == turn + 1

    # Ten distinct messages, each encoded exactly once although five bodies carried 30 in all.
    assert len(encoded) == 10
    assert len({id(m) for m in encoded}) == 10


async def test_the_cache_forgets_messages_the_latest_request_dropped(fake_llm: FakeLLM) -> None:
    async with open_client() as client:
        adapter = OpenAIChat(openai_spec(fake_llm), client)
        old = tuple(UserMessage(f"m{i}") for i in range(10))
        adapter.prepare(ModelRequest(system="s", messages=old))
        adapter.prepare(ModelRequest(system="s", messages=(UserMessage("summary"),)))
        assert len(adapter._messages) == 1


async def test_knobs_default_retries_apply_when_none_are_given(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(Reply(500), Reply(500))
    knobs = LoopKnobs(backoff_initial_s=0.001, backoff_max_s=0.001)
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm)], knobs, sink=sink) as intel:
        reply = await intel.complete(ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert reply.text == "done"
    assert [r["outcome"] for r in sink.results()] == ["retry", "retry", "ok"]


async def test_a_reply_that_never_comes_times_out_per_request_and_is_retried_once(fake_llm: FakeLLM) -> None:
    fake_llm.default = Hang()
    sink = RecordingSink()
    async with open_intelligence(
        [openai_spec(fake_llm, request_timeout_s=0.05)], FAST_KNOBS, sink=sink
    ) as intel:
        with pytest.raises(IntelUnavailable, match=r"no reply within request_timeout_s=0\.05"):
            await intel.complete(ModelRequest(system="s", messages=(UserMessage("hi"),)))
    # A stall is retried once, not transport_retries times: each attempt waited the whole timeout.
    assert [r["outcome"] for r in sink.results()] == ["retry", "failover"]
    await fake_llm.wait_aborted(2)


async def test_a_body_over_the_cap_is_malformed_not_buffered(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("subagent.intel.transport.MAX_BODY_BYTES", 1000)
    fake_llm.enqueue(chat("x" * 5000))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    assert reply.malformed is not None and "exceeds" in reply.malformed


async def test_nan_in_tool_arguments_is_an_arguments_error_not_a_poisoned_transcript(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.enqueue(chat(tool_calls=[tool_call("demo__add", '{"a": NaN}')]))
    reply = await complete_once(fake_llm, ModelRequest(system="s", messages=(UserMessage("hi"),)))
    [call] = reply.tool_calls
    assert call.arguments is None
    assert call.raw_arguments == '{"a": NaN}'


async def test_json_action_mode_sends_tool_turns_as_plain_text(fake_llm: FakeLLM) -> None:
    call = ToolCall(id="act_1", name="demo__add", arguments={"a": 1}, raw_arguments='{"a": 1}')
    request = ModelRequest(
        system="s",
        messages=(
            UserMessage("task"),
            AssistantMessage('{"action": "tool", "tool": "demo__add", "arguments": {"a": 1}}', (call,)),
            ToolResultMessage("act_1", "demo__add", "2"),
        ),
        json_actions=True,
    )
    fake_llm.enqueue(chat('{"action": "final", "result": "2"}'))
    endpoint = openai_spec(fake_llm, tool_mode="json")
    async with open_intelligence([endpoint], FAST_KNOBS, sink=RecordingSink()) as intel:
        await intel.complete(request)
    body = fake_llm.requests[0].json
    assert isinstance(body, dict)
    messages = body["messages"]
    assert isinstance(messages, list)
    assert [m["role"] for m in messages if isinstance(m, dict)] == ["system", "user", "assistant", "user"]
    assert all("tool_calls" not in m for m in messages if isinstance(m, dict))
    last = messages[-1]
    assert isinstance(last, dict)
    assert last["content"] == "Result of tool `demo__add`:\n2"
    assert "tools" not in body


async def test_a_stubbed_message_in_the_middle_is_re_encoded_and_the_rest_reused(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = count_encodings(monkeypatch)
    async with open_client() as client:
        adapter = OpenAIChat(openai_spec(fake_llm), client)
        first = tuple(UserMessage(f"m{i}") for i in range(6))
        adapter.prepare(ModelRequest(system="s", messages=first))
        stubbed = (*first[:2], UserMessage("[elided]"), *first[3:], UserMessage("new"))
        body = adapter.prepare(ModelRequest(system="s", messages=stubbed)).payload
    assert [m.text for m in encoded[6:] if isinstance(m, UserMessage)] == ["[elided]", "new"]
    assert body.count(b'"role":"user"') == 7
