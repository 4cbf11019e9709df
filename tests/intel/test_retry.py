"""The retry plan: backoff envelope, jitter bounds, Retry-After as a capped lower bound."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.spawn import LoopKnobs
from subagent.intel.retry import (
    RetryPolicy,
    backoff_step_s,
    parse_retry_after,
    parse_retry_after_ms,
    retry_delay_s,
)

DEFAULT = RetryPolicy.from_knobs(LoopKnobs())
NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("retry_index", "step_s"),
    [
        pytest.param(0, 0.1, id="first-retry-waits-the-initial-step"),
        pytest.param(1, 0.2, id="second-doubles"),
        pytest.param(2, 0.4, id="third-doubles-again"),
        pytest.param(6, 5.0, id="capped-at-backoff-max"),
        pytest.param(10_000, 5.0, id="huge-index-stays-capped"),
    ],
)
def test_backoff_step_doubles_from_initial_to_max(retry_index: int, step_s: float) -> None:
    assert backoff_step_s(DEFAULT, retry_index) == pytest.approx(step_s)


def test_no_delay_is_planned_once_the_retries_are_spent() -> None:
    rng = random.Random(0)
    assert retry_delay_s(DEFAULT, 2, rng=rng) is not None
    assert retry_delay_s(DEFAULT, 3, rng=rng) is None


def test_zero_retries_means_the_first_failure_is_final() -> None:
    policy = RetryPolicy.from_knobs(LoopKnobs(transport_retries=0))
    assert retry_delay_s(policy, 0, rng=random.Random(0)) is None


def test_the_same_seed_plans_the_same_delays() -> None:
    first = [retry_delay_s(DEFAULT, i, rng=random.Random(7)) for i in range(3)]
    second = [retry_delay_s(DEFAULT, i, rng=random.Random(7)) for i in range(3)]
    assert first == second


@given(
    retry_index=st.integers(min_value=0, max_value=20),
    seed=st.integers(min_value=0, max_value=2**32),
    initial_s=st.floats(min_value=0.001, max_value=2.0),
    max_s=st.floats(min_value=0.001, max_value=30.0),
)
def test_jittered_delay_lies_in_the_upper_half_of_the_step(
    retry_index: int, seed: int, initial_s: float, max_s: float
) -> None:
    policy = RetryPolicy(retries=50, initial_s=initial_s, max_s=max(initial_s, max_s))
    step = backoff_step_s(policy, retry_index)
    delay = retry_delay_s(policy, retry_index, rng=random.Random(seed))
    assert delay is not None
    assert step / 2 <= delay <= step <= policy.max_s


@given(
    retry_index=st.integers(min_value=0, max_value=2),
    seed=st.integers(min_value=0, max_value=2**32),
    retry_after_s=st.floats(min_value=0.0, max_value=10_000.0),
)
def test_retry_after_is_a_lower_bound_capped_at_sixty_seconds(
    retry_index: int, seed: int, retry_after_s: float
) -> None:
    delay = retry_delay_s(DEFAULT, retry_index, rng=random.Random(seed), retry_after_s=retry_after_s)
    assert delay is not None
    assert delay >= min(retry_after_s, 60.0)
    assert delay <= max(min(retry_after_s, 60.0), DEFAULT.max_s)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param("3", 3.0, id="delta-seconds"),
        pytest.param(" 1.5 ", 1.5, id="fractional-with-spaces"),
        pytest.param(
            format_datetime(datetime.fromtimestamp(NOW + 30, UTC), usegmt=True), 30.0, id="http-date"
        ),
        pytest.param(
            format_datetime(datetime.fromtimestamp(NOW - 30, UTC), usegmt=True), 0.0, id="date-in-past"
        ),
        pytest.param("-5", 0.0, id="negative-means-now"),
        pytest.param("soon", None, id="garbage"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="absent"),
        pytest.param("nan", None, id="nan"),
        pytest.param("inf", None, id="infinite"),
    ],
)
def test_retry_after_header_parses_to_seconds(header: str | None, seconds: float | None) -> None:
    parsed = parse_retry_after(header, now_epoch_s=NOW)
    if seconds is None:
        assert parsed is None
    else:
        assert parsed == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param("250", 0.25, id="millis"),
        pytest.param("x", None, id="garbage"),
        pytest.param("-1", None, id="negative"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_retry_after_ms_header_parses_to_seconds(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after_ms(header) == seconds
