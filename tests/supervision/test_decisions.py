"""The supervisor's pure decisions: liveness verdicts and exit classification."""

from __future__ import annotations

import signal

import pytest

from agentd.supervision.liveness import (
    ExitInfo,
    KillCause,
    LivenessPolicy,
    Observation,
    Verdict,
    classify,
    classify_exit,
    first_ping_at,
    next_check_time,
    next_ping_at,
    ping_due,
)
from protocol.result import RunError, RunResult, TerminalStatus

POLICY = LivenessPolicy(
    ping_interval_s=5,
    missed_pongs=3,
    loop_stall_s=30,
    deadline_backstop_s=5,
    ready_timeout_s=60,
    eof_grace_s=2,
    max_faults=3,
)
BASE = Observation(spawned_at=0.0, deadline=100.0, ready=True)


@pytest.mark.parametrize(
    ("changes", "now", "verdict"),
    [
        pytest.param({}, 10.0, "ok", id="healthy"),
        pytest.param({}, 105.0, "deadline", id="deadline-plus-backstop"),
        pytest.param({}, 104.9, "ok", id="within-backstop"),
        pytest.param({"outstanding_pings": 3}, 10.0, "unresponsive", id="three-missed-pongs"),
        pytest.param({"outstanding_pings": 2}, 10.0, "ok", id="two-missed-pongs"),
        pytest.param({"last_loop_age_ms": 30_001}, 10.0, "wedged", id="wedged-loop"),
        pytest.param({"last_loop_age_ms": 29_000}, 10.0, "ok", id="busy-but-ticking"),
        pytest.param({"ready": False}, 60.0, "not_ready", id="never-ready"),
        pytest.param({"ready": False}, 59.0, "ok", id="still-booting"),
        pytest.param({"eof_at": 8.0}, 10.0, "eof", id="eof-then-alive"),
        pytest.param({"eof_at": 9.0}, 10.0, "ok", id="eof-grace"),
        pytest.param({"faults": 3}, 10.0, "faulty", id="protocol-faults"),
        pytest.param(
            {"result_received": True, "outstanding_pings": 9}, 200.0, "ok", id="reported-is-left-to-exit"
        ),
    ],
)
def test_classify(changes: dict[str, object], now: float, verdict: Verdict) -> None:
    from dataclasses import replace

    assert classify(replace(BASE, **changes), POLICY, now) == verdict  # type: ignore[arg-type]


REPORTED = RunResult(status=TerminalStatus.COMPLETED, result="ok")
CANCELLED = RunResult(status=TerminalStatus.CANCELLED)


@pytest.mark.parametrize(
    ("result", "info", "cause", "by_us", "status", "kind"),
    [
        pytest.param(
            REPORTED,
            ExitInfo(signal=signal.SIGKILL),
            "teardown",
            True,
            TerminalStatus.COMPLETED,
            None,
            id="its-own-result-stands",
        ),
        pytest.param(
            CANCELLED,
            ExitInfo(exit_code=0),
            "deadline",
            False,
            TerminalStatus.DEADLINE,
            None,
            id="cancelled-by-the-deadline-backstop-is-deadline",
        ),
        pytest.param(
            None,
            ExitInfo(signal=signal.SIGKILL),
            "cancel",
            True,
            TerminalStatus.CANCELLED,
            "cancelled",
            id="killed-after-our-cancel",
        ),
        pytest.param(
            None,
            ExitInfo(signal=signal.SIGKILL),
            "deadline",
            True,
            TerminalStatus.DEADLINE,
            "deadline",
            id="killed-at-the-deadline",
        ),
        pytest.param(
            None, ExitInfo(signal=signal.SIGKILL), "stuck", True, TerminalStatus.CRASHED, "stuck", id="stuck"
        ),
        pytest.param(
            None,
            ExitInfo(signal=signal.SIGKILL),
            None,
            False,
            TerminalStatus.CRASHED,
            "killed",
            id="sigkill-from-outside",
        ),
        pytest.param(
            None,
            ExitInfo(signal=signal.SIGSEGV),
            None,
            False,
            TerminalStatus.CRASHED,
            "segfault",
            id="segfault",
        ),
        pytest.param(
            None,
            ExitInfo(signal=signal.SIGXCPU),
            None,
            False,
            TerminalStatus.CRASHED,
            "cpu_limit",
            id="cpu-limit",
        ),
        pytest.param(
            None, ExitInfo(exit_code=1), None, False, TerminalStatus.CRASHED, "exit", id="exit-without-result"
        ),
        pytest.param(
            None,
            ExitInfo(exit_code=0),
            "faulty",
            True,
            TerminalStatus.CRASHED,
            "protocol",
            id="protocol-faults",
        ),
    ],
)
def test_classify_exit(
    result: RunResult | None,
    info: ExitInfo,
    cause: KillCause | None,
    by_us: bool,
    status: TerminalStatus,
    kind: str | None,
) -> None:
    outcome = classify_exit(result, info, kill_cause=cause, sigkilled_by_us=by_us)
    assert outcome.status is status
    assert (outcome.error.kind if outcome.error else None) == kind


def test_an_oom_kill_is_named_and_stderr_is_attached() -> None:
    outcome = classify_exit(
        None,
        ExitInfo(signal=signal.SIGKILL),
        kill_cause=None,
        sigkilled_by_us=False,
        oom_killed=True,
        stderr_tail="Traceback ...",
    )
    assert outcome.error == RunError(kind="oom", message=outcome.error.message if outcome.error else "")
    assert outcome.error is not None
    assert "--- last stderr ---\nTraceback ..." in outcome.error.message


def test_a_ping_is_due_from_just_before_its_time() -> None:
    assert ping_due(now=9.999, next_ping=10.0)  # checked early by the shared clock's coalescing
    assert not ping_due(now=9.99, next_ping=10.0)


@pytest.mark.parametrize(
    ("due", "sent", "expected"),
    [
        pytest.param(10.0, 10.0, 15.0, id="on-time"),
        pytest.param(10.0, 10.4, 15.0, id="late-keeps-its-phase"),
        pytest.param(10.0, 9.999, 15.0, id="early-keeps-its-phase"),
        pytest.param(10.0, 16.0, 21.0, id="a-whole-interval-behind-resumes-from-the-send"),
    ],
)
def test_the_next_ping_keeps_the_child_s_own_phase(due: float, sent: float, expected: float) -> None:
    assert next_ping_at(due, sent, interval=5.0) == expected


def test_the_next_check_is_a_tick_on_or_the_next_ping_if_sooner() -> None:
    assert next_check_time(now=10.0, tick=1.0, next_ping=15.0) == 11.0
    assert next_check_time(now=10.0, tick=1.0, next_ping=10.5) == 10.5
    assert next_check_time(now=10.0, tick=1.0, next_ping=9.0) == 11.0  # not ready yet: no ping ahead


def test_a_child_s_first_ping_is_drawn_within_a_quarter_interval_after_one_interval() -> None:
    assert first_ping_at(start=100.0, interval=4.0, draw=0.0) == 104.0
    assert first_ping_at(start=100.0, interval=4.0, draw=0.5) == 104.5
    assert 104.0 < first_ping_at(start=100.0, interval=4.0, draw=0.999) < 105.0
