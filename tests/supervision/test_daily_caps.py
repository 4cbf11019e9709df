"""The daily caps' decisions (agentd/supervision/daily_caps.py): which day an instant falls in for a
zone and when the next one starts, whether a spend reaches a cap, and how long a task over
several caps waits."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.supervision.daily_caps import (
    CapsConfig,
    DailyCap,
    Spend,
    day_of,
    decide,
    over,
    schedule_cap,
    trigger_cap,
    uid_cap,
)


def _at(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


@pytest.mark.parametrize(
    ("now", "zone", "date", "start", "end"),
    [
        pytest.param(
            "2026-12-04T13:00:00+00:00",
            "UTC",
            "2026-12-04",
            "2026-12-04T00:00:00+00:00",
            "2026-12-05T00:00:00+00:00",
            id="utc-midday",
        ),
        pytest.param(
            "2026-12-04T23:59:59+00:00",
            "UTC",
            "2026-12-04",
            "2026-12-04T00:00:00+00:00",
            "2026-12-05T00:00:00+00:00",
            id="utc-last-second",
        ),
        pytest.param(
            "2026-12-04T13:00:00+00:00",
            "Pacific/Kiritimati",
            "2026-12-05",
            "2026-12-05T00:00:00+14:00",
            "2026-12-06T00:00:00+14:00",
            id="a-zone-ahead-is-already-tomorrow",
        ),
        pytest.param(
            "2026-12-04T03:00:00+00:00",
            "America/New_York",
            "2026-12-03",
            "2026-12-03T00:00:00-05:00",
            "2026-12-04T00:00:00-05:00",
            id="a-zone-behind-is-still-yesterday",
        ),
        pytest.param(
            "2026-03-08T12:00:00-04:00",
            "America/New_York",
            "2026-03-08",
            "2026-03-08T00:00:00-05:00",
            "2026-03-09T00:00:00-04:00",
            id="spring-forward-day-is-23-hours",
        ),
        pytest.param(
            "2026-11-01T12:00:00-05:00",
            "America/New_York",
            "2026-11-01",
            "2026-11-01T00:00:00-04:00",
            "2026-11-02T00:00:00-05:00",
            id="fall-back-day-is-25-hours",
        ),
        pytest.param(
            "2026-12-04T20:00:00+00:00",
            "Asia/Kathmandu",
            "2026-12-05",
            "2026-12-05T00:00:00+05:45",
            "2026-12-06T00:00:00+05:45",
            id="a-quarter-hour-offset",
        ),
    ],
)
def test_the_day_of_an_instant_in_a_zone_and_when_it_ends(
    now: str, zone: str, date: str, start: str, end: str
) -> None:
    day = day_of(_at(now), zone)
    assert (day.date, day.start, day.end) == (date, _at(start), _at(end))


@given(st.floats(min_value=0, max_value=4e9), st.sampled_from(["UTC", "Europe/Paris", "Asia/Kolkata"]))
def test_every_instant_lies_in_its_day_and_the_next_day_starts_where_it_ends(now: float, zone: str) -> None:
    day = day_of(now, zone)
    assert day.start <= now < day.end
    assert day_of(day.end, zone).start == day.end
    assert 23 * 3600 <= day.end - day.start <= 25 * 3600


COST = DailyCap("uid:1000", "uid 1000", "budgets.per_uid_daily_cost", cost_usd=5.0)
TOKENS = DailyCap("uid:1000", "uid 1000", "budgets.per_uid_daily_tokens", tokens=1000)


@pytest.mark.parametrize(
    ("cap", "spent", "reason"),
    [
        pytest.param(COST, Spend(4.99, 10**9), None, id="cost-below-the-cap-runs"),
        pytest.param(
            COST,
            Spend(5.0, 0),
            "the daily cost cap of uid 1000 is spent: $5.0000 today of budgets.per_uid_daily_cost $5.0000",
            id="cost-at-the-cap-is-spent",
        ),
        pytest.param(TOKENS, Spend(100.0, 999), None, id="tokens-below-the-cap-runs"),
        pytest.param(
            TOKENS,
            Spend(0.0, 1200),
            "the daily token cap of uid 1000 is spent: 1,200 tokens today of budgets.per_uid_daily_tokens 1,000",
            id="tokens-over-the-cap-is-spent",
        ),
    ],
)
def test_a_cap_is_spent_once_the_day_reaches_it_and_the_reason_names_the_key(
    cap: DailyCap, spent: Spend, reason: str | None
) -> None:
    assert over(cap, spent) == reason


def test_a_task_over_no_cap_starts() -> None:
    assert decide([(COST, Spend(1.0, 0)), (TOKENS, Spend(0.0, 10))], _at("2026-12-04T13:00:00+00:00")) is None


def test_a_task_over_several_caps_waits_for_the_latest_next_day() -> None:
    now = _at("2026-12-04T13:00:00+00:00")
    zoned = DailyCap(
        "schedule:s1", "schedule nightly", "the schedule's daily_cost", 1.0, zone="America/New_York"
    )
    deferral = decide([(COST, Spend(6.0, 0)), (zoned, Spend(2.0, 0))], now)
    assert deferral is not None
    assert deferral.until == _at("2026-12-05T00:00:00-05:00")  # New York's midnight comes after UTC's
    assert deferral.scope == "schedule:s1"
    assert "schedule nightly" in deferral.reason


def test_the_configuration_gives_each_scope_its_cap_and_none_where_it_sets_none() -> None:
    config = CapsConfig(uid_cost=2.5, trigger_cost={"inbox": 1.0})
    assert uid_cap(config, 1000) == DailyCap("uid:1000", "uid 1000", "budgets.per_uid_daily_cost", 2.5)
    assert uid_cap(CapsConfig(), 1000) is None
    cap = trigger_cap(config, "inbox")
    assert cap is not None and cap.scope == "trigger:inbox" and cap.cost_usd == 1.0
    assert trigger_cap(config, "other") is None
    zoned = schedule_cap("s1", "nightly", 3.0, "Europe/Paris")
    assert zoned is not None and zoned.zone == "Europe/Paris"
    assert schedule_cap("s1", "nightly", None, "Europe/Paris") is None
    unzoned = schedule_cap("s1", "nightly", 3.0, None)
    assert unzoned is not None and unzoned.zone == "UTC"
