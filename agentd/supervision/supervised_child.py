"""One supervised subagent process: the subagent's policy over the shared core (docs/design.md §3, §6).

`SupervisedChild.run` owns the child from the spawn frame to the reaped exit status through
`SupervisedProcess` (framing, writes, pings on the watch clock, the detectors, the kill ladder,
reaping); what is the subagent's own is here: the frames it sends up (events, usage, turns,
`sup/*` requests, its one result), the teardown grace after that result, and the stop causes.
It returns exactly one `RunResult`: the child's own, or one the supervisor attributes.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Protocol

import anyio
from pydantic import BaseModel, JsonValue

from agentd.spawning.cgroup import CgroupLeaf
from agentd.spawning.spawner import SpawnedProcess
from agentd.supervision.liveness import KillCause, LivenessPolicy, SilentVerdict, Verdict, classify_exit
from agentd.supervision.payloads import with_deadline
from agentd.supervision.starvation import Silence
from agentd.supervision.supervised_process import STDERR_LINE_CAP, SupervisedProcess
from agentd.supervision.watch_clock import WatchClock
from processes.ladder import LadderPolicy, RungAction
from protocol import control, jsonrpc
from protocol.result import RunResult
from protocol.spawn import SpawnPayload

STDERR_TAIL_LINES = 40

SupRequest = (
    control.SupSpawn
    | control.SupWait
    | control.SupStatus
    | control.SupCancel
    | control.SupApprove
    | control.SupRecord
    | control.SupSlot
)


@dataclass(frozen=True, slots=True)
class ChildIdentity:
    task_id: str
    run_id: str
    handle: str


class ChildListener(Protocol):
    """What a `SupervisedChild` reports to its owner (all called on the event loop)."""

    def on_ready(self, child: SupervisedChild) -> None: ...
    def on_event(self, child: SupervisedChild, params: control.EventParams) -> None: ...
    def on_usage(self, child: SupervisedChild, params: control.UsageParams) -> None: ...
    def on_slot_done(self, child: SupervisedChild, params: control.SlotDoneParams) -> None: ...
    def on_slot_start(self, child: SupervisedChild, params: control.SlotStartParams) -> None: ...
    def slot_nowait(self, child: SupervisedChild, params: control.SlotParams) -> JsonValue | None: ...
    def on_result(self, child: SupervisedChild, result: RunResult) -> None: ...
    def on_turn(self, child: SupervisedChild, params: control.TurnParams) -> None: ...
    def on_stderr(self, child: SupervisedChild, line: str) -> None: ...
    def on_verdict(self, child: SupervisedChild, verdict: Verdict) -> None: ...
    def on_starved(self, child: SupervisedChild, silence: Silence, late: SilentVerdict) -> None: ...
    def on_rung(self, child: SupervisedChild, rung: RungAction, cause: KillCause) -> None: ...
    async def on_request(self, child: SupervisedChild, request: SupRequest) -> JsonValue: ...


class _Detached:
    """The listener of a child whose supervision has ended: it hears nothing more. Dropping the
    real one breaks the child ↔ listener ↔ owner cycle, so a finished task's objects are freed as
    their last reference goes, not by a full collection."""

    def on_ready(self, child: SupervisedChild) -> None:
        pass

    def on_event(self, child: SupervisedChild, params: control.EventParams) -> None:
        pass

    def on_usage(self, child: SupervisedChild, params: control.UsageParams) -> None:
        pass

    def on_slot_done(self, child: SupervisedChild, params: control.SlotDoneParams) -> None:
        pass

    def on_slot_start(self, child: SupervisedChild, params: control.SlotStartParams) -> None:
        pass

    def slot_nowait(self, child: SupervisedChild, params: control.SlotParams) -> JsonValue | None:
        return None

    def on_result(self, child: SupervisedChild, result: RunResult) -> None:
        pass

    def on_turn(self, child: SupervisedChild, params: control.TurnParams) -> None:
        pass

    def on_stderr(self, child: SupervisedChild, line: str) -> None:
        pass

    def on_verdict(self, child: SupervisedChild, verdict: Verdict) -> None:
        pass

    def on_starved(self, child: SupervisedChild, silence: Silence, late: SilentVerdict) -> None:
        pass

    def on_rung(self, child: SupervisedChild, rung: RungAction, cause: KillCause) -> None:
        pass

    async def on_request(self, child: SupervisedChild, request: SupRequest) -> JsonValue:
        return {"refused": "the subagent's supervision has ended"}


DETACHED = _Detached()


class SupervisedChild(SupervisedProcess):
    """The subagent's policy over the shared core: its spawn (or go) frame, its events, usage,
    turns, requests and one result, the teardown grace after that result, and the status its exit
    is given (`classify_exit`)."""

    def __init__(
        self,
        proc: SpawnedProcess,
        identity: ChildIdentity,
        listener: ChildListener,
        *,
        deadline: float,
        liveness: LivenessPolicy | None = None,
        ladder: LadderPolicy | None = None,
        cgroup: CgroupLeaf | None = None,
        teardown_grace_s: float = 10.0,
        stderr_line_cap: int = STDERR_LINE_CAP,
        clock: WatchClock | None = None,
    ) -> None:
        super().__init__(
            proc,
            control.UP_ADAPTER,
            liveness=liveness or LivenessPolicy(),
            ladder=ladder or LadderPolicy(),
            deadline=deadline,
            cgroup=cgroup,
            stderr_line_cap=stderr_line_cap,
            clock=clock,
        )
        self.identity = identity
        self.listener = listener
        self.teardown_grace_s = teardown_grace_s
        self.result: RunResult | None = None
        self.result_at: float | None = None
        self.kill_cause: KillCause | None = None
        # The first detector verdict it was stopped for, if one was: what its crash says.
        self.verdict: Verdict | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        # Frames `tell` handed to a task that has not written them yet.
        self._told_later = 0

    @property
    def result_received(self) -> bool:
        return self.result is not None

    # ---- lifecycle ---------------------------------------------------------------------------

    async def run(self, payload: SpawnPayload, *, held: SpawnPayload | None = None) -> RunResult:
        """Supervise the child to its reaped exit; return its one terminal result.

        `held`: the child was prestarted with this payload and waits for `ctrl/go` (a trigger's
        task, agentd/supervision/parking.py), which is sent instead of `ctrl/spawn`: `payload`'s
        instruction if it differs (a newer delivery), and the time left of the deadline."""
        try:
            exit_info = await self._supervise(lambda: self._first_frame(payload, held), reveal=held is None)
        finally:
            self.listener = DETACHED  # supervision is over, on every path
        return classify_exit(
            self.result,
            exit_info,
            kill_cause=self.kill_cause,
            sigkilled_by_us=self.top_rung == "sigkill",
            oom_killed=self.oom_killed,
            stderr_tail="\n".join(self._stderr_tail) if self.result is None else "",
            verdict=self.verdict,
            silence=self.silence,
        )

    def _first_frame(self, payload: SpawnPayload, held: SpawnPayload | None) -> control.Spawn | control.Go:
        if held is None:
            return control.Spawn(params=self._as_sent(payload))
        instruction = payload.instruction if payload.instruction != held.instruction else None
        left = self._as_sent(payload).limits.deadline_s
        return control.Go(params=control.GoParams(instruction=instruction, deadline_s=left))

    def _as_sent(self, payload: SpawnPayload) -> SpawnPayload:
        # The child times itself from the frame's arrival: it gets what is left of our deadline,
        # so its deadline and this supervisor's backstop name the same instant.
        return with_deadline(payload, self.deadline, now=anyio.current_time())

    def stop(self, cause: KillCause, *, start: RungAction = "cancel", reason: str = "") -> None:
        """Start the kill ladder (once); a later, harder request (`start="sigkill"`) escalates at once."""
        if self.exited:
            return
        # The first cause decides an attributed status; before `run`, a harder request replaces
        # the pending one, its cause with it.
        if self.kill_cause is None or (self._tg is None and start == "sigkill"):
            self.kill_cause = cause
        self._request_stop(start, reason or cause)

    def _stop_within(self, cause: KillCause, start: RungAction, reason: str) -> None:
        self.stop(cause, start=start, reason=reason)

    def _on_rung(self, rung: RungAction) -> None:
        self.listener.on_rung(self, rung, self.kill_cause or "faulty")

    # ---- reading -----------------------------------------------------------------------------

    def _on_ready(self) -> None:
        self.listener.on_ready(self)

    def _on_frame(self, message: BaseModel) -> None:
        if isinstance(message, control.Batch):
            self._on_notes(message.params)
        elif isinstance(message, control.Event):
            self.listener.on_event(self, message.params)
        elif isinstance(message, control.Usage):
            self.listener.on_usage(self, message.params)
        elif isinstance(message, control.SlotDone):
            self.listener.on_slot_done(self, message.params)
        elif isinstance(message, control.SlotStart):
            self.listener.on_slot_start(self, message.params)
        elif isinstance(message, control.Result):
            if self.result is not None:
                self.faults += 1
                return
            self.result = message.params
            self.result_at = anyio.current_time()
            self.listener.on_result(self, message.params)
        elif isinstance(message, control.Turn):
            self.listener.on_turn(self, message.params)
        elif isinstance(message, control.SupSlot) and self._answer_slot_now(message):
            pass  # answered in this turn
        elif isinstance(message, SupRequest):
            if isinstance(message, control.SupRecord):
                self._on_notes(message.params)  # what came before the items, handled first
            assert self._tg is not None
            self._tg.start_soon(self._answer, message)
        else:
            self.faults += 1  # the up union holds nothing else

    def _on_notes(self, notes: control.NotesParams) -> None:
        """A frame's events in their order, then its usage reports: as if each had come alone."""
        listener = self.listener
        for event in notes.events:
            listener.on_event(self, event)
        for usage in notes.usage:
            listener.on_usage(self, usage)

    def _answer_slot_now(self, request: control.SupSlot) -> bool:
        """Answer a slot that is free now in the turn that read its ask: a task started for it
        runs only after every task already ready, which on a busy loop was most of a slot's wait
        (bench/provider_limits.py). False: the slot must be waited for, by `_answer`."""
        result = self.listener.slot_nowait(self, request.params)
        if result is None:
            return False
        self.tell(jsonrpc.Response(id=request.id, result=result))
        return True

    def tell(self, message: BaseModel) -> None:
        """Send `message` without waiting: now when it can go whole, else from a task. Frames told
        go in the order told (a standing slot's call-back must never overtake its hand-out), so
        while one waits for its task, the next waits behind it."""
        if self.exited or self._tg is None:
            return
        if self._told_later == 0 and self.send_nowait(message):
            return
        self._told_later += 1
        self._tg.start_soon(self._tell_later, message)

    async def _tell_later(self, message: BaseModel) -> None:
        try:
            await self.send(message)  # the write lock is taken in the order the tasks started
        finally:
            self._told_later -= 1

    async def _answer(self, request: SupRequest) -> None:
        try:
            result = await self.listener.on_request(self, request)
        except LookupError as exc:
            error = jsonrpc.ErrorData(code=jsonrpc.INVALID_PARAMS, message=str(exc)[:500])
            await self.send(jsonrpc.ErrorResponse(id=request.id, error=error))
            return
        await self.send(jsonrpc.Response(id=request.id, result=result))

    def _tell_stderr(self, line: str) -> None:
        self.listener.on_stderr(self, line)

    def _on_stderr(self, line: str) -> None:
        self._stderr_tail.append(line)
        self.listener.on_stderr(self, line)

    # ---- liveness ----------------------------------------------------------------------------

    def _pinging(self, now: float) -> bool:
        if self.result is None:
            return True
        if self.result_at is not None and now - self.result_at >= self.teardown_grace_s:
            self.stop("teardown", start="sigterm", reason="did not exit after its result")
        return False

    def _on_starved(self, silence: Silence, late: SilentVerdict) -> None:
        self.listener.on_starved(self, silence, late)

    def _on_verdict(self, verdict: Verdict) -> None:
        if self.verdict is None:
            self.verdict = verdict
        self.listener.on_verdict(self, verdict)
        cause: KillCause = (
            "deadline" if verdict == "deadline" else ("faulty" if verdict == "faulty" else "stuck")
        )
        self.stop(cause, start="cancel" if verdict == "deadline" else "sigterm", reason=verdict)
