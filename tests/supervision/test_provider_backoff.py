"""The shared backoff a provider's answer asks for (pure): 429 and 503 with Retry-After, spent
rate-limit budgets in OpenAI's and Anthropic's headers, jitter and its bounds."""

from __future__ import annotations

import pytest

from agentd.supervision.provider_backoff import (
    DEFAULT_429_HOLD_S,
    MAX_HOLD_S,
    backoff_hold,
    header_reset_s,
    parse_duration_s,
)

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("status", "retry_after_s", "expected"),
    [
        pytest.param(429, 2.0, 2.0, id="429-retry-after"),
        pytest.param(429, None, DEFAULT_429_HOLD_S, id="429-without-retry-after"),
        pytest.param(503, 3.0, 3.0, id="503-retry-after"),
        pytest.param(503, None, None, id="503-without-retry-after-is-a-plain-failure"),
        pytest.param(500, 3.0, None, id="500-holds-nothing"),
        pytest.param(200, None, None, id="ok"),
        pytest.param(429, 10_000.0, MAX_HOLD_S, id="capped"),
    ],
)
def test_a_rate_limited_answer_holds_the_endpoint_for_its_wait(
    status: int, retry_after_s: float | None, expected: float | None
) -> None:
    hold = backoff_hold(status, retry_after_s, {}, now_epoch_s=NOW, jitter=0.0)
    assert (hold.hold_s if hold else None) == expected


def test_jitter_spreads_the_hold_within_a_bounded_share() -> None:
    low = backoff_hold(429, 10.0, {}, now_epoch_s=NOW, jitter=0.0)
    high = backoff_hold(429, 10.0, {}, now_epoch_s=NOW, jitter=0.999)
    assert low is not None and high is not None
    assert low.hold_s == 10.0 and 10.0 < high.hold_s < 12.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param(
            {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, 360.0, id="openai"
        ),
        pytest.param(
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "20ms",
            },
            1.0,
            id="openai-the-latest-spent-reset",
        ),
        pytest.param(
            {"x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "1s"}, None, id="not-spent"
        ),
        pytest.param(
            {
                "anthropic-ratelimit-tokens-remaining": "0",
                "anthropic-ratelimit-tokens-reset": "2023-11-14T22:13:50Z",
            },
            30.0,
            id="anthropic-instant",
        ),
        pytest.param(
            {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"},
            None,
            id="unreadable",
        ),
    ],
)
def test_spent_budgets_in_rate_limit_headers_hold_until_their_reset(
    headers: dict[str, str], expected: float | None
) -> None:
    assert header_reset_s(headers, now_epoch_s=NOW) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("", None),
        ("5", None),
        ("1x", None),
    ],
)
def test_provider_durations_parse(text: str, seconds: float | None) -> None:
    assert parse_duration_s(text) == seconds
