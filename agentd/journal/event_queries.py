"""The journal's SQL for task events: the writer inserts and trims them at each flush, the
read connections page through them. Numbering (`seq`) is the writer's (agentd/journal/writer.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from pydantic import JsonValue

from agentd.journal.records import EventRecord


def insert_events(
    conn: sqlite3.Connection, task_id: str, first_seq: int, events: Iterable[tuple[float, str, str]]
) -> None:
    """Insert `(ts, event, fields_json)` rows numbered from `first_seq` on."""
    conn.executemany(
        "INSERT INTO events (task_id, seq, ts, event, fields) VALUES (?, ?, ?, ?, ?)",
        ((task_id, seq, ts, event, fields) for seq, (ts, event, fields) in enumerate(events, first_seq)),
    )


def trim_events(conn: sqlite3.Connection, task_id: str, *, keep_after: int) -> None:
    """Drop the task's events with `seq <= keep_after` (bounded retention)."""
    conn.execute("DELETE FROM events WHERE task_id = ? AND seq <= ?", (task_id, keep_after))


def last_event_seq(conn: sqlite3.Connection, task_id: str) -> int:
    """The task's highest event seq, 0 if it has none."""
    row = conn.execute("SELECT max(seq) FROM events WHERE task_id = ?", (task_id,)).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def events_after(
    conn: sqlite3.Connection, task_id: str, *, after_seq: int, limit: int
) -> tuple[EventRecord, ...]:
    rows = conn.execute(
        "SELECT seq, ts, event, fields FROM events WHERE task_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (task_id, after_seq, limit),
    ).fetchall()
    return tuple(
        EventRecord(task_id=task_id, seq=row[0], ts=row[1], event=row[2], fields=_fields(row[3]))
        for row in rows
    )


def _fields(text: str) -> dict[str, JsonValue]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
