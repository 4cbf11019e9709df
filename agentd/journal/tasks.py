"""The journal's tasks (docs/design.md §8): each task's lifecycle from submit to its end, its tree
of nodes, and the reads over them. A repository over the journal's one writer: every method is
one write (acknowledged once its COMMIT returned) or one read, over the SQL of
`agentd.journal.queries`.
"""

from __future__ import annotations

import functools
import json
import socket
import sqlite3
import time
from collections.abc import Mapping, Sequence

from pydantic import JsonValue

from agentd.journal import node_queries as nq
from agentd.journal import queries as q
from agentd.journal.quota import Quota
from agentd.journal.records import NodeEnd, NodeRecord, NodeState, TaskRecord, new_run_id, new_task_id
from agentd.journal.repository import Repository
from agentd.journal.task_ids import matching_task_ids
from protocol.api import TaskSpec, TaskState
from protocol.result import AbortKind, RunError, RunResult, RunUsage, TerminalStatus
from protocol.transcript import StepItem

GET_MANY_CHUNK = 500  # well under SQLite's bound on a statement's parameters
# The `worker` of a task this host runs itself (the journal records which host ran each task).
_HOST = socket.gethostname()


class Tasks(Repository):
    """Submit tasks, move them through their states, keep their trees, and read them."""

    # ---- durable writes --------------------------------------------------------------------------

    async def submit(
        self,
        spec: TaskSpec,
        owner_uid: int,
        idempotency_key: str | None = None,
        quota: Quota | None = None,
        *,
        trigger: str | None = None,
        uri: str | None = None,
        task_id: str | None = None,
        run_id: str | None = None,
    ) -> tuple[TaskRecord, bool]:
        """Journal a new queued task; returns `(record, created)`. `task_id`: the id to give it
        (one `new_task_id()` made, so a caller can name it before it is visible); else a new one.
        `run_id` likewise (a trigger's prestarted child already carries both).

        The same `idempotency_key` from the same uid returns the existing task with
        `created=False`; keys are scoped per uid. Raises `JournalUnavailable` if not committed,
        `QuotaExceeded` (nothing written) if the uid is at one of `quota`'s caps.
        """
        op = functools.partial(
            q.insert_task,
            task_id=task_id or new_task_id(),
            run_id=run_id or new_run_id(),
            spec=spec,
            spec_json=spec.model_dump_json(),
            owner_uid=owner_uid,
            idempotency_key=idempotency_key,
            quota=quota or Quota(),
            now=time.time(),
            trigger=trigger,
            uri=uri,
        )
        return await self._write(op)

    async def fork(
        self,
        spec: TaskSpec,
        owner_uid: int,
        idempotency_key: str | None,
        quota: Quota,
        *,
        origin: str,
        step: int,
        items: Sequence[StepItem],
        task_id: str,
    ) -> tuple[TaskRecord, bool]:
        """`submit` for a fork of `origin` at `step`: the task and its copy of the root's
        transcript (`items`) commit together (`agentd fork`; docs/durability.md)."""
        op = functools.partial(
            q.insert_fork,
            origin=origin,
            step=step,
            items=items,
            task_id=task_id,
            run_id=new_run_id(),
            spec=spec,
            spec_json=spec.model_dump_json(),
            owner_uid=owner_uid,
            idempotency_key=idempotency_key,
            quota=quota,
            now=time.time(),
        )
        return await self._write(op)

    async def submit_resumed(
        self,
        spec: TaskSpec,
        owner_uid: int,
        idempotency_key: str,
        *,
        steps: Mapping[str, Sequence[StepItem]],
        resumes: int,
    ) -> tuple[TaskRecord, bool]:
        """`submit` for an attempt that resumes from `steps` journaled elsewhere (each node's, by
        handle; a Temporal worker's earlier attempt): the task and its transcripts commit together,
        and its run replays them."""
        op = functools.partial(
            q.insert_resumed,
            steps=steps,
            resumes=resumes,
            task_id=new_task_id(),
            run_id=new_run_id(),
            spec=spec,
            spec_json=spec.model_dump_json(),
            owner_uid=owner_uid,
            idempotency_key=idempotency_key,
            quota=Quota(),
            now=time.time(),
            trigger=None,
            uri=None,
        )
        return await self._write(op)

    async def submit_claimed(
        self,
        spec: TaskSpec,
        owner_uid: int,
        *,
        grant_steps: int | None = None,
        grant_tokens: int | None = None,
        trigger: str | None = None,
    ) -> TaskRecord:
        """Journal a task that its creator runs itself (a warm session's), already `starting`:
        the scheduler never takes it, and a daemon restart ends it `crashed` (never requeued).
        Run it with `TaskRun(..., claimed=True)`."""
        op = functools.partial(
            q.insert_claimed_task,
            task_id=new_task_id(),
            run_id=new_run_id(),
            spec=spec,
            owner_uid=owner_uid,
            now=time.time(),
            grant_steps=grant_steps,
            grant_tokens=grant_tokens,
            trigger=trigger,
        )
        return await self._write(op)

    async def mark_starting(
        self, task_id: str, *, grant_steps: int | None = None, grant_tokens: int | None = None
    ) -> TaskRecord:
        """queued → starting, creating the root node "0" in the same commit. Commit this before
        spawning (write-ahead, docs/design.md §8). Raises `InvalidTransition` (nothing written) if the
        task is no longer queued, e.g. it was cancelled while waiting."""
        op = functools.partial(
            q.mark_starting,
            task_id=task_id,
            grant_steps=grant_steps,
            grant_tokens=grant_tokens,
            now=time.time(),
        )
        return await self._write(op)

    async def mark_running(self, task_id: str, pid: int, pid_start_time: float) -> TaskRecord:
        """starting → running, recording on the task and its root node the process identity
        used by restart recovery."""
        op = functools.partial(
            q.mark_running,
            task_id=task_id,
            pid=pid,
            pid_start_time=pid_start_time,
            now=time.time(),
            worker=_HOST,
        )
        return await self._write(op)

    async def mark_started(
        self,
        task_id: str,
        pid: int,
        pid_start_time: float,
        *,
        grant_steps: int | None = None,
        grant_tokens: int | None = None,
    ) -> TaskRecord:
        """queued → starting → running in one commit, for a child that exists already (a trigger's
        prestarted one, which holds until it is told to go): both records, in their order, before
        it runs. Raises `InvalidTransition` (nothing written) if the task is no longer queued."""
        now = time.time()

        def op(conn: sqlite3.Connection) -> TaskRecord:
            q.mark_starting(conn, task_id, grant_steps=grant_steps, grant_tokens=grant_tokens, now=now)
            return q.mark_running(
                conn, task_id, pid=pid, pid_start_time=pid_start_time, now=now, worker=_HOST
            )

        return await self._write(op)

    async def mark_remote_running(
        self, task_id: str, *, executor: str, worker: str, resumes: int = 0
    ) -> TaskRecord:
        """starting|running → running on `worker` (a remote executor's; no local process);
        `resumes`: how many attempts before this one it went on from (at least)."""
        op = functools.partial(
            q.mark_remote_running,
            task_id=task_id,
            executor=executor,
            worker=worker,
            resumes=resumes,
            now=time.time(),
        )
        return await self._write(op)

    async def forget_queued(self, task_id: str) -> bool:
        """Delete a still-queued task an executor did not accept; False if it was claimed meanwhile."""
        return await self._write(functools.partial(q.forget_queued, task_id=task_id))

    async def mark_terminal(
        self,
        task_id: str,
        status: TerminalStatus,
        *,
        exit_code: int | None = None,
        result: JsonValue = None,
        partial: bool = False,
        usage: RunUsage | None = None,
        abort: AbortKind | None = None,
        error: RunError | None = None,
        only_queued: bool = False,
        idle: bool = False,
        root: NodeEnd | None = None,
    ) -> TaskRecord:
        """queued|starting|running → terminal (`only_queued`: queued → terminal, for a task no
        run has claimed). Events appended before this call commit with it. `idle`: the run
        reported it found nothing to do. `root`: the root node's end, committed with it (a run
        that left it to this write: one transaction per task end instead of two)."""
        op = functools.partial(
            q.mark_terminal,
            task_id=task_id,
            status=status,
            exit_code=exit_code,
            result_json=json.dumps(result) if result is not None else None,
            partial=partial,
            usage=usage if usage is not None else RunUsage(),
            abort=abort,
            error=error,
            now=time.time(),
            only_queued=only_queued,
            idle=idle,
            root=root,
        )
        return await self._write(op, wakes=task_id)

    async def requeue(self, task_id: str) -> TaskRecord:
        """starting|running → queued with `attempts + 1`, keeping the `run_id`."""
        return await self._write(functools.partial(q.requeue, task_id=task_id))

    async def pause_for_budget(
        self, task_id: str, result: RunResult, *, root: NodeEnd | None = None
    ) -> TaskRecord:
        """starting|running → queued and paused (its budget ran out), keeping the run's result;
        `root`: the root node's end, committed with it."""
        op = functools.partial(q.pause_for_budget, task_id=task_id, result=result, root=root, now=time.time())
        return await self._write(op, wakes=task_id)

    async def extend(self, task_id: str, spec: TaskSpec) -> TaskRecord:
        """A paused task's spec with a larger budget, queued to resume (`agentd extend`)."""
        return await self._write(functools.partial(q.extend, task_id=task_id, spec=spec), wakes=task_id)

    async def paused_since(self, before: float) -> tuple[TaskRecord, ...]:
        """The tasks paused for budget since before `before`."""
        return await self._read(functools.partial(q.paused_since, before=before))

    async def park(
        self, task_id: str, *, root: NodeEnd | None = None, waiting: tuple[str, float] | None = None
    ) -> TaskRecord:
        """starting|running → queued to go on from its transcript (a stop), spending no attempt;
        `root`: the root node's end, committed with it; `waiting`: the approval request it waits
        on, and until when (a park on an approval, `q.park`)."""
        op = functools.partial(q.park, task_id=task_id, root=root, now=time.time(), waiting=waiting)
        return await self._write(op, wakes=task_id)

    async def requeue_after_crash(self, task_id: str, *, root: NodeEnd | None = None) -> TaskRecord:
        """starting|running → queued for its next attempt, to go on from its transcript (its
        subagent crashed); `root`: the root node's end, committed with it."""
        op = functools.partial(q.requeue_after_crash, task_id=task_id, root=root, now=time.time())
        return await self._write(op, wakes=task_id)

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
        """Create or update a live node of a task's tree (None leaves a stored value unchanged);
        `revive` starts again a node that ended in an earlier run (a resumed nested subagent)."""
        op = functools.partial(
            nq.upsert_node,
            task_id=task_id,
            handle=handle,
            parent=parent,
            depth=depth,
            state=state,
            pid=pid,
            pid_start_time=pid_start_time,
            usage=usage,
            grant_steps=grant_steps,
            grant_tokens=grant_tokens,
            now=time.time(),
            revive=revive,
        )
        return await self._write(op)

    async def end_node(
        self, task_id: str, handle: str, status: TerminalStatus, usage: RunUsage | None = None
    ) -> NodeRecord:
        """Mark a node terminal with its final usage; it stays in the tree after the task ends."""
        op = functools.partial(
            nq.end_node, task_id=task_id, handle=handle, status=status, usage=usage, now=time.time()
        )
        return await self._write(op)

    # ---- reads -----------------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskRecord | None:
        return await self._read(functools.partial(q.get_task, task_id=task_id))

    async def get_many(self, task_ids: Sequence[str]) -> tuple[TaskRecord, ...]:
        """The tasks of `task_ids` that exist, in no particular order: one read per 500 ids."""
        found: list[TaskRecord] = []
        for start in range(0, len(task_ids), GET_MANY_CHUNK):
            chunk = task_ids[start : start + GET_MANY_CHUNK]
            found.extend(await self._read(functools.partial(q.get_tasks, task_ids=chunk)))
        return tuple(found)

    async def list(
        self,
        owner_uid: int | None = None,
        state: TaskState | None = None,
        limit: int = 100,
        before: str | None = None,
        schedule_id: str | None = None,
        trigger: str | None = None,
    ) -> tuple[TaskRecord, ...]:
        """Summaries of tasks newest first (the instruction cut, no result: `queries.list_tasks`),
        optionally only one owner's, one state's, one schedule's and/or one trigger's, and only
        those submitted before the task `before`."""
        return await self._read(
            functools.partial(
                q.list_tasks,
                owner_uid=owner_uid,
                state=state,
                limit=limit,
                before=before,
                schedule_id=schedule_id,
                trigger=trigger,
            )
        )

    async def counts(self, owner_uid: int | None = None) -> dict[TaskState, int]:
        """The number of unfinished tasks in each state (queued, starting, running: all present,
        zero if none), optionally only one owner's."""
        return await self._read(functools.partial(q.count_unfinished, owner_uid=owner_uid))

    async def next_queued(self, per_owner: int, day_now: float | None = None) -> tuple[TaskRecord, ...]:
        """Each owner's oldest `per_owner` queued tasks, in submission order; `day_now`: the daily
        caps' clock, against which a deferred task's day is over (the wall clock without one)."""
        op = functools.partial(q.next_queued, per_owner=per_owner, now=time.time(), day_now=day_now)
        return await self._read(op)

    async def match_ids(self, prefix: str, owner_uid: int | None, limit: int) -> tuple[str, ...]:
        """Task ids that start with `prefix` (only `owner_uid`'s unless None), in id order."""
        return await self._read(
            functools.partial(matching_task_ids, prefix=prefix, owner_uid=owner_uid, limit=limit)
        )

    async def unfinished(self) -> tuple[TaskRecord, ...]:
        """Tasks left `starting` or `running` (restart recovery), oldest first."""
        return await self._read(q.unfinished)

    async def nodes(self, task_id: str) -> tuple[NodeRecord, ...]:
        """The task's tree, root first (by depth, then creation)."""
        return await self._read(functools.partial(nq.task_nodes, task_id=task_id))
