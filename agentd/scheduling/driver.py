"""The scheduler: fires schedules on time, from the journal, across restarts (docs/design.md §11).

It keeps every active schedule's next occurrence in a heap and sleeps until the earliest (bounded,
so a wall-clock step is noticed), then decides each due fire with `agentd.scheduling.plan` and
journals it: a fire's task and the schedule's advance commit together, so a restart never fires an
occurrence twice. Fires run concurrently (bounded) so group commit batches them. The supervisor
tells it when a fire ends (`fire_ended`), which a loop needs for its next run. The clock is
injectable (`clock`: wall-clock seconds since the epoch).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
import structlog

from agentd.errors import JournalError, QuotaExceeded, ScheduleNotFound
from agentd.journal.quota import Quota
from agentd.journal.records import ScheduleRecord, TaskRecord
from agentd.journal.store import Journal
from agentd.metrics.port import NULL_METRICS, Metrics
from agentd.off_loop import run_check
from agentd.scheduling.fire_rate import FireRate
from agentd.scheduling.plan import (
    MIN_IDLE_PAUSE_S,
    DueDecision,
    Progress,
    RunOutcome,
    after_run,
    first_fire,
    next_fire,
    on_due,
    parse_trigger,
    remaining_tokens,
    trigger_of,
)
from protocol.api import ScheduleSpec, TaskSpec, TaskState
from protocol.result import TerminalStatus

EV_CREATED = "schedule.created"
EV_FIRED = "schedule.fired"
EV_SKIPPED = "schedule.skipped"
EV_PAUSED = "schedule.paused"
EV_RESUMED = "schedule.resumed"
EV_ENDED = "schedule.ended"
EV_DELETED = "schedule.deleted"

# The longest the scheduler sleeps without looking at the clock again: a wall-clock step (NTP,
# an operator) is noticed within this.
MAX_SLEEP_S = 5.0
# Fires being journaled at once; more wait (group commit batches those in flight).
FIRE_CONCURRENCY = 64
# A fire the journal could not commit is retried this much later.
RETRY_S = 1.0

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Fired:
    """What one due occurrence did (for tests and the bench)."""

    schedule_id: str
    due_at: float
    decision: DueDecision
    task_id: str | None
    lag_s: float


class Scheduler:
    """Owns the in-memory timetable of the journal's active schedules. Obtain, `load`, `serve`."""

    def __init__(
        self,
        journal: Journal,
        *,
        on_fired: Callable[[], None],
        log: structlog.typing.FilteringBoundLogger,
        clock: Clock = time.time,
        stopped: Callable[[], bool] = lambda: False,
        quota: Callable[[], Quota] = Quota,
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        self.journal = journal
        self._metrics = metrics
        self._on_fired = on_fired
        # True once the daemon drains: nothing more fires (what comes due waits for the next start).
        self._stopped = stopped
        # The per-uid caps a fire counts against, like a submit (the config's, read at each fire).
        self._quota = quota
        self._log = log
        self._clock = clock
        # Invariant: `_next[s]` is the occurrence schedule `s` is armed for; the heap may also hold
        # stale entries (re-armed or disarmed schedules), skipped when popped.
        self._heap: list[tuple[float, str]] = []
        self._next: dict[str, float] = {}
        self._wake = anyio.Event()
        self._limiter = anyio.CapacityLimiter(FIRE_CONCURRENCY)
        self._rate = FireRate()

    # ---- the timetable -----------------------------------------------------------------------

    @property
    def armed(self) -> int:
        return len(self._next)

    def arm(self, schedule_id: str, at: float | None) -> None:
        """Fire `schedule_id` at `at` (None: disarm it)."""
        if at is None:
            self._next.pop(schedule_id, None)
            return
        self._next[schedule_id] = at
        heapq.heappush(self._heap, (at, schedule_id))
        if self._heap[0] == (at, schedule_id):
            self._wake.set()

    async def load(self) -> int:
        """Arm every active schedule from the journal; account fires that ended while no
        scheduler listened (the daemon stopped between a run's end and its accounting)."""
        for record in await self.journal.schedules.active():
            if record.next_fire_at is not None:
                self.arm(record.schedule_id, record.next_fire_at)
            if record.last_task_id is not None and record.last_status is None:
                task = await self.journal.tasks.get(record.last_task_id)
                if task is not None and task.state == "terminal":
                    await self.fire_ended(task, False)
        return self.armed

    async def serve(self) -> None:
        """Fire due schedules until cancelled."""
        async with anyio.create_task_group() as tg:
            while True:
                now = self._clock()
                while self._heap and self._heap[0][0] <= now and not self._stopped():
                    at, schedule_id = heapq.heappop(self._heap)
                    if self._next.get(schedule_id) != at:
                        continue  # stale: re-armed or disarmed since
                    del self._next[schedule_id]
                    tg.start_soon(self._fire_guarded, schedule_id, at, now)
                self._wake = anyio.Event()
                wait_s = min(self._heap[0][0] - now, MAX_SLEEP_S) if self._heap else MAX_SLEEP_S
                with anyio.move_on_after(max(wait_s, 0.0)):
                    await self._wake.wait()

    # ---- one due occurrence ------------------------------------------------------------------

    async def _fire_guarded(self, schedule_id: str, due_at: float, woke_at: float) -> None:
        async with self._limiter:
            try:
                await self.fire_due(schedule_id, due_at, woke_at=woke_at)
            except ScheduleNotFound:
                pass  # paused, resumed or deleted while this fire was being decided: theirs wins
            except JournalError as exc:
                self._log.error(EV_FIRED, schedule_id=schedule_id, err=f"journal: {exc}", retry_s=RETRY_S)
                # The retry finds the journal still at `due_at` and fires that occurrence.
                self.arm(schedule_id, max(due_at, self._clock()) + RETRY_S)

    async def fire_due(
        self, schedule_id: str, due_at: float, *, woke_at: float | None = None
    ) -> Fired | None:
        """Decide and journal the occurrence `due_at` of `schedule_id`; None if it no longer applies.
        `woke_at`: when the timetable found it due (the event loop's lateness, for the log)."""
        woke_at = self._clock() if woke_at is None else woke_at
        found = await self._occurrence(schedule_id, due_at)
        if found is None:
            return None
        record, last_state, due_at = found
        now = self._clock()
        decision, next_at = _decide(record, last_state, due_at, now)
        if not decision.fire:
            return await self._skip(record, due_at, decision, next_at)
        try:
            schedule, task_id = await self._journal_fire(record, due_at, now, decision, next_at)
        except QuotaExceeded as exc:
            self._rate.forget(record.owner_uid, now)
            decision, next_at = _refused(record, decision, now)
            return await self._skip(record, due_at, decision, next_at, refused=str(exc))
        return self._started(
            record, schedule, task_id, decision, due_at=due_at, woke_at=woke_at, next_at=next_at
        )

    async def _occurrence(
        self, schedule_id: str, due_at: float
    ) -> tuple[ScheduleRecord, TaskState | None, float] | None:
        """The active schedule, its last fire's state and the occurrence to decide: `due_at`, or
        the journal's earlier one when a retry armed this; None when nothing is due any more."""
        record, last_state = await self.journal.schedules.for_fire(schedule_id)
        if record is None or record.state != "active" or record.next_fire_at is None:
            return None
        if record.next_fire_at > due_at:
            # The journal moved on (another path re-armed it): that occurrence is the one to arm.
            self.arm(schedule_id, record.next_fire_at)
            return None
        return record, last_state, record.next_fire_at

    async def _journal_fire(
        self, record: ScheduleRecord, due_at: float, now: float, decision: DueDecision, next_at: float | None
    ) -> tuple[ScheduleRecord, str]:
        """The fire's task and the schedule's advance, committed together; raises `QuotaExceeded`
        when the owner is at a cap (nothing written)."""
        quota = self._quota()
        self._admit(record, now, quota)
        schedule, task = await self.journal.schedules.fire(
            record.schedule_id,
            expect_next=due_at,
            next_at=next_at,
            skipped=decision.skipped,
            spec=self._fire_spec(record),
            quota=quota,
        )
        return schedule, task.task_id

    async def _skip(
        self,
        record: ScheduleRecord,
        due_at: float,
        decision: DueDecision,
        next_at: float | None,
        *,
        refused: str | None = None,
    ) -> Fired:
        """Journal the occurrence as skipped (an overlap also on the task still running), log it
        and arm the next one."""
        schedule_id = record.schedule_id
        schedule = await self.journal.schedules.skip(
            schedule_id, expect_next=due_at, next_at=next_at, skipped=decision.skipped
        )
        outcome = "refused" if decision.reason == "quota" else "skipped"
        self._metrics.fired("schedule", record.name or "", outcome)
        self._log.info(
            EV_SKIPPED,
            schedule_id=schedule_id,
            reason=decision.reason,
            skipped=decision.skipped,
            due_at=due_at,
            running_task=record.last_task_id if decision.reason == "overlap" else None,
            next_fire_at=next_at,
            err=refused,
        )
        if decision.reason == "overlap" and record.last_task_id is not None:
            self.journal.append_event(
                record.last_task_id,
                EV_SKIPPED,
                {"schedule_id": schedule_id, "reason": "overlap", "due_at": due_at},
            )
        self.arm(schedule_id, schedule.next_fire_at)
        return Fired(schedule_id, due_at, decision, None, self._clock() - due_at)

    def _started(
        self,
        record: ScheduleRecord,
        schedule: ScheduleRecord,
        task_id: str,
        decision: DueDecision,
        *,
        due_at: float,
        woke_at: float,
        next_at: float | None,
    ) -> Fired:
        """A fire's task is journaled: log it, arm the next occurrence, wake the supervisor."""
        lag_s = self._clock() - due_at
        self._metrics.fired("schedule", record.name or "", "started")
        self._log.info(
            EV_FIRED,
            schedule_id=record.schedule_id,
            task_id=task_id,
            owner_uid=record.owner_uid,
            reason=decision.reason,
            skipped=decision.skipped,
            due_at=due_at,
            lag_ms=round(lag_s * 1000, 3),
            wake_ms=round((woke_at - due_at) * 1000, 3),
            next_fire_at=next_at,
        )
        self.arm(record.schedule_id, schedule.next_fire_at)
        self._on_fired()
        return Fired(record.schedule_id, due_at, decision, task_id, lag_s)

    def _admit(self, record: ScheduleRecord, now: float, quota: Quota) -> None:
        """Count a fire against its owner's rate, or raise `QuotaExceeded` naming the cap. The
        daemon's own schedules (`[[schedule]]` in its config) are the operator's: not capped."""
        if record.name is not None:
            return
        problem = self._rate.admit(record.owner_uid, now, quota.max_fires_per_minute)
        if problem is not None:
            raise QuotaExceeded(problem)

    async def _last_running(self, record: ScheduleRecord) -> bool:
        if record.last_task_id is None or record.last_status is not None:
            return False  # its end is accounted: it is over
        task = await self.journal.tasks.get(record.last_task_id)
        return task is not None and task.state != "terminal"

    def _fire_spec(self, record: ScheduleRecord) -> TaskSpec:
        """The task a fire runs: the schedule's, its per-fire token limit cut to what the
        schedule's total budget still allows."""
        spec = record.spec
        left = remaining_tokens(record.trigger, _progress(record))
        if left is None:
            return spec
        cap = left if spec.limits.max_tokens is None else min(spec.limits.max_tokens, left)
        return spec.model_copy(update={"limits": spec.limits.model_copy(update={"max_tokens": cap})})

    # ---- a fire ended ------------------------------------------------------------------------

    async def fire_ended(self, task: TaskRecord, draining: bool) -> None:
        """Account a finished fire on its schedule (the supervisor's hook). Never raises: a
        failure is logged and `load` accounts the run at the next start."""
        try:
            await self._account(task, draining)
        except ScheduleNotFound:
            pass  # deleted, or a later fire is already its last: nothing to account
        except JournalError as exc:
            self._log.error(
                EV_ENDED, schedule_id=task.schedule_id, task_id=task.task_id, err=f"journal: {exc}"
            )

    async def _account(self, task: TaskRecord, draining: bool) -> None:
        assert task.schedule_id is not None and task.status is not None
        record = await self.journal.schedules.get(task.schedule_id)
        if record is None or record.last_task_id != task.task_id or record.last_status is not None:
            return
        trigger = trigger_of(record.trigger, record.created_at)
        outcome = RunOutcome(
            status=task.status,
            tokens=task.usage.tokens,
            idle=task.idle,
            error=task.error.message.splitlines()[0][:500] if task.error and task.error.message else None,
            cancelled_by_user=task.status == TerminalStatus.CANCELLED and not draining,
        )
        step = after_run(trigger, _progress(record), outcome, self._clock())
        state = "ended" if step.end else "paused" if step.pause else record.state
        set_next = record.trigger.kind == "loop" and state == "active"
        updated = await self.journal.schedules.account_run(
            record.schedule_id,
            task.task_id,
            status=task.status,
            error=outcome.error,
            failures=step.progress.failures,
            tokens_used=step.progress.tokens_used,
            pause_s=step.progress.pause_s,
            next_at=step.next_at,
            state=state,
            note=step.end or step.pause or record.note,
            set_next=set_next,
        )
        if step.end:
            self._log.info(EV_ENDED, schedule_id=record.schedule_id, reason=step.end, runs=updated.runs)
        elif step.pause:
            self._log.info(EV_PAUSED, schedule_id=record.schedule_id, reason=step.pause)
        self.arm(record.schedule_id, updated.next_fire_at if updated.state == "active" else None)

    # ---- what clients ask --------------------------------------------------------------------

    async def create(
        self,
        owner_uid: int,
        trigger: ScheduleSpec,
        spec: TaskSpec,
        *,
        idempotency_key: str | None = None,
        name: str | None = None,
        quota: Quota | None = None,
    ) -> tuple[ScheduleRecord, bool]:
        """Check a client's trigger (off the event loop, bounded: raises `TriggerError` naming
        the field, or `CheckTimedOut`), journal the new schedule and arm it. A client's schedule
        counts against its `quota` (`QuotaExceeded`); the config's named ones do not."""
        now = self._clock()
        checked = await run_check(lambda: parse_trigger(trigger, now))
        first = first_fire(checked)
        record, created = await self.journal.schedules.create(
            owner_uid,
            trigger,
            spec,
            next_fire_at=first,
            now=now,
            idempotency_key=idempotency_key,
            name=name,
            quota=quota,
        )
        if created:
            self._log.info(
                EV_CREATED,
                schedule_id=record.schedule_id,
                owner_uid=owner_uid,
                kind=trigger.kind,
                name=name,
                next_fire_at=first,
            )
            self.arm(record.schedule_id, record.next_fire_at)
        return record, created

    async def pause(self, schedule_id: str) -> ScheduleRecord:
        record = await self.journal.schedules.set_state(
            schedule_id, "paused", allowed=("active", "paused"), note="paused by a client"
        )
        self.arm(schedule_id, None)
        self._log.info(EV_PAUSED, schedule_id=schedule_id, reason="client")
        return record

    async def resume(self, schedule_id: str) -> ScheduleRecord:
        """Active again: a clock-driven schedule from its next occurrence after now (what it
        missed while paused is not fired), a loop at once unless its run still goes on."""
        current = await self.journal.schedules.get(schedule_id)
        if current is None:
            raise ScheduleNotFound(schedule_id)
        if current.state == "active":
            return current
        now = self._clock()
        trigger = trigger_of(current.trigger, current.created_at)
        if current.trigger.kind == "loop":
            at = None if await self._last_running(current) else now
        else:
            at = next_fire(trigger, now)
        record = await self.journal.schedules.set_state(
            schedule_id, "active", allowed=("paused",), note=None, next_fire_at=at
        )
        self.arm(schedule_id, at)
        self._log.info(EV_RESUMED, schedule_id=schedule_id, next_fire_at=at)
        return record

    async def delete(self, schedule_id: str) -> ScheduleRecord:
        record = await self.journal.schedules.delete(schedule_id)
        self.arm(schedule_id, None)
        self._log.info(EV_DELETED, schedule_id=schedule_id)
        return record

    async def sync_named(self, owner_uid: int, wanted: Mapping[str, tuple[ScheduleSpec, TaskSpec]]) -> None:
        """Make the owner's named schedules those of the config: new ones created, changed ones
        replaced (their counters start again), removed ones deleted; unchanged ones keep going."""
        existing = await self.journal.schedules.by_name(owner_uid)
        for name, record in existing.items():
            if wanted.get(name) != (record.trigger, record.spec):
                await self.delete(record.schedule_id)
        for name, (trigger, spec) in wanted.items():
            current = existing.get(name)
            if current is None or (current.trigger, current.spec) != (trigger, spec):
                await self.create(owner_uid, trigger, spec, name=name)


def _decide(
    record: ScheduleRecord, last_state: TaskState | None, due_at: float, now: float
) -> tuple[DueDecision, float | None]:
    """Whether the occurrence `due_at` fires, and the schedule's next occurrence (None: it ends;
    a loop's is set when its run ends)."""
    trigger = trigger_of(record.trigger, record.created_at)
    if record.trigger.kind == "loop":
        decision = DueDecision(fire=True, reason="on_time", skipped=0, next_at=None)
    else:
        running = (
            record.trigger.overlap == "skip"
            and record.last_status is None
            and last_state not in (None, "terminal")
        )
        decision = on_due(trigger, due_at, now, previous_running=running)
    if decision.fire and record.trigger.max_runs is not None and record.runs + 1 >= record.trigger.max_runs:
        return decision, None  # the last fire: the schedule ends once it has run
    return decision, decision.next_at


def _refused(record: ScheduleRecord, decision: DueDecision, now: float) -> tuple[DueDecision, float | None]:
    """The occurrence the owner's queue had no room for: skipped (and says why), not retried; a
    loop tries again after its interval."""
    if record.trigger.kind == "loop":
        next_at: float | None = now + max(record.trigger.interval_s, MIN_IDLE_PAUSE_S)
    else:
        next_at = decision.next_at
    return DueDecision(fire=False, reason="quota", skipped=decision.skipped + 1, next_at=next_at), next_at


def _progress(record: ScheduleRecord) -> Progress:
    return Progress(
        runs=record.runs, failures=record.failures, tokens_used=record.tokens_used, pause_s=record.pause_s
    )
