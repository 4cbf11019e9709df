"""What the daemon implements behind the API socket: the `Backend` protocol, and the ownership
rule every backend keeps (`check_owner`, `task_not_found`) so that another uid's task is
indistinguishable from a missing one (docs/design.md §9)."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from typing import Protocol

from agentd.api.peercred import Caller
from agentd.errors import ApiError
from protocol.api import (
    NOT_FOUND,
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
    TaskView,
    TranscriptParams,
    TranscriptView,
    TriggerRef,
    TriggerView,
    WaitParams,
    WatchParams,
)


class Backend(Protocol):
    """What the daemon implements behind the socket. It enforces the ownership rule: `check_owner`
    on every task it is asked about, and `list` and `match` filtered to the caller's tasks unless
    `is_admin`.

    Raise `ApiError` to refuse a request; any other exception is answered as an internal error.
    `events` yields a task's events after `after_seq`; with `follow` it keeps yielding until the
    task is terminal. It is closed (`aclose`) as soon as the client goes away.
    """

    async def submit(self, caller: Caller, params: SubmitParams) -> SubmitResult: ...
    async def get(self, caller: Caller, params: TaskRef) -> TaskView: ...
    async def list(self, caller: Caller, params: ListParams) -> builtins.list[TaskView]: ...
    # The same rule as `list`: only ids of tasks the caller may see.
    async def match(self, caller: Caller, params: MatchParams) -> TaskMatches: ...
    async def cancel(self, caller: Caller, params: CancelParams) -> TaskView: ...
    async def wait(self, caller: Caller, params: WaitParams) -> TaskView: ...
    def events(self, caller: Caller, params: EventsParams) -> AsyncIterator[EventView]: ...
    # The same rule as `list`: only the tasks the caller may see, each view once its state or
    # status changed (first the named tasks' views); it ends when the daemon stops.
    def watch(self, caller: Caller, params: WatchParams) -> AsyncIterator[TaskView]: ...
    async def tree(self, caller: Caller, params: TaskRef) -> builtins.list[NodeView]: ...
    async def transcript(self, caller: Caller, params: TranscriptParams) -> TranscriptView: ...
    async def fork(self, caller: Caller, params: ForkParams) -> SubmitResult: ...
    async def extend(self, caller: Caller, params: ExtendParams) -> TaskView: ...
    async def status(self, caller: Caller) -> DaemonStatus: ...
    # Schedules (docs/design.md §11) keep the same rule: another uid's schedule is a missing one.
    async def schedule_create(self, caller: Caller, params: ScheduleCreateParams) -> ScheduleCreateResult: ...
    async def schedule_list(
        self, caller: Caller, params: ScheduleListParams
    ) -> builtins.list[ScheduleView]: ...
    async def schedule_get(self, caller: Caller, params: ScheduleRef) -> ScheduleView: ...
    async def schedule_pause(self, caller: Caller, params: ScheduleRef) -> ScheduleView: ...
    async def schedule_resume(self, caller: Caller, params: ScheduleRef) -> ScheduleView: ...
    async def schedule_delete(self, caller: Caller, params: ScheduleRef) -> ScheduleView: ...
    # Approvals: a caller sees and decides only the requests of tasks it owns, unless
    # it is an admin; another uid's request is a missing one.
    async def approval_list(
        self, caller: Caller, params: ApprovalListParams
    ) -> builtins.list[ApprovalView]: ...
    async def approval_decide(self, caller: Caller, params: ApprovalDecideParams) -> ApprovalView: ...
    # Reactive triggers (docs/triggers.md) are the operator's: admins only (FORBIDDEN otherwise).
    async def trigger_list(self, caller: Caller) -> builtins.list[TriggerView]: ...
    async def trigger_pause(self, caller: Caller, params: TriggerRef) -> TriggerView: ...
    async def trigger_resume(self, caller: Caller, params: TriggerRef) -> TriggerView: ...
    async def trigger_restart(self, caller: Caller, params: TriggerRef) -> TriggerView: ...
    # Daily caps (docs/budgets.md): today's spend, the caps and the deferred tasks; a caller sees
    # their own, an admin everyone's.
    async def budget_list(self, caller: Caller) -> BudgetsView: ...


# The methods that change nothing and need only the journal and the supervisor's `LiveFigures`:
# when the API runs on a loop of its own, these are answered there (`ReadMethods`), every other
# method on the daemon's loop (docs/decisions.md, "API reads on a loop of their own").
READ_METHODS = frozenset({"task.get", "task.list", "task.match", "daemon.status"})


class ReadMethods(Protocol):
    """The part of `Backend` that answers `READ_METHODS`, with the same ownership rule."""

    async def get(self, caller: Caller, params: TaskRef) -> TaskView: ...
    async def list(self, caller: Caller, params: ListParams) -> builtins.list[TaskView]: ...
    async def match(self, caller: Caller, params: MatchParams) -> TaskMatches: ...
    async def status(self, caller: Caller) -> DaemonStatus: ...


def task_not_found(task_id: str | None = None) -> ApiError:
    """The one NOT_FOUND error for a task, whether it is missing or belongs to someone else."""
    what = f"no task {task_id!r}" if task_id is not None else "no such task"
    return ApiError(NOT_FOUND, what)


def schedule_not_found(schedule_id: str) -> ApiError:
    """The one NOT_FOUND error for a schedule, whether it is missing or someone else's."""
    return ApiError(NOT_FOUND, f"no schedule {schedule_id!r}")


def check_owner(caller: Caller, owner_uid: int, *, task_id: str | None = None) -> None:
    """Refuse `caller` a task owned by another uid unless the caller is an admin.

    Raises NOT_FOUND, not FORBIDDEN, with the same message as a missing task (`task_not_found`),
    so a caller cannot probe which task ids exist.
    """
    if owner_uid != caller.uid and not caller.is_admin:
        raise task_not_found(task_id)
