"""Finding tasks by the start of their id (`task.match`): what turns a short id a person typed
into the task it names. A read on the journal's read connections; the range is served by the
unique index on `tasks.task_id`, so a match costs a few index steps however many tasks there are.
"""

from __future__ import annotations

import sqlite3

# Sorts after every character a task id may hold: `prefix + _PAST` bounds the ids that start with it.
_PAST = "\U0010ffff"


def matching_task_ids(
    conn: sqlite3.Connection, *, prefix: str, owner_uid: int | None, limit: int
) -> tuple[str, ...]:
    """The ids that start with `prefix`, in id order, at most `limit`; only `owner_uid`'s tasks
    unless it is None (an admin)."""
    owner = " AND owner_uid = :owner" if owner_uid is not None else ""
    rows = conn.execute(
        f"SELECT task_id FROM tasks WHERE task_id >= :low AND task_id < :high{owner}"
        " ORDER BY task_id LIMIT :limit",
        {"low": prefix, "high": prefix + _PAST, "owner": owner_uid, "limit": limit},
    ).fetchall()
    return tuple(row[0] for row in rows)
