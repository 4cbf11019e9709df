"""The async driver: executes the pure loop's actions with the model and the tools (docs/design.md §5).

It owns every effect of a run — connecting intelligence and MCP, bounding each operation by
the deadline, turning a `ctrl/cancel` into a cancelled operation, reporting events and usage —
and sends exactly one `ev/result`, *before* tearing down MCP servers so a cancel is reported
within milliseconds however slowly a tool server exits.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace

import anyio
from pydantic import JsonValue

from protocol import control
from protocol.events import EventName
from protocol.exit_codes import ExitCode
from protocol.result import (
    RunError,
    RunResult,
    RunUsage,
    TerminalStatus,
    cap_text,
    distill,
    interrupted_status,
)
from protocol.spawn import SpawnPayload
from protocol.transcript import OverflowItem, ResultItem, StartItem, ToolsRejectedItem
from subagent import faults
from subagent.channel import ControlChannel
from subagent.errors import ContextOverflow, ContextTooSmall, IntelError, McpFatal, StepNotRecorded
from subagent.intel import Intelligence, open_intelligence
from subagent.intel.classify import ToolsRejected
from subagent.intel.slots import Slots
from subagent.intel.tool_memory import needs_json_actions, remember_json_actions
from subagent.loop import window
from subagent.loop.machine import (
    TurnView,
    initial_state,
    message_chars,
    next_action,
    on_context_overflow,
    on_model_reply,
    on_tool_results,
    on_tools_rejected,
    terminal_for,
    with_json_actions,
)
from subagent.loop.state import CallModel, CallTools, Finish, LoopState, Terminal
from subagent.messages import ToolOutcome, ToolSpec
from subagent.release import FirstRequest, Release, released
from subagent.resume import (
    IN_FLIGHT,
    INTERRUPTED,
    ModelOutcome,
    Replay,
    StepRecorder,
    model_reply,
    reply_item,
    result_item,
    tool_outcome,
)
from subagent.session import Inbox, run_session
from subagent.telemetry import describe
from subagent.tools import ToolRouter, open_tools
from subagent.tracing import tracing

MIN_CALL_TIMEOUT_S = 0.05


@dataclass
class Interruptible:
    """The operation in flight that a `ctrl/cancel` must abort (connect, a model call, a tool call)."""

    scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


@dataclass
class Driver:
    payload: SpawnPayload
    channel: ControlChannel
    state: LoopState
    current: Interruptible = field(default_factory=Interruptible)
    _view_version: int = -1
    _view: TurnView = field(default_factory=TurnView)
    started: float = field(default_factory=anyio.current_time)
    connecting: bool = True
    sent: RunResult | None = None
    # The tool router, once connected (its `idle_reported` goes into the result).
    tools: ToolRouter | None = None
    # A warm session's usage in turns already ended (`state.budgets` holds the current turn's).
    base_usage: RunUsage = field(default_factory=RunUsage)
    # A resumed run's journaled steps, and where this run's new steps go (subagent/resume.py).
    replay: Replay = field(default_factory=lambda: Replay(()))
    recorder: StepRecorder = field(default_factory=lambda: StepRecorder(None))
    _replay_reported: bool = False

    @property
    def cancelled(self) -> bool:
        return self.channel.cancel_requested.is_set()

    def view(self, tools: ToolRouter) -> TurnView:
        """This turn's tools and system prompt, rebuilt when the catalogue changed.

        Raises:
            ContextTooSmall: the system prompt, task and tool catalogue leave no room for a reply.
        """
        if tools.version != self._view_version or self._view.tool_mode != self.state.config.tool_mode:
            specs = tools.specs()
            chars = sum(tool_chars(s) for s in specs)
            view = TurnView.build(
                self.state.config, specs, tools.resource_catalogue(), chars, tools.ungranted()
            )
            self._check_head(view)
            self._view, self._view_version = view, tools.version
        return self._view

    def remember_tool_mode(self, before: str) -> None:
        """After an `auto` run switched to JSON actions, remember it for its endpoints."""
        if before == "native" and self.state.config.tool_mode == "json":
            for spec in self.payload.intelligence:
                remember_json_actions(spec)

    def _check_head(self, view: TurnView) -> None:
        config = self.state.config
        assert view.system is not None  # TurnView.build renders it
        in_system = view.tools_chars if config.tool_mode == "json" else 0
        size = window.head_size(
            config,
            prompt_chars=len(view.system) - in_system + sum(message_chars(m) for m in self.state.head),
            catalogue_chars=view.tools_chars,
            tools=len(view.tools),
        )
        problem = window.head_problem(size)
        if problem is not None:
            raise ContextTooSmall(problem)

    def emit_notes(self) -> None:
        for note in self.state.notes:
            self.channel.emit(note.event, dict(note.fields))
        # Emitted once: the next transition may keep adding to the same state's notes.
        self.state = replace(self.state, notes=())

    async def drive(self, intel: Intelligence, tools: ToolRouter) -> Terminal:
        """Run the loop to a terminal status."""
        while True:
            action = next_action(
                self.state, self.view(tools), now=anyio.current_time(), cancelled=self.cancelled
            )
            if isinstance(action, Finish):
                return action.terminal
            if isinstance(action, CallModel):
                await self._call_model(intel, action)
            elif isinstance(action, CallTools):
                await self._call_tools(tools, action)

    async def _call_model(self, intel: Intelligence, action: CallModel) -> None:
        mode_before = self.state.config.tool_mode
        purpose = action.request.purpose
        journaled = self._replayed_model(purpose)
        if isinstance(journaled, OverflowItem):
            if self._on_overflow(action):
                raise ContextOverflow("the request did not fit the context window, even after compaction")
            return
        if isinstance(journaled, ToolsRejectedItem):
            if self._on_tools_rejected(action, journaled.detail, mode_before):
                raise ToolsRejected(journaled.detail)
            return
        if journaled is not None:
            reply = model_reply(journaled)
        else:
            # What this run journaled so far (the last tool results) is durable before the model sees it.
            await self.recorder.flush()
            with self._interruptible() as scope:
                try:
                    reply = await intel.complete(action.request)
                except ContextOverflow:
                    await self.recorder.flush(OverflowItem(purpose=purpose))
                    if self._on_overflow(action):
                        raise
                    return
                except ToolsRejected as exc:
                    await self.recorder.flush(ToolsRejectedItem(detail=str(exc)[:2000]))
                    if self._on_tools_rejected(action, str(exc), mode_before):
                        raise
                    return
            if scope.cancelled_caught:
                return
            self.recorder.later(reply_item(reply, purpose))
        self.state = on_model_reply(
            self.state, action, reply, now=anyio.current_time(), cancelled=self.cancelled
        )
        self.remember_tool_mode(mode_before)
        call = self.state.budgets.last_call
        assert call is not None  # on_model_reply records every reply's usage
        usage = control.UsageParams(
            tokens_in=call.tokens_in,
            tokens_out=call.tokens_out,
            steps=call.steps,
            model=reply.model or self.payload.intelligence[0].model,
            endpoint=reply.endpoint,
            cached_in=reply.usage.cached_in if reply.usage is not None else 0,
            reported=reply.usage is not None and not reply.usage.estimated,
        )
        # A replayed reply's usage is sent too: the supervisor's tree counts the run from its start.
        self.channel.report_usage(usage)
        self.emit_notes()

    def _on_overflow(self, action: CallModel) -> bool:
        """Compact and ask again; True when that cannot help (the run ends)."""
        self.state, fatal = on_context_overflow(self.state, action)
        self.emit_notes()
        return fatal

    def _on_tools_rejected(self, action: CallModel, detail: str, mode_before: str) -> bool:
        """Switch to JSON actions and ask again; True when that cannot help (the run ends)."""
        self.state, fatal = on_tools_rejected(self.state, action, detail)
        self.emit_notes()
        if not fatal:
            self.remember_tool_mode(mode_before)
        return fatal

    def _replayed_model(self, purpose: str) -> ModelOutcome | None:
        if not self.replay.active:
            return None
        journaled = self.replay.model_outcome(purpose)
        self._replay_moved()
        return journaled

    def _replay_moved(self) -> None:
        """Once the replay is over, say how far it went; one that diverged voids the rest."""
        if self.replay.active or self._replay_reported or not self.replay.resumed:
            return
        self._replay_reported = True
        fields: dict[str, JsonValue] = {"steps": self.replay.steps, "items": self.replay.position}
        if self.replay.diverged is not None:
            fields["diverged"] = self.replay.diverged[:300]
            self.recorder.later(self.replay.rewind())
        self.channel.emit("loop.resumed", fields)

    async def _call_tools(self, tools: ToolRouter, action: CallTools) -> None:
        outcomes: list[ToolOutcome] = []
        for call in action.calls:
            journaled = self.replay.tool_outcome(call) if self.replay.active else None
            self._replay_moved()
            if isinstance(journaled, ResultItem):
                outcomes.append(tool_outcome(journaled))  # it ran before: never again
                continue
            if journaled == IN_FLIGHT and not tools.idempotent(call):
                outcome = ToolOutcome(INTERRUPTED, is_error=True)
                self.recorder.later(result_item(call, outcome))
                outcomes.append(outcome)
                continue
            timeout_s = max(MIN_CALL_TIMEOUT_S, self.state.config.deadline - anyio.current_time())
            with self._interruptible() as scope:
                # Its intent is durable right before the tool runs (after any approval: a call
                # that waited for a person and never ran is not in flight); an in-flight call's
                # `start` is journaled already.
                starting = (
                    self.recorder.flush
                    if journaled == IN_FLIGHT
                    else functools.partial(self.recorder.flush, StartItem(call_id=call.id, name=call.name))
                )
                outcome = await tools.call(call, timeout_s=timeout_s, starting=starting)
            if scope.cancelled_caught:
                return  # the state keeps its pending calls; next_action sees cancel or deadline
            self.recorder.later(result_item(call, outcome))
            outcomes.append(outcome)
        self.state = on_tool_results(self.state, outcomes, now=anyio.current_time(), cancelled=self.cancelled)
        self.emit_notes()

    def _interruptible(self) -> anyio.CancelScope:
        scope = anyio.CancelScope(deadline=self.state.config.deadline)
        self.current.scope = scope
        if self.cancelled:
            scope.cancel()
        return scope

    def on_cancel(self) -> None:
        """Called in the event loop when `ctrl/cancel` arrives."""
        if self.connecting and self.sent is None:
            # Report at once: unwinding half-connected MCP servers may take seconds.
            self.report(self.result(terminal_for(self.state, TerminalStatus.CANCELLED)))
        self.current.cancel()

    def report(self, result: RunResult) -> None:
        """Send the one `ev/result` of this run (later calls are ignored)."""
        if self.sent is not None:
            return
        self.sent = result
        dur_ms = int((anyio.current_time() - self.started) * 1000)
        self.channel.emit(
            "loop.final",
            {
                "status": result.status.value,
                "abort": result.abort,
                "steps": result.usage.steps,
                "tokens": result.usage.tokens,
                "dur_ms": dur_ms,
                "error": result.error.kind if result.error else None,
            },
        )
        self.channel.send(control.Result(params=result))

    def result(self, terminal: Terminal) -> RunResult:
        idle = self.tools is not None and self.tools.idle_reported
        error = None
        if terminal.error_kind is not None:
            error = RunError(
                kind=terminal.error_kind, message=cap_text(terminal.reason or terminal.error_kind, 4000)
            )
        return RunResult(
            status=terminal.status,
            result=distill(terminal.result),
            partial=terminal.partial,
            usage=self.usage(),
            error=error,
            idle=idle and terminal.status == TerminalStatus.COMPLETED,
        )

    def usage(self) -> RunUsage:
        return self.base_usage + self.state.budgets.used


# The provider's envelope around one tool definition (`{"type":"function","function":{…}}`).
TOOL_ENVELOPE_CHARS = 48


def tool_chars(spec: ToolSpec) -> int:
    """One tool definition's size as sent (compact JSON), for the forward estimate."""
    schema = json.dumps(spec.input_schema, separators=(",", ":"), ensure_ascii=False)
    return TOOL_ENVELOPE_CHARS + len(spec.name) + len(spec.description) + len(schema)


class ChannelLink:
    """The `SupervisorLink` of the `subagent_*` tools and the `SlotLink` of model requests: `sup/*`
    requests over the control channel."""

    def __init__(self, channel: ControlChannel) -> None:
        self._channel = channel

    async def request(self, method: str, params: dict[str, JsonValue]) -> JsonValue:
        # The tool call (or model request) that makes the request bounds it by the run's deadline.
        return await self._channel.request(method, params, timeout_s=math.inf)

    def notify(self, message: control.SlotDone | control.SlotStart) -> None:
        self._channel.send(message)


def _start_state(payload: SpawnPayload) -> LoopState:
    state = initial_state(payload, now=anyio.current_time())
    if state.config.auto_tool_mode and needs_json_actions(payload.intelligence[0]):
        state = with_json_actions(state)
    return state


def _emit_start(channel: ControlChannel, payload: SpawnPayload) -> None:
    channel.emit(
        "loop.start",
        {
            "handle": payload.handle,
            "depth": payload.depth,
            "max_steps": payload.limits.max_steps,
            "max_tokens": payload.limits.max_tokens,
            "deadline_s": payload.limits.deadline_s,
            "servers": len(payload.mcp_servers),
            **describe(payload.instruction, capture=payload.telemetry.capture_content, prefix="instruction"),
        },
    )


class _Run:
    """One run of a payload: connect, wait for `ctrl/go` if held, drive the loop, report once."""

    def __init__(self, payload: SpawnPayload, channel: ControlChannel) -> None:
        self.payload = payload
        self.channel = channel
        self.driver = Driver(payload, channel, _start_state(payload))
        self.driver.replay = Replay(payload.replay)
        self.driver.recorder = StepRecorder(
            channel.request if payload.record_steps and not payload.warm else None
        )
        self.release = Release(held=payload.hold_s is not None)
        self.first_request = FirstRequest()
        self.slots = Slots(ChannelLink(channel))
        channel.set_lease_handler(self.slots.on_lease)
        # Injections reach only a warm session; any other run ignores them (nothing to append them to).
        self.inbox = Inbox()
        # Bounds connecting by the deadline; once connected, a cancel or the deadline aborts single
        # operations instead (`Driver._interruptible`).
        self.outer = anyio.CancelScope(deadline=self.driver.state.config.deadline)
        if payload.hold_s is None:
            _emit_start(channel, payload)

    def emit(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        if event == "intel.result":
            self.first_request.on_sent()
        self.channel.emit(event, fields)

    async def released(self, hold_s: float) -> bool:
        """A held run: False when no `ctrl/go` came in time; else the driver runs the released task."""
        params = await self.release.wait(hold_s)
        if params is None:
            return False
        driver = self.driver
        driver.payload = released(driver.payload, params)
        driver.state = _start_state(driver.payload)
        driver.started = anyio.current_time()
        self.outer.deadline = driver.state.config.deadline
        _emit_start(self.channel, driver.payload)
        # From here to its first request on the wire the task is what a trigger's user waits on:
        # out of SCHED_BATCH for that stretch, so no wake-up on it waits for a scheduler tick.
        self.first_request.leave_batch()
        return True

    async def run(self) -> RunResult:
        driver = self.driver
        async with anyio.create_task_group() as tg:
            on_inject = self.inbox.put if self.payload.warm else _ignore
            tg.start_soon(self.channel.serve, driver.on_cancel, on_inject, self.release.on_go)
            try:
                with self.outer:
                    driver.current.scope = self.outer
                    await self.connect_and_drive()
                if self.outer.cancelled_caught and driver.sent is None:
                    status = interrupted_status(
                        cancelled=driver.cancelled,
                        past_deadline=anyio.current_time() >= driver.state.config.deadline,
                    )
                    assert status is not None  # only a cancel or its deadline cancels `outer`
                    driver.report(driver.result(terminal_for(driver.state, status)))
            except* McpFatal as group:
                driver.report(abort(driver, "mcp", group.exceptions[0]))
            except* IntelError as group:
                driver.report(abort(driver, "intelligence", group.exceptions[0]))
            except* StepNotRecorded as group:
                driver.report(not_recorded(driver, group.exceptions[0]))
            tg.cancel_scope.cancel()
        assert driver.sent is not None
        return driver.sent

    async def connect_and_drive(self) -> None:
        payload, driver, channel = self.payload, self.driver, self.channel
        hold_s = payload.hold_s
        all_hinted = all(spec.name in payload.mcp_catalogues for spec in payload.mcp_servers)
        async with contextlib.AsyncExitStack() as stack:
            intel = await stack.enter_async_context(
                open_intelligence(
                    payload.intelligence,
                    payload.loop,
                    sink=self.emit,
                    capture_content=payload.telemetry.capture_content,
                    on_sent=self.first_request.on_sent,
                    turns_played=driver.replay.turns,
                    slots=self.slots,
                )
            )
            if hold_s is not None and not all_hinted and not await self.released(hold_s):
                driver.report(_never_released())
                return
            tools = await stack.enter_async_context(
                open_tools(
                    driver.payload,
                    sink=channel.emit,
                    supervisor=ChannelLink(channel),
                    hinted_after=self.first_request.sent,
                    released=self.release.go,
                )
            )
            if hold_s is not None and all_hinted and not await self.released(hold_s):
                driver.report(_never_released())
                return
            # Connected: from here on a cancel or the deadline aborts single operations instead.
            self.outer.deadline = math.inf
            driver.connecting = False
            driver.tools = tools
            if (fault := faults.armed(payload.handle, os.environ)) is not None:
                faults.commit(fault, channel.out_fd)
            if payload.warm:
                driver.report(await run_session(driver, intel, tools, self.inbox))
            else:
                terminal = await driver.drive(intel, tools)
                await driver.recorder.flush()  # the last reply belongs to the transcript too
                driver.report(driver.result(terminal))
            # The result is out; MCP servers are torn down (bounded, shielded) as the block exits.


async def run_async(payload: SpawnPayload, channel: ControlChannel) -> RunResult:
    """Connect, drive the loop, report the result, then tear down.

    A held payload (`hold_s`: a prestarted trigger task) opens its model client — and its tools,
    when every granted server is hinted, since connecting any other would start it — and then waits
    for `ctrl/go` before the loop starts; without one in `hold_s` it ends `cancelled`, having done
    nothing (docs/triggers.md)."""
    return await _Run(payload, channel).run()


def _ignore(_params: control.InjectParams) -> None:
    return None


def _never_released() -> RunResult:
    message = "prestarted, and never told to run (its trigger's delivery did not start it)"
    return RunResult(status=TerminalStatus.CANCELLED, error=RunError(kind="cancelled", message=message))


def abort(driver: Driver, kind: str, exc: Exception) -> RunResult:
    error_kind = getattr(exc, "kind", type(exc).__name__)
    return RunResult(
        status=TerminalStatus.CRASHED,
        result=distill(driver.state.partial),
        partial=driver.state.partial is not None,
        usage=driver.usage(),
        abort="mcp" if kind == "mcp" else "intelligence",
        error=RunError(kind=str(error_kind)[:64], message=cap_text(str(exc), 4000)),
    )


def not_recorded(driver: Driver, exc: Exception) -> RunResult:
    """The run stops rather than act on a step that would not survive a restart."""
    return RunResult(
        status=TerminalStatus.CRASHED,
        result=distill(driver.state.partial),
        partial=driver.state.partial is not None,
        usage=driver.usage(),
        error=RunError(kind="journal", message=cap_text(str(exc), 4000)),
    )


def _innermost(exc: BaseException) -> str:
    """The type name of the first leaf of an exception group (task groups wrap what failed)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return type(exc).__name__


def run_task(payload: SpawnPayload, channel: ControlChannel) -> int:
    """The child's top level: run the task; any unexpected error is still reported as `crashed`."""
    started = time.monotonic()
    try:
        with tracing(payload) as spans:
            channel.observer = spans
            anyio.run(run_async, payload, channel)
    except Exception as exc:  # noqa: BLE001 - the top-level handler: report, never die silently
        import traceback

        traceback.print_exc(file=sys.stderr)
        error = RunError(
            kind="internal",
            message=f"{_innermost(exc)} in the subagent after {time.monotonic() - started:.1f}s",
        )
        channel.send(control.Result(params=RunResult(status=TerminalStatus.CRASHED, error=error)))
        return ExitCode.FAILURE
    finally:
        channel.close()
    return ExitCode.OK
