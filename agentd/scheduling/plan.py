"""Recurring work's decisions (docs/design.md §11), pure: when a schedule fires next, what a due fire does,
and what a finished run means for the schedule.

Times are wall-clock UTC instants (seconds since the epoch) passed in as arguments; nothing here
reads a clock. Cron expressions are evaluated by `cronsim` on the local wall clock of the
schedule's zone: each matching local time fires at most once (an ambiguous time at its first
instant), and a local time that does not exist (the spring-forward gap) is skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim

from agentd.config.cron import cron_problem, load_zone, zone_problem
from agentd.errors import AgentdError
from protocol.api import ScheduleSpec
from protocol.result import TerminalStatus

# A fire this late (the daemon was down, or busy) counts as missed and follows the `missed`
# policy; within it, it is simply on time.
MISFIRE_GRACE_S = 1.0
# Bounds the search for a cron expression's next fire, so no expression a client sends costs the
# daemon more than a few milliseconds: a fire further out than the horizon counts as none (the
# schedule is refused at creation, or ends), and so does one behind more skipped candidates (local
# times in a daylight-saving gap or a repeated hour) than any real expression has: a gap or a
# repeated hour skips at most a few dozen.
HORIZON_YEARS = 50
HORIZON_S = HORIZON_YEARS * 365.25 * 86400
MAX_CANDIDATES = 1000
# Missed occurrences are counted up to this many (the count is reported, never fired).
MAX_COUNTED_MISSES = 1000
# The first pause of an idle backoff when a loop has no interval of its own.
MIN_IDLE_PAUSE_S = 1.0
# After a crashed loop run the next waits at least this, doubling per crash in a row up to the cap
# (docs/design.md §6's restart governor), so a loop that crashes at once does not spin.
CRASH_BACKOFF_S = 0.5
CRASH_BACKOFF_MAX_S = 30.0

# `quota` is the driver's: the owner's per-uid cap refused the fire's task.
DueReason = Literal["on_time", "catch_up", "missed", "overlap", "quota"]


class TriggerError(AgentdError, ValueError):
    """A schedule's `field` has a value that cannot be evaluated; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Trigger:
    """A validated `ScheduleSpec` ready to evaluate. `anchor` is when the schedule was created."""

    spec: ScheduleSpec
    anchor: float
    zone: ZoneInfo | None = None


def trigger_of(spec: ScheduleSpec, anchor: float) -> Trigger:
    """A journaled schedule's trigger: `parse_trigger` accepted it when it was created."""
    return Trigger(spec, anchor, load_zone(spec.tz) if spec.tz is not None else None)


def parse_trigger(spec: ScheduleSpec, anchor: float) -> Trigger:
    """Check a client's trigger for what the wire model cannot (cron syntax, the zone's name, a
    cron expression that fires within the horizon after `anchor`). Raises `TriggerError`.

    Bounded: a cron expression costs at most `MAX_CANDIDATES` steps of its search."""
    zone = None
    if spec.tz is not None:
        if problem := zone_problem(spec.tz):
            raise TriggerError("tz", problem)
        zone = load_zone(spec.tz)
    if spec.kind == "cron":
        assert spec.cron is not None  # the wire model requires it for this kind
        if problem := cron_problem(spec.cron):
            raise TriggerError("cron", problem)
        search = search_cron(spec.cron, zone, anchor)
        if search.at is None:
            raise TriggerError("cron", search.why_none(spec.cron, spec.tz))
    return Trigger(spec, anchor, zone)


def first_fire(trigger: Trigger) -> float | None:
    """When a new schedule fires first: a loop at once, an interval one period after creation,
    a cron schedule at its next matching time."""
    if trigger.spec.kind == "loop":
        return trigger.anchor
    return next_fire(trigger, trigger.anchor)


def next_fire(trigger: Trigger, after: float) -> float | None:
    """The first occurrence strictly after `after`, or None (a loop has no clock-driven fires;
    a cron expression with no match within the horizon has none either)."""
    spec = trigger.spec
    if spec.kind == "loop":
        return None
    if spec.kind == "interval":
        assert spec.every_s is not None
        periods = math.floor((after - trigger.anchor) / spec.every_s) + 1
        return trigger.anchor + max(periods, 1) * spec.every_s
    assert spec.cron is not None
    return search_cron(spec.cron, trigger.zone, after).at


@dataclass(frozen=True, slots=True)
class CronSearch:
    """The bounded search's answer: the next fire (None: none within the bounds), how many local
    times it skipped because clocks jumped over them, and whether it ran out of candidates."""

    at: float | None
    in_gaps: int = 0
    out_of_candidates: bool = False

    def why_none(self, expr: str, tz: str | None) -> str:
        if self.out_of_candidates:
            if self.in_gaps == MAX_CANDIDATES:
                return (
                    f"{expr!r} has no fire among its next {MAX_CANDIDATES} candidate times: each falls "
                    f"in a daylight-saving gap of {tz} (clocks skip that local time)"
                )
            return f"{expr!r} has no fire among its next {MAX_CANDIDATES} candidate times"
        if self.in_gaps:
            return (
                f"{expr!r} never fires in the next {HORIZON_YEARS} years: every occurrence falls in a "
                f"daylight-saving gap of {tz} (clocks skip that local time)"
            )
        return f"{expr!r} never fires in the next {HORIZON_YEARS} years"


def search_cron(expr: str, zone: ZoneInfo | None, after: float) -> CronSearch:
    """The first fire of a valid cron expression strictly after `after`, within `HORIZON_YEARS`
    and `MAX_CANDIDATES`: each matching local wall time fires once, at its first instant."""
    instant = datetime.fromtimestamp(after, UTC)
    horizon = after + HORIZON_S
    if zone is None:
        # UTC has no gaps or repeats: cronsim walks it directly.
        try:
            at = next(iter(CronSim(expr, instant))).timestamp()
        except (StopIteration, OverflowError):
            return CronSearch(None)
        return CronSearch(at if at <= horizon else None)
    # Walk naive local wall times; cronsim yields each once, strictly after its start.
    local = instant.astimezone(zone).replace(tzinfo=None)
    candidates = CronSim(expr, local)
    in_gaps = 0
    for _ in range(MAX_CANDIDATES):
        try:
            wall = next(candidates)
        except (StopIteration, OverflowError):
            return CronSearch(None, in_gaps)
        utc = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        if utc.timestamp() > horizon:
            return CronSearch(None, in_gaps)
        if utc.astimezone(zone).replace(tzinfo=None) != wall:
            in_gaps += 1
            continue  # this local time does not exist (clocks jumped over it): skipped
        if utc.timestamp() <= after:
            continue  # an ambiguous time whose first instant has passed: it fired once already
        return CronSearch(utc.timestamp(), in_gaps)
    return CronSearch(None, in_gaps, out_of_candidates=True)


@dataclass(frozen=True, slots=True)
class DueDecision:
    """What a due occurrence does: fire a task now or not, how many occurrences were passed over,
    and the next occurrence (always after `now`, so missed time never becomes a burst)."""

    fire: bool
    reason: DueReason
    skipped: int
    next_at: float | None


def on_due(trigger: Trigger, due_at: float, now: float, *, previous_running: bool) -> DueDecision:
    """Decide a due fire of a clock-driven schedule.

    Args:
        due_at: the occurrence that came due (the schedule's stored next fire).
        now: the current instant (>= due_at).
        previous_running: the schedule's previous fire has not ended yet.
    """
    spec = trigger.spec
    nxt = next_fire(trigger, max(due_at, now))
    late = now - due_at > MISFIRE_GRACE_S
    passed = _count_between(trigger, due_at, now) if late else 1
    if previous_running and spec.overlap == "skip":
        return DueDecision(fire=False, reason="overlap", skipped=passed, next_at=nxt)
    if not late:
        return DueDecision(fire=True, reason="on_time", skipped=0, next_at=nxt)
    if spec.missed == "catch_up_one":
        return DueDecision(fire=True, reason="catch_up", skipped=passed - 1, next_at=nxt)
    return DueDecision(fire=False, reason="missed", skipped=passed, next_at=nxt)


def _count_between(trigger: Trigger, due_at: float, now: float) -> int:
    """Occurrences in [due_at, now] (at least the one at due_at), counted up to a cap."""
    spec = trigger.spec
    if spec.kind == "interval":
        assert spec.every_s is not None
        return min(int((now - due_at) // spec.every_s) + 1, MAX_COUNTED_MISSES)
    count, at = 1, due_at
    while count < MAX_COUNTED_MISSES:
        later = next_fire(trigger, at)
        if later is None or later > now:
            break
        count, at = count + 1, later
    return count


# ---- after a run -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Progress:
    """The counters a schedule keeps across runs (journaled with it)."""

    runs: int = 0
    failures: int = 0  # consecutive failed runs
    tokens_used: int = 0
    pause_s: float | None = None  # a loop's current pause (grows while runs are idle)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What the schedule needs of a finished fire."""

    status: TerminalStatus
    tokens: int
    idle: bool = False
    error: str | None = None
    # The run was cancelled by a client (not by a daemon drain).
    cancelled_by_user: bool = False


@dataclass(frozen=True, slots=True)
class AfterRun:
    """The schedule after one of its runs ended: new counters, and at most one of `end` / `pause`
    (the schedule stops for good, or waits for a resume); `next_at` is a loop's next run."""

    progress: Progress
    next_at: float | None = None
    end: str | None = None
    pause: str | None = None


def after_run(trigger: Trigger, progress: Progress, outcome: RunOutcome, now: float) -> AfterRun:
    """Account one finished run: failures in a row, the token budget, `max_runs`, and a loop's
    next run (its interval, doubled up to `idle_backoff_max_s` while runs report nothing done)."""
    spec = trigger.spec
    failed = outcome.status == TerminalStatus.CRASHED
    progress = replace(
        progress,
        failures=progress.failures + 1 if failed else 0,
        tokens_used=progress.tokens_used + outcome.tokens,
    )
    if spec.kind == "loop" and outcome.cancelled_by_user:
        return AfterRun(progress, end="a run was cancelled")
    if progress.failures >= spec.max_failures:
        detail = f": {outcome.error}" if outcome.error else ""
        return AfterRun(progress, end=f"{progress.failures} failed runs in a row{detail}")
    if spec.max_runs is not None and progress.runs >= spec.max_runs:
        return AfterRun(progress, end=f"max_runs reached ({spec.max_runs})")
    if spec.max_total_tokens is not None and progress.tokens_used >= spec.max_total_tokens:
        return AfterRun(
            progress,
            pause=f"token budget spent ({progress.tokens_used} of max_total_tokens {spec.max_total_tokens})",
        )
    if spec.kind != "loop":
        return AfterRun(progress)
    pause_s = loop_pause(
        spec, progress.pause_s, idle=outcome.idle and outcome.status == TerminalStatus.COMPLETED
    )
    wait_s = pause_s
    if failed:
        wait_s = max(pause_s, min(CRASH_BACKOFF_S * 2 ** (progress.failures - 1), CRASH_BACKOFF_MAX_S))
    return AfterRun(replace(progress, pause_s=pause_s), next_at=now + wait_s)


def loop_pause(spec: ScheduleSpec, previous_s: float | None, *, idle: bool) -> float:
    """The pause before a loop's next run: its interval, or after an idle run double the last
    pause (starting from the interval, at least `MIN_IDLE_PAUSE_S`), capped."""
    if not idle:
        return spec.interval_s
    base = max(spec.interval_s, MIN_IDLE_PAUSE_S)
    doubled = base if previous_s is None or previous_s < base else previous_s * 2
    return min(doubled, max(spec.idle_backoff_max_s, base))


def remaining_tokens(spec: ScheduleSpec, progress: Progress) -> int | None:
    """What the schedule's total token budget still allows one fire, or None (no total budget)."""
    if spec.max_total_tokens is None:
        return None
    return max(spec.max_total_tokens - progress.tokens_used, 1)


def local_time(at: float, zone: ZoneInfo | None) -> datetime:
    """`at` on the schedule's wall clock (UTC without a zone), for display."""
    instant = datetime.fromtimestamp(at, UTC)
    return instant.astimezone(zone) if zone is not None else instant


__all__ = [
    "MISFIRE_GRACE_S",
    "AfterRun",
    "DueDecision",
    "Progress",
    "RunOutcome",
    "Trigger",
    "TriggerError",
    "after_run",
    "first_fire",
    "local_time",
    "loop_pause",
    "next_fire",
    "on_due",
    "parse_trigger",
    "remaining_tokens",
]
