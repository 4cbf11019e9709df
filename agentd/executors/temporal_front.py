"""The front door's Temporal executor: a submit starts the task's workflow, a run follows it.

`accept` starts the workflow (durable in Temporal) before the submit is acknowledged. The
supervisor then runs a `RemoteRun` per task: it marks the task `starting`, polls the workflow's
pending activity for its heartbeat (attempt, worker, tree, a bounded tail of events), mirrors
those into this journal, and returns the workflow's result as the task's one terminal status.
A drain of the front door stops following (the task goes on; the next daemon follows it again);
`agentd cancel` cancels the workflow, which cancels the activity on its worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
import anyio.abc
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, TerminatedError, WorkflowAlreadyStartedError
from temporalio.exceptions import TimeoutError as TemporalTimeout
from temporalio.service import RPCError

from agentd import logs
from agentd.errors import ExecutorUnavailable, InvalidTransition, JournalError
from agentd.executors.remote import (
    DEADLINE_GRACE_S,
    NODES_CAP,
    WORKFLOW_NAME,
    Mirror,
    TemporalSettings,
    decode_events,
    synthetic,
    workflow_id,
    workflow_input,
)
from agentd.journal.records import NodeEnd, TaskRecord
from agentd.journal.store import Journal
from agentd.supervision.executor import Run
from agentd.supervision.liveness import KillCause
from agentd.supervision.ports import RunPorts
from agentd.supervision.supervised_child import SupervisedChild
from protocol.api import NodeView
from protocol.result import RunError, RunResult, TerminalStatus
from protocol.spawn import SpawnPayload

POLL_S = 0.5  # how often a followed task's heartbeat is read (events reach `logs -f` this late)
RETRY_MAX_S = 5.0  # the longest wait between two tries while Temporal is unreachable


class TemporalExecutor:
    """Runs every task as a Temporal workflow; this daemon keeps the journal and the API."""

    name = "temporal"

    def __init__(
        self,
        client: Client,
        settings: TemporalSettings,
        journal: Journal,
        deadline_of: Callable[[TaskRecord], float],
    ) -> None:
        self.client = client
        self.settings = settings
        self.journal = journal
        # The task's effective deadline (its spec's, or the configured default), in seconds.
        self.deadline_of = deadline_of
        self.log = logs.get()

    async def accept(self, record: TaskRecord) -> None:
        try:
            with anyio.fail_after(self.settings.connect_timeout_s):
                await self.start_workflow(record)
        except TimeoutError:
            wait, where = self.settings.connect_timeout_s, self.settings.target
            raise ExecutorUnavailable(f"Temporal at {where} did not answer within {wait:g}s") from None
        except (RPCError, RuntimeError) as exc:
            raise ExecutorUnavailable(f"Temporal at {self.settings.target}: {exc}") from None

    async def start_workflow(self, record: TaskRecord) -> WorkflowHandle[Any, Any]:
        """Start the task's workflow, or find the one already started for it (never a second)."""
        deadline_s = self.deadline_of(record)
        try:
            return await self.client.start_workflow(
                WORKFLOW_NAME,
                workflow_input(record, deadline_s, self.settings.heartbeat_timeout_s),
                id=workflow_id(record.task_id),
                task_queue=self.settings.task_queue,
                # The task's deadline is the workflow's (plus the time to stop and report).
                execution_timeout=timedelta(seconds=deadline_s + 2 * DEADLINE_GRACE_S),
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:  # it ran and closed already: follow its result
            return self.client.get_workflow_handle(workflow_id(record.task_id))

    def start(self, ports: RunPorts, record: TaskRecord, payload: SpawnPayload) -> Run:
        return RemoteRun(self, record)

    # The worker runs the task; its next attempt, on any worker, resumes from the steps the
    # earlier ones journaled in the workflow history (docs/temporal.md).
    resumes_here = False
    replays = False

    def requeue_on_recovery(self, record: TaskRecord) -> bool:
        # The workflow goes on without this daemon: a requeued task is simply followed again.
        return True


class RemoteRun:
    """Follows one task's workflow to its result (the `Run` face of a remote task)."""

    root_child: SupervisedChild | None = None
    # The worker's tree is mirrored node by node (`_record_tree`): nothing left for the terminal write.
    root_end: NodeEnd | None = None

    def __init__(self, executor: TemporalExecutor, record: TaskRecord) -> None:
        self.executor = executor
        self.journal = executor.journal
        self.record = record
        self.cancel_reason: str | None = None
        self.mirror = Mirror()
        self.nodes: list[NodeView] = []
        self.log = logs.get(task_id=record.task_id, run_id=record.run_id)
        self._scope = anyio.CancelScope()
        self._detached = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._handle: WorkflowHandle[Any, Any] | None = None

    # ---- the Run face -----------------------------------------------------------------------

    async def run(self) -> RunResult | None:
        try:
            self.record = await self.journal.tasks.mark_starting(self.record.task_id)
        except InvalidTransition as exc:
            if exc.state == "terminal":
                return None
            raise
        result: RunResult | None = None
        with self._scope:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._handle = await self._retrying("start", self.executor.start_workflow, self.record)
                if self.cancel_reason is not None:
                    tg.start_soon(self._cancel_workflow)
                tg.start_soon(self._poll)
                result = await self._result(self._handle)
                tg.cancel_scope.cancel()
        if self._detached or result is None:
            return None  # the front door is draining: the task goes on, the next daemon follows it
        return result

    def cancel(self, reason: str, *, cause: KillCause = "cancel", force: bool = False) -> None:
        if cause == "drain":
            self._detached = True
            self._scope.cancel()
            return
        first = self.cancel_reason is None
        self.cancel_reason = self.cancel_reason or reason
        if first and self._tg is not None and self._handle is not None:
            self._tg.start_soon(self._cancel_workflow)

    def pids(self) -> set[int]:
        return set()  # its processes live on a worker

    def node_views(self) -> list[NodeView]:
        return list(self.nodes) or [NodeView(handle="0", parent=None, depth=0, state="starting")]

    def awaiting_approval(self) -> set[str]:
        return set()

    # ---- following -------------------------------------------------------------------------

    async def _retrying(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` until it succeeds: Temporal being away never ends a task (it is durable there)."""
        delay = 0.2
        failures = 0
        while True:
            try:
                return await fn(*args)
            except (RPCError, RuntimeError) as exc:
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    self.log.warning("executor.error", op=what, err=str(exc)[:300], failures=failures)
            await anyio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    async def _result(self, handle: WorkflowHandle[Any, Any]) -> RunResult:
        delay = 0.2
        while True:
            try:
                raw = await handle.result()
                break
            except WorkflowFailureError as exc:
                return self._failed(exc)
            except (RPCError, RuntimeError) as exc:
                self.log.warning("executor.error", op="result", err=str(exc)[:300])
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        if isinstance(raw, dict):
            await self._take(raw)
            await self._record_tree(raw.get("nodes"))
        return self._decoded(raw)

    async def _record_tree(self, raw: object) -> None:
        """The worker's final tree, journaled here so `agentd tree` shows it after the end."""
        if not isinstance(raw, list):
            return
        task_id = self.record.task_id
        try:
            for item in raw[:NODES_CAP]:
                node = NodeView.model_validate(item)
                await self.journal.tasks.upsert_node(
                    task_id,
                    node.handle,
                    parent=node.parent,
                    depth=node.depth,
                    grant_steps=node.grant_steps,
                    grant_tokens=node.grant_tokens,
                )
                if node.status is not None:
                    await self.journal.tasks.end_node(task_id, node.handle, node.status, node.usage)
        except (ValueError, JournalError) as exc:
            self.log.warning("executor.error", op="mirror", err=f"tree: {exc}"[:300])

    def _decoded(self, raw: object) -> RunResult:
        if not isinstance(raw, dict):
            return synthetic(TerminalStatus.CRASHED, "worker", f"unreadable workflow result: {raw!r}"[:300])
        fields = {k: raw[k] for k in RunResult.model_fields if k in raw}
        try:
            result = RunResult.model_validate(fields)
        except ValueError as exc:
            return synthetic(TerminalStatus.CRASHED, "worker", f"unreadable workflow result: {exc}")
        if result.status is TerminalStatus.CANCELLED and self.cancel_reason is not None:
            result = result.model_copy(
                update={"error": RunError(kind="cancelled", message=self.cancel_reason)}
            )
        return result

    def _failed(self, exc: WorkflowFailureError) -> RunResult:
        cause = exc.cause
        if isinstance(cause, TemporalTimeout):
            return synthetic(TerminalStatus.DEADLINE, "deadline", "the task's workflow timed out")
        if isinstance(cause, CancelledError):
            return synthetic(
                TerminalStatus.CANCELLED, "cancelled", self.cancel_reason or "the workflow was cancelled"
            )
        if isinstance(cause, TerminatedError):
            return synthetic(TerminalStatus.CRASHED, "terminated", f"the workflow was terminated: {cause}")
        return synthetic(TerminalStatus.CRASHED, "worker", f"the workflow failed: {cause or exc}")

    async def _cancel_workflow(self) -> None:
        assert self._handle is not None
        await self._retrying("cancel", self._handle.cancel)

    async def _poll(self) -> None:
        """Mirror the pending activity's heartbeat: the attempt, its worker, its tree, its events."""
        assert self._handle is not None
        converter = self.executor.client.data_converter
        while True:
            await anyio.sleep(POLL_S)
            try:
                description = await self._handle.describe()
                for pending in description.raw_description.pending_activities:
                    if not pending.heartbeat_details.payloads:
                        continue
                    details = await converter.decode(pending.heartbeat_details.payloads)
                    if details and isinstance(details[0], dict):
                        await self._take(details[0])
            except (RPCError, RuntimeError) as exc:
                self.log.debug("executor.error", op="describe", err=str(exc)[:300])
            except JournalError as exc:
                self.log.warning("executor.error", op="mirror", err=f"journal: {exc}")
            except Exception as exc:  # noqa: BLE001 - a bad heartbeat must not end the following
                self.log.warning("executor.error", op="describe", err=f"{type(exc).__name__}: {exc}"[:300])

    async def _take(self, progress: dict[str, Any]) -> None:
        attempt, worker = progress.get("attempt"), progress.get("worker")
        if not isinstance(attempt, int) or not isinstance(worker, str):
            return
        task_id = self.record.task_id
        started = self.mirror.new_attempt(attempt, worker)
        if started is not None:
            with contextlib.suppress(InvalidTransition):  # it ended meanwhile
                # Every attempt after the first goes on from the steps journaled before it.
                self.record = await self.journal.tasks.mark_remote_running(
                    task_id, executor="temporal", worker=worker, resumes=max(0, attempt - 1)
                )
            self.journal.append_event(task_id, started.event, started.fields)
            self.log.info("task.attempt", attempt=attempt, worker=worker)
        for appended in self.mirror.take(attempt, decode_events(progress.get("events"))):
            self.journal.append_event(task_id, appended.event, appended.fields)
        nodes = progress.get("nodes")
        if isinstance(nodes, list):
            with contextlib.suppress(ValueError):
                self.nodes = [NodeView.model_validate(n) for n in nodes[:NODES_CAP]]
