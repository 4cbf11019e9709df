"""A warm session's driver (docs/warm-sessions.md): wait for a `ctrl/inject`, run one turn of the
loop for it, report `ev/turn`, and wait again — until a cancel, the idle timeout, or the session's
own budget ends it with one `RunResult`.

The decisions are in `subagent.loop.session`; this module owns the waits. The wait for the next
delivery is bounded by the idle timeout and by the session's deadline, and a `ctrl/cancel`
interrupts it like any other operation.
"""

from __future__ import annotations

import collections
from typing import Protocol

import anyio

from protocol import control
from protocol.result import RunResult, RunUsage, TerminalStatus, distill
from protocol.spawn import SpawnPayload
from subagent.channel import ControlChannel
from subagent.intel import Intelligence
from subagent.loop import session
from subagent.loop.machine import TurnView
from subagent.loop.state import LoopState, Terminal
from subagent.tools import ToolRouter


class Interrupt(Protocol):
    scope: anyio.CancelScope | None


class Driver(Protocol):
    """What a session needs of the run's driver (`subagent.run.Driver`): its turns are its runs."""

    payload: SpawnPayload
    channel: ControlChannel
    state: LoopState
    started: float
    base_usage: RunUsage

    @property
    def current(self) -> Interrupt: ...
    @property
    def cancelled(self) -> bool: ...
    def usage(self) -> RunUsage: ...
    def view(self, tools: ToolRouter) -> TurnView: ...
    def emit_notes(self) -> None: ...
    async def drive(self, intel: Intelligence, tools: ToolRouter) -> Terminal: ...


class Inbox:
    """Injections handed over by the control channel, oldest first."""

    def __init__(self) -> None:
        self._items: collections.deque[control.InjectParams] = collections.deque()
        self._arrived = anyio.Event()

    def put(self, params: control.InjectParams) -> None:
        """Called on the event loop by `ControlChannel.serve`."""
        self._items.append(params)
        self._arrived.set()

    async def get(self, scope: anyio.CancelScope) -> control.InjectParams | None:
        """The next injection, or None when `scope` (deadline or cancel) ended the wait first."""
        with scope:
            while not self._items:
                self._arrived = anyio.Event()
                await self._arrived.wait()
        return self._items.popleft() if self._items else None


async def run_session(driver: Driver, intel: Intelligence, tools: ToolRouter, inbox: Inbox) -> RunResult:
    """Serve injections until the session ends; return its one result (the caller reports it)."""
    payload = driver.payload
    spec, limits = payload.session, payload.limits
    session_deadline = driver.started + limits.deadline_s
    last = Terminal(TerminalStatus.COMPLETED)
    while True:
        now = anyio.current_time()
        if driver.cancelled:
            return _ended(driver, last, TerminalStatus.CANCELLED)
        spent = session.session_stop(driver.usage(), limits, session_deadline=session_deadline, now=now)
        if spent is not None:
            return _ended(driver, last, spent)
        idle_until = min(now + spec.idle_timeout_s, session_deadline)
        wait = anyio.CancelScope(deadline=idle_until)
        driver.current.scope = wait
        if driver.cancelled:
            wait.cancel()
        params = await inbox.get(wait)
        if driver.cancelled:
            return _ended(driver, last, TerminalStatus.CANCELLED)
        if params is None:
            if anyio.current_time() >= session_deadline:
                return _ended(driver, last, TerminalStatus.DEADLINE)
            return _ended(driver, last, TerminalStatus.COMPLETED, idle=True)
        bounds = session.turn_bounds(
            spec, limits, driver.usage(), session_deadline=session_deadline, now=anyio.current_time()
        )
        started = anyio.current_time()
        view = driver.view(tools)
        overhead = len(view.system or "") + view.tools_chars
        driver.state = session.begin_turn(driver.state, params.message, bounds, overhead_chars=overhead)
        driver.emit_notes()
        terminal = await driver.drive(intel, tools)
        turn_usage = driver.state.budgets.used
        driver.base_usage = driver.base_usage + turn_usage
        driver.state = session.end_turn(driver.state, terminal)
        last = terminal
        turn = control.TurnParams(
            seq=params.seq,
            status=terminal.status,
            result=distill(terminal.result),
            partial=terminal.partial,
            usage=turn_usage,
            dur_ms=int((anyio.current_time() - started) * 1000),
        )
        driver.channel.send(control.Turn(params=turn))
        if terminal.status is TerminalStatus.CANCELLED:
            return _ended(driver, last, TerminalStatus.CANCELLED)
        spent = session.spent_by_turn(terminal.status, bounds)
        if spent is not None:
            return _ended(driver, last, spent)


def _ended(driver: Driver, last: Terminal, status: TerminalStatus, *, idle: bool = False) -> RunResult:
    """The session's result: how it ended, carrying the last turn's answer."""
    return RunResult(
        status=status,
        result=distill(last.result),
        partial=last.partial or (last.result is not None and status is not TerminalStatus.COMPLETED),
        usage=driver.usage(),
        idle=idle,
    )
