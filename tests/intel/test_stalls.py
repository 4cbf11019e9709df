"""A model endpoint that goes silent mid-reply: the read-idle bound, one retry, the run's deadline
."""

from __future__ import annotations

import random

import anyio
import pytest

from protocol.spawn import LoopKnobs
from subagent.errors import IntelUnavailable
from subagent.intel import open_intelligence
from subagent.intel.retry import RetryPolicy, retry_delay_s
from subagent.messages import ModelRequest, UserMessage
from tests.intel.conftest import FAST_KNOBS, RecordingSink, anthropic_spec, openai_spec
from tests.support.fake_llm import FakeLLM, Reply, Stall, anthropic, chat, stall_midway

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(system="s", messages=(UserMessage("hi"),))


async def test_a_body_that_stalls_midway_is_cut_at_the_read_idle_bound_not_the_request_timeout(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.default = stall_midway(chat("a reply long enough to be cut in half"))
    sink = RecordingSink()
    spec = openai_spec(fake_llm, request_timeout_s=60, read_idle_timeout_s=0.2)
    started = anyio.current_time()
    async with open_intelligence([spec], FAST_KNOBS, sink=sink) as intel:
        with anyio.fail_after(10), pytest.raises(IntelUnavailable, match=r"read_idle_timeout_s=0\.2"):
            await intel.complete(REQUEST)
    elapsed = anyio.current_time() - started
    # Two attempts (one retry of a stall) of 0.2 s each, far from 2 x request_timeout_s.
    assert [r["outcome"] for r in sink.results()] == ["retry", "failover"]
    assert 0.4 <= elapsed < 5
    await fake_llm.wait_aborted(2)


async def test_a_stall_then_a_good_reply_succeeds_on_the_retry(fake_llm: FakeLLM) -> None:
    fake_llm.enqueue(stall_midway(chat("first")), chat("second"))
    sink = RecordingSink()
    spec = openai_spec(fake_llm, read_idle_timeout_s=0.1)
    async with open_intelligence([spec], FAST_KNOBS, sink=sink) as intel:
        with anyio.fail_after(10):
            reply = await intel.complete(REQUEST)
    assert reply.text == "second"
    assert [r["outcome"] for r in sink.results()] == ["retry", "ok"]


async def test_an_error_body_that_stalls_is_cut_at_the_read_idle_bound(fake_llm: FakeLLM) -> None:
    fake_llm.default = Stall(Reply(500, b'{"error": {"message": "' + b"y" * 100), 10)
    spec = openai_spec(fake_llm, read_idle_timeout_s=0.1)
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        with anyio.fail_after(10), pytest.raises(IntelUnavailable, match="read_idle_timeout_s"):
            await intel.complete(REQUEST)


async def test_the_anthropic_adapter_has_the_same_read_idle_bound(fake_llm: FakeLLM) -> None:
    fake_llm.default = stall_midway(anthropic("a reply long enough to be cut in half"))
    spec = anthropic_spec(fake_llm, read_idle_timeout_s=0.1)
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        with anyio.fail_after(10), pytest.raises(IntelUnavailable, match="read_idle_timeout_s"):
            await intel.complete(REQUEST)


async def test_no_retry_starts_when_its_backoff_would_reach_the_deadline(fake_llm: FakeLLM) -> None:
    fake_llm.default = stall_midway(chat("a reply long enough to be cut in half"))
    sink = RecordingSink()
    # A backoff of at least 1 s cannot end before a deadline 0.5 s away: no retry, and the
    # caller gets the endpoint's error rather than waiting for its own deadline.
    knobs = LoopKnobs(transport_retries=3, backoff_initial_s=2.0, backoff_max_s=2.0)
    spec = openai_spec(fake_llm, read_idle_timeout_s=0.1)
    async with open_intelligence([spec], knobs, sink=sink) as intel:
        with anyio.CancelScope(deadline=anyio.current_time() + 0.5):
            with pytest.raises(IntelUnavailable, match="no time left before the deadline"):
                await intel.complete(REQUEST)
    assert [r["outcome"] for r in sink.results()] == ["failover"]


@pytest.mark.parametrize(
    ("stalls", "remaining_s", "retries"),
    [
        pytest.param(0, float("inf"), True, id="a-transient-failure-is-retried"),
        pytest.param(1, float("inf"), True, id="the-first-stall-is-retried"),
        pytest.param(2, float("inf"), False, id="a-second-stall-is-not"),
        pytest.param(0, 0.01, False, id="no-retry-past-the-deadline"),
    ],
)
def test_the_retry_plan_bounds_stalls_and_respects_the_deadline(
    stalls: int, remaining_s: float, retries: bool
) -> None:
    policy = RetryPolicy(retries=3, initial_s=0.1, max_s=5.0)
    delay = retry_delay_s(policy, 1, rng=random.Random(0), stalls=stalls, remaining_s=remaining_s)
    assert (delay is not None) is retries
