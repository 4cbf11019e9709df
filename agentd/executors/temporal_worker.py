"""A worker's side: the activity that runs one task on this host's own supervisor.

The activity journals the task locally (a fresh local task per attempt, keyed by workflow id and
attempt), lets the local `Supervisor` run it — the same spawning, limits, liveness detectors, kill
ladder and tree budgets as any local task, its whole tree on this host — and heartbeats every
`HEARTBEAT_S` with the attempt, this worker's identity, live usage, the tree, the pids and a
bounded tail of the task's events. A cancel of the activity (from `agentd cancel`, or the
workflow gone) runs the kill ladder and returns the `cancelled` result; this worker's drain hands
the task back (a retryable failure) so that another worker runs it.

Each node's steps are journaled in the task's workflow history (an `agentd.steps` signal, awaited)
before this host's journal and before the subagent goes on (`WorkflowSteps`); an attempt after
the first reads them back and resumes from them (`journaled_steps`), whichever worker ran the
earlier one (docs/durability.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from agentd.errors import JournalError
from agentd.executors.remote import (
    ACTIVITY_NAME,
    NODES_CAP,
    RETRYABLE_TYPE,
    STEPS_SIGNAL,
    Assignment,
    EventTail,
    TemporalSettings,
    result_of,
    retryable,
    seed_of,
    steps_batches,
    synthetic,
    workflow_id,
)
from agentd.executors.temporal_workflow import TaskWorkflow
from agentd.journal.records import TaskRecord
from agentd.journal.store import Journal
from agentd.journal.transcripts import StepRecord, Transcripts
from agentd.supervision.supervisor import Supervisor
from protocol.api import TaskSpec
from protocol.result import RunResult, RunUsage, TerminalStatus
from protocol.transcript import StepItem

HEARTBEAT_S = 0.5
EVENT_BATCH = 500
# How long journaling one batch of steps in the workflow's history, and reading them all back
# at an attempt's start, may take: past it the step is refused (the subagent stops rather than
# act on a step no other worker would see), or the attempt is handed back.
SIGNAL_TIMEOUT_S = 10.0
HISTORY_TIMEOUT_S = 60.0


class WorkflowSteps:
    """This worker's step journal: a node's steps are signalled to the task's workflow, where the
    next attempt on any worker finds them, then committed here too (for `agentd transcript` on
    this host and this attempt's own nested resumes). `client` is set once connected; a task not
    run for a workflow is journaled here only."""

    def __init__(self, local: Transcripts) -> None:
        self.local = local
        self.client: Client | None = None
        self.workflows: dict[str, str] = {}  # local task id → its workflow's id

    async def append(self, task_id: str, handle: str, items: Sequence[StepItem]) -> int:
        workflow_id = self.workflows.get(task_id)
        if workflow_id is not None and self.client is not None:
            workflow = self.client.get_workflow_handle(workflow_id)
            bound = timedelta(seconds=SIGNAL_TIMEOUT_S)
            for batch in steps_batches(handle, list(items)):
                try:
                    await workflow.signal(STEPS_SIGNAL, batch, rpc_timeout=bound)
                except RPCError as exc:
                    raise JournalError(f"the workflow's history did not take the step: {exc}") from None
        return await self.local.append(task_id, handle, items)

    async def items(self, task_id: str, handle: str = "0") -> list[StepRecord]:
        return await self.local.items(task_id, handle)

    async def children(self, task_id: str) -> dict[str, str | None]:
        return await self.local.children(task_id)


async def journaled_steps(client: Client, workflow_id: str) -> dict[str, list[StepItem]]:
    """Every node's steps the task's earlier attempts signalled, read from its history."""
    batches: list[object] = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if not event.HasField("workflow_execution_signaled_event_attributes"):
            continue
        signalled = event.workflow_execution_signaled_event_attributes
        if signalled.signal_name == STEPS_SIGNAL and signalled.input.payloads:
            batches.extend(await client.data_converter.decode(signalled.input.payloads))
    return seed_of(batches)


class TaskActivity:
    def __init__(
        self,
        journal: Journal,
        supervisor: Supervisor,
        identity: str,
        stop_bound_s: float,
        steps: WorkflowSteps,
    ) -> None:
        self.journal = journal
        self.supervisor = supervisor
        self.identity = identity
        self.steps = steps
        # How long a cancelled task may take to stop: the kill ladder's bound plus teardown.
        self.stop_bound_s = stop_bound_s

    @activity.defn(name=ACTIVITY_NAME)
    async def run_task(self, task: dict[str, Any]) -> dict[str, Any]:
        info = activity.info()
        attempt = info.attempt
        assignment = Assignment.of(task)
        spec = assignment.attempt_spec(time.time())
        if spec is None:
            late = synthetic(TerminalStatus.DEADLINE, "deadline", "no time was left")
            return self._answer(late, attempt, [])
        workflow = info.workflow_id or workflow_id(assignment.task_id)
        local = await self._submit(spec, assignment.owner_uid, workflow, attempt)
        self.steps.workflows[local.task_id] = workflow
        try:
            return await self._supervise(local, attempt)
        finally:
            self.steps.workflows.pop(local.task_id, None)

    async def _submit(self, spec: TaskSpec, owner_uid: int, workflow: str, attempt: int) -> TaskRecord:
        """Journal this attempt here; after the first, with the steps the earlier ones journaled
        in the workflow's history, so that it resumes from them."""
        key = f"temporal:{workflow}:{attempt}"
        try:
            if attempt == 1 or self.steps.client is None:
                local, _ = await self.journal.tasks.submit(spec, owner_uid, key)
                return local
            activity.heartbeat({"attempt": attempt, "worker": self.identity})
            with anyio.fail_after(HISTORY_TIMEOUT_S):
                steps = await journaled_steps(self.steps.client, workflow)
            local, _ = await self.journal.tasks.submit_resumed(
                spec, owner_uid, key, steps=steps, resumes=attempt - 1
            )
            return local
        except (JournalError, RPCError, TimeoutError) as exc:
            raise ApplicationError(f"the worker's journal: {exc}", type=RETRYABLE_TYPE) from None

    async def _supervise(self, local: TaskRecord, attempt: int) -> dict[str, Any]:
        self.supervisor.notify_submitted()
        tail = EventTail()
        seq = 0
        done = self.supervisor.terminal_event(local.task_id)
        if local.state == "terminal":  # this attempt ran here already (a repeated delivery)
            done.set()
        try:
            while True:
                with anyio.move_on_after(HEARTBEAT_S):
                    await done.wait()
                if done.is_set():
                    break
                seq = await self._pump(local.task_id, seq, tail)
                activity.heartbeat(await self._progress(local, attempt, tail))
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            handing_back = details is not None and details.worker_shutdown
            reason = "the worker is draining" if handing_back else "the task was cancelled"
            with anyio.CancelScope(shield=True):
                await self.supervisor.cancel(local.task_id, reason)
                with anyio.move_on_after(self.stop_bound_s):
                    await done.wait()
                seq = await self._pump(local.task_id, seq, tail)
            if handing_back:
                raise ApplicationError(
                    "handed back: the worker is draining", {"attempt": attempt}, type=RETRYABLE_TYPE
                ) from None
        await self.journal.flush_events()
        seq = await self._pump(local.task_id, seq, tail)
        record = await self.journal.tasks.get(local.task_id)
        if record is None or record.status is None:
            raise ApplicationError("the task did not end in time", type=RETRYABLE_TYPE)
        result = result_of(record)
        answer = self._answer(result, attempt, tail.encoded())
        nodes = await self.journal.tasks.nodes(local.task_id)
        answer["nodes"] = [n.to_view().model_dump(mode="json") for n in nodes[:NODES_CAP]]
        if retryable(result):
            raise ApplicationError(f"the task's child crashed: {result.error}", answer, type=RETRYABLE_TYPE)
        return answer

    def _answer(self, result: RunResult, attempt: int, events: list[Any]) -> dict[str, Any]:
        return {
            **result.model_dump(mode="json"),
            "attempt": attempt,
            "worker": self.identity,
            "events": events,
        }

    async def _pump(self, task_id: str, seq: int, tail: EventTail) -> int:
        for _ in range(20):  # bounded: at most 10,000 events per beat (the tail keeps the newest)
            batch = await self.journal.events_after(task_id, seq, EVENT_BATCH)
            tail.extend((e.seq, e.ts, e.event, e.fields) for e in batch)
            if batch:
                seq = batch[-1].seq
            if len(batch) < EVENT_BATCH:
                break
        return seq

    async def _progress(self, local: TaskRecord, attempt: int, tail: EventTail) -> dict[str, Any]:
        slot = self.supervisor.running.get(local.task_id)
        run = slot.run if slot is not None else None
        nodes = run.node_views()[:NODES_CAP] if run is not None else []
        usage = sum((n.usage for n in nodes), RunUsage())
        return {
            "attempt": attempt,
            "worker": self.identity,
            "local_task_id": local.task_id,
            "state": "running" if run is not None else "queued",
            "pids": sorted(run.pids()) if run is not None else [],
            "usage": usage.model_dump(mode="json"),
            "nodes": [n.model_dump(mode="json") for n in nodes],
            "events": tail.encoded(),
        }


def build_worker(
    client: Client,
    settings: TemporalSettings,
    activity_impl: TaskActivity,
    *,
    max_tasks: int,
    drain_s: float,
) -> Worker:
    """This host's Temporal worker: the task workflow and the activity, `max_tasks` at once."""
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[TaskWorkflow],
        activities=[activity_impl.run_task],
        max_concurrent_activities=max_tasks,
        identity=activity_impl.identity,
        # Heartbeats reach the server at most this late: events reach `logs -f`, and a cancel the
        # activity, within about a second.
        max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_S),
        default_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_S),
        graceful_shutdown_timeout=timedelta(seconds=drain_s),
    )
