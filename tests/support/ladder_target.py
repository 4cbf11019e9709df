"""`ProcessExitingAt`: a fake process for the ladder driver that exits at a chosen rung.

It records what the ladder did to it (the polite request, signals, cgroup kills) and exits when
it receives the request or signal named by `exits_at`, or never (`None`); no real process.
"""

from __future__ import annotations

import signal

import anyio

from processes.climb import LadderTarget
from processes.ladder import RungAction

SIGNAL_RUNGS: dict[int, RungAction] = {signal.SIGTERM: "sigterm", signal.SIGKILL: "sigkill"}


class ProcessExitingAt:
    def __init__(self, exits_at: RungAction | None, *, request_hangs: bool = False) -> None:
        self.exits_at = exits_at
        self.request_hangs = request_hangs
        self.received: list[str] = []
        self.exited = anyio.Event()

    def target(self) -> LadderTarget:
        return LadderTarget(
            request_exit=self._request_exit,
            signal_group=self._signal_group,
            kill_cgroup=lambda: self.received.append("cgroup.kill"),
            wait_exited=self.exited.wait,
        )

    async def _request_exit(self, reason: str) -> None:
        self.received.append(f"request: {reason}")
        if self.request_hangs:
            await anyio.sleep_forever()
        self._receive("cancel")

    def _signal_group(self, sig: int) -> None:
        self.received.append(signal.Signals(sig).name)
        self._receive(SIGNAL_RUNGS[sig])

    def _receive(self, rung: RungAction) -> None:
        if rung == self.exits_at:
            self.exited.set()
