"""Task supervision: the queue, the spawn chokepoint, outcomes, drain and restart recovery.

The `Supervisor` takes queued tasks from the journal up to `max_concurrent_tasks`, spawns each
as a `SupervisedChild` in write-ahead order (mark `starting` → spawn → record pid and start time →
send `ctrl/spawn`), records exactly one terminal status per task, and sweeps orphans. Each task
runs as a `TaskRun` given narrow `RunPorts`. It never talks to a model and never parses MCP
traffic (docs/design.md §1).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import anyio
import anyio.lowlevel
import psutil
from pydantic import JsonValue

from agentd import logs
from agentd.errors import InvalidTransition, JournalError
from agentd.journal.records import ApprovalRecord, NodeEnd, TaskRecord
from agentd.journal.store import Journal
from agentd.metrics.port import NULL_METRICS, Metrics
from agentd.spawning import reaper
from agentd.spawning.cgroup import CgroupRoot
from agentd.spawning.spawner import Spawner
from agentd.supervision.approvals import ApprovalDesk, Asker
from agentd.supervision.daily_caps import CapsConfig
from agentd.supervision.daily_desk import DailyDesk, day_clock
from agentd.supervision.executor import Executor, LocalExecutor, Run
from agentd.supervision.fairness import at_owner_cap, fair_order
from agentd.supervision.parking import Parking
from agentd.supervision.ports import DrainState, RunOptions, RunPorts, StepJournal
from agentd.supervision.provider_desk import ProviderDesk
from agentd.supervision.provider_limits import EndpointLimits
from agentd.supervision.queue_cache import QueueCache, first_per_owner
from agentd.supervision.resumption import resumes_after
from agentd.supervision.spawn_window import SpawnWindow
from agentd.supervision.task_payloads import PayloadError
from agentd.supervision.watch_clock import WatchClock
from agentd.tracing import NULL_TRACING, TaskSpan, Tracing
from protocol.environment import RUN_MARKER_ENV, ZYGOTE_RUN_ID
from protocol.result import RunError, RunResult, TerminalStatus, exit_code
from protocol.spawn import SpawnPayload
from protocol.transcript import replayable, steps_of

PayloadBuilder = Callable[[TaskRecord], SpawnPayload]
# Told of every schedule fire that reached its terminal state: the record, and whether the daemon
# was draining (a drain's cancel is not a user's). Must not raise (agentd/scheduling/driver.py).
FireEnded = Callable[[TaskRecord, bool], Awaitable[None]]
# A task's end asks for a sweep this soon (its leaked MCP servers go), coalesced with other ends.
SWEEP_COALESCE_S = 0.2
# Loop iterations the scheduler lets pass after a wake before it starts runs (see `serve`).
YIELDS_AFTER_WAKE = 2


@dataclass(frozen=True, slots=True)
class SupervisorOptions:
    max_concurrent_tasks: int = 8
    # Root tasks one owner may have running at once; None: no cap.
    max_running_per_uid: int | None = None
    drain_timeout_s: float = 25.0
    orphan_sweep_interval_s: float = 10.0
    # Subagents booting at once (spawn → first model call); the rest wait in order. 0: no bound.
    spawn_window: int = 16
    # Each task runs under the options current when it starts, to its end (a reload does not
    # change a running task).
    run: RunOptions = field(default_factory=RunOptions)
    # What a stop (SIGTERM) does to running tasks: "park" them (their children are stopped and
    # they go back to the queue with their transcripts, to resume at the next start) or
    # "cancel" them (docs/durability.md).
    on_stop: Literal["park", "cancel"] = "park"
    # A task whose call has waited this long for a person's approval is parked (its subagents
    # stop, its slot frees) until the call is decided; 0: never (docs/durability.md).
    park_approval_after_s: float = 60.0
    # A task whose budget ran out (and that names none itself): "end" it `exhausted_*`, or
    # "pause" it until `agentd extend`, at most `budget_wait_timeout_s` (docs/durability.md).
    on_budget: Literal["end", "pause"] = "end"
    budget_wait_timeout_s: float = 86400.0
    # `[intelligence.NAME]` provider limits, enforced across every task (docs/budgets.md).
    provider_limits: Mapping[str, EndpointLimits] = field(default_factory=dict)
    # Daily caps per user and trigger (a schedule's is its own): a task over one waits for the next
    # day (docs/budgets.md).
    daily_caps: CapsConfig = field(default_factory=CapsConfig)


@dataclass
class _Slot:
    """A task this daemon has taken from the queue; `run` exists once its payload is built."""

    record: TaskRecord
    run: Run | None = None
    span: TaskSpan | None = None
    cancel_reason: str | None = None
    # The drain stopped it to resume later (`on_stop = "park"`), or a call waited too long for an
    # approval (`parked_on`: that request and until when the task waits for it, wall clock); a
    # client's cancel clears it.
    park: bool = False
    parked_on: tuple[str, float] | None = None


class Supervisor:
    def __init__(
        self,
        journal: Journal,
        build_payload: PayloadBuilder,
        spawner: Spawner,
        options: SupervisorOptions | None = None,
        cgroup_root: CgroupRoot | None = None,
        metrics: Metrics = NULL_METRICS,
        tracing: Tracing = NULL_TRACING,
        *,
        approvals: bool = True,
        executor: Executor | None = None,
        steps: StepJournal | None = None,
    ) -> None:
        self.journal = journal
        # Where the nodes' transcripts are journaled: this journal's, or (a Temporal worker's)
        # the task's workflow history first, so the next attempt on any worker resumes from it.
        self.steps: StepJournal = steps or journal.transcripts
        # How each task runs: here (the default), or on a Temporal worker (docs/design.md §16).
        self.executor: Executor = executor or LocalExecutor()
        # Journaled tasks whose submit waits for the executor to accept them: not to be taken yet.
        self.accepting: set[str] = set()
        # Gated tool calls wait here for a person; without a desk they are denied.
        self.build_payload = build_payload
        self.spawner = spawner
        self.options = options or SupervisorOptions()
        self.approvals = ApprovalDesk(journal) if approvals else None
        if self.approvals is not None and self.executor.resumes_here:
            self.approvals.park_after_s = self.options.park_approval_after_s
            self.approvals.on_long_wait = self._park_on_approval
            self.approvals.on_decided_unwaited = self._approval_decided
        self.cgroup_root = cgroup_root
        self.metrics = metrics
        self.tracing = tracing
        self.log = logs.get()
        self.running: dict[str, _Slot] = {}
        self._running_by_owner: Counter[int] = Counter()  # kept with `running`: fairness reads it per pick
        self.window = SpawnWindow(self.options.spawn_window)
        self.providers = ProviderDesk(self.options.provider_limits)
        self.clock = WatchClock()
        self.daily = DailyDesk(journal, lambda: self.options.daily_caps, day_clock())
        # The earliest instant (the desk's clock) a task this daemon deferred may start again.
        self._next_lift: float | None = None
        # Trigger tasks' children prestarted while their debounce window is open (parking.py).
        self.parking = Parking(
            spawner, cgroup_root, lambda: self.options.run, lambda record: self.build_payload(record)
        )
        self._drain = DrainState()
        self._wake = anyio.Event()
        # The queue as last read, so a task's start or end does not cost a journal read.
        self._queue = QueueCache()
        self._sweep_wanted = anyio.Event()
        self._terminal: dict[str, anyio.Event] = {}
        self._drained = anyio.Event()
        # Fair scheduling (supervision/fairness.py): when each owner last had a task started.
        self._starts = 0
        self._last_started: dict[int, int] = {}
        self.on_fire_ended: FireEnded | None = None
        # Tasks run outside the scheduler (warm sessions): how to cancel each, and its processes.
        self._adopted: dict[str, tuple[Callable[[str], None], Callable[[], set[int]]]] = {}
        # Told of every trigger delivery's task that ended (frees a `max_inflight` slot); must not raise.
        self.on_trigger_ended: Callable[[TaskRecord], None] | None = None
        # Other long-lived children of the daemon (resource watchers): the orphan sweep spares them.
        self.also_owned: Callable[[], set[int]] = set

    # ---- public --------------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        """Intake has stopped and every running task is being cancelled."""
        return self._drain.draining

    @property
    def forced(self) -> bool:
        """A second signal asked for SIGKILL now."""
        return self._drain.forced

    def owned_pids(self) -> set[int]:
        children = {pid for slot in self.running.values() if slot.run is not None for pid in slot.run.pids()}
        adopted = {pid for _, pids in self._adopted.values() for pid in pids()}
        parked = self.parking.pids()
        return children | adopted | parked | self.spawner.helper_pids() | self.also_owned()

    def run_ports(self) -> RunPorts:
        """What a task's run needs of the daemon (a warm session's runs get the same)."""
        return RunPorts(
            journal=self.journal,
            spawner=self.spawner,
            drain=self._drain,
            options=self.options.run,
            cgroups=self.cgroup_root,
            metrics=self.metrics,
            approvals=self.approvals,
            window=self.window,
            clock=self.clock,
            parking=self.parking,
            steps=self.steps,
            providers=self.providers,
        )

    def adopt(self, task_id: str, cancel: Callable[[str], None], pids: Callable[[], set[int]]) -> None:
        """Know a task that runs outside the scheduler (a warm session's incarnation): `cancel`
        serves `agentd cancel` and the drain, and its processes are not orphans to the sweep."""
        self._adopted[task_id] = (cancel, pids)
        if self.draining:
            cancel("agentd is shutting down")

    def release(self, task_id: str) -> None:
        """The adopted task has ended (its terminal status is recorded)."""
        self._adopted.pop(task_id, None)

    def notify_submitted(self, record: TaskRecord | None = None) -> None:
        """A submit created a task: count it and wake the scheduler.

        `record` is listed in the scheduler's copy of the queue only while its id is still in
        `accepting` (so no read can have started it already, and it cannot start twice);
        otherwise, or without it, the scheduler reads the queue from the journal again."""
        self.metrics.task_submitted()
        if record is not None and record.task_id in self.accepting:
            self._queue.submitted(record)
        else:
            self._queue.stale()
        self._wake.set()

    def queue_changed(self) -> None:
        """A queued task left the queue other than by starting (forgotten, cancelled): the
        scheduler reads the queue from the journal again instead of trusting its copy."""
        self._queue.stale()

    def terminal_event(self, task_id: str) -> anyio.Event:
        """An event set when `task_id` reaches a terminal state in this daemon's lifetime."""
        return self._terminal.setdefault(task_id, anyio.Event())

    async def cancel(self, task_id: str, reason: str) -> TaskRecord | None:
        """Cancel a task in any state; returns the record as it stands (None if unknown).

        A queued task is ended here only if it is still queued when the write commits; if the
        scheduler claimed it meanwhile, its run is cancelled instead. Either way it ends once.
        """
        slot = self.running.get(task_id)
        if slot is None and (adopted := self._adopted.get(task_id)) is not None:
            adopted[0](reason)
            return await self.journal.tasks.get(task_id)
        if slot is None:
            self.parking.discard(task_id, "its task was cancelled while queued")
            record = await self.journal.tasks.get(task_id)
            if record is None or record.state != "queued":
                return record
            result = RunResult(
                status=TerminalStatus.CANCELLED, error=RunError(kind="cancelled", message=reason)
            )
            try:
                return await self._record_terminal(record, result, only_queued=True)
            except InvalidTransition:
                slot = self.running.get(task_id)
                if slot is None:  # it ended on its own meanwhile
                    return await self.journal.tasks.get(task_id)
            finally:
                # It left the queue here, not through the scheduler; told after the commit, since
                # a read while it was being written may have copied it still queued.
                self.queue_changed()
        slot.cancel_reason = slot.cancel_reason or reason
        slot.park, slot.parked_on = False, None  # a client's cancel ends it, even during a drain
        if slot.run is not None:
            slot.run.cancel(reason)
        return await self.journal.tasks.get(task_id)

    def drain(self, *, force: bool = False) -> None:
        """Stop intake and cancel every running task; `force` SIGKILLs them now (second signal)."""
        first = not self.draining
        self._drain.draining = True
        self._drain.forced = self._drain.forced or force
        if first:
            self.log.info("proc.drain", running=len(self.running))
            self.parking.begin_close()
        park = self.options.on_stop == "park" and self.executor.resumes_here
        for slot in self.running.values():
            if slot.cancel_reason is None:
                slot.park = park
            slot.cancel_reason = slot.cancel_reason or "agentd is shutting down"
            if slot.run is not None:
                slot.run.cancel("agentd is shutting down", cause="drain", force=force)
        for cancel, _ in list(self._adopted.values()):
            cancel("agentd is shutting down")
        self._wake.set()

    async def wait_drained(self) -> None:
        await self._drained.wait()

    def counts(self) -> dict[str, int]:
        return {"running": len(self.running)}

    @property
    def live(self) -> int:
        """Tasks taken from the queue and not yet ended, warm sessions' included."""
        return len(self.running) + len(self._adopted)

    # ---- the scheduler --------------------------------------------------------------------------

    async def serve(self) -> None:
        """Run tasks until drained: start queued ones as slots free up; sweep orphans."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._sweep_forever)
            tg.start_soon(self.clock.serve)
            tg.start_soon(self.parking.serve)
            while not self.draining:
                # A new event before the pick, not after it: a wake while the pick reads the journal
                # is then not lost (it used to wait for the 1 s timed wake below).
                self._wake = anyio.Event()
                free = self.options.max_concurrent_tasks - len(self.running)
                if free > 0:
                    try:
                        queued = await self._queued(free + len(self.running))
                    except JournalError as exc:
                        self.log.error("proc.start", err=f"journal read failed: {exc}")
                        queued = ()
                    waiting = [
                        r for r in queued if r.task_id not in self.running and r.task_id not in self.accepting
                    ]
                    cap = self.options.max_running_per_uid
                    for record in fair_order(waiting, self._running_by_owner, self._last_started):
                        if len(self.running) >= self.options.max_concurrent_tasks:
                            break
                        if at_owner_cap(self._running_by_owner[record.owner_uid], cap):
                            continue  # its owner runs its share: it waits, another owner's may start
                        if self.daily.may_apply(record) and await self._held_for_the_day(record):
                            continue
                        self._starts += 1
                        self._last_started[record.owner_uid] = self._starts
                        slot = _Slot(record)
                        self.running[record.task_id] = slot
                        self._running_by_owner[record.owner_uid] += 1
                        self._queue.taken(record)
                        tg.start_soon(self._run_task, slot)
                with anyio.move_on_after(1.0) as timed:
                    await self._wake.wait()
                # Whoever woke us (a submit) answers its client first: its reply is a lock and a
                # socket write away, and the runs started below would take the loop before it.
                # Reading the queue from the journal used to give it that time (a thread hop).
                for _ in range(YIELDS_AFTER_WAKE):
                    await anyio.lowlevel.checkpoint()
                if self._next_lift is not None and self.daily.now() >= self._next_lift:
                    self._next_lift = None
                    self._queue.stale()  # deferred tasks' day is over: the journal lists them again
                if timed.cancelled_caught:
                    # Nothing woke it: read the journal again, so a task queued by a path that did
                    # not say so (or a requeue) is still started within a second, as before.
                    self._queue.stale()
            await self._finish_drain()
            await self.parking.close()
            self.sweep()  # what the last tasks to end left behind, before the sweeper stops
            tg.cancel_scope.cancel()
        self._drained.set()

    async def _queued(self, per_owner: int) -> tuple[TaskRecord, ...]:
        """Each owner's oldest `per_owner` queued tasks: from the cached queue, else the journal."""
        picked = self._queue.pick(per_owner)
        if picked is not None:
            return picked
        size = self._queue.read_size(per_owner)
        self._queue.begin_read()
        read = None
        try:
            read = await self.journal.tasks.next_queued(size, day_now=self.daily.now())
        finally:
            usable = self._queue.end_read(read, size)
        if not usable:
            # A task it lists was forgotten or cancelled meanwhile: start nothing from it, and
            # pick again at once from a fresh read.
            self._wake.set()
            return ()
        return first_per_owner(read, per_owner)[0]

    async def _held_for_the_day(self, record: TaskRecord) -> bool:
        """Whether a daily cap keeps `record` from starting (deferred to the cap's next day, or
        left for the next pick when the journal cannot say)."""
        hold = await self.daily.hold(record, self.log)
        if self.draining:
            return True  # the drain began during the read: nothing more starts
        if hold.held:
            self._queue.taken(record)  # not startable now: the journal lists it again after `until`
        if hold.until is not None and (self._next_lift is None or hold.until < self._next_lift):
            self._next_lift = hold.until
        return hold.held

    async def _finish_drain(self) -> None:
        deadline = anyio.current_time() + self.options.drain_timeout_s
        while self.running and anyio.current_time() < deadline - 2.5:
            with anyio.move_on_at(deadline - 2.5):
                await self._wake.wait()
            self._wake = anyio.Event()
        if self.running:
            self.drain(force=True)
            with anyio.move_on_at(deadline):
                while self.running:
                    await self._wake.wait()
                    self._wake = anyio.Event()

    async def _sweep_forever(self) -> None:
        while True:
            with anyio.move_on_after(self.options.orphan_sweep_interval_s):
                await self._sweep_wanted.wait()
                # Coalesce: a thousand tasks ending within this pause cost one sweep, not a thousand.
                await anyio.sleep(SWEEP_COALESCE_S)
            self._sweep_wanted = anyio.Event()
            self.sweep()
            await self.expire_paused()

    def sweep_soon(self) -> None:
        """A task ended: what it leaked (a stdio MCP server) is swept within `SWEEP_COALESCE_S`."""
        self._sweep_wanted.set()

    def sweep(self) -> list[int]:
        if self.spawner.spawning:
            # A forked subagent is the daemon's child before its spawn owns it: sweeping now could
            # take it for an orphan. The next sweep comes soon enough.
            return []
        return reaper.sweep(self.owned_pids(), on_kill=reaper.log_orphan)

    # ---- one task ------------------------------------------------------------------------------

    async def _run_task(self, slot: _Slot) -> None:
        """Run one task to its one terminal status. Nothing one task does or suffers escapes
        this function: an unexpected error ends that task `crashed`, never the scheduler."""
        record = slot.record
        slot.span = self.tracing.start_task(record.task_id, record.run_id, record.attempts + 1)
        result: RunResult | None = None
        try:
            try:
                result = await self._start_and_supervise(slot)
            except JournalError:
                raise
            except Exception as exc:
                self.log.exception("task.terminal", task_id=record.task_id, err=f"internal error: {exc!r}")
                message = f"agentd internal error: {_innermost(exc)}"[:500]
                result = RunResult(
                    status=TerminalStatus.CRASHED, error=RunError(kind="internal", message=message)
                )
            # The root node's end (a local run leaves it to us) commits in the same transaction
            # as the task's state.
            root = slot.run.root_end if slot.run is not None else None
            if slot.park and result is not None and result.status is TerminalStatus.CANCELLED:
                await self._park(record, root, slot.parked_on)
            elif result is not None and self._pauses(record, result):
                await self._pause(record, result, root)
            elif result is not None and self._retries(record, result):
                await self._retry(record, result, root)
            elif result is not None:  # None: it was cancelled while queued, and recorded then
                # A forced kill (a second signal) is not a clean drain.
                await self._record_terminal(
                    record, result, clean_drain=self.draining and not self.forced, root=root
                )
        except JournalError as exc:
            # The outcome could not be recorded; restart recovery will reconcile the task.
            self.log.error("task.terminal", task_id=record.task_id, err=f"journal: {exc}")
        finally:
            slot.span.end(
                result.status.value if result is not None else None,
                cost_usd=result.usage.cost_usd if result is not None else None,
            )
            if self.running.pop(record.task_id, None) is not None:
                self._running_by_owner[record.owner_uid] -= 1
                if not self._running_by_owner[record.owner_uid]:
                    del self._running_by_owner[record.owner_uid]
            self._wake.set()
            self.sweep_soon()

    def _pauses(self, record: TaskRecord, result: RunResult) -> bool:
        """Whether a run that spent its budget waits for `agentd extend` instead of ending."""
        spent = result.status in (TerminalStatus.EXHAUSTED_STEPS, TerminalStatus.EXHAUSTED_TOKENS)
        wanted = record.spec.on_budget or self.options.on_budget
        return spent and wanted == "pause" and self.executor.resumes_here

    async def _pause(self, record: TaskRecord, result: RunResult, root: NodeEnd | None) -> None:
        await self.journal.tasks.pause_for_budget(record.task_id, result, root=root)
        fields: dict[str, JsonValue] = {"status": result.status.value, "steps": result.usage.steps}
        self.journal.append_event(record.task_id, "task.paused", fields)
        self.log.info("task.paused", task_id=record.task_id, run_id=record.run_id, **fields)

    def _retries(self, record: TaskRecord, result: RunResult) -> bool:
        """Whether a crashed run goes on from its transcript in a new attempt (here; a Temporal
        worker's supervisor leaves retries to Temporal)."""
        return resumes_after(result) and self.executor.requeue_on_recovery(record)

    async def _retry(self, record: TaskRecord, result: RunResult, root: NodeEnd | None) -> None:
        requeued = await self.journal.tasks.requeue_after_crash(record.task_id, root=root)
        assert result.error is not None
        fields: dict[str, JsonValue] = {
            "attempt": requeued.attempts + 1,
            "err": result.error.kind,
            "message": result.error.message[:500],
        }
        self.journal.append_event(record.task_id, "task.requeued", fields)
        self.log.warning("task.requeued", task_id=record.task_id, run_id=record.run_id, **fields)

    async def expire_paused(self) -> None:
        """End the tasks that waited for `agentd extend` longer than `budget_wait_timeout_s`,
        with the status their budget gave them."""
        try:
            expired = await self.journal.tasks.paused_since(time.time() - self.options.budget_wait_timeout_s)
        except JournalError:
            return
        for record in expired:
            assert record.paused_result is not None
            waited = f"no budget was added within {self.options.budget_wait_timeout_s:g} s"
            error = RunError(kind=record.paused_result.status.value, message=waited)
            with contextlib.suppress(InvalidTransition, JournalError):
                await self._record_terminal(
                    record, record.paused_result.model_copy(update={"error": error}), only_queued=True
                )

    async def _park(
        self, record: TaskRecord, root: NodeEnd | None, waiting: tuple[str, float] | None
    ) -> None:
        """Back to the queue, to resume from its transcript: when the daemon starts again, or
        (`waiting`) once the approval request it waits on is decided or expires."""
        parked = await self.journal.tasks.park(record.task_id, root=root, waiting=waiting)
        fields: dict[str, JsonValue] = {"resumes": parked.resumes}
        if waiting is not None:
            fields.update(call=waiting[0], until=round(waiting[1], 3))
            self.queue_changed()  # a decision made while it stopped lets it start at once
        self.journal.append_event(record.task_id, "task.parked", fields)
        self.log.info("task.parked", task_id=record.task_id, run_id=record.run_id, **fields)

    def _park_on_approval(self, asker: Asker, record: ApprovalRecord, until: float) -> bool:
        """A call of `asker`'s task has waited `park_approval_after_s` for a person: stop the
        task's subagents and park it, so that it frees its slot while nobody decides; it resumes
        from its transcript, and finds the decision, once the request is decided or `until`
        (wall clock) passes. False: the task is ending or the daemon draining; it keeps waiting."""
        slot = self.running.get(asker.task_id)
        if slot is None or slot.run is None or slot.park or slot.cancel_reason is not None or self.draining:
            return False
        slot.park, slot.parked_on = True, (record.call_id, until)
        slot.run.cancel("parked while a tool call waits for a person's approval", cause="park")
        return True

    def _approval_decided(self, record: ApprovalRecord) -> None:
        """A request no run waits on was decided: its parked task may start now."""
        self.queue_changed()
        self._wake.set()

    async def _resumed(self, record: TaskRecord, payload: SpawnPayload) -> SpawnPayload | RunResult:
        """A task that ran before: its payload with the root's journaled transcript to replay and
        what is left of its deadline (it runs in wall time across stops); or its `deadline` result."""
        elapsed = time.time() - (record.first_started_at or time.time())
        left = payload.limits.deadline_s - max(0.0, elapsed)
        if left <= 0:
            deadline_s = payload.limits.deadline_s
            message = f"its deadline ({deadline_s:g} s from its first start) passed while it was stopped"
            return RunResult(status=TerminalStatus.DEADLINE, error=RunError(kind="deadline", message=message))
        steps = await self.journal.transcripts.items(record.task_id, "0")
        items = [step.item for step in steps]
        from_step = steps_of(replayable(items))
        self.journal.append_event(
            record.task_id,
            "task.resumed",
            {"from_step": from_step, "items": len(items), "resumes": record.resumes},
        )
        self.log.info("task.resumed", task_id=record.task_id, from_step=from_step, items=len(items))
        limits = payload.limits.model_copy(update={"deadline_s": left})
        return payload.model_copy(update={"replay": items, "limits": limits})

    async def _start_and_supervise(self, slot: _Slot) -> RunResult | None:
        try:
            payload = self.build_payload(slot.record)
            if slot.span is not None and slot.span.traceparent is not None:
                # The task's span is the parent of its subagents' spans (and its MCP servers').
                telemetry = payload.telemetry.model_copy(update={"traceparent": slot.span.traceparent})
                payload = payload.model_copy(update={"telemetry": telemetry})
        except PayloadError as exc:
            return RunResult(status=TerminalStatus.CRASHED, error=RunError(kind="config", message=str(exc)))
        if slot.cancel_reason is not None:
            return RunResult(
                status=TerminalStatus.CANCELLED, error=RunError(kind="cancelled", message=slot.cancel_reason)
            )
        if (slot.record.resumes or slot.record.forked_from) and self.executor.replays:
            resumed = await self._resumed(slot.record, payload)
            if isinstance(resumed, RunResult):
                return resumed
            payload = resumed
        slot.run = self.executor.start(self.run_ports(), slot.record, payload)
        if self.draining:
            slot.run.cancel("agentd is shutting down", cause="drain", force=self.forced)
        return await slot.run.run()

    async def _record_terminal(
        self,
        record: TaskRecord,
        result: RunResult,
        *,
        clean_drain: bool = False,
        only_queued: bool = False,
        root: NodeEnd | None = None,
    ) -> TaskRecord:
        code = int(exit_code(result, clean_drain=clean_drain))
        record = await self.journal.tasks.mark_terminal(
            record.task_id,
            result.status,
            exit_code=code,
            result=result.result,
            partial=result.partial,
            usage=result.usage,
            abort=result.abort,
            error=result.error,
            only_queued=only_queued,
            idle=result.idle,
            root=root,
        )
        self.metrics.task_finished(result.status.value, code)
        self.log.info(
            "task.terminal",
            task_id=record.task_id,
            run_id=record.run_id,
            status=result.status.value,
            exit_code=code,
            steps=result.usage.steps,
            tokens=result.usage.tokens,
            err=result.error.kind if result.error else None,
        )
        self.terminal_event(record.task_id).set()
        if record.schedule_id is not None and self.on_fire_ended is not None:
            await self.on_fire_ended(record, self.draining)
        if record.trigger is not None and self.on_trigger_ended is not None:
            self.on_trigger_ended(record)
        return record

    # ---- restart recovery (docs/design.md §8) -----------------------------------------------------------

    async def recover(self) -> list[str]:
        """Reconcile tasks a previous daemon left `starting`/`running`; returns their ids.

        A survivor matching pid, start time and environment (`is_run_of`) is killed (with its
        process group); the task is requeued with the same run id if its retry policy allows, else `crashed`.
        """
        handled: list[str] = []
        for record in await self.journal.tasks.unfinished():
            killed = await anyio.to_thread.run_sync(kill_survivor, record)
            if self.executor.requeue_on_recovery(record):
                await self.journal.tasks.requeue(record.task_id)
                outcome = "requeued"
            else:
                result = RunResult(
                    status=TerminalStatus.CRASHED,
                    usage=record.usage,
                    error=RunError(
                        kind="supervisor_restart", message="the supervisor restarted while this task ran"
                    ),
                )
                await self._record_terminal(record, result)
                outcome = "crashed"
            self.log.warning(
                "subagent.restart",
                task_id=record.task_id,
                run_id=record.run_id,
                outcome=outcome,
                survivor_killed=killed,
                attempts=record.attempts,
            )
            handled.append(record.task_id)
        return handled


def _innermost(exc: BaseException) -> str:
    """`Type: message` of the first leaf of an exception group (task groups wrap what failed)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def is_run_of(environ: dict[str, str], run_id: str) -> bool:
    """Whether a process whose `/proc/PID/environ` is `environ` (and whose pid and start time are
    the run's) is that run's subagent.

    An exec'd subagent carries its run's marker in its environment block. One forked by the zygote
    shows the zygote's marker there (it sets its own after the fork, which `/proc` never sees): for
    it, pid and start time are the identity (a recycled pid has a later start time), and the
    zygote's marker says it is a subagent at all.
    """
    marker = environ.get(RUN_MARKER_ENV, "")
    return marker.startswith((run_id + "/", ZYGOTE_RUN_ID + "/"))


def kill_survivor(record: TaskRecord, *, timeout_s: float = 5.0) -> bool:
    """Kill the process a previous daemon ran for `record`, if it still exists and is really it.

    It is identified by pid, start time and its environment, so a recycled pid is never signalled.
    It is not our child (it was reparented when its daemon died), so it cannot be reaped here:
    it is gone once it has vanished or become a zombie.
    """
    if record.pid is None or record.pid_start_time is None:
        return False
    try:
        proc = psutil.Process(record.pid)
        if abs(proc.create_time() - record.pid_start_time) > 0.05:
            return False
        if not is_run_of(proc.environ(), record.run_id):
            return False
    except psutil.Error:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.01)
    return True
