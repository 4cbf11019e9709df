"""The pure schedule decisions on a controlled clock: next fires (DST both ways, month ends, leap
day, steps across the hour), missed and overlapping fires, and a loop's accounting of its runs."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from agentd.scheduling.plan import (
    MISFIRE_GRACE_S,
    Progress,
    RunOutcome,
    TriggerError,
    after_run,
    first_fire,
    loop_pause,
    next_fire,
    on_due,
    parse_trigger,
)
from protocol.api import ScheduleSpec
from protocol.result import TerminalStatus

BERLIN = ZoneInfo("Europe/Berlin")


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def _local(zone: ZoneInfo, year: int, month: int, day: int, hour: int, minute: int, fold: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold).timestamp()


def _cron(expr: str, tz: str | None = None, **extra: object) -> ScheduleSpec:
    return ScheduleSpec.model_validate({"kind": "cron", "cron": expr, "tz": tz, **extra})


def _fires(spec: ScheduleSpec, start: float, count: int) -> list[float]:
    trigger = parse_trigger(spec, start)
    out, at = [], start
    for _ in range(count):
        nxt = next_fire(trigger, at)
        assert nxt is not None
        out.append(nxt)
        at = nxt
    return out


def test_every_seven_minutes_restarts_at_the_top_of_the_hour() -> None:
    fires = _fires(_cron("*/7 * * * *"), _utc(2026, 3, 2, 10, 50), 3)
    assert fires == [_utc(2026, 3, 2, 10, 56), _utc(2026, 3, 2, 11, 0), _utc(2026, 3, 2, 11, 7)]


def test_month_end_skips_months_without_a_31st() -> None:
    fires = _fires(_cron("0 12 31 * *"), _utc(2026, 1, 31, 13, 0), 2)
    assert fires == [_utc(2026, 3, 31, 12, 0), _utc(2026, 5, 31, 12, 0)]


def test_leap_day_fires_only_in_leap_years() -> None:
    assert _fires(_cron("0 0 29 2 *"), _utc(2025, 1, 1), 2) == [_utc(2028, 2, 29), _utc(2032, 2, 29)]


def test_a_local_time_that_does_not_exist_is_skipped_on_spring_forward() -> None:
    # 2026-03-29: Berlin clocks jump from 02:00 to 03:00; 02:30 does not exist that day.
    fires = _fires(_cron("30 2 * * *", "Europe/Berlin"), _utc(2026, 3, 27, 12, 0), 3)
    assert fires == [
        _local(BERLIN, 2026, 3, 28, 2, 30),
        _local(BERLIN, 2026, 3, 30, 2, 30),
        _local(BERLIN, 2026, 3, 31, 2, 30),
    ]


def test_an_ambiguous_local_time_fires_once_on_fall_back() -> None:
    # 2026-10-25: Berlin clocks go back from 03:00 to 02:00; 02:30 happens twice.
    fires = _fires(_cron("30 2 * * *", "Europe/Berlin"), _utc(2026, 10, 24, 12, 0), 2)
    assert fires == [_local(BERLIN, 2026, 10, 25, 2, 30, fold=0), _local(BERLIN, 2026, 10, 26, 2, 30)]


def test_a_frequent_schedule_fires_each_local_minute_once_through_the_repeated_hour() -> None:
    start = _local(BERLIN, 2026, 10, 25, 1, 50)
    fires = _fires(_cron("0,30 * * * *", "Europe/Berlin"), start, 4)
    assert fires == [
        _local(BERLIN, 2026, 10, 25, 2, 0),
        _local(BERLIN, 2026, 10, 25, 2, 30),
        _local(BERLIN, 2026, 10, 25, 3, 0),  # the second 02:00 and 02:30 do not fire again
        _local(BERLIN, 2026, 10, 25, 3, 30),
    ]
    assert fires[2] - fires[1] == 5400


def test_cron_without_a_zone_is_utc() -> None:
    assert _fires(_cron("0 7 * * 1-5"), _utc(2026, 3, 6, 8, 0), 1) == [_utc(2026, 3, 9, 7, 0)]


def test_an_interval_fires_one_period_after_creation_and_keeps_its_phase() -> None:
    trigger = parse_trigger(ScheduleSpec(kind="interval", every_s=10), 1000.0)
    assert first_fire(trigger) == 1010.0
    assert next_fire(trigger, 1034.5) == 1040.0


def test_a_loop_runs_at_once_and_has_no_clock_driven_fires() -> None:
    trigger = parse_trigger(ScheduleSpec(kind="loop", interval_s=30), 1000.0)
    assert first_fire(trigger) == 1000.0
    assert next_fire(trigger, 1000.0) is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(_cron("61 * * * *"), "cron", id="minute-out-of-range"),
        pytest.param(_cron("* * *"), "cron", id="three-fields"),
        pytest.param(_cron("0 0 30 2 *"), "cron", id="february-30th"),
        pytest.param(_cron("0 7 * * *", "Mars/Olympus"), "tz", id="unknown-zone"),
    ],
)
def test_an_unusable_trigger_names_its_field(spec: ScheduleSpec, field: str) -> None:
    with pytest.raises(TriggerError) as caught:
        parse_trigger(spec, 0.0)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("expr", "tz", "why"),
    [
        pytest.param(
            "30 2 * 3 SUN#5",
            "Europe/Berlin",
            "'30 2 * 3 SUN#5' never fires in the next 50 years: every occurrence falls in a "
            "daylight-saving gap of Europe/Berlin (clocks skip that local time)",
            id="fifth-march-sunday-in-the-berlin-gap",
        ),
        pytest.param(
            "* 2 * 3 7L",
            "Europe/Berlin",
            "'* 2 * 3 7L' has no fire among its next 1000 candidate times: each falls in a "
            "daylight-saving gap of Europe/Berlin (clocks skip that local time)",
            id="every-minute-of-the-berlin-gap",
        ),
    ],
)
def test_a_cron_with_no_fire_within_the_horizon_is_refused_saying_why(expr: str, tz: str, why: str) -> None:
    with pytest.raises(TriggerError) as caught:
        parse_trigger(_cron(expr, tz), _utc(2026, 12, 3))
    assert str(caught.value) == f"cron: {why}"


def test_a_rare_cron_within_the_horizon_is_accepted() -> None:
    # The fifth Sunday of February: 29 Feb 2032, then every 28 years.
    trigger = parse_trigger(_cron("0 0 * 2 SUN#5"), _utc(2026, 12, 3))
    assert first_fire(trigger) == _utc(2032, 2, 29)
    assert next_fire(trigger, _utc(2032, 2, 29)) == _utc(2060, 2, 29)


def test_the_wire_model_refuses_fields_of_another_kind() -> None:
    with pytest.raises(ValueError, match="every_s does not apply"):
        ScheduleSpec.model_validate({"kind": "cron", "cron": "* * * * *", "every_s": 5})
    with pytest.raises(ValueError, match="cron is required"):
        ScheduleSpec.model_validate({"kind": "cron"})


# ---- due fires --------------------------------------------------------------------------------

EVERY_10 = parse_trigger(ScheduleSpec(kind="interval", every_s=10), 0.0)
CATCH_UP = parse_trigger(ScheduleSpec(kind="interval", every_s=10, missed="catch_up_one"), 0.0)


def test_an_on_time_fire_fires_and_moves_to_the_next_occurrence() -> None:
    decision = on_due(EVERY_10, 10.0, 10.05, previous_running=False)
    assert (decision.fire, decision.reason, decision.skipped, decision.next_at) == (True, "on_time", 0, 20.0)


def test_missed_fires_are_skipped_by_default_never_burst() -> None:
    decision = on_due(EVERY_10, 10.0, 95.0, previous_running=False)
    assert (decision.fire, decision.reason, decision.skipped, decision.next_at) == (False, "missed", 9, 100.0)


def test_catch_up_one_fires_once_for_all_missed_occurrences() -> None:
    decision = on_due(CATCH_UP, 10.0, 95.0, previous_running=False)
    assert (decision.fire, decision.reason, decision.skipped, decision.next_at) == (
        True,
        "catch_up",
        8,
        100.0,
    )


def test_a_fire_within_the_grace_is_on_time_not_missed() -> None:
    assert on_due(EVERY_10, 10.0, 10.0 + MISFIRE_GRACE_S, previous_running=False).reason == "on_time"


def test_a_fire_due_while_the_previous_runs_is_skipped_unless_overlap_is_allowed() -> None:
    skipped = on_due(EVERY_10, 10.0, 10.01, previous_running=True)
    assert (skipped.fire, skipped.reason, skipped.skipped, skipped.next_at) == (False, "overlap", 1, 20.0)
    allow = parse_trigger(ScheduleSpec(kind="interval", every_s=10, overlap="allow"), 0.0)
    assert on_due(allow, 10.0, 10.01, previous_running=True).fire


def test_missed_cron_occurrences_are_counted_after_downtime() -> None:
    trigger = parse_trigger(_cron("*/7 * * * *"), 0.0)
    due = _utc(2026, 3, 2, 10, 0)
    decision = on_due(trigger, due, _utc(2026, 3, 2, 10, 30), previous_running=False)
    assert (decision.fire, decision.skipped, decision.next_at) == (False, 5, _utc(2026, 3, 2, 10, 35))


# ---- after a run -------------------------------------------------------------------------------

LOOP = parse_trigger(ScheduleSpec(kind="loop", interval_s=2, idle_backoff_max_s=10, max_failures=2), 0.0)


def _done(status: TerminalStatus = TerminalStatus.COMPLETED, **kw: object) -> RunOutcome:
    return RunOutcome(status=status, tokens=kw.pop("tokens", 5), **kw)  # type: ignore[arg-type]


def test_idle_runs_double_the_pause_up_to_the_cap_and_a_busy_run_resets_it() -> None:
    pauses = []
    progress = Progress(runs=1)
    for idle in (True, True, True, True, False):
        step = after_run(LOOP, progress, _done(idle=idle), 100.0)
        progress = step.progress
        pauses.append(step.next_at - 100.0 if step.next_at is not None else None)
    assert pauses == [2.0, 4.0, 8.0, 10.0, 2.0]


def test_an_idle_report_from_a_run_that_did_not_complete_is_not_idle() -> None:
    assert loop_pause(LOOP.spec, 4.0, idle=False) == 2.0
    step = after_run(LOOP, Progress(runs=1, pause_s=4.0), _done(TerminalStatus.STALLED, idle=True), 0.0)
    assert step.next_at == 2.0


def test_consecutive_crashes_end_the_schedule_with_the_last_error() -> None:
    first = after_run(LOOP, Progress(runs=1), _done(TerminalStatus.CRASHED, error="boom 1"), 0.0)
    assert first.end is None and first.progress.failures == 1
    second = after_run(LOOP, first.progress, _done(TerminalStatus.CRASHED, error="boom 2"), 0.0)
    assert second.end == "2 failed runs in a row: boom 2"


def test_a_success_resets_the_failure_streak() -> None:
    step = after_run(LOOP, Progress(runs=3, failures=1), _done(), 0.0)
    assert step.progress.failures == 0 and step.end is None


def test_max_runs_ends_the_schedule_after_its_last_run() -> None:
    trigger = parse_trigger(ScheduleSpec(kind="loop", max_runs=3), 0.0)
    assert after_run(trigger, Progress(runs=2), _done(), 0.0).end is None
    assert after_run(trigger, Progress(runs=3), _done(), 0.0).end == "max_runs reached (3)"


def test_a_user_cancel_stops_a_loop_but_a_drain_does_not() -> None:
    cancelled = _done(TerminalStatus.CANCELLED, cancelled_by_user=True)
    assert after_run(LOOP, Progress(runs=1), cancelled, 0.0).end == "a run was cancelled"
    drained = _done(TerminalStatus.CANCELLED)
    assert after_run(LOOP, Progress(runs=1), drained, 0.0).next_at == 2.0


def test_spending_the_total_token_budget_pauses_the_schedule() -> None:
    trigger = parse_trigger(ScheduleSpec(kind="interval", every_s=60, max_total_tokens=100), 0.0)
    step = after_run(trigger, Progress(runs=2, tokens_used=90), _done(tokens=15), 0.0)
    assert step.pause == "token budget spent (105 of max_total_tokens 100)"
    assert step.progress.tokens_used == 105


def test_a_crashed_loop_run_backs_off_before_the_next() -> None:
    trigger = parse_trigger(ScheduleSpec(kind="loop", interval_s=0, max_failures=10), 0.0)
    progress, waits = Progress(runs=1), []
    for _ in range(8):
        step = after_run(trigger, progress, _done(TerminalStatus.CRASHED), 100.0)
        progress = step.progress
        assert step.next_at is not None
        waits.append(step.next_at - 100.0)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert after_run(trigger, progress, _done(), 100.0).next_at == 100.0  # a success: no wait
