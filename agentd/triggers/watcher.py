"""One supervised resource watcher process: the watcher's policy over the shared core
(docs/design.md §2, §11).

`WatcherProcess.run` owns a watcher from the `ctrl/watch` frame to its reaped exit status through
`SupervisedProcess`, as `SupervisedChild` owns a subagent: the same framing, writes, pings on the
shared watch clock, detectors, kill ladder and reaping. What is the watcher's own is here: the
frames it sends up (its state, resource changes, its catalogue, log events), and what a stop means
for it (`stopped_by_us`, the verdict that made us stop it). A watcher has no deadline: it lives
until it is stopped, says `unsupported` (exit 0), or loses its session.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel

from agentd.spawning.spawner import SpawnedProcess
from agentd.supervision.liveness import ExitInfo, LivenessPolicy, Verdict
from agentd.supervision.supervised_process import STDERR_LINE_CAP, SupervisedProcess
from agentd.supervision.watch_clock import WatchClock
from processes.ladder import LadderPolicy
from protocol import control
from protocol.watch import (
    WATCH_UP_ADAPTER,
    CatalogueReport,
    ResourceChanged,
    Watch,
    WatchPayload,
    WatchState,
)


class WatcherListener(Protocol):
    """What a `WatcherProcess` reports to its owner (all called on the event loop)."""

    def on_state(self, watcher: WatcherProcess, frame: WatchState) -> None: ...
    def on_resource(self, watcher: WatcherProcess, frame: ResourceChanged) -> None: ...
    def on_catalogue(self, watcher: WatcherProcess, frame: CatalogueReport) -> None: ...
    def on_event(self, watcher: WatcherProcess, params: control.EventParams) -> None: ...
    def on_stderr(self, watcher: WatcherProcess, line: str) -> None: ...
    def on_stuck(self, watcher: WatcherProcess, verdict: str) -> None: ...


class WatcherProcess(SupervisedProcess):
    channel = "watch"

    def __init__(
        self,
        proc: SpawnedProcess,
        server: str,
        listener: WatcherListener,
        *,
        liveness: LivenessPolicy,
        ladder: LadderPolicy,
        stderr_line_cap: int = STDERR_LINE_CAP,
        clock: WatchClock | None = None,
    ) -> None:
        super().__init__(
            proc,
            WATCH_UP_ADAPTER,
            liveness=liveness,
            ladder=ladder,
            stderr_line_cap=stderr_line_cap,
            clock=clock,
        )
        self.server = server
        self.listener = listener
        self.stopped_by_us = False
        self.stop_reason: str | None = None
        # The liveness verdict that made us stop it (unresponsive, not_ready, ...), if one did.
        self.stuck_verdict: str | None = None

    async def run(self, payload: WatchPayload) -> ExitInfo:
        """Supervise the watcher to its reaped exit; return how it ended."""
        return await self._supervise(lambda: Watch(params=payload), reveal=True)

    def stop(self, reason: str, *, force: bool = False) -> None:
        """Stop it (the daemon drains, the trigger went away, an operator restarts it): the kill
        ladder from `ctrl/cancel` (from SIGKILL with `force`)."""
        self.stopped_by_us = True
        self.stop_reason = self.stop_reason or reason
        self._request_stop("sigkill" if force else "cancel", reason)

    def _on_verdict(self, verdict: Verdict) -> None:
        self.stuck_verdict = verdict
        self.listener.on_stuck(self, verdict)
        # A stop of its own making, not `stopped_by_us`: its server counts it as a failure.
        super()._on_verdict(verdict)

    def _on_frame(self, message: BaseModel) -> None:
        if isinstance(message, WatchState):
            self.listener.on_state(self, message)
        elif isinstance(message, ResourceChanged):
            self.listener.on_resource(self, message)
        elif isinstance(message, CatalogueReport):
            self.listener.on_catalogue(self, message)
        elif isinstance(message, control.Event):
            self.listener.on_event(self, message.params)
        else:
            self.faults += 1

    def _tell_stderr(self, line: str) -> None:
        self.listener.on_stderr(self, line)
