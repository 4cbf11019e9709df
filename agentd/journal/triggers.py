"""The journal's triggers (docs/design.md §11; docs/triggers.md): a repository over its one writer.

A trigger's tasks are ordinary tasks carrying `trigger` and `uri` (schema v4); what an operator
set on a trigger that must survive a restart — whether it is paused — is a `trigger_state` row.
"""

from __future__ import annotations

import functools
import sqlite3
import time

from agentd.journal.repository import Repository


def _paused(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM trigger_state WHERE paused = 1")}


def _set_paused(conn: sqlite3.Connection, *, name: str, paused: bool, now: float) -> None:
    conn.execute(
        "INSERT INTO trigger_state (name, paused, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at",
        (name, int(paused), now),
    )


def _counts(conn: sqlite3.Connection) -> dict[str, tuple[int, int, float | None]]:
    rows = conn.execute(
        "SELECT trigger, count(*), sum(state != 'terminal'), max(created_at) FROM tasks"
        " WHERE trigger IS NOT NULL GROUP BY trigger"
    )
    return {row[0]: (int(row[1]), int(row[2] or 0), row[3]) for row in rows}


class Triggers(Repository):
    """Whether each trigger is paused (durably), and how many tasks each started."""

    async def paused(self) -> set[str]:
        return await self._read(_paused)

    async def set_paused(self, name: str, paused: bool) -> None:
        """Record (durably) whether trigger `name` is paused; raises `JournalUnavailable`."""
        await self._write(functools.partial(_set_paused, name=name, paused=paused, now=time.time()))

    async def counts(self) -> dict[str, tuple[int, int, float | None]]:
        """Per trigger name: tasks started in all, those not yet terminal, the newest's creation."""
        return await self._read(_counts)
