"""`open_intelligence(on_sent=…)`: called once a request's body is on the wire, before its reply
(a run starts its hinted MCP servers only then, so their start does not delay the request)."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from subagent.intel import open_intelligence
from subagent.messages import ModelRequest, UserMessage
from tests.intel.conftest import FAST_KNOBS, RecordingSink, openai_spec
from tests.support.fake_llm import FakeLLM, chat

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(system="s", messages=(UserMessage("hi"),))


async def test_on_sent_is_called_when_the_body_is_sent_before_the_reply_comes(fake_llm: FakeLLM) -> None:
    fake_llm.default = dataclasses.replace(chat("slow"), delay_s=30)  # the reply never comes in time
    sink = RecordingSink()
    sent = anyio.Event()
    async with (
        open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=sink, on_sent=sent.set) as intel,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(intel.complete, REQUEST)
        with anyio.fail_after(10):
            await sent.wait()
        await fake_llm.wait_requests(1)
        assert sink.results() == []  # the call is still waiting for its reply
        tg.cancel_scope.cancel()


async def test_on_sent_is_called_for_every_request(fake_llm: FakeLLM) -> None:
    fake_llm.default = chat("done")
    calls: list[float] = []
    async with open_intelligence(
        [openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink(), on_sent=lambda: calls.append(1.0)
    ) as intel:
        with anyio.fail_after(10):
            await intel.complete(REQUEST)
            await intel.complete(REQUEST)
    assert len(calls) == 2
