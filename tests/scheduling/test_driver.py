"""The scheduler over a real journal on a controlled clock: a fire journals its task and moves the
schedule on in one commit, the same occurrence never fires twice, missed occurrences follow the
policy after a clock jump (a restart), and a loop's next run waits for its backoff."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from agentd.errors import IdempotencyConflict
from agentd.journal.quota import Quota
from agentd.journal.store import Journal, JournalOptions, open_journal
from agentd.scheduling.driver import Scheduler
from protocol.api import ScheduleSpec, TaskSpec
from protocol.result import TerminalStatus

pytestmark = pytest.mark.anyio
SPEC = TaskSpec(instruction="tick")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    async with open_journal(tmp_path / "state", JournalOptions(event_flush_interval_s=0.01)) as opened:
        yield opened


def _scheduler(journal: Journal, clock: Clock, quota: Quota | None = None) -> tuple[Scheduler, list[int]]:
    woken: list[int] = []
    scheduler = Scheduler(
        journal,
        on_fired=lambda: woken.append(1),
        log=structlog.get_logger(),
        clock=clock,
        quota=lambda: quota or Quota(),
    )
    return scheduler, woken


async def test_a_fire_commits_its_task_with_the_schedules_advance_and_never_twice(journal: Journal) -> None:
    clock = Clock(1000.0)
    scheduler, woken = _scheduler(journal, clock)
    record, created = await scheduler.create(7, ScheduleSpec(kind="interval", every_s=10), SPEC)
    assert created and record.next_fire_at == 1010.0
    clock.now = 1010.2
    fired = await scheduler.fire_due(record.schedule_id, 1010.0)
    assert fired is not None and fired.task_id is not None and fired.decision.reason == "on_time"
    task = await journal.tasks.get(fired.task_id)
    assert task is not None
    assert (task.schedule_id, task.fire_at, task.owner_uid, task.state) == (
        record.schedule_id,
        1010.0,
        7,
        "queued",
    )
    after = await journal.schedules.get(record.schedule_id)
    assert after is not None and (after.next_fire_at, after.runs, after.last_task_id) == (
        1020.0,
        1,
        task.task_id,
    )
    assert woken == [1]
    # The same occurrence again (a stale timer, a retry): nothing fires.
    assert await scheduler.fire_due(record.schedule_id, 1010.0) is None
    assert len(await journal.tasks.list(schedule_id=record.schedule_id)) == 1


async def test_after_a_clock_jump_missed_occurrences_are_skipped_and_counted(journal: Journal) -> None:
    clock = Clock(1000.0)
    scheduler, _ = _scheduler(journal, clock)
    record, _ = await scheduler.create(7, ScheduleSpec(kind="interval", every_s=10), SPEC)
    clock.now = 1095.0  # the daemon was down from before 1010 until now
    fired = await scheduler.fire_due(record.schedule_id, 1010.0)
    assert fired is not None and fired.task_id is None
    assert (fired.decision.reason, fired.decision.skipped) == ("missed", 9)
    after = await journal.schedules.get(record.schedule_id)
    assert after is not None and (after.next_fire_at, after.skipped, after.runs) == (1100.0, 9, 0)


async def test_a_fire_while_the_previous_is_queued_is_skipped_and_recorded_on_that_task(
    journal: Journal,
) -> None:
    clock = Clock(1000.0)
    scheduler, _ = _scheduler(journal, clock)
    record, _ = await scheduler.create(7, ScheduleSpec(kind="interval", every_s=10), SPEC)
    clock.now = 1010.0
    first = await scheduler.fire_due(record.schedule_id, 1010.0)
    assert first is not None and first.task_id is not None
    clock.now = 1020.0
    second = await scheduler.fire_due(record.schedule_id, 1020.0)
    assert second is not None and second.decision.reason == "overlap" and second.task_id is None
    await journal.flush_events()
    events = await journal.events_after(first.task_id)
    assert [(e.event, e.fields["reason"]) for e in events] == [("schedule.skipped", "overlap")]


async def test_a_loop_backs_off_after_an_idle_run_and_ends_at_max_runs(journal: Journal) -> None:
    clock = Clock(1000.0)
    scheduler, _ = _scheduler(journal, clock)
    spec = ScheduleSpec(kind="loop", interval_s=0, max_runs=2)
    record, _ = await scheduler.create(7, spec, SPEC)
    assert record.next_fire_at == 1000.0
    first = await scheduler.fire_due(record.schedule_id, 1000.0)
    assert first is not None and first.task_id is not None
    waiting = await journal.schedules.get(record.schedule_id)
    assert waiting is not None and waiting.next_fire_at is None  # while the run goes on
    clock.now = 1003.0
    ended = await journal.tasks.mark_terminal(first.task_id, TerminalStatus.COMPLETED, idle=True)
    await scheduler.fire_ended(ended, False)
    after = await journal.schedules.get(record.schedule_id)
    assert after is not None and (after.next_fire_at, after.pause_s) == (1004.0, 1.0)
    clock.now = 1004.0
    second = await scheduler.fire_due(record.schedule_id, 1004.0)
    assert second is not None and second.task_id is not None
    done = await journal.tasks.mark_terminal(second.task_id, TerminalStatus.COMPLETED)
    await scheduler.fire_ended(done, False)
    await scheduler.fire_ended(done, False)  # told twice: accounted once
    final = await journal.schedules.get(record.schedule_id)
    assert final is not None
    assert (final.state, final.note, final.runs, final.next_fire_at) == (
        "ended",
        "max_runs reached (2)",
        2,
        None,
    )


async def test_a_fire_over_the_owners_cap_is_skipped_not_retried(journal: Journal) -> None:
    clock = Clock(1000.0)
    scheduler, _ = _scheduler(journal, clock, Quota(max_queued=1))
    await journal.tasks.submit(SPEC, 7)  # the owner already has one queued task
    record, _ = await scheduler.create(7, ScheduleSpec(kind="interval", every_s=10), SPEC)
    clock.now = 1010.0
    fired = await scheduler.fire_due(record.schedule_id, 1010.0)
    assert fired is not None and (fired.decision.reason, fired.task_id) == ("quota", None)
    after = await journal.schedules.get(record.schedule_id)
    assert after is not None and (after.next_fire_at, after.skipped, after.runs) == (1020.0, 1, 0)


async def test_load_rearms_from_the_journal_and_pause_resume_delete_change_the_timetable(
    journal: Journal,
) -> None:
    clock = Clock(1000.0)
    scheduler, _ = _scheduler(journal, clock)
    record, _ = await scheduler.create(7, ScheduleSpec(kind="interval", every_s=10), SPEC)
    fresh, _ = _scheduler(journal, clock)
    assert await fresh.load() == 1
    paused = await fresh.pause(record.schedule_id)
    assert (paused.state, paused.next_fire_at, fresh.armed) == ("paused", None, 0)
    clock.now = 1043.0
    resumed = await fresh.resume(record.schedule_id)
    assert (resumed.state, resumed.next_fire_at, fresh.armed) == ("active", 1050.0, 1)
    await fresh.delete(record.schedule_id)
    assert fresh.armed == 0 and await journal.schedules.get(record.schedule_id) is None


async def test_load_accounts_a_fire_that_ended_while_no_scheduler_listened(journal: Journal) -> None:
    clock = Clock(1000.0)
    scheduler, _ = _scheduler(journal, clock)
    record, _ = await scheduler.create(7, ScheduleSpec(kind="loop", interval_s=5), SPEC)
    fired = await scheduler.fire_due(record.schedule_id, 1000.0)
    assert fired is not None and fired.task_id is not None
    # The run ends, but the daemon dies before the scheduler hears of it.
    await journal.tasks.mark_terminal(fired.task_id, TerminalStatus.CRASHED)
    clock.now = 1010.0
    restarted, _ = _scheduler(journal, clock)
    assert await restarted.load() == 1
    after = await journal.schedules.get(record.schedule_id)
    assert after is not None
    assert (after.last_status, after.failures, after.next_fire_at) == (TerminalStatus.CRASHED, 1, 1015.0)


async def test_the_same_idempotency_key_from_the_same_owner_returns_the_same_schedule(
    journal: Journal,
) -> None:
    scheduler, _ = _scheduler(journal, Clock(1000.0))
    trigger = ScheduleSpec(kind="interval", every_s=60)
    first, created = await scheduler.create(7, trigger, SPEC, idempotency_key="nightly")
    again, created_again = await scheduler.create(7, trigger, SPEC, idempotency_key="nightly")
    other, created_other = await scheduler.create(8, trigger, SPEC, idempotency_key="nightly")
    assert (created, created_again, created_other) == (True, False, True)
    assert again.schedule_id == first.schedule_id != other.schedule_id
    assert scheduler.armed == 2
    # The same key for another trigger or task is refused, as for tasks; nothing is written.
    for trigger_, spec_ in (
        (ScheduleSpec(kind="interval", every_s=30), SPEC),
        (trigger, TaskSpec(instruction="other")),
    ):
        with pytest.raises(IdempotencyConflict, match=f"used for schedule {first.schedule_id}"):
            await scheduler.create(7, trigger_, spec_, idempotency_key="nightly")
    assert scheduler.armed == 2
