"""`budget.list` (`agentd budgets`): today's spend against each daily cap the caller may see, and the
tasks the caps defer (docs/budgets.md, "Daily caps").

A user sees their own uid's line, their schedules' and their deferred tasks; an admin sees every
uid that spent today or has a deferred task, every trigger with a cap, and everyone's schedules.
"""

from __future__ import annotations

from agentd.journal.store import Journal
from agentd.supervision.daily_caps import CapsConfig, DailyCap, day_of, schedule_cap, trigger_cap, uid_cap
from agentd.supervision.daily_desk import DailyDesk
from protocol.api import BudgetLine, BudgetsView, DeferredTaskView

# Schedules read for their caps at most (the listing is a view, not an audit).
MAX_SCHEDULES = 1000


async def budgets_view(
    journal: Journal, desk: DailyDesk, config: CapsConfig, owner_uid: int | None, caller_uid: int
) -> BudgetsView:
    """The view for `owner_uid`'s (None: everyone's, for an admin calling as `caller_uid`)."""
    now = desk.now()
    deferred = await journal.spending.deferred(owner_uid)
    lines = await _uid_lines(
        journal, desk, config, owner_uid, caller_uid, deferred_uids={d.owner_uid for d in deferred}
    )
    if owner_uid is None:
        for name in sorted(config.trigger_cost):
            cap = trigger_cap(config, name)
            if cap is not None:
                lines.append(await _line(desk, cap, "trigger", name, None, now))
    for schedule in await journal.schedules.list(owner_uid, None, MAX_SCHEDULES, None):
        trigger = schedule.trigger
        cap = schedule_cap(
            schedule.schedule_id, schedule.name or schedule.schedule_id, trigger.daily_cost, trigger.tz
        )
        if cap is not None:
            lines.append(await _line(desk, cap, "schedule", schedule.schedule_id, schedule.owner_uid, now))
    views = [
        DeferredTaskView(
            task_id=d.task_id,
            owner_uid=d.owner_uid,
            trigger=d.trigger,
            schedule_id=d.schedule_id,
            until=d.until,
            reason=d.reason,
        )
        for d in deferred
    ]
    return BudgetsView(now=now, lines=lines, deferred=views)


async def _uid_lines(
    journal: Journal,
    desk: DailyDesk,
    config: CapsConfig,
    owner_uid: int | None,
    caller_uid: int,
    deferred_uids: set[int],
) -> list[BudgetLine]:
    now = desk.now()
    if owner_uid is not None:
        uids = {owner_uid}
    else:
        day = day_of(now)
        spent = await journal.spending.scopes("uid:", day.start, day.end)
        uids = {int(scope.removeprefix("uid:")) for scope, _, _ in spent} | deferred_uids | {caller_uid}
    lines = []
    for uid in sorted(uids):
        cap = uid_cap(config, uid) or DailyCap(f"uid:{uid}", f"uid {uid}", "")
        lines.append(await _line(desk, cap, "uid", str(uid), uid, now))
    return lines


async def _line(
    desk: DailyDesk, cap: DailyCap, kind: str, name: str, owner_uid: int | None, now: float
) -> BudgetLine:
    day = day_of(now, cap.zone)
    spent = await desk.spent_today(cap, now)
    return BudgetLine.model_validate(
        {
            "kind": kind,
            "name": name,
            "owner_uid": owner_uid,
            "day": day.date,
            "zone": cap.zone,
            "resets_at": day.end,
            "spent_usd": spent.cost_usd,
            "spent_tokens": spent.tokens,
            "cap_usd": cap.cost_usd,
            "cap_tokens": cap.tokens,
        }
    )
