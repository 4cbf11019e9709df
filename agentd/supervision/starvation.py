"""Starved or stuck: what a child whose pongs are overdue is doing, judged from what the kernel's
scheduler says of it (docs/design.md §6), as pure functions.

A child that misses pongs because it was not given the CPU (a loaded machine, its nice level) is
not stuck: it is given more time, up to `LivenessPolicy.starved_grace_s`. A child that had the CPU
and did not answer, is stopped, or sleeps without answering is unresponsive as before. No I/O:
the supervisor reads the facts (`processes/sched_facts.py`) and passes `now`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from processes.sched_facts import SchedFacts

# What one look at an overdue child found:
#   first_look  the first look of this silence: there is no window to measure yet
#   unseen      the process could not be read (gone, or no /proc)
#   halted      every thread is stopped (SIGSTOP, a tracer) or exiting
#   busy        it ran on a CPU and still did not answer: wedged
#   blocked     it neither ran nor waited for a CPU: asleep without answering (a deadlock, `D`)
#   starved     it was runnable and waited for a CPU it was not given
Judgement = Literal["first_look", "unseen", "halted", "busy", "blocked", "starved"]


@dataclass(frozen=True, slots=True)
class StarvationPolicy:
    """Where starved ends and wedged begins; the defaults are the product's."""

    # It ran at least this share of the window's wall time on a CPU: it had the CPU. A starved child
    # gets a small share; a spinning one on an idle core gets all of it.
    busy_share: float = 0.5
    # Or at least this much CPU time since its pongs fell overdue, however long that was: far more
    # than answering a ping takes (a thread's GIL hand-over included), so whatever got it, the child
    # had the CPU it needed.
    busy_cpu_s: float = 1.0
    # It waited on a run queue at least this share of the window's wall time (summed over its
    # threads): it was kept from the CPU.
    wait_share: float = 0.25


@dataclass(frozen=True, slots=True)
class Silence:
    """What the supervisor has seen of a child since its pongs fell overdue."""

    # When its pongs were first found overdue (monotonic seconds): the outer bound counts from here.
    since: float
    # The first and the latest readable look, and when the latest was taken.
    first: SchedFacts | None
    last: SchedFacts | None
    last_at: float
    judgement: Judgement

    @property
    def ran_ms(self) -> int | None:
        """CPU time it ran since the first look, or None without two looks."""
        if self.first is None or self.last is None:
            return None
        return max(0, self.last.run_ns - self.first.run_ns) // 1_000_000

    @property
    def waited_ms(self) -> int | None:
        """Run-queue wait the kernel has added since the first look, or None without two looks."""
        if self.first is None or self.last is None:
            return None
        return max(0, self.last.wait_ns - self.first.wait_ns) // 1_000_000


def observe_silence(
    silence: Silence | None, facts: SchedFacts | None, now: float, policy: StarvationPolicy
) -> Silence:
    """The silence after one more look (`facts`, None when the process could not be read) at `now`."""
    if silence is None:
        return Silence(since=now, first=facts, last=facts, last_at=now, judgement=_first_judgement(facts))
    if facts is not None and now <= silence.last_at:
        return silence  # no time has passed: there is no window to measure
    judgement = judge(silence.first, silence.last, facts, now - silence.last_at, policy)
    if facts is None:
        return replace(silence, judgement=judgement)
    return replace(silence, first=silence.first or facts, last=facts, last_at=now, judgement=judgement)


def _first_judgement(facts: SchedFacts | None) -> Judgement:
    if facts is None:
        return "unseen"
    return "halted" if facts.halted else "first_look"


def judge(
    first: SchedFacts | None,
    last: SchedFacts | None,
    now: SchedFacts | None,
    wall_s: float,
    policy: StarvationPolicy,
) -> Judgement:
    """What a child did over the window from the look `last` to the look `now`, `wall_s` apart;
    `first` is the first look of its silence.

    Busy wins over starved: a child that had the CPU and stayed silent is wedged whatever else it
    waited for. Runnable at both ends of the window counts as waiting, since the kernel adds a
    thread's wait only when it next runs (`SchedFacts`)."""
    if now is None:
        return "unseen"
    if now.halted:
        return "halted"
    if first is None or last is None or wall_s <= 0:
        return "first_look"
    wall_ns = wall_s * 1e9
    ran_ns = now.run_ns - last.run_ns
    if ran_ns >= policy.busy_share * wall_ns or now.run_ns - first.run_ns >= policy.busy_cpu_s * 1e9:
        return "busy"
    waited_ns = now.wait_ns - last.wait_ns
    if waited_ns >= policy.wait_share * wall_ns or (last.runnable and now.runnable):
        return "starved"
    return "blocked"


def silence_fields(silence: Silence | None) -> dict[str, str | int | float | None]:
    """What an event says of a silence: the last judgement, how long its pongs have been overdue,
    and the CPU time it ran and the run-queue wait the kernel added since the first look."""
    if silence is None:
        return {}
    return {
        "cpu": silence.judgement,
        "overdue_s": round(silence.last_at - silence.since, 1),
        "ran_ms": silence.ran_ms,
        "waited_ms": silence.waited_ms,
    }
