"""The journal's SQL for a task's tree of nodes: one synchronous function per operation.

A live node is created or updated in place; a node that ended stays as it ended (only a resumed
run revives it), so a task's tree keeps every node's usage after the task ends. Writes run on the
writer thread inside the group-commit transaction and raise `TaskNotFound` / `NodeNotFound` /
`InvalidTransition`; reads run on either connection.
"""

from __future__ import annotations

import sqlite3

from agentd.errors import InvalidTransition, NodeNotFound, TaskNotFound
from agentd.journal.records import NodeRecord, NodeState
from protocol.result import RunUsage, TerminalStatus


def node_from_row(row: sqlite3.Row) -> NodeRecord:
    status = row["status"]
    usage = row["usage"]
    return NodeRecord(
        task_id=row["task_id"],
        handle=row["handle"],
        parent=row["parent"],
        depth=row["depth"],
        state=row["state"],
        created_at=row["created_at"],
        pid=row["pid"],
        pid_start_time=row["pid_start_time"],
        status=TerminalStatus(status) if status is not None else None,
        usage=RunUsage.model_validate_json(usage) if usage is not None else RunUsage(),
        grant_steps=row["grant_steps"],
        grant_tokens=row["grant_tokens"],
        ended_at=row["ended_at"],
    )


def upsert_node(
    conn: sqlite3.Connection,
    *,
    task_id: str,
    handle: str,
    parent: str | None,
    depth: int,
    state: NodeState,
    pid: int | None,
    pid_start_time: float | None,
    usage: RunUsage | None,
    grant_steps: int | None,
    grant_tokens: int | None,
    now: float,
    revive: bool = False,
) -> NodeRecord:
    """Create or update a live node; a node that already ended is revived only with `revive` (a
    resumed run's nested subagent going on from its transcript)."""
    if not conn.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)).fetchall():
        raise TaskNotFound(task_id)
    if revive:
        conn.execute(
            "UPDATE nodes SET state = 'starting', status = NULL, ended_at = NULL"
            " WHERE task_id = ? AND handle = ? AND state = 'terminal'",
            (task_id, handle),
        )
    return write_node(
        conn,
        task_id=task_id,
        handle=handle,
        parent=parent,
        depth=depth,
        state=state,
        pid=pid,
        pid_start_time=pid_start_time,
        usage=usage,
        grant_steps=grant_steps,
        grant_tokens=grant_tokens,
        now=now,
    )


def write_node(
    conn: sqlite3.Connection,
    *,
    task_id: str,
    handle: str,
    parent: str | None,
    depth: int,
    state: NodeState,
    pid: int | None,
    pid_start_time: float | None,
    usage: RunUsage | None,
    grant_steps: int | None,
    grant_tokens: int | None,
    now: float,
) -> NodeRecord:
    """`upsert_node` for a task known to exist (its row was just updated in this transaction)."""
    rows = conn.execute(
        "INSERT INTO nodes (task_id, handle, parent, depth, state, pid, pid_start_time, usage,"
        " grant_steps, grant_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (task_id, handle) DO UPDATE SET parent = excluded.parent,"
        " depth = excluded.depth, state = excluded.state,"
        " pid = coalesce(excluded.pid, pid), pid_start_time = coalesce(excluded.pid_start_time,"
        " pid_start_time), usage = coalesce(excluded.usage, usage),"
        " grant_steps = coalesce(excluded.grant_steps, grant_steps),"
        " grant_tokens = coalesce(excluded.grant_tokens, grant_tokens)"
        " WHERE nodes.state != 'terminal' RETURNING *",
        (
            task_id,
            handle,
            parent,
            depth,
            state,
            pid,
            pid_start_time,
            usage.model_dump_json() if usage is not None else None,
            grant_steps,
            grant_tokens,
            now,
        ),
    ).fetchall()
    if not rows:
        raise InvalidTransition(f"{task_id}/{handle}", "terminal", state)
    return node_from_row(rows[0])


def end_node(
    conn: sqlite3.Connection,
    *,
    task_id: str,
    handle: str,
    status: TerminalStatus,
    usage: RunUsage | None,
    now: float,
) -> NodeRecord:
    rows = conn.execute(
        "UPDATE nodes SET state = 'terminal', status = ?, usage = coalesce(?, usage), ended_at = ?"
        " WHERE task_id = ? AND handle = ? AND state != 'terminal' RETURNING *",
        (status.value, usage.model_dump_json() if usage is not None else None, now, task_id, handle),
    ).fetchall()
    if rows:
        return node_from_row(rows[0])
    if not conn.execute("SELECT 1 FROM nodes WHERE task_id = ? AND handle = ?", (task_id, handle)).fetchall():
        raise NodeNotFound(task_id, handle)
    raise InvalidTransition(f"{task_id}/{handle}", "terminal", "terminal")


def task_nodes(conn: sqlite3.Connection, task_id: str) -> tuple[NodeRecord, ...]:
    rows = conn.execute(
        "SELECT * FROM nodes WHERE task_id = ? ORDER BY depth, created_at, handle", (task_id,)
    ).fetchall()
    return tuple(node_from_row(row) for row in rows)
