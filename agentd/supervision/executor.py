"""The `Executor` seam (docs/design.md §16): between "a task must run" and "spawn a local child".

The supervisor keeps the queue, the journal and every terminal status; an executor only says how
one task's run happens. `local` (the default) is a `TaskRun` on this host. A remote executor
(agentd/executors/temporal_front.py) follows a run on another host through the same `Run` face,
so `agentd status/list/logs/tree/cancel` and the drain work the same with either.
"""

from __future__ import annotations

from typing import Protocol

from agentd.journal.records import NodeEnd, TaskRecord
from agentd.supervision.liveness import KillCause
from agentd.supervision.ports import RunPorts
from agentd.supervision.supervised_child import SupervisedChild
from agentd.supervision.task_run import TaskRun
from protocol.api import NodeView
from protocol.result import RunResult
from protocol.spawn import SpawnPayload


class Run(Protocol):
    """One task's run, as the supervisor drives it (`TaskRun` is the local one)."""

    @property
    def root_child(self) -> SupervisedChild | None: ...

    @property
    def root_end(self) -> NodeEnd | None:
        """The root node's end, once the run is over, if the supervisor is to commit it with the
        task's terminal status (None: the run recorded it itself, or there is none here)."""
        ...

    async def run(self) -> RunResult | None:
        """The task's result; None when nothing is to be recorded now (a cancelled queued task,
        or a remote run the front door stopped following while it goes on elsewhere)."""
        ...

    def cancel(self, reason: str, *, cause: KillCause = "cancel", force: bool = False) -> None: ...

    def pids(self) -> set[int]: ...

    def node_views(self) -> list[NodeView]: ...

    def awaiting_approval(self) -> set[str]: ...


class Executor(Protocol):
    """How a task runs: `name` is what the journal records as the task's executor."""

    name: str
    # This host's supervisor runs the task itself and resumes it from its journaled transcript
    # (after a restart, or a park at a stop); a remote executor's worker does that on its side.
    resumes_here: bool
    # A run of a task that ran before (resumed, or forked) replays its journaled transcript here.
    replays: bool

    async def accept(self, record: TaskRecord) -> None:
        """Make the just-journaled task durable with the executor before its submit is
        acknowledged; raises `ExecutorUnavailable` (retryable) if it could not."""
        ...

    def start(self, ports: RunPorts, record: TaskRecord, payload: SpawnPayload) -> Run: ...

    def requeue_on_recovery(self, record: TaskRecord) -> bool:
        """Whether a task a previous process left unfinished is queued again (else `crashed`)."""
        ...


class LocalExecutor:
    """Today's behaviour: every task is a tree of child processes of this supervisor."""

    name = "local"

    replays = True

    def __init__(self, *, requeue: bool = True) -> None:
        # A Temporal worker's supervisor never requeues, parks or pauses a task: Temporal retries
        # it elsewhere. It does replay a transcript an earlier attempt journaled.
        self.requeue = requeue
        self.resumes_here = requeue

    async def accept(self, record: TaskRecord) -> None:
        return None  # the journal's commit is the whole acceptance

    def start(self, ports: RunPorts, record: TaskRecord, payload: SpawnPayload) -> Run:
        return TaskRun(ports, record, payload, defer_root_end=True)

    def requeue_on_recovery(self, record: TaskRecord) -> bool:
        return self.requeue and record.may_requeue
