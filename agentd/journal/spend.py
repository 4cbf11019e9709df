"""What tasks spent, per scope and quarter hour, for the daily caps (docs/budgets.md, "Daily caps");
and the tasks a cap holds back.

A task's usage is added when it ends, in the commit that ends it, to its owner's scope (`uid:N`)
and, for a delivery or a fire, its trigger's (`trigger:NAME`) or schedule's (`schedule:ID`). Rows
are quarter hours (every zone's offset is a whole number of them), so any zone's day is one range
read of a scope's primary key, and a restart reads the same figures.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from agentd.journal.repository import Repository
from protocol.result import RunUsage

BUCKET_S = 900


@dataclass(frozen=True, slots=True)
class DeferredTask:
    task_id: str
    owner_uid: int
    trigger: str | None
    schedule_id: str | None
    until: float
    reason: str


def scopes_of(owner_uid: int, trigger: str | None, schedule_id: str | None) -> list[str]:
    """The spend scopes a task counts in."""
    scopes = [f"uid:{owner_uid}"]
    if trigger is not None:
        scopes.append(f"trigger:{trigger}")
    if schedule_id is not None:
        scopes.append(f"schedule:{schedule_id}")
    return scopes


def add_spend(conn: sqlite3.Connection, scopes: Sequence[str], usage: RunUsage, at: float) -> None:
    """Count `usage`, spent by a task that ended at `at`, in each of `scopes` (in the caller's
    transaction, so a task's end and its spend commit together)."""
    if usage.cost_usd <= 0 and usage.tokens <= 0:
        return
    bucket = int(at // BUCKET_S) * BUCKET_S
    conn.executemany(
        "INSERT INTO spend (scope, bucket, cost_usd, tokens) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (scope, bucket) DO UPDATE SET"
        " cost_usd = cost_usd + excluded.cost_usd, tokens = tokens + excluded.tokens",
        [(scope, bucket, usage.cost_usd, usage.tokens) for scope in scopes],
    )


def spent_between(conn: sqlite3.Connection, scope: str, start: float, end: float) -> tuple[float, int]:
    """What `scope` spent in the quarter hours from `start` to before `end`."""
    row = conn.execute(
        "SELECT COALESCE(SUM(cost_usd), 0), COALESCE(SUM(tokens), 0) FROM spend"
        " WHERE scope = ? AND bucket >= ? AND bucket < ?",
        (scope, start, end),
    ).fetchone()
    return float(row[0]), int(row[1])


def scopes_between(
    conn: sqlite3.Connection, prefix: str, start: float, end: float
) -> list[tuple[str, float, int]]:
    """Every scope starting with `prefix` that spent between `start` and `end`, with its spend."""
    rows = conn.execute(
        "SELECT scope, SUM(cost_usd), SUM(tokens) FROM spend WHERE scope >= ? AND scope < ?"
        " AND bucket >= ? AND bucket < ? GROUP BY scope ORDER BY scope",
        (prefix, prefix + "\uffff", start, end),
    ).fetchall()
    return [(str(row[0]), float(row[1]), int(row[2])) for row in rows]


def defer(conn: sqlite3.Connection, task_id: str, until: float, reason: str) -> bool:
    """A queued task waits until `until` (wall clock); False when it is no longer queued."""
    cursor = conn.execute(
        "UPDATE tasks SET deferred_until = ?, deferred_reason = ? WHERE task_id = ? AND state = 'queued'",
        (until, reason, task_id),
    )
    return cursor.rowcount > 0


def deferred(conn: sqlite3.Connection, owner_uid: int | None) -> list[DeferredTask]:
    """The queued tasks a cap holds back (or held: the next pick starts those past their day)."""
    where = "" if owner_uid is None else " AND owner_uid = :owner"
    rows = conn.execute(
        "SELECT task_id, owner_uid, trigger, schedule_id, deferred_until, deferred_reason FROM tasks"
        f" WHERE state = 'queued' AND deferred_until IS NOT NULL{where} ORDER BY seq LIMIT 1000",
        {"owner": owner_uid},
    ).fetchall()
    return [DeferredTask(r[0], r[1], r[2], r[3], float(r[4]), str(r[5] or "")) for r in rows]


class Spending(Repository):
    """Each scope's spend per day, and the tasks a daily cap defers."""

    async def spent(self, scope: str, start: float, end: float) -> tuple[float, int]:
        return await self._read(functools.partial(spent_between, scope=scope, start=start, end=end))

    async def scopes(self, prefix: str, start: float, end: float) -> list[tuple[str, float, int]]:
        return await self._read(functools.partial(scopes_between, prefix=prefix, start=start, end=end))

    async def defer(self, task_id: str, until: float, reason: str) -> bool:
        return await self._write(functools.partial(defer, task_id=task_id, until=until, reason=reason))

    async def deferred(self, owner_uid: int | None) -> list[DeferredTask]:
        return await self._read(functools.partial(deferred, owner_uid=owner_uid))
