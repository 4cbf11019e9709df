"""The circuit breaker, driven by an injected clock: closed → open → half-open → closed/open."""

from __future__ import annotations

import pytest

from subagent.intel.breaker import (
    Breaker,
    breaker_after_failure,
    breaker_after_success,
    breaker_allows,
    breaker_state,
    reopens_in_s,
)


def failed(times: int, *, at: float = 0.0, breaker: Breaker | None = None) -> Breaker:
    current = breaker or Breaker()
    for _ in range(times):
        current = breaker_after_failure(current, at)
    return current


@pytest.mark.parametrize(
    ("failures", "state"),
    [
        pytest.param(0, "closed", id="fresh"),
        pytest.param(1, "closed", id="one-failure"),
        pytest.param(2, "closed", id="two-failures"),
        pytest.param(3, "open", id="three-failures-open-it"),
        pytest.param(5, "open", id="more-failures-keep-it-open"),
    ],
)
def test_breaker_opens_after_three_consecutive_failures(failures: int, state: str) -> None:
    assert breaker_state(failed(failures, at=100.0), 100.0) == state


def test_open_breaker_refuses_calls_until_the_cooldown_ends_then_half_opens() -> None:
    breaker = failed(3, at=100.0)
    assert not breaker_allows(breaker, 129.9)
    assert reopens_in_s(breaker, 120.0) == pytest.approx(10.0)
    assert breaker_state(breaker, 130.0) == "half_open"
    assert breaker_allows(breaker, 130.0)


def test_a_successful_half_open_trial_closes_the_breaker() -> None:
    breaker = breaker_after_success(failed(3, at=0.0))
    assert breaker_state(breaker, 31.0) == "closed"
    assert breaker.consecutive_failures == 0
    # It takes three new failures to open it again.
    assert breaker_state(failed(2, at=40.0, breaker=breaker), 40.0) == "closed"


def test_a_failed_half_open_trial_reopens_for_a_full_cooldown() -> None:
    breaker = breaker_after_failure(failed(3, at=0.0), 31.0)
    assert breaker_state(breaker, 31.0) == "open"
    assert breaker_state(breaker, 60.9) == "open"
    assert breaker_state(breaker, 61.0) == "half_open"


def test_a_success_between_failures_resets_the_count() -> None:
    breaker = failed(2, breaker=breaker_after_success(failed(2)))
    assert breaker_state(breaker, 0.0) == "closed"


def test_closed_breaker_reopens_in_zero_seconds() -> None:
    assert reopens_in_s(Breaker(), 5.0) == 0.0
