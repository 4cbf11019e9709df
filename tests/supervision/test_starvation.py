"""Starved or stuck: the pure judgement of an overdue child — not ready in time, its pongs missed, its
loop reported stopped — (agentd/supervision/starvation.py) and the verdicts and exit reasons it leads
to (agentd/supervision/liveness.py)."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.supervision.liveness import (
    ExitInfo,
    LivenessPolicy,
    Observation,
    SilentVerdict,
    classify,
    classify_exit,
    overdue,
    silent_verdict,
)
from agentd.supervision.starvation import (
    Judgement,
    Silence,
    StarvationPolicy,
    judge,
    observe_silence,
    silence_fields,
)
from processes.sched_facts import SchedFacts

MS = 1_000_000
RULES = StarvationPolicy(busy_share=0.5, busy_cpu_s=1.0, wait_share=0.25)


def facts(run_ms: int = 0, wait_ms: int = 0, *, runnable: bool = False, halted: bool = False) -> SchedFacts:
    return SchedFacts(threads=3, runnable=runnable, halted=halted, run_ns=run_ms * MS, wait_ns=wait_ms * MS)


START = facts(100, 50)


@pytest.mark.parametrize(
    ("last", "now", "wall_s", "expected"),
    [
        pytest.param(START, None, 1.0, "unseen", id="gone-or-unreadable"),
        pytest.param(START, facts(100, 50, halted=True), 1.0, "halted", id="sigstopped"),
        pytest.param(START, facts(1100, 60, runnable=True), 1.0, "busy", id="spinning-on-an-idle-core"),
        pytest.param(START, facts(650, 500, runnable=True), 1.0, "busy", id="half-a-core-is-busy"),
        pytest.param(START, facts(101, 900, runnable=True), 1.0, "starved", id="waited-most-of-the-window"),
        pytest.param(START, facts(101, 300), 1.0, "starved", id="waited-a-quarter-then-ran-and-slept"),
        pytest.param(
            replace(START, runnable=True),
            facts(101, 50, runnable=True),
            1.0,
            "starved",
            id="queued-throughout",
        ),
        pytest.param(START, facts(101, 50, runnable=True), 1.0, "blocked", id="runnable-only-now"),
        pytest.param(START, facts(100, 50), 1.0, "blocked", id="asleep-without-answering"),
        pytest.param(START, facts(101, 60), 1.0, "blocked", id="a-little-wait-is-not-starvation"),
        pytest.param(START, facts(200, 900, runnable=True), 0.0, "first_look", id="no-window"),
    ],
)
def test_judge(last: SchedFacts, now: SchedFacts | None, wall_s: float, expected: Judgement) -> None:
    assert judge(START, last, now, wall_s, RULES) == expected


def test_a_child_that_ran_a_second_of_cpu_since_its_silence_began_is_busy_however_starved_now() -> None:
    first = facts(0, 0)
    last = facts(990, 50_000, runnable=True)
    now = facts(1_001, 51_000, runnable=True)  # 11 ms in this window, waited all of it
    assert judge(first, last, now, 1.0, RULES) == "busy"


@given(
    run_ms=st.integers(0, 5_000),
    wait_ms=st.integers(0, 5_000),
    wall_s=st.floats(0.01, 10.0),
    runnable=st.booleans(),
)
def test_a_halted_child_is_never_starved(run_ms: int, wait_ms: int, wall_s: float, runnable: bool) -> None:
    now = facts(100 + run_ms, 50 + wait_ms, runnable=runnable, halted=True)
    assert judge(START, START, now, wall_s, RULES) == "halted"


@given(extra_ms=st.integers(0, 10_000), wait_ms=st.integers(0, 100_000), runnable=st.booleans())
def test_a_child_that_had_half_the_window_on_a_cpu_is_never_starved(
    extra_ms: int, wait_ms: int, runnable: bool
) -> None:
    wall_s = 2.0
    now = facts(100 + 1_000 + extra_ms, 50 + wait_ms, runnable=runnable)
    assert judge(START, START, now, wall_s, RULES) == "busy"


@given(run_ms=st.integers(0, 499), wait_ms=st.integers(250, 100_000))
def test_a_child_that_waited_a_quarter_of_the_window_and_ran_little_is_starved(
    run_ms: int, wait_ms: int
) -> None:
    now = facts(100 + run_ms, 50 + wait_ms)
    assert judge(START, START, now, 1.0, RULES) == "starved"


def test_a_silence_starts_with_a_first_look_and_is_judged_over_the_window_since_the_last() -> None:
    silence = observe_silence(None, facts(100, 50, runnable=True), 10.0, RULES)
    assert (silence.since, silence.judgement) == (10.0, "first_look")
    silence = observe_silence(silence, facts(110, 850, runnable=True), 11.0, RULES)
    assert silence.judgement == "starved"
    silence = observe_silence(silence, facts(900, 860, runnable=True), 12.0, RULES)
    assert silence.judgement == "busy"
    assert (silence.since, silence.last_at, silence.ran_ms, silence.waited_ms) == (10.0, 12.0, 800, 810)


def test_a_first_look_at_a_stopped_or_vanished_child_judges_it_at_once() -> None:
    assert observe_silence(None, facts(halted=True), 10.0, RULES).judgement == "halted"
    assert observe_silence(None, None, 10.0, RULES).judgement == "unseen"


def test_a_second_look_at_the_same_instant_changes_nothing() -> None:
    silence = observe_silence(None, facts(100, 50), 10.0, RULES)
    assert observe_silence(silence, facts(500, 50), 10.0, RULES) is silence


def test_a_child_that_vanishes_mid_silence_keeps_its_last_facts_and_is_unseen() -> None:
    silence = observe_silence(None, facts(100, 50), 10.0, RULES)
    gone = observe_silence(silence, None, 11.0, RULES)
    assert (gone.judgement, gone.last, gone.last_at) == ("unseen", silence.last, 10.0)


POLICY = LivenessPolicy(ping_interval_s=5, missed_pongs=3, starved_grace_s=60)


def silence(judgement: Judgement, since: float = 100.0) -> Silence:
    return Silence(since=since, first=START, last=START, last_at=since, judgement=judgement)


@pytest.mark.parametrize(
    ("seen", "now", "verdict"),
    [
        pytest.param(None, 100.0, "unresponsive", id="not-looked-at"),
        pytest.param(silence("first_look"), 100.0, "ok", id="first-look-waits-one-check"),
        pytest.param(silence("halted"), 100.0, "unresponsive", id="stopped-is-stuck"),
        pytest.param(silence("unseen"), 100.0, "unresponsive", id="unreadable-is-stuck"),
        pytest.param(silence("busy"), 100.0, "unresponsive", id="had-the-cpu-is-stuck"),
        pytest.param(silence("blocked"), 100.0, "unresponsive", id="asleep-is-stuck"),
        pytest.param(silence("starved"), 159.9, "ok", id="starved-within-its-grace"),
        pytest.param(silence("starved"), 160.0, "starved", id="starved-past-its-grace"),
    ],
)
def test_silent_verdict(seen: Silence | None, now: float, verdict: str) -> None:
    assert silent_verdict(seen, POLICY, now) == verdict


def test_with_no_grace_missed_pongs_alone_decide() -> None:
    no_grace = replace(POLICY, starved_grace_s=0)
    assert silent_verdict(silence("starved"), no_grace, 100.0) == "unresponsive"
    assert silent_verdict(silence("first_look"), no_grace, 100.0) == "unresponsive"


@given(since=st.floats(0, 1e6), waited=st.floats(0, 1e4), judgement=st.sampled_from(get_args(Judgement)))
def test_every_silence_ends_within_the_grace(since: float, waited: float, judgement: Judgement) -> None:
    """The outer bound: past `starved_grace_s` no judgement leaves a silent child alone, except
    the one check a first look waits for its window."""
    verdict = silent_verdict(silence(judgement, since), POLICY, since + POLICY.starved_grace_s + waited)
    assert verdict != "ok" or judgement == "first_look"


def test_classify_gives_a_starved_child_its_grace_and_only_missed_pongs_are_judged_so() -> None:
    base = Observation(spawned_at=0.0, deadline=1000.0, ready=True, outstanding_pings=3)
    assert classify(replace(base, silence=silence("starved")), POLICY, 120.0) == "ok"
    assert classify(replace(base, silence=silence("starved")), POLICY, 161.0) == "starved"
    assert classify(replace(base, silence=silence("starved")), POLICY, 1006.0) == "deadline"
    assert classify(replace(base, outstanding_pings=2, silence=silence("busy")), POLICY, 120.0) == "ok"


READY = Observation(spawned_at=0.0, deadline=1000.0, ready=True)


@pytest.mark.parametrize(
    ("obs", "now", "late"),
    [
        pytest.param(replace(READY, ready=False), 59.9, None, id="booting-within-its-timeout"),
        pytest.param(replace(READY, ready=False), 60.0, "not_ready", id="not-ready-in-time"),
        pytest.param(replace(READY, outstanding_pings=3), 10.0, "unresponsive", id="pongs-missed"),
        pytest.param(replace(READY, last_loop_age_ms=30_001), 10.0, "wedged", id="loop-stopped"),
        pytest.param(replace(READY, outstanding_pings=2, last_loop_age_ms=29_000), 10.0, None, id="on-time"),
    ],
)
def test_overdue_names_what_a_child_is_late_with(obs: Observation, now: float, late: str | None) -> None:
    assert overdue(obs, LivenessPolicy(), now) == late


@pytest.mark.parametrize(
    ("obs", "late"),
    [
        pytest.param(replace(READY, ready=False), "not_ready", id="booting"),
        pytest.param(replace(READY, outstanding_pings=3), "unresponsive", id="silent"),
        pytest.param(replace(READY, last_loop_age_ms=60_000), "wedged", id="loop-stopped"),
    ],
)
def test_whatever_it_is_late_with_a_starved_child_gets_its_grace_and_no_more(
    obs: Observation, late: SilentVerdict
) -> None:
    # Overdue from 100 s on (a ready timeout of 60 s is past by then too).
    assert classify(replace(obs, silence=silence("first_look")), POLICY, 100.0) == "ok"
    assert classify(replace(obs, silence=silence("starved")), POLICY, 159.9) == "ok"
    assert classify(replace(obs, silence=silence("starved")), POLICY, 160.0) == "starved"
    for judgement in ("busy", "blocked", "halted", "unseen"):
        assert classify(replace(obs, silence=silence(judgement)), POLICY, 100.0) == late
    assert classify(obs, POLICY, 100.0) == late  # not looked at: as without the starvation check


@pytest.mark.parametrize(
    ("verdict", "kind", "says"),
    [
        pytest.param("starved", "starved", "starved of CPU", id="starved"),
        pytest.param("unresponsive", "stuck", "unresponsive: missed its pongs", id="unresponsive"),
        pytest.param("wedged", "stuck", "wedged", id="wedged"),
        pytest.param(None, "stuck", "unresponsive child killed by the supervisor", id="no-verdict"),
    ],
)
def test_a_stuck_child_s_crash_names_its_detector(verdict: str | None, kind: str, says: str) -> None:
    result = classify_exit(
        None,
        ExitInfo(signal=signal.SIGTERM),
        kill_cause="stuck",
        sigkilled_by_us=False,
        verdict=verdict,  # type: ignore[arg-type]
    )
    assert result.error is not None
    assert result.error.kind == kind
    assert says in result.error.message
    assert "killed by SIGTERM" in result.error.message


def test_an_event_says_what_the_scheduler_showed() -> None:
    seen = observe_silence(observe_silence(None, facts(100, 50), 10.0, RULES), facts(105, 950), 11.0, RULES)
    assert silence_fields(seen) == {"cpu": "starved", "overdue_s": 1.0, "ran_ms": 5, "waited_ms": 900}
    assert silence_fields(None) == {}


@pytest.mark.parametrize(
    ("judgement", "says"),
    [
        pytest.param("halted", "(stopped: every thread was stopped or exiting)", id="halted"),
        pytest.param("busy", "(it had the CPU and did not answer)", id="busy"),
        pytest.param("blocked", "(asleep without answering, not waiting for a CPU)", id="blocked"),
    ],
)
def test_an_unresponsive_child_s_crash_says_what_the_scheduler_showed(
    judgement: Judgement, says: str
) -> None:
    result = classify_exit(
        None,
        ExitInfo(signal=signal.SIGKILL),
        kill_cause="stuck",
        sigkilled_by_us=True,
        verdict="unresponsive",
        silence=silence(judgement),
    )
    assert result.error is not None
    assert result.error.message.startswith(
        f"unresponsive: missed its pongs {says}; the child killed by SIGKILL"
    )
