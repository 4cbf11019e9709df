"""`[intelligence.NAME] temperature` on the wire: sent with every request when set, never when unset."""

from __future__ import annotations

import pytest

from subagent.intel import open_intelligence
from subagent.messages import ModelRequest, UserMessage
from tests.intel.conftest import FAST_KNOBS, RecordingSink, anthropic_spec, openai_spec
from tests.support.fake_llm import FakeLLM, Respond, anthropic

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(system="s", messages=(UserMessage("go"),))


async def test_an_openai_endpoint_sends_its_temperature_on_every_request(fake_llm: FakeLLM) -> None:
    async with open_intelligence(
        [openai_spec(fake_llm, temperature=0.0)], FAST_KNOBS, sink=RecordingSink()
    ) as intel:
        await intel.complete(REQUEST)
        await intel.complete(ModelRequest(system="s", messages=(UserMessage("go"),), json_actions=True))
    temperatures = [r.json.get("temperature") for r in fake_llm.requests if isinstance(r.json, dict)]
    assert temperatures == [0.0, 0.0]


async def test_without_a_temperature_the_server_default_applies(fake_llm: FakeLLM) -> None:
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        await intel.complete(REQUEST)
    (request,) = fake_llm.requests
    assert isinstance(request.json, dict) and "temperature" not in request.json


async def test_an_anthropic_endpoint_sends_its_temperature(fake_llm: FakeLLM) -> None:
    fake_llm.default = Respond(lambda _r: anthropic("ok"))
    async with open_intelligence(
        [anthropic_spec(fake_llm, temperature=0.2)], FAST_KNOBS, sink=RecordingSink()
    ) as intel:
        reply = await intel.complete(REQUEST)
    assert reply.text == "ok"
    (request,) = fake_llm.requests
    assert isinstance(request.json, dict) and request.json["temperature"] == 0.2
