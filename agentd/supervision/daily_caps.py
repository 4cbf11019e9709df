"""Daily spending caps, decided (docs/budgets.md, "Daily caps"): which day an instant falls in for a
cap's zone, when the next day starts, and whether a task about to start is over any of its caps.

Pure: times are wall-clock UTC instants (seconds since the epoch) passed in; the spend of each
day is read from the journal by the caller (`agentd.supervision.daily_desk`). A cap counts what
tasks that ended that day spent, so a run already going is never stopped by one: only a task
about to start is deferred, until the day of the cap that holds it ends.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

UTC_ZONE = "UTC"


@dataclass(frozen=True, slots=True)
class Day:
    """One calendar day of a zone: its date and the instants it starts and ends (UTC seconds)."""

    date: str  # YYYY-MM-DD on the zone's wall clock
    zone: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class DailyCap:
    """A cap on what one scope spends a day. `scope` is the journal's key (`uid:1000`,
    `trigger:inbox`, `schedule:s-…`); `label` names it for a person; None: not capped."""

    scope: str
    label: str
    key: str  # the configuration key that set it, named in the reason
    cost_usd: float | None = None
    tokens: int | None = None
    zone: str = UTC_ZONE


@dataclass(frozen=True, slots=True)
class Spend:
    cost_usd: float = 0.0
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class Deferral:
    """A task's start put off: until when (the day's end), which scope, and why in words."""

    until: float
    scope: str
    reason: str


def day_of(now: float, zone: str = UTC_ZONE) -> Day:
    """The day of `zone` that `now` falls in. A day is 23 or 25 hours across a daylight-saving
    change: its end is the next local midnight, whatever its length."""
    tz = ZoneInfo(zone)
    local = datetime.datetime.fromtimestamp(now, tz)
    midnight = datetime.datetime.combine(local.date(), datetime.time(), tzinfo=tz)
    following = datetime.datetime.combine(
        local.date() + datetime.timedelta(days=1), datetime.time(), tzinfo=tz
    )
    return Day(local.date().isoformat(), zone, midnight.timestamp(), following.timestamp())


def over(cap: DailyCap, spent: Spend) -> str | None:
    """Why `spent` reaches `cap` (a sentence naming the key, the cap and the spend), else None.
    Reaching the cap is enough: a task started at exactly the cap would only spend past it."""
    if cap.cost_usd is not None and spent.cost_usd >= cap.cost_usd:
        return (
            f"the daily cost cap of {cap.label} is spent: ${spent.cost_usd:.4f} today of "
            f"{cap.key} ${cap.cost_usd:.4f}"
        )
    if cap.tokens is not None and spent.tokens >= cap.tokens:
        return (
            f"the daily token cap of {cap.label} is spent: {spent.tokens:,} tokens today of "
            f"{cap.key} {cap.tokens:,}"
        )
    return None


def decide(caps: list[tuple[DailyCap, Spend]], now: float) -> Deferral | None:
    """Whether a task about to start waits for another day: over any cap, it waits until the
    latest day's end among the caps it is over (starting earlier would only be deferred again)."""
    held = []
    for cap, spent in caps:
        reason = over(cap, spent)
        if reason is not None:
            held.append(Deferral(day_of(now, cap.zone).end, cap.scope, reason))
    if not held:
        return None
    return max(held, key=lambda deferral: deferral.until)


@dataclass(frozen=True, slots=True)
class CapsConfig:
    """The daily caps the configuration sets: each user's (`[budgets]`) and each trigger's
    (`[[trigger]] daily_cost`); a schedule's is in its own spec."""

    uid_cost: float | None = None
    uid_tokens: int | None = None
    trigger_cost: Mapping[str, float] = field(default_factory=dict)


def uid_cap(config: CapsConfig, uid: int) -> DailyCap | None:
    if config.uid_cost is None and config.uid_tokens is None:
        return None
    key = "budgets.per_uid_daily_cost" if config.uid_cost is not None else "budgets.per_uid_daily_tokens"
    if config.uid_cost is not None and config.uid_tokens is not None:
        key = "budgets.per_uid_daily_*"
    return DailyCap(f"uid:{uid}", f"uid {uid}", key, config.uid_cost, config.uid_tokens)


def trigger_cap(config: CapsConfig, name: str) -> DailyCap | None:
    cost = config.trigger_cost.get(name)
    if cost is None:
        return None
    return DailyCap(f"trigger:{name}", f"trigger {name!r}", f"trigger {name!r} daily_cost", cost)


def schedule_cap(schedule_id: str, label: str, cost: float | None, zone: str | None) -> DailyCap | None:
    if cost is None:
        return None
    return DailyCap(
        f"schedule:{schedule_id}",
        f"schedule {label}",
        "the schedule's daily_cost",
        cost,
        zone=zone or UTC_ZONE,
    )
