"""Stand-ins for a `TaskRun`'s ports, so a task run is tested without a `Supervisor`.

`RecordingJournal` (its task writes in `RecordingTasks`) and `RecordingSpawner` note what they are
asked, in order, in one shared `Ledger`: a test reads the write-ahead order of journal writes
around each spawn from it. The journal can hold its task as already ended, as the real one does
for a task cancelled while queued; the spawner either starts a real process or fails with
`SpawnError`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from pydantic import JsonValue

from agentd.errors import InvalidTransition, SpawnError
from agentd.journal.records import NodeRecord, NodeState, TaskRecord, new_run_id, new_task_id
from agentd.spawning.spawner import ExecSpawner, SpawnedProcess, SpawnRequest
from protocol.api import TaskSpec, TaskState
from protocol.result import RunUsage, TerminalStatus

Ledger = list[str]


def queued_record(instruction: str) -> TaskRecord:
    """A task just taken from the queue."""
    return TaskRecord(
        task_id=new_task_id(),
        run_id=new_run_id(),
        owner_uid=0,
        idempotency_key=None,
        spec=TaskSpec(instruction=instruction),
        state="queued",
        created_at=time.time(),
    )


class RecordingTasks:
    """A `RunTasks` that keeps each write as a line of the ledger (`starting 0`, `end 1 …`)."""

    def __init__(self, ledger: Ledger, record: TaskRecord, *, state: TaskState = "queued") -> None:
        self.ledger = ledger
        self.record = replace(record, state=state)
        # Awaited before the `starting` write completes (a test holds the commit with it).
        self.before_starting: Callable[[], Awaitable[object]] | None = None

    async def mark_starting(
        self, task_id: str, *, grant_steps: int | None = None, grant_tokens: int | None = None
    ) -> TaskRecord:
        if self.before_starting is not None:
            await self.before_starting()
        if self.record.state != "queued":
            raise InvalidTransition(task_id, self.record.state, "starting")
        self.ledger.append("starting 0")
        self.record = replace(self.record, state="starting")
        return self.record

    async def mark_running(self, task_id: str, pid: int, pid_start_time: float) -> TaskRecord:
        self.ledger.append("running 0")
        self.record = replace(self.record, state="running", pid=pid, pid_start_time=pid_start_time)
        return self.record

    async def mark_started(
        self,
        task_id: str,
        pid: int,
        pid_start_time: float,
        *,
        grant_steps: int | None = None,
        grant_tokens: int | None = None,
    ) -> TaskRecord:
        await self.mark_starting(task_id, grant_steps=grant_steps, grant_tokens=grant_tokens)
        return await self.mark_running(task_id, pid, pid_start_time)

    async def upsert_node(
        self,
        task_id: str,
        handle: str,
        *,
        parent: str | None,
        depth: int,
        state: NodeState = "starting",
        pid: int | None = None,
        pid_start_time: float | None = None,
        usage: RunUsage | None = None,
        grant_steps: int | None = None,
        grant_tokens: int | None = None,
        revive: bool = False,
    ) -> NodeRecord:
        self.ledger.append(f"{state} {handle}")
        return NodeRecord(task_id, handle, parent, depth, state, time.time(), pid, pid_start_time)

    async def end_node(
        self, task_id: str, handle: str, status: TerminalStatus, usage: RunUsage | None = None
    ) -> NodeRecord:
        self.ledger.append(f"end {handle} {status.value}")
        return NodeRecord(task_id, handle, None, 0, "terminal", time.time(), status=status)

    async def nodes(self, task_id: str) -> tuple[NodeRecord, ...]:
        return ()


class RecordingJournal:
    """A `RunJournal` that keeps each write as a line of the ledger (`starting 0`, `event …`)."""

    def __init__(self, ledger: Ledger, record: TaskRecord, *, state: TaskState = "queued") -> None:
        self.ledger = ledger
        self.tasks = RecordingTasks(ledger, record, state=state)

    def append_event(self, task_id: str, event: str, fields: Mapping[str, JsonValue] | None = None) -> None:
        self.ledger.append(f"event {event}")


class RecordingSpawner:
    """A `ChildSpawner` that notes each spawn (`spawn 0`), then execs it or fails (`fail=True`)."""

    def __init__(self, ledger: Ledger, *, fail: bool = False) -> None:
        self.ledger = ledger
        self.fail = fail
        self._exec = ExecSpawner()
        # Called as each spawn is asked for (a test releases a held journal write with it).
        self.on_spawn: Callable[[], object] | None = None

    async def settle(self) -> None:
        return None

    async def spawn_child(self, request: SpawnRequest) -> SpawnedProcess:
        self.ledger.append(f"spawn {request.handle}")
        if self.on_spawn is not None:
            self.on_spawn()
        if self.fail:
            raise SpawnError("no process for you")
        return self._exec.spawn(request)
