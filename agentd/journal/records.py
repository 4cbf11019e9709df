"""What the journal hands back: frozen records of tasks, nodes and events, and their ids.

Records are built once from a row (JSON columns parsed once) and are safe to share between the
writer thread and the event loop. `to_view()` turns a record into its `protocol.api` wire view.
Ids are time-sortable and URL-safe: a prefix plus 26 Crockford base32 characters (ULID layout:
48 bits of milliseconds, then 80 random bits).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Literal

from pydantic import JsonValue

from protocol.api import (
    ApprovalState,
    ApprovalView,
    DeferralView,
    EventView,
    ForkOrigin,
    NodeView,
    ScheduleSpec,
    ScheduleState,
    ScheduleView,
    TaskSpec,
    TaskState,
    TaskView,
)
from protocol.result import AbortKind, RunError, RunResult, RunUsage, TerminalStatus

NodeState = Literal["starting", "running", "terminal"]
TASK_STATES: tuple[TaskState, ...] = ("queued", "starting", "running", "terminal")

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _ulid() -> str:
    value = ((time.time_ns() // 1_000_000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 0x1F])
        value >>= 5
    return "".join(reversed(chars))


def new_task_id() -> str:
    """A fresh task id, e.g. `t_01J9Z3K6W8M2Q4R5S7T9V0X1Y2`; later ids sort after earlier ones."""
    return "t_" + _ulid()


def new_schedule_id() -> str:
    """A fresh schedule id (`s_` + 26 characters)."""
    return "s_" + _ulid()


def new_call_id() -> str:
    """A fresh approval request id (`a_` + 26 characters)."""
    return "a_" + _ulid()


def new_run_id() -> str:
    """A fresh run id (`r_` + 26 characters); a requeued task keeps its run id."""
    return "r_" + _ulid()


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task as journaled."""

    task_id: str
    run_id: str
    owner_uid: int
    idempotency_key: str | None
    spec: TaskSpec
    state: TaskState
    created_at: float
    # Invariant: `status` is set exactly when `state` is "terminal" (a CHECK constraint holds it).
    status: TerminalStatus | None = None
    exit_code: int | None = None
    result: JsonValue = None
    partial: bool = False
    usage: RunUsage = field(default_factory=RunUsage)
    abort: AbortKind | None = None
    error: RunError | None = None
    # Invariant: `attempts` counts runs that were interrupted and requeued; the current (or next)
    # run is attempt number `attempts + 1`, so a requeue is allowed while that stays below
    # `spec.retry.max_attempts` (see `may_requeue`).
    attempts: int = 0
    # Invariant: (`pid`, `pid_start_time`) identify the live process of the current attempt only
    # while `state` is "running"; the start time (psutil `create_time()`) guards against pid reuse.
    pid: int | None = None
    pid_start_time: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    # A fire of a schedule: which one, and the occurrence (UTC instant) it fired for.
    schedule_id: str | None = None
    fire_at: float | None = None
    # The finished run reported that it found nothing to do (a loop's idle backoff reads it).
    idle: bool = False
    # A delivery of a reactive trigger: its name and the URI it is about (docs/triggers.md).
    trigger: str | None = None
    uri: str | None = None
    # Which executor ran the task (`local`, `temporal`) and where: the host, or the Temporal worker.
    executor: str | None = None
    worker: str | None = None
    # Runs that went on from the journaled transcript (after a restart, or a park at a stop), and
    # when the first run started: the deadline counts from there, in wall time.
    resumes: int = 0
    first_started_at: float | None = None
    # A fork (`agentd fork`): the task and step its root's transcript was copied from.
    forked_from: str | None = None
    forked_step: int | None = None
    # Invariant: set only while `state` is "queued": the budget ran out (`on_budget = "pause"`);
    # the task waits for `extend`, keeping the run's result, and the scheduler leaves it alone.
    paused_at: float | None = None
    paused_result: RunResult | None = None
    # Set only while `state` is "queued": it was parked while a call waited for a person's
    # approval (this request); the scheduler leaves it until the request is decided or
    # `parked_until` (wall clock: the request's expiry or the task's deadline) passes.
    parked_call: str | None = None
    parked_until: float | None = None
    # Set only while `state` is "queued": a daily cap was spent when the scheduler would have
    # started it (docs/budgets.md); it waits until this instant (wall clock: the cap's next day).
    deferred_until: float | None = None
    deferred_reason: str | None = None

    @property
    def may_requeue(self) -> bool:
        """Whether the retry policy allows one more run after an interruption."""
        return self.attempts + 1 < self.spec.retry.max_attempts

    def to_view(self) -> TaskView:
        paused = self.paused_result
        if paused is not None and self.state == "queued":  # what the paused run reached
            return self._view().model_copy(
                update={
                    "state": "awaiting_budget",
                    "result": paused.result,
                    "partial": paused.partial,
                    "usage": paused.usage,
                    "error": RunError(kind="awaiting_budget", message=_budget_wait(paused)),
                }
            )
        if self.parked_call is not None and self.state == "queued":
            return self._view().model_copy(update={"state": "awaiting_approval"})
        if self.deferred_until is not None and self.state == "queued":
            deferred = DeferralView(until=self.deferred_until, reason=self.deferred_reason or "")
            return self._view().model_copy(update={"deferred": deferred})
        return self._view()

    def _view(self) -> TaskView:
        return TaskView(
            task_id=self.task_id,
            run_id=self.run_id,
            owner_uid=self.owner_uid,
            state=self.state,
            status=self.status,
            exit_code=self.exit_code,
            result=self.result,
            partial=self.partial,
            usage=self.usage,
            abort=self.abort,
            error=self.error,
            attempts=self.attempts,
            instruction=self.spec.instruction,
            model=self.spec.model,
            mcp=list(self.spec.mcp),
            created_at=self.created_at,
            started_at=self.started_at,
            ended_at=self.ended_at,
            pid=self.pid,
            schedule_id=self.schedule_id,
            trigger=self.trigger,
            uri=self.uri,
            executor=self.executor,
            worker=self.worker,
            resumes=self.resumes,
            forked_from=(
                ForkOrigin(task_id=self.forked_from, step=self.forked_step or 0)
                if self.forked_from is not None
                else None
            ),
        )


def _budget_wait(result: RunResult) -> str:
    spent = "step" if result.status is TerminalStatus.EXHAUSTED_STEPS else "token"
    if result.error is not None and result.error.kind == "cost_budget":
        spent = "cost"
    return f"its {spent} budget ran out: it waits for `agentd extend` (or ends {result.status.value})"


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """One schedule as journaled: its trigger, the task each fire runs, and its counters."""

    schedule_id: str
    owner_uid: int
    idempotency_key: str | None
    name: str | None
    trigger: ScheduleSpec
    spec: TaskSpec
    state: ScheduleState
    created_at: float
    note: str | None = None
    # Invariant: set exactly while the schedule waits for a clock-driven fire (or a loop for its
    # next run); None while a loop run goes on, and once paused or ended.
    next_fire_at: float | None = None
    runs: int = 0
    failures: int = 0
    skipped: int = 0
    tokens_used: int = 0
    pause_s: float | None = None
    last_task_id: str | None = None
    last_status: TerminalStatus | None = None
    last_error: str | None = None
    last_fire_at: float | None = None

    def to_view(self) -> ScheduleView:
        return ScheduleView(
            schedule_id=self.schedule_id,
            owner_uid=self.owner_uid,
            name=self.name,
            trigger=self.trigger,
            instruction=self.spec.instruction,
            state=self.state,
            note=self.note,
            next_fire_at=self.next_fire_at,
            runs=self.runs,
            failures=self.failures,
            skipped=self.skipped,
            tokens_used=self.tokens_used,
            pause_s=self.pause_s,
            last_task_id=self.last_task_id,
            last_status=self.last_status,
            last_error=self.last_error,
            last_fire_at=self.last_fire_at,
            created_at=self.created_at,
        )


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One subagent of a task's tree (handle "0" is the root); kept after the task ends."""

    task_id: str
    handle: str
    parent: str | None
    depth: int
    state: NodeState
    created_at: float
    pid: int | None = None
    pid_start_time: float | None = None
    status: TerminalStatus | None = None
    usage: RunUsage = field(default_factory=RunUsage)
    grant_steps: int | None = None
    grant_tokens: int | None = None
    ended_at: float | None = None

    def to_view(self) -> NodeView:
        return NodeView(
            handle=self.handle,
            parent=self.parent,
            depth=self.depth,
            status=self.status,
            state=self.state,
            pid=self.pid,
            usage=self.usage,
            grant_steps=self.grant_steps,
            grant_tokens=self.grant_tokens,
        )


@dataclass(frozen=True, slots=True)
class NodeEnd:
    """A node's end to record with its task's terminal status, in the same commit (the root's)."""

    status: TerminalStatus
    usage: RunUsage


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One journaled event. `seq` starts at 1 per task and grows by one per event, with no gaps."""

    task_id: str
    seq: int
    ts: float
    event: str
    fields: dict[str, JsonValue]

    def to_view(self) -> EventView:
        return EventView(seq=self.seq, ts=self.ts, event=self.event, fields=self.fields)


@dataclass(frozen=True, slots=True)
class JournalHealth:
    """Whether the last write committed, and the most recent write failure (kept after recovery)."""

    healthy: bool = True
    last_error: str | None = None
    last_error_at: float | None = None


@dataclass(frozen=True, slots=True)
class JournalStats:
    """Writer counters since open: `commits` far below `operations` means group commit is working."""

    commits: int = 0
    operations: int = 0
    failed_batches: int = 0
    events_written: int = 0
    events_dropped: int = 0


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One gated tool call held for a person; times are UTC epoch seconds."""

    call_id: str
    task_id: str
    run_id: str
    handle: str
    owner_uid: int
    tool_call_id: str
    server: str
    tool: str
    arguments: JsonValue
    digest: str
    instruction: str
    state: ApprovalState
    consumed: bool
    reason: str | None
    decided_by: int | None
    requested_at: float
    expires_at: float
    decided_at: float | None

    def to_view(self) -> ApprovalView:
        return ApprovalView(
            call=self.call_id,
            task_id=self.task_id,
            handle=self.handle,
            owner_uid=self.owner_uid,
            server=self.server,
            tool=self.tool,
            arguments=self.arguments,
            instruction=self.instruction,
            state=self.state,
            requested_at=self.requested_at,
            expires_at=self.expires_at,
            decided_at=self.decided_at,
            decided_by=self.decided_by,
            reason=self.reason,
        )
