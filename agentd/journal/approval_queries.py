"""The SQL of the approval gate: open a request (or find the decision a restart left),
decide it, settle it (expired, withdrawn), consume a decision, list what is pending.

Each function runs on the journal's write or read connection, inside its transaction. A decision
is written only over `pending` (the first of a person and the timeout wins), and a decision is
consumed exactly once, so it is honoured once.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Literal

from agentd.journal.records import ApprovalRecord

_COLUMNS = (
    "call_id, task_id, run_id, handle, owner_uid, tool_call_id, server, tool, arguments, digest, "
    "instruction, state, consumed, reason, decided_by, requested_at, expires_at, decided_at"
)
_QUALIFIED = ", ".join(f"a.{c.strip()}" for c in _COLUMNS.split(","))

Opened = Literal["new", "pending", "decided"]


def approval_from_row(row: sqlite3.Row) -> ApprovalRecord:
    return ApprovalRecord(
        call_id=row["call_id"],
        task_id=row["task_id"],
        run_id=row["run_id"],
        handle=row["handle"],
        owner_uid=row["owner_uid"],
        tool_call_id=row["tool_call_id"],
        server=row["server"],
        tool=row["tool"],
        arguments=json.loads(row["arguments"]),
        digest=row["digest"],
        instruction=row["instruction"],
        state=row["state"],
        consumed=bool(row["consumed"]),
        reason=row["reason"],
        decided_by=row["decided_by"],
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decided_at=row["decided_at"],
    )


def get_approval(conn: sqlite3.Connection, *, call_id: str) -> ApprovalRecord | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM approvals WHERE call_id = ?", (call_id,)).fetchone()
    return approval_from_row(row) if row is not None else None


def open_request(
    conn: sqlite3.Connection,
    *,
    call_id: str,
    task_id: str,
    run_id: str,
    handle: str,
    owner_uid: int,
    tool_call_id: str,
    server: str,
    tool: str,
    arguments_json: str,
    digest: str,
    instruction: str,
    now: float,
    timeout_s: float,
    busy: frozenset[str],
) -> tuple[ApprovalRecord, Opened]:
    """The request for this call: a decision a previous run left unconsumed (consumed now:
    `decided`), a pending request nobody waits on (`pending`, its original expiry kept), else a
    new pending row (`new`). `busy` are the requests a live caller already waits on."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM approvals WHERE task_id = ? AND digest = ? AND consumed = 0 "
        "AND state IN ('pending', 'approved', 'denied') ORDER BY seq",
        (task_id, digest),
    ).fetchall()
    for row in rows:
        found = approval_from_row(row)
        if found.call_id in busy:
            continue
        if found.state != "pending":
            conn.execute("UPDATE approvals SET consumed = 1 WHERE call_id = ?", (found.call_id,))
            return found, "decided"
        return found, "pending"
    row = conn.execute(
        f"INSERT INTO approvals ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, "
        f"NULL, NULL, ?, ?, NULL) RETURNING {_COLUMNS}",
        (
            call_id,
            task_id,
            run_id,
            handle,
            owner_uid,
            tool_call_id,
            server,
            tool,
            arguments_json,
            digest,
            instruction,
            now,
            now + timeout_s,
        ),
    ).fetchone()
    return approval_from_row(row), "new"


def decide(
    conn: sqlite3.Connection,
    *,
    call_id: str,
    state: Literal["approved", "denied", "expired", "withdrawn"],
    reason: str | None,
    decided_by: int | None,
    now: float,
) -> tuple[ApprovalRecord | None, bool]:
    """Decide a pending request; returns the row and whether this call decided it (False: it was
    decided already, or does not exist)."""
    row = conn.execute(
        f"UPDATE approvals SET state = ?, reason = ?, decided_by = ?, decided_at = ? "
        f"WHERE call_id = ? AND state = 'pending' RETURNING {_COLUMNS}",
        (state, reason, decided_by, now, call_id),
    ).fetchone()
    if row is not None:
        return approval_from_row(row), True
    return get_approval(conn, call_id=call_id), False


def consume(conn: sqlite3.Connection, *, call_id: str) -> None:
    """Mark a decision as delivered to a run (it is never honoured again)."""
    conn.execute("UPDATE approvals SET consumed = 1 WHERE call_id = ?", (call_id,))


def pending(
    conn: sqlite3.Connection, *, owner_uid: int | None, task_id: str | None, limit: int
) -> tuple[ApprovalRecord, ...]:
    """Pending requests of unfinished tasks, oldest first; optionally one owner's, one task's."""
    where = ["a.state = 'pending'", "t.state != 'terminal'"]
    args: list[object] = []
    if owner_uid is not None:
        where.append("a.owner_uid = ?")
        args.append(owner_uid)
    if task_id is not None:
        where.append("a.task_id = ?")
        args.append(task_id)
    rows = conn.execute(
        f"SELECT {_QUALIFIED} FROM approvals a JOIN tasks t ON t.task_id = a.task_id "
        f"WHERE {' AND '.join(where)} ORDER BY a.seq LIMIT ?",
        (*args, limit),
    ).fetchall()
    return tuple(approval_from_row(r) for r in rows)
