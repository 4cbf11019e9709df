"""`InMemoryBackend`: the daemon's `Backend` contract over a dict, with hooks tests observe.

It keeps the ownership rule the real daemon must keep (`check_owner`, owner-filtered lists), records
every caller it sees, and counts event iterators opened and closed. Instructions that start with
`explode` or `unavailable` make `submit` fail, to exercise the server's error paths.
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
from pydantic import JsonValue

from agentd.api.backend import check_owner, task_not_found
from agentd.api.peercred import Caller
from agentd.errors import ApiError
from protocol.api import (
    UNAVAILABLE,
    ApprovalDecideParams,
    ApprovalListParams,
    ApprovalView,
    BudgetsView,
    CancelParams,
    DaemonStatus,
    EventsParams,
    EventView,
    ExtendParams,
    ForkParams,
    ListParams,
    MatchParams,
    NodeView,
    ScheduleCreateParams,
    ScheduleCreateResult,
    ScheduleListParams,
    ScheduleRef,
    ScheduleView,
    SubmitParams,
    SubmitResult,
    TaskMatches,
    TaskRef,
    TaskSpec,
    TaskView,
    TranscriptParams,
    TranscriptView,
    TriggerRef,
    TriggerView,
    WaitParams,
    WatchParams,
)
from protocol.result import TerminalStatus


@dataclass
class _Task:
    view: TaskView
    events: list[EventView] = field(default_factory=list)


class InMemoryBackend:
    def __init__(self) -> None:
        self._tasks: dict[str, _Task] = {}
        self._ids = itertools.count(1)
        self._keys: dict[tuple[int, str], str] = {}
        self._changed = anyio.Event()
        self.callers: list[Caller] = []
        self.iterators_opened = 0
        self.iterators_closed = 0
        self.iterator_closed = anyio.Event()
        self.streaming = anyio.Event()
        self.waiting = anyio.Event()
        self.wait_ended = anyio.Event()

    # ---- test hooks ----------------------------------------------------------------------

    def add_event(self, task_id: str, event: str, **fields: JsonValue) -> None:
        task = self._tasks[task_id]
        task.events.append(EventView(seq=len(task.events) + 1, ts=0.0, event=event, fields=fields))
        self._notify()

    def finish(self, task_id: str, status: TerminalStatus = TerminalStatus.COMPLETED) -> None:
        task = self._tasks[task_id]
        task.view = task.view.model_copy(update={"state": "terminal", "status": status, "exit_code": 0})
        self.add_event(task_id, "task.terminal", status=status)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _owned(self, caller: Caller, task_id: str) -> _Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise task_not_found(task_id)
        check_owner(caller, task.view.owner_uid, task_id=task_id)
        return task

    # ---- Backend -------------------------------------------------------------------------

    async def submit(self, caller: Caller, params: SubmitParams) -> SubmitResult:
        self.callers.append(caller)
        instruction = params.spec.instruction
        if instruction.startswith("explode"):
            raise RuntimeError(f"backend bug while handling {instruction!r}")
        if instruction.startswith("unavailable"):
            raise ApiError(UNAVAILABLE, "the journal could not commit", retryable=True)
        key = (caller.uid, params.idempotency_key) if params.idempotency_key else None
        if key is not None and key in self._keys:
            existing = self._tasks[self._keys[key]].view
            return SubmitResult(task_id=existing.task_id, state=existing.state, created=False)
        task_id = f"t{next(self._ids)}"
        view = TaskView(
            task_id=task_id,
            run_id=f"r-{task_id}",
            owner_uid=caller.uid,
            state="queued",
            instruction=instruction,
        )
        self._tasks[task_id] = _Task(view)
        if key is not None:
            self._keys[key] = task_id
        self.add_event(task_id, "task.submitted")
        return SubmitResult(task_id=task_id, state="queued", created=True)

    async def get(self, caller: Caller, params: TaskRef) -> TaskView:
        self.callers.append(caller)
        return self._owned(caller, params.task_id).view

    async def list(self, caller: Caller, params: ListParams) -> builtins.list[TaskView]:
        self.callers.append(caller)
        views = [t.view for t in self._tasks.values() if caller.is_admin or t.view.owner_uid == caller.uid]
        views = [v for v in views if params.state in (None, v.state)]
        views = [v for v in views if params.schedule_id in (None, v.schedule_id)]
        return [v for v in views if params.trigger in (None, v.trigger)][: params.limit]

    async def match(self, caller: Caller, params: MatchParams) -> TaskMatches:
        self.callers.append(caller)
        seen = (t.view for t in self._tasks.values() if caller.is_admin or t.view.owner_uid == caller.uid)
        ids = sorted(v.task_id for v in seen if v.task_id.startswith(params.prefix))
        return TaskMatches(task_ids=ids[: params.limit])

    async def cancel(self, caller: Caller, params: CancelParams) -> TaskView:
        self.callers.append(caller)
        task = self._owned(caller, params.task_id)
        if task.view.state != "terminal":
            self.finish(params.task_id, TerminalStatus.CANCELLED)
        return task.view

    async def wait(self, caller: Caller, params: WaitParams) -> TaskView:
        self.callers.append(caller)
        task = self._owned(caller, params.task_id)
        self.waiting.set()
        try:
            with anyio.move_on_after(params.timeout_s if params.timeout_s is not None else float("inf")):
                while task.view.state != "terminal":
                    await self._changed.wait()
        finally:
            self.wait_ended.set()
        return task.view

    async def events(self, caller: Caller, params: EventsParams) -> AsyncIterator[EventView]:
        self.callers.append(caller)
        task = self._owned(caller, params.task_id)
        self.iterators_opened += 1
        try:
            seq = params.after_seq  # events are numbered 1, 2, ...: seq is also an index
            while True:
                changed = self._changed  # taken before reading (see `watch`)
                while seq < len(task.events):
                    event = task.events[seq]
                    seq = event.seq
                    self.streaming.set()
                    yield event
                if not params.follow or task.view.state == "terminal":
                    return
                await changed.wait()
        finally:
            self.iterators_closed += 1
            self.iterator_closed.set()

    async def watch(self, caller: Caller, params: WatchParams) -> AsyncIterator[TaskView]:
        self.callers.append(caller)
        sent: dict[str, tuple[str, str | None]] = {}
        pending = set(params.task_ids)
        while True:
            # Taken before reading, as the journal's `watching` is: a change made while a view is
            # being sent (on another loop, the send takes a while) is not missed.
            changed = self._changed
            for task_id in sorted(pending):
                task = self._tasks.get(task_id)
                if task is None or not (caller.is_admin or task.view.owner_uid == caller.uid):
                    continue
                if sent.get(task_id) != (task.view.state, task.view.status):
                    sent[task_id] = (task.view.state, task.view.status)
                    self.streaming.set()
                    yield task.view
            await changed.wait()
            pending = set(self._tasks)

    async def tree(self, caller: Caller, params: TaskRef) -> builtins.list[NodeView]:
        self.callers.append(caller)
        self._owned(caller, params.task_id)
        return [NodeView(handle="0", parent=None, depth=0)]

    async def transcript(self, caller: Caller, params: TranscriptParams) -> TranscriptView:
        self.callers.append(caller)
        view = self._owned(caller, params.task_id).view
        return TranscriptView(
            task_id=view.task_id, handle=params.handle, state=view.state, instruction=view.instruction
        )

    async def fork(self, caller: Caller, params: ForkParams) -> SubmitResult:
        view = self._owned(caller, params.task_id).view
        spec = TaskSpec(instruction=params.instruction or view.instruction)
        return await self.submit(caller, SubmitParams(spec=spec, idempotency_key=params.idempotency_key))

    async def extend(self, caller: Caller, params: ExtendParams) -> TaskView:
        return self._owned(caller, params.task_id).view

    async def status(self, caller: Caller) -> DaemonStatus:
        self.callers.append(caller)
        return DaemonStatus(
            pid=0,
            version="test",
            uptime_s=0.0,
            draining=False,
            queued=sum(t.view.state == "queued" for t in self._tasks.values()),
            running=0,
            max_concurrent_tasks=4,
            journal_ok=True,
        )

    # ---- schedules: not kept here (the real daemon's are tested end to end) -------------------

    def _no_schedules(self) -> ApiError:
        return ApiError(UNAVAILABLE, "the in-memory backend keeps no schedules")

    async def schedule_create(self, caller: Caller, params: ScheduleCreateParams) -> ScheduleCreateResult:
        raise self._no_schedules()

    async def schedule_list(self, caller: Caller, params: ScheduleListParams) -> builtins.list[ScheduleView]:
        return []

    async def schedule_get(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        raise self._no_schedules()

    async def schedule_pause(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        raise self._no_schedules()

    async def schedule_resume(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        raise self._no_schedules()

    async def schedule_delete(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        raise self._no_schedules()

    async def approval_list(self, caller: Caller, params: ApprovalListParams) -> builtins.list[ApprovalView]:
        self.callers.append(caller)
        if params.task_id is not None:
            task = self._tasks.get(params.task_id)
            if task is None:
                raise task_not_found(params.task_id)
            check_owner(caller, task.view.owner_uid, task_id=params.task_id)
        return []

    async def approval_decide(self, caller: Caller, params: ApprovalDecideParams) -> ApprovalView:
        self.callers.append(caller)
        raise task_not_found(params.task_id)

    async def trigger_list(self, caller: Caller) -> builtins.list[TriggerView]:
        return []

    async def trigger_pause(self, caller: Caller, params: TriggerRef) -> TriggerView:
        raise ApiError(UNAVAILABLE, "this backend runs no triggers", retryable=False)

    async def trigger_resume(self, caller: Caller, params: TriggerRef) -> TriggerView:
        raise ApiError(UNAVAILABLE, "this backend runs no triggers", retryable=False)

    async def trigger_restart(self, caller: Caller, params: TriggerRef) -> TriggerView:
        raise ApiError(UNAVAILABLE, "this backend runs no triggers", retryable=False)

    async def budget_list(self, caller: Caller) -> BudgetsView:
        return BudgetsView(now=0.0)
