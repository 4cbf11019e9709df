"""A held run's release: `ctrl/go` and what it carries, and the first model request after it.

A prestarted trigger task's payload is held (`hold_s`): the run opens its model client and hinted
tools and waits for `ctrl/go` (docs/triggers.md). Released, it runs the final instruction with the
deadline left, out of SCHED_BATCH until its first request is on the wire.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from protocol import control
from protocol.spawn import SpawnPayload
from subagent.scheduling import leave_batch


def released(payload: SpawnPayload, go: control.GoParams) -> SpawnPayload:
    """A held payload as `ctrl/go` releases it: the final instruction, the deadline left, no hold."""
    limits = payload.limits.model_copy(update={"deadline_s": go.deadline_s})
    instruction = go.instruction or payload.instruction
    return payload.model_copy(update={"instruction": instruction, "limits": limits, "hold_s": None})


class Release:
    """A held run's `ctrl/go`: taken once, with what it carries (an unheld run is released at once)."""

    def __init__(self, *, held: bool) -> None:
        self.go = anyio.Event()
        self.params: control.GoParams | None = None
        if not held:
            self.go.set()

    def on_go(self, params: control.GoParams) -> None:
        """Called in the event loop when `ctrl/go` arrives (a second one is ignored)."""
        if not self.go.is_set():
            self.params = params
            self.go.set()

    async def wait(self, hold_s: float) -> control.GoParams | None:
        """What `ctrl/go` carried, or None when none came within `hold_s`."""
        with anyio.move_on_after(hold_s):
            await self.go.wait()
        return self.params


class FirstRequest:
    """The run's first model request on the wire (or its call ended): hinted MCP servers connect
    after it, and a released run goes back to SCHED_BATCH with it."""

    def __init__(self) -> None:
        self.sent = anyio.Event()
        self._back_to_batch: Callable[[], None] = _nothing

    def on_sent(self) -> None:
        self.sent.set()
        self._back_to_batch()

    def leave_batch(self) -> None:
        """Out of SCHED_BATCH until the first request is sent (`on_sent`)."""
        self._back_to_batch = leave_batch()


def _nothing() -> None:
    return None
