"""The kill ladder's plan (docs/design.md §6): which rungs to climb and how long each may take. Pure.

    polite request → grace → killpg(SIGTERM) → grace → killpg(SIGKILL) → reap

The supervisor's polite request is `ctrl/cancel` (5 s, 2 s, 2 s); the stdio MCP transport's is
closing the server's stdin (2 s, 2 s, 2 s). `processes.climb` runs a plan against one process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# "cancel" is the polite rung, whatever form the request takes for the process being stopped.
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
