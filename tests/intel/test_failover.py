"""Retries within an endpoint and failover across the list, over real HTTP to fake servers."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator

import anyio
import pytest

from protocol.spawn import EndpointSpec
from subagent.errors import ContextOverflow, IntelFatal, IntelUnavailable
from subagent.intel import open_intelligence
from subagent.intel.failover import FailoverIntelligence
from subagent.intel.openai import OpenAIChat
from subagent.intel.retry import RetryPolicy
from subagent.intel.transport import open_client
from subagent.messages import ModelRequest, UserMessage
from tests.intel.conftest import FAST_KNOBS, RecordingSink, openai_spec
from tests.support.fake_llm import FakeLLM, Reply, chat, error

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(system="s", messages=(UserMessage("hi"),))
OVERFLOW = error(400, {"error": {"message": "too long", "code": "context_length_exceeded"}})


@pytest.fixture
def second_llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


def closed_port_url() -> str:
    """A loopback URL nobody listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_429_with_retry_after_waits_at_least_that_long_then_succeeds(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(429, headers={"retry-after": "0.2"}), chat("after the wait"))
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=sink) as intel:
        reply = await intel.complete(REQUEST)
    assert reply.text == "after the wait"
    first, second = fake_llm.requests
    assert second.at - first.at >= 0.2
    retry, ok = sink.results()
    assert (retry["outcome"], retry["status"], retry["err"]) == ("retry", 429, "IntelTransient")
    assert isinstance(retry["retry_in_ms"], int) and retry["retry_in_ms"] >= 200
    assert ok["outcome"] == "ok"


async def test_500_is_retried_then_succeeds(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(500), Reply(503), chat("recovered"))
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=sink) as intel:
        assert (await intel.complete(REQUEST)).text == "recovered"
    assert [(c["attempt"], r["outcome"]) for c, r in zip(sink.calls(), sink.results(), strict=True)] == [
        (1, "retry"),
        (2, "retry"),
        (3, "ok"),
    ]


async def test_exhausted_retries_fail_over_to_the_second_endpoint(
    fake_llm: FakeLLM, second_llm: FakeLLM
) -> None:
    fake_llm.default = error(503)
    second_llm.enqueue(chat("from the backup"))
    endpoints = [openai_spec(fake_llm, name="primary"), openai_spec(second_llm, name="backup")]
    sink = RecordingSink()
    async with open_intelligence(endpoints, FAST_KNOBS, sink=sink) as intel:
        assert (await intel.complete(REQUEST)).text == "from the backup"
    assert len(fake_llm.requests) == 3  # the first attempt and two retries
    assert [(r["endpoint"], r["outcome"]) for r in sink.results()] == [
        ("primary", "retry"),
        ("primary", "retry"),
        ("primary", "failover"),
        ("backup", "ok"),
    ]


async def test_all_endpoints_down_is_unavailable_naming_each_endpoint_and_no_key(fake_llm: FakeLLM) -> None:
    fake_llm.default = error(502)
    endpoints = [
        openai_spec(fake_llm, name="flaky", api_key="sk-very-secret"),
        EndpointSpec(kind="openai", name="nowhere", base_url=closed_port_url(), api_key="sk-other-secret"),
    ]
    sink = RecordingSink()
    async with open_intelligence(endpoints, FAST_KNOBS, sink=sink) as intel:
        with pytest.raises(IntelUnavailable) as caught:
            await intel.complete(REQUEST)
    message = str(caught.value)
    assert "flaky: server error (HTTP 502) (after 3 attempts)" in message
    assert "nowhere: could not connect (ConnectError) (after 3 attempts)" in message
    assert "secret" not in message
    assert "secret" not in repr(sink.events)


async def test_401_is_fatal_without_retries(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(401, {"error": {"message": "Incorrect API key provided: sk-abc"}}))
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm, api_key="sk-abc")], FAST_KNOBS, sink=sink) as intel:
        with pytest.raises(IntelFatal, match=r"authentication failed \(HTTP 401\)") as caught:
            await intel.complete(REQUEST)
    assert "sk-abc" not in str(caught.value)
    assert caught.value.kind == "auth"
    assert len(fake_llm.requests) == 1
    assert [(r["outcome"], r["status"]) for r in sink.results()] == [("fatal", 401)]


async def test_auth_failure_on_the_first_endpoint_fails_over_to_the_next(
    fake_llm: FakeLLM, second_llm: FakeLLM
) -> None:
    fake_llm.enqueue(error(403))
    second_llm.enqueue(chat("second"))
    endpoints = [openai_spec(fake_llm, name="a"), openai_spec(second_llm, name="b")]
    async with open_intelligence(endpoints, FAST_KNOBS, sink=RecordingSink()) as intel:
        assert (await intel.complete(REQUEST)).text == "second"


async def test_auth_everywhere_is_fatal_not_unavailable(fake_llm: FakeLLM, second_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(401))
    second_llm.enqueue(error(404))
    endpoints = [openai_spec(fake_llm, name="a"), openai_spec(second_llm, name="b")]
    async with open_intelligence(endpoints, FAST_KNOBS, sink=RecordingSink()) as intel:
        with pytest.raises(IntelFatal, match=r"a: authentication failed.*b: request rejected"):
            await intel.complete(REQUEST)


async def test_a_rejected_request_is_a_config_error_not_auth(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(404, {"error": {"message": "no such model", "code": "model_not_found"}}))
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=RecordingSink()) as intel:
        with pytest.raises(IntelFatal, match="model_not_found no such model") as caught:
            await intel.complete(REQUEST)
    assert caught.value.kind == "config"
    assert len(fake_llm.requests) == 1


async def test_context_overflow_is_raised_at_once_without_failover(
    fake_llm: FakeLLM, second_llm: FakeLLM
) -> None:
    fake_llm.enqueue(OVERFLOW)
    endpoints = [openai_spec(fake_llm, name="a"), openai_spec(second_llm, name="b")]
    async with open_intelligence(endpoints, FAST_KNOBS, sink=RecordingSink()) as intel:
        with pytest.raises(ContextOverflow):
            await intel.complete(REQUEST)
    assert (len(fake_llm.requests), len(second_llm.requests)) == (1, 0)


async def test_cancelling_during_a_retry_sleep_returns_promptly(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(error(429, headers={"retry-after": "30"}))
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm)], FAST_KNOBS, sink=sink) as intel:
        # The outer deadline lies beyond the 30 s wait (a retry that cannot end before the
        # deadline is not planned at all); the cancel must land long before either.
        with anyio.move_on_after(45) as outer:
            started = anyio.current_time()
            async with anyio.create_task_group() as tg:
                tg.start_soon(intel.complete, REQUEST)
                await fake_llm.wait_requests(1)
                await sink.wait_results(1)
                tg.cancel_scope.cancel()
    assert not outer.cancelled_caught
    assert anyio.current_time() - started < 5
    assert sink.results()[0]["retry_in_ms"] == 30_000
    assert len(fake_llm.requests) == 1


async def test_breaker_opens_after_three_failed_calls_and_half_opens_after_the_cooldown(
    fake_llm: FakeLLM, second_llm: FakeLLM
) -> None:
    fake_llm.default = error(500)
    now = [1000.0]
    policy = RetryPolicy(retries=0, initial_s=0.001, max_s=0.001)
    async with open_client() as client:
        adapters = [
            OpenAIChat(openai_spec(f, name=n), client) for f, n in ((fake_llm, "a"), (second_llm, "b"))
        ]
        intel = FailoverIntelligence(
            adapters, policy, sink=RecordingSink(), rng=random.Random(0), clock=lambda: now[0]
        )
        for _ in range(3):
            await intel.complete(REQUEST)
        assert len(fake_llm.requests) == 3

        await intel.complete(REQUEST)  # open: the primary is skipped
        assert len(fake_llm.requests) == 3

        now[0] += 30.0
        fake_llm.enqueue(chat("healed"))
        assert (await intel.complete(REQUEST)).text == "healed"  # half-open trial succeeds
        assert len(fake_llm.requests) == 4


async def test_every_breaker_open_is_unavailable_without_sending(fake_llm: FakeLLM) -> None:
    fake_llm.default = error(500)
    policy = RetryPolicy(retries=0, initial_s=0.001, max_s=0.001)
    async with open_client() as client:
        intel = FailoverIntelligence(
            [OpenAIChat(openai_spec(fake_llm), client)], policy, sink=RecordingSink(), clock=lambda: 0.0
        )
        for _ in range(3):
            with pytest.raises(IntelUnavailable):
                await intel.complete(REQUEST)
        with pytest.raises(
            IntelUnavailable, match=r"default: circuit open for 30.0s more; last: server error"
        ):
            await intel.complete(REQUEST)
    assert len(fake_llm.requests) == 3


async def test_intel_call_and_result_fields_carry_sizes_not_content(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("secret answer"))
    sink = RecordingSink()
    async with open_intelligence([openai_spec(fake_llm, api_key="sk-k")], FAST_KNOBS, sink=sink) as intel:
        await intel.complete(ModelRequest(system="s", messages=(UserMessage("secret question"),)))
    [call] = sink.calls()
    [result] = sink.results()
    assert call == {
        "endpoint": "default",
        "attempt": 1,
        "model": "fake-model",
        "purpose": "turn",
        "messages": 1,
        "request_bytes": len(fake_llm.requests[0].body),
    }
    assert set(result) == {
        "endpoint",
        "attempt",
        "outcome",
        "status",
        "dur_ms",
        "tokens_in",
        "tokens_out",
        "finish_reason",
    }
    assert "secret" not in repr(sink.events)
    assert "sk-k" not in repr(sink.events)


async def test_captured_content_is_described_when_the_task_opted_in(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(chat("the answer"))
    sink = RecordingSink()
    async with open_intelligence(
        [openai_spec(fake_llm)], FAST_KNOBS, sink=sink, capture_content=True
    ) as intel:
        await intel.complete(ModelRequest(system="s", messages=(UserMessage("the question"),)))
    assert sink.calls()[0]["last_message"] == "the question"
    assert sink.results()[0]["reply"] == "the answer"
    assert sink.results()[0]["reply_len"] == len("the answer")


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        pytest.param({"api_key": "sk-clé"}, "'authorization'", id="non-ascii-key"),
        pytest.param({"headers": {"x-team": "a\r\nevil: 1"}}, "'x-team'", id="header-injection"),
        pytest.param({"headers": {"bad name": "v"}}, "'bad name'", id="invalid-header-name"),
    ],
)
async def test_headers_that_cannot_go_on_the_wire_are_a_config_error_at_open(
    fake_llm: FakeLLM, overrides: dict[str, object], problem: str
) -> None:
    with pytest.raises(IntelFatal, match=problem) as caught:
        async with open_intelligence([openai_spec(fake_llm, **overrides)], FAST_KNOBS, sink=RecordingSink()):
            pass
    assert caught.value.kind == "config"
    assert "clé" not in str(caught.value)
    assert "evil" not in str(caught.value)
