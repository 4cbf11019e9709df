"""Liveness detectors and exit classification (docs/design.md §6) as pure functions.

The supervisor samples an `Observation` of each child on its timer and asks `classify` for a
verdict; when a child's process is reaped, `classify_exit` decides its terminal status. No I/O
and no clock reads: `now` is an argument.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Literal

from agentd.supervision.starvation import Silence, StarvationPolicy
from protocol.result import RunError, RunResult, TerminalStatus, interrupted_status


@dataclass(frozen=True, slots=True)
class LivenessPolicy:
    ping_interval_s: float = 5.0
    missed_pongs: int = 3
    loop_stall_s: float = 30.0
    deadline_backstop_s: float = 5.0
    ready_timeout_s: float = 60.0
    eof_grace_s: float = 2.0
    max_faults: int = 3
    # How long past its missed pongs a child judged starved of CPU (not stuck) is given before it is
    # stopped all the same; 0: missed pongs alone decide, as without the starvation check.
    starved_grace_s: float = 60.0
    starvation: StarvationPolicy = field(default_factory=StarvationPolicy)


@dataclass(frozen=True, slots=True)
class Observation:
    """What the supervisor knows about one live child at `now` (monotonic seconds)."""

    spawned_at: float
    deadline: float
    ready: bool = False
    outstanding_pings: int = 0
    last_loop_age_ms: int | None = None
    eof_at: float | None = None
    faults: int = 0
    result_received: bool = False
    # What the scheduler showed of it since its pongs fell overdue (None while they are not).
    silence: Silence | None = None


Verdict = Literal["ok", "deadline", "unresponsive", "starved", "wedged", "not_ready", "eof", "faulty"]


def classify(obs: Observation, policy: LivenessPolicy, now: float) -> Verdict:
    """Detectors A (deadline backstop), B (wedged loop), C (missed pongs), plus boot/EOF/faults.

    A child whose pongs arrive with a fresh `loop_age_ms` is busy in a legitimate long call and
    is left alone however quiet it is otherwise; only its deadline bounds it. A child overdue —
    not ready in time, missing its pongs, or reporting a loop that stopped turning — is judged by
    `silent_verdict`: each of these is what a child kept off the CPU looks like too.
    """
    if obs.result_received:
        # It has reported; what is left is its exit, bounded by the caller's teardown timer.
        return "ok"
    if now >= obs.deadline + policy.deadline_backstop_s:
        return "deadline"
    if obs.faults >= policy.max_faults:
        return "faulty"
    if obs.ready and obs.eof_at is not None and now - obs.eof_at >= policy.eof_grace_s:
        return "eof"
    suspected = overdue(obs, policy, now)
    return "ok" if suspected is None else silent_verdict(obs.silence, policy, now, suspected)


SilentVerdict = Literal["not_ready", "unresponsive", "wedged"]


def overdue(obs: Observation, policy: LivenessPolicy, now: float) -> SilentVerdict | None:
    """What the child would be stopped as if it is not starved of CPU, or None while nothing is
    overdue (only then is it looked at by the scheduler)."""
    if not obs.ready:
        return "not_ready" if now - obs.spawned_at >= policy.ready_timeout_s else None
    if pongs_overdue(obs, policy):
        return "unresponsive"
    if obs.last_loop_age_ms is not None and obs.last_loop_age_ms > policy.loop_stall_s * 1000:
        return "wedged"
    return None


def pongs_overdue(obs: Observation, policy: LivenessPolicy) -> bool:
    """Whether it has missed enough pongs to be judged."""
    return obs.outstanding_pings >= policy.missed_pongs


def silent_verdict(
    silence: Silence | None, policy: LivenessPolicy, now: float, suspected: SilentVerdict = "unresponsive"
) -> Verdict:
    """An overdue child: `suspected`, unless the scheduler shows it starved of CPU.

    A starved child is left alone (`ok`) until `starved_grace_s` after it fell overdue, then
    stopped with the verdict `starved`, so a spinning child that only looks starved on a loaded
    machine is still bounded. The first look of a silence waits one check for a window to measure,
    unless that look already shows it stopped or gone.
    """
    if silence is None or policy.starved_grace_s <= 0:
        return suspected
    if silence.judgement == "first_look":
        return "ok"
    if silence.judgement != "starved":
        return suspected
    return "starved" if now - silence.since >= policy.starved_grace_s else "ok"


# A check this little before a child's ping is due sends it: the shared clock checks children due
# within a millisecond of each other in one wake-up, and one checked early would otherwise wait a
# whole tick for its ping.
PING_EARLY_S = 0.002


# A child's first ping comes up to this share of an interval later than one interval after its
# start, drawn per child: children started together (a batch of forks) would otherwise keep being
# pinged together, since each keeps its own phase (`next_ping_at`), and each such burst of pongs
# queues behind itself.
FIRST_PING_SPREAD = 0.25


def first_ping_at(start: float, interval: float, draw: float) -> float:
    """When the first ping of a child started at `start` is due; `draw` in [0, 1) is its place."""
    return start + interval * (1 + FIRST_PING_SPREAD * draw)


def ping_due(now: float, next_ping: float) -> bool:
    return now >= next_ping - PING_EARLY_S


def next_ping_at(due: float, sent: float, interval: float) -> float:
    """When the ping after the one due at `due` (and sent at `sent`) is due: in the child's own
    phase. Counted from the send instead, a child took the phase of the children checked in the
    same wake-up and stayed with them: over a run the pings bunched into bursts whose pongs queued
    behind each other. Checks a whole interval behind (a stalled loop) resume from the send."""
    following = due + interval
    return following if following > sent else sent + interval


def next_check_time(now: float, tick: float, next_ping: float) -> float:
    """One tick on, or the next ping's time if that comes sooner (the ticks after it then keep the
    ping's phase: as many checks an interval as before)."""
    at = now + tick
    return next_ping if now < next_ping < at else at


# `park`: stopped to resume later while a call waits for a person's approval (supervisor.py).
KillCause = Literal["cancel", "deadline", "stuck", "faulty", "drain", "park", "teardown"]


# What a stuck child's error message says of the detector that stopped it.
STUCK_REASONS: dict[str, str] = {
    "unresponsive": "unresponsive: missed its pongs",
    "starved": (
        "starved of CPU: runnable but not scheduled enough to get ready, answer its pings or turn "
        "its event loop, stopped when its grace (supervision.starved_grace_s) ran out"
    ),
    "wedged": "wedged: its pongs reported an event loop that stopped turning",
    "not_ready": "not ready: no ev/ready within supervision.ready_timeout_s",
    "eof": "its control channel closed while the process kept running",
}

# What the scheduler showed of an unresponsive child, as its crash message says it.
SEEN: dict[str, str] = {
    "halted": "stopped: every thread was stopped or exiting",
    "busy": "it had the CPU and did not answer",
    "blocked": "asleep without answering, not waiting for a CPU",
    "unseen": "its scheduling could not be read",
}


@dataclass(frozen=True, slots=True)
class ExitInfo:
    """How the process ended: exactly one of `exit_code` / `signal` is set."""

    exit_code: int | None = None
    signal: int | None = None

    @property
    def describe(self) -> str:
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        return f"exited with code {self.exit_code}"


def classify_exit(
    result: RunResult | None,
    exit_info: ExitInfo,
    *,
    kill_cause: KillCause | None,
    sigkilled_by_us: bool,
    oom_killed: bool = False,
    stderr_tail: str = "",
    verdict: Verdict | None = None,
    silence: Silence | None = None,
) -> RunResult:
    """The one terminal result for a reaped child (the EOF×exit half of docs/design.md §6).

    A child that reported `ev/result` keeps its own verdict, however it exited afterwards.
    Otherwise the supervisor attributes the status from the first cause it stopped the child for:
    a cancel or drain is `cancelled` and the deadline backstop is `deadline` (`interrupted_status`),
    everything else is `crashed` with the reason recorded: for a child stopped as stuck, the
    detector's `verdict` says which (a child starved of CPU past its grace is kind `starved`), and
    what the scheduler showed of a silent child (`silence`), when it was looked at.
    """
    interrupted = interrupted_status(
        cancelled=kill_cause in ("cancel", "drain", "park"), past_deadline=kill_cause == "deadline"
    )
    if result is not None:
        if result.status is TerminalStatus.CANCELLED and interrupted is TerminalStatus.DEADLINE:
            # It obeyed the cancel the deadline backstop sent: the reason it stopped is the deadline.
            return result.model_copy(update={"status": TerminalStatus.DEADLINE})
        return result
    if interrupted is TerminalStatus.CANCELLED:
        return RunResult(
            status=TerminalStatus.CANCELLED,
            error=RunError(kind="cancelled", message=f"cancelled; the child {exit_info.describe}"),
        )
    if interrupted is TerminalStatus.DEADLINE:
        return RunResult(
            status=TerminalStatus.DEADLINE,
            error=RunError(kind="deadline", message=f"deadline backstop; the child {exit_info.describe}"),
        )
    if oom_killed:
        kind, message = "oom", "killed by the out-of-memory killer (memory limit)"
    elif kill_cause == "stuck" and verdict == "starved":
        kind, message = "starved", f"{STUCK_REASONS['starved']}; the child {exit_info.describe}"
    elif kill_cause == "stuck":
        reason = STUCK_REASONS.get(verdict or "", "unresponsive child killed by the supervisor")
        if verdict in ("unresponsive", "not_ready") and silence is not None and silence.judgement in SEEN:
            reason = f"{reason} ({SEEN[silence.judgement]})"
        kind, message = "stuck", f"{reason}; the child {exit_info.describe}"
    elif kill_cause == "faulty":
        kind, message = "protocol", f"control-channel protocol faults; the child {exit_info.describe}"
    elif exit_info.signal == signal.SIGKILL and not sigkilled_by_us:
        kind, message = "killed", "killed by SIGKILL from outside agentd (or the OOM killer)"
    elif exit_info.signal == signal.SIGSEGV:
        kind, message = "segfault", "segmentation fault"
    elif exit_info.signal == signal.SIGXCPU:
        kind, message = "cpu_limit", "CPU time limit exceeded"
    elif exit_info.signal is not None:
        kind, message = "signal", exit_info.describe
    else:
        kind, message = "exit", f"{exit_info.describe} without reporting a result"
    if stderr_tail:
        message = f"{message}\n--- last stderr ---\n{stderr_tail}"
    return RunResult(status=TerminalStatus.CRASHED, error=RunError(kind=kind, message=message[-4000:]))
