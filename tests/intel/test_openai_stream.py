"""Streaming chat completions: delta accumulation, stream end rules, stalls and cancellation."""

from __future__ import annotations

import anyio
import pytest
from pydantic import JsonValue

from subagent.errors import IntelUnavailable
from subagent.intel import open_intelligence
from subagent.messages import ModelReply, ModelRequest, TokenUsage, ToolCall, UserMessage
from tests.intel.conftest import FAST_KNOBS, RecordingSink, openai_spec
from tests.support.fake_llm import FakeLLM, Hang, Stream, chat, chat_chunks, sse

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(system="s", messages=(UserMessage("hi"),))
# Two content chunks, then silence until the client leaves.
STALLING = Stream(sse(chat_chunks("abcdef")).chunks[:2], stall=True)


async def stream_once(fake: FakeLLM, sink: RecordingSink | None = None, **spec: float) -> ModelReply:
    endpoint = openai_spec(fake, stream=True, **spec)
    async with open_intelligence([endpoint], FAST_KNOBS, sink=sink or RecordingSink()) as intel:
        return await intel.complete(REQUEST)


async def test_streamed_text_and_tool_calls_are_accumulated_with_usage_from_the_last_chunk(
    fake_llm: FakeLLM,
) -> None:
    calls = [("call_a", "demo__add", '{"a": 2, "b": 3}'), ("call_b", "note_read", "{}")]
    fake_llm.enqueue(sse(chat_chunks("The sum is coming.", tool_calls=calls, usage=(70, 12))))
    reply = await stream_once(fake_llm)
    assert reply == ModelReply(
        text="The sum is coming.",
        tool_calls=(ToolCall("call_a", "demo__add", {"a": 2, "b": 3}), ToolCall("call_b", "note_read", {})),
        usage=TokenUsage(70, 12),
        finish_reason="stop",
        model="fake-model",
    )
    [recorded] = fake_llm.requests
    assert isinstance(recorded.json, dict)
    assert recorded.json["stream"] is True
    assert recorded.json["stream_options"] == {"include_usage": True}
    assert recorded.headers["accept"] == "text/event-stream"


async def test_a_stream_without_done_but_with_a_finish_reason_is_complete(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(sse(chat_chunks("ok", usage=None), done=False))
    reply = await stream_once(fake_llm)
    assert (reply.text, reply.finish_reason) == ("ok", "stop")
    assert reply.usage is not None  # estimated, since the server sent none


async def test_a_stream_cut_off_before_any_finish_is_retried(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(sse(chat_chunks("partial", finish_reason=None, usage=None), done=False))
    fake_llm.enqueue(sse(chat_chunks("whole")))
    sink = RecordingSink()
    reply = await stream_once(fake_llm, sink)
    assert reply.text == "whole"
    assert [r["outcome"] for r in sink.results()] == ["retry", "ok"]


async def test_a_chunk_that_is_not_json_makes_the_reply_malformed(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(Stream([b"{broken"]))
    reply = await stream_once(fake_llm)
    assert reply.malformed == "a stream chunk is not JSON"


async def test_streamed_refusal_and_content_filter_are_refusals(fake_llm: FakeLLM) -> None:
    refusal: list[JsonValue] = [
        {"choices": [{"delta": {"refusal": "No"}}]},
        {"choices": [{"delta": {"refusal": " way."}}]},
    ]
    fake_llm.enqueue(sse([*refusal, {"choices": [{"delta": {}, "finish_reason": "stop"}]}]))
    fake_llm.enqueue(sse(chat_chunks("x", finish_reason="content_filter")))
    assert (await stream_once(fake_llm)).refusal == "No way."
    assert (await stream_once(fake_llm)).refusal == "content filtered"


async def test_no_first_event_within_the_first_token_timeout_is_retried_once_then_unavailable(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.default = Hang()
    sink = RecordingSink()
    with pytest.raises(IntelUnavailable, match=r"no first event within first_token_timeout_s=0\.05"):
        await stream_once(fake_llm, sink, first_token_timeout_s=0.05)
    assert [r["outcome"] for r in sink.results()] == ["retry", "failover"]
    await fake_llm.wait_aborted(2)


async def test_a_stream_that_stalls_midway_is_retried_once_then_unavailable(fake_llm: FakeLLM) -> None:
    fake_llm.default = STALLING
    with pytest.raises(IntelUnavailable, match=r"no event for stream_idle_timeout_s=0\.05"):
        await stream_once(fake_llm, stream_idle_timeout_s=0.05)
    assert len(fake_llm.requests) == 2
    await fake_llm.wait_aborted(2)


async def test_cancelling_mid_stream_closes_the_connection_promptly(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(STALLING)
    async with open_intelligence(
        [openai_spec(fake_llm, stream=True)], FAST_KNOBS, sink=RecordingSink()
    ) as intel:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(intel.complete, REQUEST)
                await fake_llm.wait_requests(1)
                tg.cancel_scope.cancel()
            await fake_llm.wait_aborted(1)
    assert len(fake_llm.requests) == 1


async def test_cancelling_while_waiting_for_the_first_byte_closes_the_connection(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(Hang())
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(intel.complete, REQUEST)
                await fake_llm.wait_requests(1)
                tg.cancel_scope.cancel()
            await fake_llm.wait_aborted(1)


async def test_a_server_that_ignores_stream_and_answers_json_is_still_understood(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("plain answer"))
    reply = await stream_once(fake_llm)
    assert reply.text == "plain answer"


async def test_consecutive_streams_reuse_one_keep_alive_connection(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(*(sse(chat_chunks(f"reply {i}")) for i in range(3)))
    endpoint = openai_spec(fake_llm, stream=True)
    async with open_intelligence([endpoint], FAST_KNOBS, sink=RecordingSink()) as intel:
        for i in range(3):
            reply = await intel.complete(REQUEST)
            assert reply.text == f"reply {i}"
    assert fake_llm.connections == 1
