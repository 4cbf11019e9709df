"""The API backend of a running daemon: the journal, the supervisor and the config behind the socket.

Implements `agentd.api.backend.Backend`. Ownership is enforced here: a caller sees, waits on and cancels
only its own tasks unless it is an admin, and another uid's task is indistinguishable from a
missing one. A journal that cannot commit makes `task.submit` fail with a retryable error.
"""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import anyio
from pydantic import JsonValue

from agentd.admission import Requester, SpecRejected, check_spec
from agentd.api.backend import check_owner, schedule_not_found, task_not_found
from agentd.api.budget_views import budgets_view
from agentd.api.live_figures import LiveFigures, daemon_status, live_task, take_figures, task_view
from agentd.api.peercred import Caller
from agentd.api.task_streams import task_changes, task_events
from agentd.config.load import Config
from agentd.errors import (
    ApiError,
    ExecutorUnavailable,
    IdempotencyConflict,
    InvalidTransition,
    JournalUnavailable,
    QuotaExceeded,
    ScheduleNotFound,
)
from agentd.journal.records import ScheduleRecord, TaskRecord, new_task_id
from agentd.journal.store import Journal
from agentd.journal.transcripts import StepRecord
from agentd.off_loop import CheckTimedOut, run_check
from agentd.options import submit_quota
from agentd.scheduling.driver import Scheduler
from agentd.scheduling.plan import TriggerError
from agentd.supervision.supervisor import Supervisor
from agentd.triggers.manager import TriggerManager
from protocol.api import (
    DRAINING,
    FORBIDDEN,
    IDEMPOTENCY_CONFLICT,
    INVALID_SPEC,
    NOT_FOUND,
    QUOTA_EXCEEDED,
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
    SpecLimits,
    SubmitParams,
    SubmitResult,
    TaskMatches,
    TaskRef,
    TaskSpec,
    TaskView,
    TranscriptParams,
    TranscriptStep,
    TranscriptView,
    TriggerRef,
    TriggerView,
    WaitParams,
    WatchParams,
)
from protocol.jsonrpc import INVALID_PARAMS
from protocol.transcript import StepItem, approx_bytes, first_steps, steps_of

WAIT_CAP_S = 24 * 3600.0
# A transcript page holds items of about this many bytes at most (at least one item), well within
# what a client reads in one reply.
TRANSCRIPT_PAGE_BYTES = 8 * 1024 * 1024
# `daemon.status` counts the daemon's children at most this often: the count walks every live
# child, which with 1,000 tasks cost each status call milliseconds of the loop.
CHILDREN_MAX_AGE_S = 1.0


class DaemonBackend:
    def __init__(
        self,
        journal: Journal,
        supervisor: Supervisor,
        config: Callable[[], Config],
        scheduler: Scheduler | None = None,
        triggers: TriggerManager | None = None,
    ) -> None:
        self.journal = journal
        self.supervisor = supervisor
        self._config = config
        self.scheduler = scheduler
        self.triggers = triggers
        self.started = time.monotonic()
        self._children: tuple[float, int] | None = None  # (counted at, count)

    def _children_now(self) -> int:
        """The daemon's live children, as counted within the last `CHILDREN_MAX_AGE_S`."""
        now = time.monotonic()
        if self._children is None or now - self._children[0] >= CHILDREN_MAX_AGE_S:
            self._children = (now, len(self.supervisor.owned_pids()))
        return self._children[1]

    async def _owned(self, caller: Caller, task_id: str) -> TaskRecord:
        record = await self.journal.tasks.get(task_id)
        if record is None:
            raise task_not_found(task_id)
        check_owner(caller, record.owner_uid, task_id=task_id)
        return record

    async def _check_spec(self, spec: TaskSpec, caller: Caller) -> None:
        """`check_spec` for `caller`, as an INVALID_SPEC error; with an output schema (whose
        validation a hostile schema can make slow) off the event loop, under `run_check`'s bound."""
        config = self._config()
        requester = Requester(caller.uid, caller.groups | {caller.gid}, caller.is_admin)
        try:
            if spec.output_contract.schema_ is None:
                check_spec(config, spec, requester)
            else:
                await run_check(lambda: check_spec(config, spec, requester))
        except (SpecRejected, CheckTimedOut) as exc:
            raise ApiError(INVALID_SPEC, str(exc)) from None

    async def submit(self, caller: Caller, params: SubmitParams) -> SubmitResult:
        return await self._submit(caller, params.spec, params.idempotency_key)

    async def fork(self, caller: Caller, params: ForkParams) -> SubmitResult:
        """A new task of the caller's whose run starts from a copy of `params.task_id`'s first
        `from_step` steps (its root's transcript; docs/durability.md)."""
        origin = await self._owned(caller, params.task_id)
        steps = await self.journal.transcripts.items(origin.task_id, "0")
        items = first_steps([step.item for step in steps], params.from_step)
        held = steps_of(items)
        if held < params.from_step:
            raise ApiError(
                INVALID_PARAMS,
                f"task {origin.task_id!r} has {held} journaled steps; --from-step must be at most {held}",
            )
        update: dict[str, object] = {}
        if params.model is not None:
            update["model"] = params.model
        if params.instruction is not None:
            update["instruction"] = params.instruction
        spec = origin.spec.model_copy(update=update)
        return await self._submit(
            caller, spec, params.idempotency_key, fork=(origin.task_id, params.from_step, items)
        )

    async def extend(self, caller: Caller, params: ExtendParams) -> TaskView:
        """Raise a paused task's budget (`awaiting_budget`) and queue it to resume from its
        transcript; each amount is added to what the task had, within the ceilings."""
        record = await self._owned(caller, params.task_id)
        if record.paused_at is None:
            state = self._view(record).state
            raise ApiError(
                INVALID_PARAMS, f"task {record.task_id!r} is not waiting for budget (it is {state})"
            )
        if params.steps is None and params.tokens is None and params.deadline_s is None:
            raise ApiError(INVALID_PARAMS, "give at least one of --steps, --tokens or --deadline")
        config = self._config()
        had = config.limits_for(record.spec)
        asked = SpecLimits(
            max_steps=had.max_steps + (params.steps or 0),
            max_tokens=had.max_tokens + (params.tokens or 0),
            deadline_s=had.deadline_s + (params.deadline_s or 0.0),
        )
        granted = config.limits_for(record.spec.model_copy(update={"limits": asked}))
        if (granted.max_steps, granted.max_tokens) == (had.max_steps, had.max_tokens):
            raise ApiError(
                INVALID_PARAMS,
                f"task {record.task_id!r} is at the daemon's ceilings ({had.max_steps} steps, "
                f"{had.max_tokens} tokens: [defaults] max_steps_ceiling, max_tokens_ceiling)",
            )
        try:
            extended = await self.journal.tasks.extend(
                record.task_id, record.spec.model_copy(update={"limits": asked})
            )
        except InvalidTransition:
            raise ApiError(
                INVALID_PARAMS, f"task {record.task_id!r} is no longer waiting for budget"
            ) from None
        fields: dict[str, JsonValue] = {"max_steps": granted.max_steps, "max_tokens": granted.max_tokens}
        self.journal.append_event(record.task_id, "task.extended", {**fields, "uid": caller.uid})
        self.supervisor.log.info("task.extended", task_id=record.task_id, uid=caller.uid, **fields)
        self.supervisor.queue_changed()
        return self._view(extended)

    async def _submit(
        self,
        caller: Caller,
        spec: TaskSpec,
        idempotency_key: str | None,
        *,
        fork: tuple[str, int, builtins.list[StepItem]] | None = None,
    ) -> SubmitResult:
        if self.supervisor.draining:
            raise ApiError(DRAINING, "agentd is shutting down and accepts no new tasks", retryable=True)
        await self._check_spec(spec, caller)
        # Named before it is committed: the scheduler leaves it alone until the executor accepted it.
        task_id = new_task_id()
        self.supervisor.accepting.add(task_id)
        try:
            try:
                quota = submit_quota(self._config())
                if fork is None:
                    record, created = await self.journal.tasks.submit(
                        spec, caller.uid, idempotency_key, quota=quota, task_id=task_id
                    )
                else:
                    origin, step, items = fork
                    record, created = await self.journal.tasks.fork(
                        spec,
                        caller.uid,
                        idempotency_key,
                        quota,
                        origin=origin,
                        step=step,
                        items=items,
                        task_id=task_id,
                    )
            except QuotaExceeded as exc:
                raise ApiError(QUOTA_EXCEEDED, f"the task was not accepted: {exc}", retryable=True) from None
            except IdempotencyConflict as exc:
                raise ApiError(IDEMPOTENCY_CONFLICT, f"the task was not accepted: {exc}") from None
            except JournalUnavailable as exc:
                raise ApiError(UNAVAILABLE, f"the task was not accepted: {exc}", retryable=True) from None
            if created:
                await self._accept(record)
                # Told while the scheduler still leaves it alone (`accepting`): no read can have
                # started it yet, so the scheduler's copy of the queue may list it.
                self.supervisor.notify_submitted(record)
        finally:
            self.supervisor.accepting.discard(task_id)
        if created:
            self.supervisor.log.info(
                "task.submitted",
                task_id=record.task_id,
                run_id=record.run_id,
                owner_uid=caller.uid,
                pid=caller.pid,
            )
        return SubmitResult(task_id=record.task_id, state=record.state, created=created)

    async def _accept(self, record: TaskRecord) -> None:
        """The executor accepts the new task durably (a Temporal workflow started) before the
        client hears of it; if it cannot, the task is forgotten and the submit is retryable."""
        try:
            await self.supervisor.executor.accept(record)
        except ExecutorUnavailable as exc:
            try:
                forgotten = await self.journal.tasks.forget_queued(record.task_id)
            except JournalUnavailable:
                forgotten = False
            if forgotten:
                self.supervisor.queue_changed()  # a read may have seen it while it was held back
                raise ApiError(UNAVAILABLE, f"the task was not accepted: {exc}", retryable=True) from None
            # It could not be forgotten: it stays queued, and its run starts the workflow
            # (idempotently) once Temporal answers.
            self.supervisor.log.warning("task.submitted", task_id=record.task_id, err=str(exc))

    async def get(self, caller: Caller, params: TaskRef) -> TaskView:
        return self._view(await self._owned(caller, params.task_id))

    async def list(self, caller: Caller, params: ListParams) -> builtins.list[TaskView]:
        owner = None if caller.is_admin else caller.uid
        records = await self.journal.tasks.list(
            owner, params.state, params.limit, params.before, params.schedule_id, params.trigger
        )
        return [self._view(r) for r in records]

    async def match(self, caller: Caller, params: MatchParams) -> TaskMatches:
        owner = None if caller.is_admin else caller.uid
        return TaskMatches(
            task_ids=list(await self.journal.tasks.match_ids(params.prefix, owner, params.limit))
        )

    async def cancel(self, caller: Caller, params: CancelParams) -> TaskView:
        await self._owned(caller, params.task_id)
        record = await self.supervisor.cancel(params.task_id, params.reason)
        if record is None:
            raise task_not_found(params.task_id)
        return self._view(record)

    async def wait(self, caller: Caller, params: WaitParams) -> TaskView:
        record = await self._owned(caller, params.task_id)
        if record.state != "terminal":
            done = self.supervisor.terminal_event(params.task_id)
            with anyio.move_on_after(
                min(params.timeout_s if params.timeout_s is not None else WAIT_CAP_S, WAIT_CAP_S)
            ):
                # Re-read after registering: the task may have ended in between.
                record = await self._owned(caller, params.task_id)
                if record.state != "terminal":
                    await done.wait()
            record = await self._owned(caller, params.task_id)
        return self._view(record)

    async def events(self, caller: Caller, params: EventsParams) -> AsyncIterator[EventView]:
        await self._owned(caller, params.task_id)
        async with aclosing(task_events(self.journal, params)) as events:
            async for event in events:
                yield event

    def watch(self, caller: Caller, params: WatchParams) -> AsyncIterator[TaskView]:
        def visible(record: TaskRecord) -> TaskView | None:
            seen = record.owner_uid == caller.uid or caller.is_admin
            return self._view(record) if seen else None

        return task_changes(self.journal, params, visible)

    async def transcript(self, caller: Caller, params: TranscriptParams) -> TranscriptView:
        record = await self._owned(caller, params.task_id)
        transcripts = self.journal.transcripts

        async def page() -> builtins.list[StepRecord]:
            return await transcripts.items(
                params.task_id, params.handle, after_seq=params.after_seq, limit=params.limit
            )

        with self.journal.following(params.task_id) as changed:
            steps = await page()
            if not steps and params.wait_s > 0 and record.state != "terminal":
                with anyio.move_on_after(params.wait_s):
                    await changed.wait()
                record = await self.journal.tasks.get(params.task_id) or record
                steps = await page()
        shown: builtins.list[TranscriptStep] = []
        size = 0
        for step in steps:
            size += approx_bytes(step.item)
            if shown and size > TRANSCRIPT_PAGE_BYTES:
                break
            shown.append(TranscriptStep(seq=step.seq, ts=step.ts, item=step.item))
        return TranscriptView(
            task_id=record.task_id,
            handle=params.handle,
            state=self._view(record).state,
            instruction=record.spec.instruction,
            handles=await transcripts.handles(params.task_id),
            steps=shown,
            next_seq=shown[-1].seq if shown else params.after_seq,
            more=len(shown) < len(steps) or len(steps) == params.limit,
        )

    async def tree(self, caller: Caller, params: TaskRef) -> builtins.list[NodeView]:
        record = await self._owned(caller, params.task_id)
        slot = self.supervisor.running.get(params.task_id)
        if slot is not None and slot.run is not None:
            return slot.run.node_views()  # live: usage as counted so far
        nodes = [n.to_view() for n in await self.journal.tasks.nodes(params.task_id)]
        if nodes or record.state == "terminal":
            return nodes
        return [NodeView(handle="0", parent=None, depth=0, state="starting")]

    async def status(self, caller: Caller) -> DaemonStatus:
        owner = None if caller.is_admin else caller.uid
        counts = await self.journal.tasks.counts(owner)
        figures = self.live_figures(with_tasks=False)
        return daemon_status(
            figures,
            counts,
            self.journal.health,
            owner=owner,
            pid=os.getpid(),
            uptime_s=time.monotonic() - self.started,
        )

    def live_figures(self, *, with_tasks: bool = True) -> LiveFigures:
        """What the API reads of the supervisor, taken now (on the supervisor's loop)."""
        return take_figures(
            self.supervisor, self.triggers, self._children_now, anyio.current_time(), with_tasks=with_tasks
        )

    # ---- schedules (docs/design.md §11) ---------------------------------------------------------------

    def _scheduler(self) -> Scheduler:
        if self.scheduler is None:
            raise ApiError(UNAVAILABLE, "this daemon runs no scheduler", retryable=False)
        return self.scheduler

    async def _owned_schedule(self, caller: Caller, schedule_id: str) -> ScheduleRecord:
        record = await self.journal.schedules.get(schedule_id)
        if record is None or (record.owner_uid != caller.uid and not caller.is_admin):
            raise schedule_not_found(schedule_id)
        return record

    async def schedule_create(self, caller: Caller, params: ScheduleCreateParams) -> ScheduleCreateResult:
        scheduler = self._scheduler()
        if self.supervisor.draining:
            raise ApiError(DRAINING, "agentd is shutting down and accepts no new schedules", retryable=True)
        await self._check_spec(params.spec, caller)
        try:
            record, created = await scheduler.create(
                caller.uid,
                params.trigger,
                params.spec,
                idempotency_key=params.idempotency_key,
                quota=submit_quota(self._config()),
            )
        except (TriggerError, CheckTimedOut) as exc:
            raise ApiError(INVALID_SPEC, f"invalid schedule: {exc}") from None
        except QuotaExceeded as exc:
            raise ApiError(QUOTA_EXCEEDED, f"the schedule was not accepted: {exc}", retryable=True) from None
        except IdempotencyConflict as exc:
            raise ApiError(IDEMPOTENCY_CONFLICT, f"the schedule was not accepted: {exc}") from None
        except JournalUnavailable as exc:
            raise ApiError(UNAVAILABLE, f"the schedule was not accepted: {exc}", retryable=True) from None
        return ScheduleCreateResult(
            schedule_id=record.schedule_id,
            state=record.state,
            next_fire_at=record.next_fire_at,
            created=created,
        )

    async def schedule_list(self, caller: Caller, params: ScheduleListParams) -> builtins.list[ScheduleView]:
        owner = None if caller.is_admin else caller.uid
        records = await self.journal.schedules.list(owner, params.state, params.limit, params.after)
        return [r.to_view() for r in records]

    async def schedule_get(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        return (await self._owned_schedule(caller, params.schedule_id)).to_view()

    async def schedule_pause(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        return await self._change(caller, params.schedule_id, "pause")

    async def schedule_resume(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        return await self._change(caller, params.schedule_id, "resume")

    async def schedule_delete(self, caller: Caller, params: ScheduleRef) -> ScheduleView:
        return await self._change(caller, params.schedule_id, "delete")

    async def _change(self, caller: Caller, schedule_id: str, action: str) -> ScheduleView:
        scheduler = self._scheduler()
        current = await self._owned_schedule(caller, schedule_id)
        if current.state == "ended" and action != "delete":
            raise ApiError(
                INVALID_SPEC, f"schedule {schedule_id!r} has ended ({current.note}); it cannot {action}"
            )
        try:
            if action == "pause":
                record = await scheduler.pause(schedule_id)
            elif action == "resume":
                record = await scheduler.resume(schedule_id)
            else:
                record = await scheduler.delete(schedule_id)
        except ScheduleNotFound:
            raise schedule_not_found(schedule_id) from None
        except JournalUnavailable as exc:
            raise ApiError(UNAVAILABLE, f"the schedule was not changed: {exc}", retryable=True) from None
        return record.to_view()

    # ---- approvals -----------------------------------------------------------------

    async def approval_list(self, caller: Caller, params: ApprovalListParams) -> builtins.list[ApprovalView]:
        if params.task_id is not None:
            await self._owned(caller, params.task_id)
        owner = None if caller.is_admin else caller.uid
        records = await self.journal.approvals.pending(
            owner_uid=owner, task_id=params.task_id, limit=params.limit
        )
        return [r.to_view() for r in records]

    async def approval_decide(self, caller: Caller, params: ApprovalDecideParams) -> ApprovalView:
        """A person's decision on a pending request of a task the caller may decide (its owner or an
        admin: the same rule, and the same NOT_FOUND, as every task operation). A decision that
        can no longer reach the call (the task ended or is being cancelled) is refused, saying the
        call did not run."""
        task = await self._owned(caller, params.task_id)
        desk = self.supervisor.approvals
        if desk is None:
            raise ApiError(UNAVAILABLE, "this daemon takes no approvals", retryable=False)
        call = params.call
        if call is None:
            pending = await self.journal.approvals.pending(task_id=params.task_id, limit=2)
            if not pending:
                raise ApiError(NOT_FOUND, f"task {params.task_id!r} has no pending approval request")
            if len(pending) > 1:
                raise ApiError(
                    INVALID_SPEC,
                    f"task {params.task_id!r} has several pending requests; name one (agentd approvals)",
                )
            call = pending[0].call_id
        record = await self.journal.approvals.get(call)
        if record is None or record.task_id != params.task_id:
            raise ApiError(NOT_FOUND, f"no approval request {call!r} on task {params.task_id!r}")
        self._check_approver(caller, record.server)
        try:
            if task.state == "terminal":
                # No run can make the call any more: the answer says the call did not run.
                status = task.status.value if task.status is not None else "ended"
                decided, won = await desk.withdraw(call, f"the task ended ({status}) before a decision")
                won = False
            else:
                decided, won = await desk.decide(
                    call, approve=params.approve, reason=params.reason, decider_uid=caller.uid
                )
        except JournalUnavailable as exc:
            raise ApiError(UNAVAILABLE, f"the decision was not recorded: {exc}", retryable=True) from None
        assert decided is not None
        if not won:
            raise ApiError(
                INVALID_SPEC,
                f"approval request {call!r} is already {decided.state}"
                + (f" ({decided.reason})" if decided.reason else "")
                + ("; the call did not run" if decided.state in ("withdrawn", "expired", "denied") else ""),
            )
        return decided.to_view()

    def _check_approver(self, caller: Caller, server: str) -> None:
        """A server with `approval_by = "admin"` has its gated calls decided by an admin only: the
        operator gated them, and the task's owner is the one the gate holds back."""
        configured = self._config().mcp.get(server)
        if configured is not None and configured.section.approval_by == "admin" and not caller.is_admin:
            raise ApiError(
                FORBIDDEN,
                f"calls of MCP server {server!r} are decided by an admin only (mcp.{server}.approval_by)",
            )

    # ---- reactive triggers (docs/triggers.md) -------------------------------------------------

    def _trigger_manager(self, caller: Caller) -> TriggerManager:
        if not caller.is_admin:
            raise ApiError(FORBIDDEN, "triggers are the operator's: only an admin may see or change them")
        if self.triggers is None:
            raise ApiError(UNAVAILABLE, "this daemon runs no triggers", retryable=False)
        return self.triggers

    async def trigger_list(self, caller: Caller) -> builtins.list[TriggerView]:
        return self._trigger_manager(caller).views()

    async def trigger_pause(self, caller: Caller, params: TriggerRef) -> TriggerView:
        return await self._trigger_change(caller, params.name, "pause")

    async def trigger_resume(self, caller: Caller, params: TriggerRef) -> TriggerView:
        return await self._trigger_change(caller, params.name, "resume")

    async def trigger_restart(self, caller: Caller, params: TriggerRef) -> TriggerView:
        return await self._trigger_change(caller, params.name, "restart")

    async def budget_list(self, caller: Caller) -> BudgetsView:
        owner = None if caller.is_admin else caller.uid
        caps = self.supervisor.options.daily_caps
        try:
            return await budgets_view(self.journal, self.supervisor.daily, caps, owner, caller.uid)
        except JournalUnavailable as exc:
            raise ApiError(UNAVAILABLE, f"the journal could not be read: {exc}", retryable=True) from None

    async def _trigger_change(self, caller: Caller, name: str, action: str) -> TriggerView:
        manager = self._trigger_manager(caller)
        try:
            if action == "pause":
                return await manager.pause(name)
            if action == "resume":
                return await manager.resume(name)
            return manager.restart(name)
        except KeyError:
            raise ApiError(NOT_FOUND, f"no trigger {name!r} (see `agentd triggers`)") from None
        except JournalUnavailable as exc:
            raise ApiError(UNAVAILABLE, f"the trigger was not changed: {exc}", retryable=True) from None

    def _view(self, record: TaskRecord) -> TaskView:
        return task_view(record, live_task(self.supervisor, record.task_id), anyio.current_time())
