"""The kill ladder (DESIGN §6): a pure plan and the effectful executor.

    ctrl/cancel → 5 s → killpg(SIGTERM) → 2 s → killpg(SIGKILL) (+ cgroup.kill) → reap

The executor runs shielded and time-bounded; each wait ends early when the child exits.
Signals go to the child's process group only while the child is unreaped (its pid, and so its
group id, cannot have been reused), plus `cgroup.kill` where the child has a cgroup leaf.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import anyio

RungAction = Literal["cancel", "sigterm", "sigkill"]


@dataclass(frozen=True, slots=True)
class LadderPolicy:
    cancel_grace_s: float = 5.0
    term_grace_s: float = 2.0
    kill_reap_s: float = 2.0


@dataclass(frozen=True, slots=True)
class Rung:
    action: RungAction
    wait_s: float


def plan(policy: LadderPolicy, *, start: RungAction = "cancel") -> tuple[Rung, ...]:
    """The rungs from `start` up. A child that cannot read its channel starts at SIGTERM."""
    rungs = (
        Rung("cancel", policy.cancel_grace_s),
        Rung("sigterm", policy.term_grace_s),
        Rung("sigkill", policy.kill_reap_s),
    )
    names = [r.action for r in rungs]
    return rungs[names.index(start) :]


def bound_s(rungs: tuple[Rung, ...]) -> float:
    """The longest the ladder can take."""
    return sum(r.wait_s for r in rungs)


@dataclass
class LadderTarget:
    """The effects a ladder needs from one child."""

    send_cancel: Callable[[str], Awaitable[None]]
    signal_group: Callable[[int], None]
    kill_cgroup: Callable[[], None]
    wait_exited: Callable[[], Awaitable[None]]


async def climb(
    target: LadderTarget,
    rungs: tuple[Rung, ...],
    reason: str,
    on_rung: Callable[[RungAction], None] | None = None,
) -> RungAction | None:
    """Run the ladder until the child exits; return the last rung used (None if it was already gone)."""
    last: RungAction | None = None
    with anyio.CancelScope(shield=True):
        for rung in rungs:
            last = rung.action
            if on_rung is not None:
                on_rung(rung.action)
            if rung.action == "cancel":
                with anyio.move_on_after(min(1.0, rung.wait_s)):
                    await target.send_cancel(reason)
            elif rung.action == "sigterm":
                target.signal_group(signal.SIGTERM)
            else:
                target.signal_group(signal.SIGKILL)
                target.kill_cgroup()
            with anyio.move_on_after(rung.wait_s):
                await target.wait_exited()
                return last
    return last
