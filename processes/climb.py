"""Running a kill-ladder plan against one process (docs/design.md §6): the anyio driver of `processes.ladder`.

`climb` runs shielded and time-bounded; each rung's wait ends early when the process exits. The
effects come from the caller's `LadderTarget`, which keeps the safety rule: signals go to the
process group only while its leader is unreaped (its pid, so its group id, cannot be reused).
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from processes.ladder import Rung, RungAction

# The polite request gets at most this long to be delivered; the rung's grace is for the exit.
REQUEST_EXIT_TIMEOUT_S = 1.0


def _no_cgroup() -> None:
    pass


@dataclass(frozen=True, slots=True)
class LadderTarget:
    """The effects a ladder needs from one process."""

    # The polite rung, given the reason: the supervisor sends `ctrl/cancel`, the stdio MCP
    # transport closes the server's stdin.
    request_exit: Callable[[str], Awaitable[None]]
    signal_group: Callable[[int], None]
    wait_exited: Callable[[], Awaitable[None]]
    # Called with the SIGKILL rung: the process's cgroup leaf, where it has one.
    kill_cgroup: Callable[[], None] = field(default=_no_cgroup)


async def climb(
    target: LadderTarget,
    rungs: tuple[Rung, ...],
    reason: str,
    on_rung: Callable[[RungAction], None] | None = None,
) -> RungAction | None:
    """Run the ladder until the process exits; return the last rung used (None for no rungs)."""
    last: RungAction | None = None
    with anyio.CancelScope(shield=True):
        for rung in rungs:
            last = rung.action
            if on_rung is not None:
                on_rung(rung.action)
            if rung.action == "cancel":
                with anyio.move_on_after(min(REQUEST_EXIT_TIMEOUT_S, rung.wait_s)):
                    await target.request_exit(reason)
            elif rung.action == "sigterm":
                target.signal_group(signal.SIGTERM)
            else:
                target.signal_group(signal.SIGKILL)
                target.kill_cgroup()
            with anyio.move_on_after(rung.wait_s):
                await target.wait_exited()
                return last
    return last
