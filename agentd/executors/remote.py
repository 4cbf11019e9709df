"""What the front door and a Temporal worker agree on, with no SDK: pure data and decisions.

One workflow per task (its id is derived from the task id, so a resubmit with the same
idempotency key — which returns the same task — never starts a second one); one activity that
runs the task on a worker's local supervisor. The activity's heartbeats carry the attempt, the
worker, live usage, the tree and a bounded tail of the task's events; the front door mirrors
those into its own journal (`Mirror`), so `agentd logs -f` reads them as it does a local task's.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from agentd.journal.records import TaskRecord
from protocol.api import RetryPolicy, TaskSpec
from protocol.result import RunError, RunResult, TerminalStatus
from protocol.transcript import STEP_ITEMS_ADAPTER, StepItem, approx_bytes

WORKFLOW_NAME = "agentd.task"
ACTIVITY_NAME = "agentd.run_task"
# The failure type of a retryable attempt: its child crashed, or its worker handed it back.
RETRYABLE_TYPE = "agentd.retryable"
# Time the workflow allows beyond the task's deadline: the kill ladder, teardown, the last
# heartbeat and the result's trip back (the task's own deadline is enforced on the worker).
DEADLINE_GRACE_S = 60.0
# Events a heartbeat (and a result) carries at most, and their encoded size cap: older ones are
# dropped first and the front door records how many it missed (`task.events_lost`).
TAIL_EVENTS = 200
TAIL_BYTES = 256 * 1024
NODES_CAP = 64
# A task's journaled steps go into its workflow's history as signals (`steps_batches`), read back
# by its next attempt on any worker (`seed_of`). A signal's payload stays well under Temporal's
# 2 MiB blob limit; the history as a whole is bounded by `max_transcript_bytes` and Temporal's own
# history limits (docs/temporal.md).
STEPS_SIGNAL = "agentd.steps"
SIGNAL_BYTES = 1024 * 1024


def workflow_id(task_id: str) -> str:
    return f"agentd-task-{task_id}"


def workflow_input(record: TaskRecord, deadline_s: float, heartbeat_timeout_s: float) -> dict[str, JsonValue]:
    """The workflow's argument: everything a worker needs to run the task from its own config."""
    return {
        "task_id": record.task_id,
        "run_id": record.run_id,
        "owner_uid": record.owner_uid,
        "spec": record.spec.model_dump(mode="json"),
        "deadline_s": deadline_s,
        "grace_s": DEADLINE_GRACE_S,
        "max_attempts": record.spec.retry.max_attempts,
        "heartbeat_timeout_s": heartbeat_timeout_s,
    }


@dataclass(frozen=True, slots=True)
class Assignment:
    """One attempt as a worker reads its activity's argument (the workflow input and `deadline_at`)."""

    task_id: str
    owner_uid: int
    spec: TaskSpec
    # The front door's grant: the task's deadline cut to the front door's ceilings.
    deadline_s: float
    # Wall-clock seconds at which the task's deadline passes: the workflow's start + `deadline_s`.
    deadline_at: float

    @classmethod
    def of(cls, task: Mapping[str, Any]) -> Assignment:
        return cls(
            task_id=str(task["task_id"]),
            owner_uid=int(task["owner_uid"]),
            spec=TaskSpec.model_validate(task["spec"]),
            deadline_s=float(task["deadline_s"]),
            deadline_at=float(task["deadline_at"]),
        )

    def attempt_spec(self, now: float) -> TaskSpec | None:
        """The spec this attempt runs at `now` (wall clock), or None when no time is left: its
        deadline is what is left of the grant, never more than the grant however the clocks of
        the workflow's host and this one differ; one attempt (Temporal owns the retries)."""
        left_s = min(self.deadline_s, self.deadline_at - now)
        if left_s <= 0:
            return None
        limits = self.spec.limits.model_copy(update={"deadline_s": left_s})
        return self.spec.model_copy(update={"limits": limits, "retry": RetryPolicy(max_attempts=1)})


def retryable(result: RunResult) -> bool:
    """Whether Temporal may run the task again: only a crashed child with no abort (a
    signal death, a spawn failure). Every other terminal status is the task's answer."""
    return result.status is TerminalStatus.CRASHED and result.abort is None


def result_of(record: TaskRecord) -> RunResult:
    """A worker's terminal local record as the result its activity returns."""
    assert record.status is not None
    return RunResult(
        status=record.status,
        result=record.result,
        partial=record.partial,
        usage=record.usage,
        abort=record.abort,
        error=record.error,
        idle=record.idle,
    )


def synthetic(status: TerminalStatus, kind: str, message: str) -> RunResult:
    return RunResult(status=status, error=RunError(kind=kind, message=message[:500]))


def steps_batches(handle: str, items: list[StepItem]) -> list[dict[str, JsonValue]]:
    """A node's new steps as the signals that carry them, in order, each under `SIGNAL_BYTES`
    (an item itself is capped at 1 MB of text: `protocol/transcript.py`)."""
    batches: list[dict[str, JsonValue]] = []
    batch: list[JsonValue] = []
    size = 0
    for item in items:
        cost = approx_bytes(item)
        if batch and size + cost > SIGNAL_BYTES:
            batches.append({"handle": handle, "items": batch})
            batch, size = [], 0
        batch.append(item.model_dump(mode="json"))
        size += cost
    if batch:
        batches.append({"handle": handle, "items": batch})
    return batches


def seed_of(batches: Iterable[object]) -> dict[str, list[StepItem]]:
    """Each node's transcript from the signals an earlier attempt sent, in history order. Nothing
    but a worker sends them; should one be unreadable, its node keeps the steps before it (a
    resume from a prefix of the journal beats a restart)."""
    seed: dict[str, list[StepItem]] = {}
    broken: set[str] = set()
    for batch in batches:
        if not isinstance(batch, dict) or not isinstance(handle := batch.get("handle"), str):
            continue
        if handle in broken:
            continue
        try:
            items = STEP_ITEMS_ADAPTER.validate_python(batch.get("items"))
        except ValueError:
            broken.add(handle)
            continue
        seed.setdefault(handle, []).extend(items)
    return seed


Event = tuple[int, float, str, dict[str, JsonValue]]


@dataclass
class EventTail:
    """The newest events of one attempt, bounded in count and encoded size."""

    events: deque[Event] = field(default_factory=lambda: deque(maxlen=TAIL_EVENTS))

    def extend(self, events: Iterable[Event]) -> None:
        self.events.extend(events)

    def encoded(self) -> list[JsonValue]:
        out: list[JsonValue] = [[seq, ts, name, fields] for seq, ts, name, fields in self.events]
        size = sum(len(json.dumps(e)) for e in out)
        while out and size > TAIL_BYTES:
            size -= len(json.dumps(out.pop(0)))
        return out


def decode_events(raw: JsonValue) -> list[Event]:
    out: list[Event] = []
    if not isinstance(raw, list):
        return out
    for item in raw:
        if isinstance(item, list) and len(item) == 4:
            seq, ts, name, fields = item
            if isinstance(seq, int) and isinstance(ts, int | float) and isinstance(name, str):
                out.append((seq, float(ts), name, fields if isinstance(fields, dict) else {}))
    return out


@dataclass(frozen=True, slots=True)
class Appended:
    """One event the front door appends to its journal."""

    event: str
    fields: dict[str, JsonValue]


@dataclass
class Mirror:
    """Which of a remote task's events the front door has journaled: per attempt, the last seq.

    Heartbeats overlap (each carries the newest events), so a seq already seen is skipped; a gap
    (more events than a tail holds went by between two polls) is recorded (`task.events_lost`), not hidden.
    """

    last_seq: dict[int, int] = field(default_factory=dict)
    workers: dict[int, str] = field(default_factory=dict)

    def new_attempt(self, attempt: int, worker: str) -> Appended | None:
        """`task.attempt` the first time an attempt (or its worker) is seen."""
        if self.workers.get(attempt) == worker:
            return None
        self.workers[attempt] = worker
        return Appended("task.attempt", {"attempt": attempt, "worker": worker})

    def take(self, attempt: int, events: Iterable[Event]) -> list[Appended]:
        out: list[Appended] = []
        last = self.last_seq.get(attempt, 0)
        for seq, _ts, name, fields in sorted(events, key=lambda e: e[0]):
            if seq <= last:
                continue
            if seq > last + 1:
                out.append(Appended("task.events_lost", {"attempt": attempt, "count": seq - last - 1}))
            out.append(Appended(name, {**fields, "attempt": attempt}))
            last = seq
        self.last_seq[attempt] = last
        return out


@dataclass(frozen=True, slots=True)
class TemporalSettings:
    """The `[executor]` keys, as both ends use them (agentd/options.py builds it)."""

    target: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "agentd"
    connect_timeout_s: float = 10.0
    heartbeat_timeout_s: float = 10.0
