"""The HTTP retry layer without a network: `RetryingTransport` over `httpx2.MockTransport`.

What is retried (connect errors, 429/503) and what is not (anything that may have reached the
server), how many times, how long it waits (the pure backoff and `Retry-After` parsing), and the
synthetic JSON-RPC error an exhausted request is answered with.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import httpx2
import pytest

from protocol.spawn import LoopKnobs
from subagent.tools.http import (
    TRANSPORT_FAILED,
    RetryingTransport,
    backoff_delay_s,
    parse_retry_after,
)

pytestmark = pytest.mark.anyio

FAST = LoopKnobs(transport_retries=3, backoff_initial_s=0.001, backoff_max_s=0.004)
NOW = 1_700_000_000.0


class Scripted:
    """A mock server that answers each request with the next scripted step (a status or an error)."""

    def __init__(self, *steps: int | Exception) -> None:
        self.steps = list(steps)
        self.requests = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return httpx2.Response(step, headers={"retry-after": "0"} if step in (429, 503) else {}, json={})


async def send(script: Scripted, knobs: LoopKnobs = FAST) -> httpx2.Response:
    transport = RetryingTransport(httpx2.MockTransport(script), knobs, jitter=lambda: 0.0, clock=lambda: NOW)
    async with httpx2.AsyncClient(transport=transport) as client:
        return await client.post("http://mcp.invalid/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "x"})


def error_message(response: httpx2.Response) -> str:
    body = response.json()
    assert body["error"]["code"] == TRANSPORT_FAILED
    return str(body["error"]["message"])


async def test_connect_errors_are_retried_until_the_request_gets_through() -> None:
    script = Scripted(httpx2.ConnectError("refused"), httpx2.ConnectError("refused"), 200)
    assert (await send(script)).status_code == 200
    assert script.requests == 3


async def test_429_and_503_are_retried() -> None:
    script = Scripted(429, 503, 200)
    assert (await send(script)).status_code == 200
    assert script.requests == 3


async def test_exhausted_retries_become_a_transport_failed_error_for_that_request() -> None:
    script = Scripted(503, 503, 503, 503)
    response = await send(script)
    assert script.requests == 4
    assert error_message(response) == "HTTP 503 after 4 attempts"


async def test_an_error_that_may_have_reached_the_server_is_not_retried() -> None:
    script = Scripted(httpx2.ReadError("reset"), 200)
    response = await send(script)
    assert script.requests == 1
    assert error_message(response).startswith("ReadError: reset (not retried")


async def test_other_statuses_pass_through_untouched() -> None:
    script = Scripted(500)
    assert (await send(script)).status_code == 500
    assert script.requests == 1


async def test_a_retry_after_longer_than_the_backoff_cap_is_not_waited_for() -> None:
    def slow(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(429, headers={"retry-after": "120"})

    transport = RetryingTransport(httpx2.MockTransport(slow), FAST)
    async with httpx2.AsyncClient(transport=transport) as client:
        response = await client.get("http://mcp.invalid/mcp")
    assert error_message(response) == "HTTP 429; server asked to retry after 120 s"


@pytest.mark.parametrize(
    ("attempt", "jitter", "retry_after", "delay"),
    [
        pytest.param(0, 0.0, None, 0.1, id="first"),
        pytest.param(1, 0.0, None, 0.2, id="doubles"),
        pytest.param(2, 1.0, None, 0.6, id="jitter-stretches-by-half"),
        pytest.param(10, 0.0, None, 5.0, id="capped"),
        pytest.param(10, 1.0, None, 5.0, id="capped-after-jitter"),
        pytest.param(0, 0.0, 2.0, 2.0, id="retry-after-is-a-floor"),
    ],
)
def test_backoff_delays(attempt: int, jitter: float, retry_after: float | None, delay: float) -> None:
    assert backoff_delay_s(attempt, LoopKnobs(), jitter=jitter, retry_after_s=retry_after) == pytest.approx(
        delay
    )


def http_date(offset_s: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + offset_s, tz=UTC), usegmt=True)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param("7", 7.0, id="delta-seconds"),
        pytest.param(" 0 ", 0.0, id="zero"),
        pytest.param(http_date(30), 30.0, id="http-date"),
        pytest.param(http_date(-30), 0.0, id="http-date-in-the-past"),
        pytest.param("soon", None, id="garbage"),
    ],
)
def test_retry_after_parsing(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now_s=NOW) == seconds
