"""The journal's schedules (docs/design.md §11): a repository over the journal's one writer.

Each method is one write or read through the journal's single writer or its read pool, over the
SQL of `agentd.journal.schedule_queries`; the write-ahead and acknowledgement rules are the
journal's own (a write returns only once its COMMIT did).
"""

from __future__ import annotations

import functools
import time

from agentd.journal import schedule_queries as sq
from agentd.journal.quota import Quota
from agentd.journal.records import ScheduleRecord, TaskRecord, new_run_id, new_schedule_id, new_task_id
from agentd.journal.repository import Repository
from protocol.api import ScheduleSpec, ScheduleState, TaskSpec, TaskState
from protocol.result import TerminalStatus


class Schedules(Repository):
    """Create schedules, fire and account their occurrences, change their state, and read them."""

    async def create(
        self,
        owner_uid: int,
        trigger: ScheduleSpec,
        spec: TaskSpec,
        *,
        next_fire_at: float | None,
        now: float,
        idempotency_key: str | None = None,
        name: str | None = None,
        quota: Quota | None = None,
    ) -> tuple[ScheduleRecord, bool]:
        """Journal a new active schedule; returns `(record, created)` (an existing one for the same
        owner and key). Raises `JournalUnavailable` if not committed, `QuotaExceeded` (nothing
        written) if the owner is at one of `quota`'s caps."""
        op = functools.partial(
            sq.insert_schedule,
            schedule_id=new_schedule_id(),
            owner_uid=owner_uid,
            idempotency_key=idempotency_key,
            name=name,
            trigger=trigger,
            spec=spec,
            next_fire_at=next_fire_at,
            now=now,
            quota=quota or Quota(),
        )
        return await self._write(op)

    async def fire(
        self,
        schedule_id: str,
        *,
        expect_next: float,
        next_at: float | None,
        skipped: int,
        spec: TaskSpec,
        quota: Quota | None = None,
    ) -> tuple[ScheduleRecord, TaskRecord]:
        """Fire the occurrence `expect_next`: a queued task and the schedule's advance, one commit.
        Raises `ScheduleNotFound` (nothing written) if the schedule moved on meanwhile,
        `QuotaExceeded` (nothing written) if the owner is at one of `quota`'s caps."""
        op = functools.partial(
            sq.fire,
            schedule_id=schedule_id,
            expect_next=expect_next,
            next_at=next_at,
            skipped=skipped,
            task_id=new_task_id(),
            run_id=new_run_id(),
            spec=spec,
            now=time.time(),
            quota=quota or Quota(),
        )
        return await self._write(op)

    async def skip(
        self, schedule_id: str, *, expect_next: float, next_at: float | None, skipped: int
    ) -> ScheduleRecord:
        """Pass over due occurrences without firing (missed, or overlapping a running fire)."""
        op = functools.partial(
            sq.skip, schedule_id=schedule_id, expect_next=expect_next, next_at=next_at, skipped=skipped
        )
        return await self._write(op)

    async def account_run(
        self,
        schedule_id: str,
        task_id: str,
        *,
        status: TerminalStatus,
        error: str | None,
        failures: int,
        tokens_used: int,
        pause_s: float | None,
        next_at: float | None,
        state: ScheduleState,
        note: str | None,
        set_next: bool,
    ) -> ScheduleRecord:
        """Record a finished fire on its schedule, once (see `schedule_queries.account_run`)."""
        op = functools.partial(
            sq.account_run,
            schedule_id=schedule_id,
            task_id=task_id,
            status=status,
            error=error,
            failures=failures,
            tokens_used=tokens_used,
            pause_s=pause_s,
            next_at=next_at,
            state=state,
            note=note,
            set_next=set_next,
        )
        return await self._write(op)

    async def set_state(
        self,
        schedule_id: str,
        state: ScheduleState,
        *,
        allowed: tuple[ScheduleState, ...],
        note: str | None = None,
        next_fire_at: float | None = None,
    ) -> ScheduleRecord:
        """Pause, resume or end a schedule found in an `allowed` state, else `ScheduleNotFound`."""
        op = functools.partial(
            sq.set_state,
            schedule_id=schedule_id,
            state=state,
            note=note,
            next_fire_at=next_fire_at,
            allowed=allowed,
        )
        return await self._write(op)

    async def delete(self, schedule_id: str) -> ScheduleRecord:
        return await self._write(functools.partial(sq.delete, schedule_id=schedule_id))

    async def get(self, schedule_id: str) -> ScheduleRecord | None:
        return await self._read(functools.partial(sq.get, schedule_id=schedule_id))

    async def for_fire(self, schedule_id: str) -> tuple[ScheduleRecord | None, TaskState | None]:
        """The schedule and its last fire's task state (None without one), in one read."""
        return await self._read(functools.partial(sq.get_for_fire, schedule_id=schedule_id))

    async def list(
        self,
        owner_uid: int | None = None,
        state: ScheduleState | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[ScheduleRecord, ...]:
        """Summaries (the instruction cut) oldest first, after the schedule id `after`."""
        return await self._read(
            functools.partial(sq.list_schedules, owner_uid=owner_uid, state=state, limit=limit, after=after)
        )

    async def active(self) -> tuple[ScheduleRecord, ...]:
        return await self._read(sq.active)

    async def counts(self) -> dict[str, int]:
        """How many schedules are active, paused and ended (the metrics sampler)."""
        return await self._read(sq.state_counts)

    async def by_name(self, owner_uid: int) -> dict[str, ScheduleRecord]:
        return await self._read(functools.partial(sq.by_name, owner_uid=owner_uid))
