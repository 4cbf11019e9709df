"""The daily caps at work (docs/budgets.md, "Daily caps"): before the scheduler starts a task, the
caps that apply to it — its owner's, its trigger's, its schedule's — are read with today's spend
from the journal and decided by `agentd.supervision.daily_caps`.

The desk's clock is the wall clock; `AGENTD_TEST_CLOCK_SHIFT_FILE` names a file whose number of
seconds is added to it, so the tests of a real daemon can move it to another day.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import JsonValue

from agentd.errors import JournalError
from agentd.journal.records import TaskRecord
from agentd.journal.store import Journal
from agentd.supervision.daily_caps import (
    CapsConfig,
    DailyCap,
    Deferral,
    Spend,
    day_of,
    decide,
    schedule_cap,
    trigger_cap,
    uid_cap,
)

SHIFT_ENV = "AGENTD_TEST_CLOCK_SHIFT_FILE"

Clock = Callable[[], float]


def day_clock(environ: Mapping[str, str] = os.environ) -> Clock:
    """The wall clock the caps read, shifted by the test file when one is named."""
    path = environ.get(SHIFT_ENV)
    if not path:
        return time.time
    shift_file = Path(path)

    def shifted() -> float:
        try:
            return time.time() + float(shift_file.read_text().strip() or 0)
        except (OSError, ValueError):
            return time.time()

    return shifted


@dataclass(frozen=True, slots=True)
class Hold:
    """What the desk decided of a task about to start: held back or not, and until when."""

    held: bool
    until: float | None = None


class DailyDesk:
    """Decides whether a task about to start waits for another day; reads only when a cap applies."""

    def __init__(self, journal: Journal, config: Callable[[], CapsConfig], clock: Clock = time.time) -> None:
        self._journal = journal
        self._config = config
        self.now = clock

    def may_apply(self, record: TaskRecord) -> bool:
        """Whether a cap may hold `record` back (a schedule's fire: its schedule may have one)."""
        config = self._config()
        return (
            config.uid_cost is not None
            or config.uid_tokens is not None
            or (record.trigger is not None and record.trigger in config.trigger_cost)
            or record.schedule_id is not None
        )

    async def caps_of(self, record: TaskRecord) -> list[DailyCap]:
        config = self._config()
        caps = [uid_cap(config, record.owner_uid)]
        if record.trigger is not None:
            caps.append(trigger_cap(config, record.trigger))
        if record.schedule_id is not None:
            schedule = await self._journal.schedules.get(record.schedule_id)
            if schedule is not None:
                label = schedule.name or schedule.schedule_id
                caps.append(
                    schedule_cap(
                        schedule.schedule_id, label, schedule.trigger.daily_cost, schedule.trigger.tz
                    )
                )
        return [cap for cap in caps if cap is not None]

    async def spent_today(self, cap: DailyCap, now: float) -> Spend:
        day = day_of(now, cap.zone)
        cost, tokens = await self._journal.spending.spent(cap.scope, day.start, day.end)
        return Spend(cost, tokens)

    async def check(self, record: TaskRecord) -> Deferral | None:
        """The deferral of `record` if a cap of it is spent today, else None."""
        now = self.now()
        caps = await self.caps_of(record)
        return decide([(cap, await self.spent_today(cap, now)) for cap in caps], now)

    async def hold(self, record: TaskRecord, log: structlog.typing.FilteringBoundLogger) -> Hold:
        """Defer `record` to the next day of a cap it is over (journaled with the reason, as
        `task.deferred`); a journal that cannot say holds it for the next pick."""
        try:
            deferral = await self.check(record)
            if deferral is None:
                return Hold(False)
            deferred = await self._journal.spending.defer(record.task_id, deferral.until, deferral.reason)
        except JournalError as exc:
            log.error("task.deferred", task_id=record.task_id, err=f"journal failed: {exc}")
            return Hold(True)
        if deferred:  # else it was cancelled meanwhile
            fields: dict[str, JsonValue] = {
                "until": deferral.until,
                "scope": deferral.scope,
                "reason": deferral.reason,
            }
            self._journal.append_event(record.task_id, "task.deferred", fields)
            log.info("task.deferred", task_id=record.task_id, run_id=record.run_id, **fields)
        return Hold(True, deferral.until)
