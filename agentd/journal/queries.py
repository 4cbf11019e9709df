"""The journal's SQL for tasks: one synchronous function per operation, over a caller-supplied
connection (their trees' in `node_queries`, their events' in `event_queries`).

Write functions run on the writer thread inside the group-commit transaction (each in its own
SAVEPOINT) and raise `TaskNotFound` / `NodeNotFound` / `InvalidTransition` for a request the
current state does not allow. Read functions run on a read-only connection. Rows become records
here, so every JSON column is parsed exactly once.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from agentd.errors import IdempotencyConflict, InvalidTransition, QuotaExceeded, TaskNotFound
from agentd.journal.node_queries import write_node
from agentd.journal.quota import Quota, quota_problem
from agentd.journal.records import TASK_STATES, NodeEnd, NodeState, TaskRecord
from agentd.journal.schema import summary_sql
from agentd.journal.spend import add_spend, scopes_of
from agentd.journal.transcripts import append_items
from protocol.api import TaskSpec, TaskState
from protocol.result import AbortKind, RunError, RunResult, RunUsage, TerminalStatus
from protocol.transcript import StepItem

ROOT_HANDLE = "0"

# The listing summary of the spec bound as the statement's parameter N (written with the spec).
_SUMMARY_OF_1, _SUMMARY_OF_4, _SUMMARY_OF_5 = (summary_sql(f"?{n}", task=True) for n in (1, 4, 5))

_TASK_COLUMNS = (
    "task_id, run_id, owner_uid, idempotency_key, spec, state, status, exit_code, result, partial, "
    "usage, abort, error, attempts, pid, pid_start_time, created_at, started_at, ended_at, schedule_id, "
    "fire_at, idle, trigger, uri, executor, worker, resumes, first_started_at, forked_from, forked_step, "
    "paused_at, paused_result, parked_call, parked_until, deferred_until, deferred_reason"
)


def task_from_row(row: sqlite3.Row) -> TaskRecord:
    status = row["status"]
    usage = row["usage"]
    error = row["error"]
    result = row["result"]
    return TaskRecord(
        task_id=row["task_id"],
        run_id=row["run_id"],
        owner_uid=row["owner_uid"],
        idempotency_key=row["idempotency_key"],
        spec=TaskSpec.model_validate_json(row["spec"]),
        state=row["state"],
        status=TerminalStatus(status) if status is not None else None,
        exit_code=row["exit_code"],
        result=json.loads(result) if result is not None else None,
        partial=bool(row["partial"]),
        usage=RunUsage.model_validate_json(usage) if usage is not None else RunUsage(),
        abort=row["abort"],
        error=RunError.model_validate_json(error) if error is not None else None,
        attempts=row["attempts"],
        pid=row["pid"],
        pid_start_time=row["pid_start_time"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        schedule_id=row["schedule_id"],
        fire_at=row["fire_at"],
        idle=bool(row["idle"]),
        trigger=row["trigger"],
        uri=row["uri"],
        executor=row["executor"],
        worker=row["worker"],
        resumes=row["resumes"],
        first_started_at=row["first_started_at"],
        forked_from=row["forked_from"],
        forked_step=row["forked_step"],
        paused_at=row["paused_at"],
        paused_result=(
            RunResult.model_validate_json(row["paused_result"]) if row["paused_result"] is not None else None
        ),
        parked_call=row["parked_call"],
        parked_until=row["parked_until"],
        deferred_until=row["deferred_until"],
        deferred_reason=row["deferred_reason"],
    )


# ---- writes (writer thread) -------------------------------------------------------------------


def insert_task(
    conn: sqlite3.Connection,
    *,
    task_id: str,
    run_id: str,
    spec: TaskSpec,
    spec_json: str,
    owner_uid: int,
    idempotency_key: str | None,
    quota: Quota,
    now: float,
    schedule_id: str | None = None,
    fire_at: float | None = None,
    trigger: str | None = None,
    uri: str | None = None,
) -> tuple[TaskRecord, bool]:
    """Insert a queued task, or return the task this owner already submitted under the same key.
    A schedule's fire names the schedule and the occurrence (`fire_at`) it is for.

    Raises:
        QuotaExceeded: the owner is at a cap of `quota` (checked in the writer's transaction, so
            concurrent submits cannot overshoot it); a resubmit under an existing key is not.
        IdempotencyConflict: the key names this owner's task with a different spec.
    """
    if idempotency_key is not None:
        # The single writer makes check-then-insert atomic, even for duplicates in one batch.
        rows = conn.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE owner_uid = ? AND idempotency_key = ?",
            (owner_uid, idempotency_key),
        ).fetchall()
        if rows:
            existing = task_from_row(rows[0])
            # Compared as parsed specs (defaults filled in), so the same spec spelled differently,
            # or stored before a field with a default was added, is still the same spec.
            if existing.spec != spec:
                raise IdempotencyConflict(idempotency_key, existing.task_id)
            return existing, False
    _check_quota(conn, owner_uid, len(spec_json.encode()), quota)
    conn.execute(
        "INSERT INTO tasks (task_id, run_id, owner_uid, idempotency_key, spec, spec_bytes, created_at,"
        " schedule_id, fire_at, trigger, uri, summary)"
        f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {_SUMMARY_OF_5})",
        (
            task_id,
            run_id,
            owner_uid,
            idempotency_key,
            spec_json,
            len(spec_json.encode()),
            now,
            schedule_id,
            fire_at,
            trigger,
            uri,
        ),
    )
    record = TaskRecord(
        task_id=task_id,
        run_id=run_id,
        owner_uid=owner_uid,
        idempotency_key=idempotency_key,
        spec=spec,
        state="queued",
        created_at=now,
        schedule_id=schedule_id,
        fire_at=fire_at,
        trigger=trigger,
        uri=uri,
    )
    return record, True


def insert_fork(
    conn: sqlite3.Connection, *, origin: str, step: int, items: Sequence[StepItem], **task: Any
) -> tuple[TaskRecord, bool]:
    """`insert_task` for a fork of `origin` at `step`: the new task, the origin it names and its
    copy of the transcript (`items`, its root's) commit together."""
    record, created = insert_task(conn, **task)
    if not created:
        return record, False
    conn.execute(
        "UPDATE tasks SET forked_from = ?, forked_step = ? WHERE task_id = ?", (origin, step, record.task_id)
    )
    append_items(conn, task_id=record.task_id, handle=ROOT_HANDLE, items=items, now=record.created_at)
    return dataclasses.replace(record, forked_from=origin, forked_step=step), True


def insert_resumed(
    conn: sqlite3.Connection, *, steps: Mapping[str, Sequence[StepItem]], resumes: int, **task: Any
) -> tuple[TaskRecord, bool]:
    """`insert_task` for an attempt that goes on from transcripts journaled elsewhere (a Temporal
    worker's earlier attempt): the task, its `resumes` and every node's steps commit together."""
    record, created = insert_task(conn, **task)
    if not created or not steps:
        return record, created
    conn.execute("UPDATE tasks SET resumes = ? WHERE task_id = ?", (resumes, record.task_id))
    for handle, items in steps.items():
        append_items(conn, task_id=record.task_id, handle=handle, items=items, now=record.created_at)
    return dataclasses.replace(record, resumes=resumes), True


def insert_claimed_task(
    conn: sqlite3.Connection,
    *,
    task_id: str,
    run_id: str,
    spec: TaskSpec,
    owner_uid: int,
    now: float,
    grant_steps: int | None,
    grant_tokens: int | None,
    trigger: str | None = None,
) -> TaskRecord:
    """Insert a task already `starting`, with its root node, in one commit: a task its creator
    runs itself (a warm session's), which the scheduler must never see queued. It runs once:
    restart recovery ends it `crashed` instead of requeueing it (`max_attempts` 1). `trigger`:
    the `route = "continue"` trigger whose session it is."""
    spec = spec.model_copy(update={"retry": spec.retry.model_copy(update={"max_attempts": 1})})
    spec_json = spec.model_dump_json()
    conn.execute(
        "INSERT INTO tasks (task_id, run_id, owner_uid, spec, spec_bytes, created_at, trigger, summary)"
        f" VALUES (?, ?, ?, ?, ?, ?, ?, {_SUMMARY_OF_4})",
        (task_id, run_id, owner_uid, spec_json, len(spec_json.encode()), now, trigger),
    )
    return mark_starting(conn, task_id, grant_steps=grant_steps, grant_tokens=grant_tokens, now=now)


# An owner's queued tasks and the spec bytes of its unfinished ones, from the index alone (schema v7).
QUOTA_SUM = (
    "SELECT coalesce(sum(state = 'queued'), 0), coalesce(sum(spec_bytes), 0) FROM tasks"
    " WHERE state IN ('queued', 'starting', 'running') AND owner_uid = ?"
)


# How many schedules an owner holds and the bytes of their specs, from the owner index (schema v10).
SCHEDULE_SUM = "SELECT count(*), coalesce(sum(spec_bytes), 0) FROM schedules WHERE owner_uid = ?"


def schedule_holdings(conn: sqlite3.Connection, owner_uid: int) -> tuple[int, int]:
    """The owner's schedules (in any state until deleted) and the bytes of their specs."""
    count, spec_bytes = conn.execute(SCHEDULE_SUM, (owner_uid,)).fetchone()
    return int(count), int(spec_bytes)


def pending_bytes(conn: sqlite3.Connection, owner_uid: int) -> int:
    """The spec bytes of the owner's unfinished tasks."""
    return int(conn.execute(QUOTA_SUM, (owner_uid,)).fetchone()[1])


def _check_quota(conn: sqlite3.Connection, owner_uid: int, spec_bytes: int, quota: Quota) -> None:
    if quota.max_queued is None and quota.max_pending_bytes is None:
        return
    # Only unfinished tasks count (the state index keeps this to them), so a cap clears as the
    # owner's work completes and a refusal is worth retrying.
    queued, pending_bytes = conn.execute(QUOTA_SUM, (owner_uid,)).fetchone()
    if quota.max_pending_bytes is not None:
        pending_bytes += schedule_holdings(conn, owner_uid)[1]
    problem = quota_problem(quota, queued=queued, pending_bytes=pending_bytes, spec_bytes=spec_bytes)
    if problem is not None:
        raise QuotaExceeded(problem)


def _transition(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    allowed: Sequence[TaskState],
    wanted: TaskState,
    assignments: str,
    params: Sequence[object],
) -> TaskRecord:
    marks = ", ".join("?" for _ in allowed)
    rows = conn.execute(
        f"UPDATE tasks SET state = ?, {assignments} WHERE task_id = ? AND state IN ({marks})"
        f" RETURNING {_TASK_COLUMNS}",
        (wanted, *params, task_id, *allowed),
    ).fetchall()
    if rows:
        return task_from_row(rows[0])
    current = conn.execute("SELECT state FROM tasks WHERE task_id = ?", (task_id,)).fetchall()
    if not current:
        raise TaskNotFound(task_id)
    raise InvalidTransition(task_id, current[0]["state"], wanted)


def mark_starting(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    grant_steps: int | None,
    grant_tokens: int | None,
    now: float,
) -> TaskRecord:
    """queued → starting, with the root node; a task that is no longer queued gets neither."""
    record = _transition(
        conn,
        task_id,
        allowed=("queued",),
        wanted="starting",
        assignments="started_at = ?, first_started_at = COALESCE(first_started_at, ?), pid = NULL,"
        " pid_start_time = NULL, parked_call = NULL, parked_until = NULL, deferred_until = NULL,"
        " deferred_reason = NULL",
        params=(now, now),
    )
    # Any node of a task that was queued is an earlier run's (restart recovery requeued it, or a
    # stop parked it). The root starts again — it would otherwise refuse to, forever, had it ended
    # just before the crash — and so does every node that had not ended; the nested ones that
    # ended stay: their usage is the task's (the resumed run carries it over).
    conn.execute("DELETE FROM nodes WHERE task_id = ? AND (handle = '0' OR state != 'terminal')", (task_id,))
    _upsert_root(conn, task_id, "starting", now=now, grant_steps=grant_steps, grant_tokens=grant_tokens)
    return record


def mark_running(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    pid: int,
    pid_start_time: float,
    now: float,
    worker: str | None = None,
) -> TaskRecord:
    """starting → running, and the root node with it; `worker` names this host (executor local)."""
    record = _transition(
        conn,
        task_id,
        allowed=("starting",),
        wanted="running",
        assignments="pid = ?, pid_start_time = ?, executor = 'local', worker = ?",
        params=(pid, pid_start_time, worker),
    )
    _upsert_root(conn, task_id, "running", now=now, pid=pid, pid_start_time=pid_start_time)
    return record


def mark_remote_running(
    conn: sqlite3.Connection, task_id: str, *, executor: str, worker: str, resumes: int, now: float
) -> TaskRecord:
    """starting|running → running on another host: no local pid (restart recovery kills none);
    a later attempt on another worker updates `worker`, and `resumes` (the attempts that went on
    from the steps journaled before them; it never goes down)."""
    record = _transition(
        conn,
        task_id,
        allowed=("starting", "running"),
        wanted="running",
        assignments="pid = NULL, pid_start_time = NULL, executor = ?, worker = ?, resumes = MAX(resumes, ?)",
        params=(executor, worker, resumes),
    )
    _upsert_root(conn, task_id, "running", now=now)
    return record


def forget_queued(conn: sqlite3.Connection, task_id: str) -> bool:
    """Delete a task that is still queued, with its events; False if it is not (it was claimed).

    For a submit whose executor refused it before the client was told of it (nothing acknowledged
    that was not durably accepted)."""
    row = conn.execute("SELECT state FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    if row is None or row["state"] != "queued":
        return False
    conn.execute("DELETE FROM events WHERE task_id = ?", (task_id,))
    conn.execute("DELETE FROM nodes WHERE task_id = ?", (task_id,))
    conn.execute("DELETE FROM tasks WHERE task_id = ? AND state = 'queued'", (task_id,))
    return True


def _upsert_root(
    conn: sqlite3.Connection,
    task_id: str,
    state: NodeState,
    *,
    now: float,
    pid: int | None = None,
    pid_start_time: float | None = None,
    grant_steps: int | None = None,
    grant_tokens: int | None = None,
) -> None:
    # The caller's transition just returned the task's row: no need to look it up again.
    write_node(
        conn,
        task_id=task_id,
        handle=ROOT_HANDLE,
        parent=None,
        depth=0,
        state=state,
        pid=pid,
        pid_start_time=pid_start_time,
        usage=None,
        grant_steps=grant_steps,
        grant_tokens=grant_tokens,
        now=now,
    )


def mark_terminal(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    status: TerminalStatus,
    exit_code: int | None,
    result_json: str | None,
    partial: bool,
    usage: RunUsage,
    abort: AbortKind | None,
    error: RunError | None,
    now: float,
    only_queued: bool = False,
    idle: bool = False,
    root: NodeEnd | None = None,
) -> TaskRecord:
    """Any state but terminal → terminal; with `root`, the root node ends in the same commit."""
    record = _transition(
        conn,
        task_id,
        allowed=("queued",) if only_queued else ("queued", "starting", "running"),
        wanted="terminal",
        assignments=(
            "status = ?, exit_code = ?, result = ?, partial = ?, usage = ?, abort = ?, error = ?,"
            " ended_at = ?, idle = ?, paused_at = NULL, paused_result = NULL"
        ),
        params=(
            status.value,
            exit_code,
            result_json,
            int(partial),
            usage.model_dump_json(),
            abort,
            error.model_dump_json() if error is not None else None,
            now,
            int(idle),
        ),
    )
    if root is not None:
        _end_root(conn, task_id, root, now)
    add_spend(conn, scopes_of(record.owner_uid, record.trigger, record.schedule_id), usage, now)
    return record


def _end_root(conn: sqlite3.Connection, task_id: str, root: NodeEnd, now: float) -> None:
    """The root node's end, committed with the task's (the run deferred it to its owner)."""
    conn.execute(
        "UPDATE nodes SET state = 'terminal', status = ?, usage = ?, ended_at = ?"
        " WHERE task_id = ? AND handle = ? AND state != 'terminal'",
        (root.status.value, root.usage.model_dump_json(), now, task_id, ROOT_HANDLE),
    )


def requeue(conn: sqlite3.Connection, task_id: str) -> TaskRecord:
    # The run_id is deliberately kept: a requeued task continues the same run (docs/design.md §8).
    return _transition(
        conn,
        task_id,
        allowed=("starting", "running"),
        wanted="queued",
        assignments="attempts = attempts + 1, resumes = resumes + 1, pid = NULL, pid_start_time = NULL,"
        " started_at = NULL",
        params=(),
    )


def pause_for_budget(
    conn: sqlite3.Connection, task_id: str, *, result: RunResult, root: NodeEnd | None, now: float
) -> TaskRecord:
    """starting/running → queued and paused: its budget ran out; it waits for `extend`, keeping
    the run's result (its status, partial result and usage) for the view and for a timeout."""
    return _queue_to_resume(
        conn, task_id, root, now, ", paused_at = ?, paused_result = ?", (now, result.model_dump_json())
    )


def extend(conn: sqlite3.Connection, task_id: str, *, spec: TaskSpec) -> TaskRecord:
    """A paused task's spec with a larger budget; queued to resume. Raises `InvalidTransition`
    (with the state `queued`) if it is not paused."""
    spec_json = spec.model_dump_json()
    rows = conn.execute(
        f"UPDATE tasks SET spec = ?1, summary = {_SUMMARY_OF_1}, spec_bytes = ?,"
        " paused_at = NULL, paused_result = NULL"
        f" WHERE task_id = ? AND state = 'queued' AND paused_at IS NOT NULL RETURNING {_TASK_COLUMNS}",
        (spec_json, len(spec_json.encode()), task_id),
    ).fetchall()
    if rows:
        return task_from_row(rows[0])
    current = conn.execute("SELECT state FROM tasks WHERE task_id = ?", (task_id,)).fetchall()
    if not current:
        raise TaskNotFound(task_id)
    raise InvalidTransition(task_id, current[0]["state"], "queued")


def paused_since(conn: sqlite3.Connection, *, before: float) -> tuple[TaskRecord, ...]:
    """Tasks paused for budget since before `before` (their wait timed out)."""
    rows = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks WHERE state = 'queued' AND paused_at < ?", (before,)
    ).fetchall()
    return tuple(task_from_row(row) for row in rows)


def park(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    root: NodeEnd | None,
    now: float,
    waiting: tuple[str, float] | None = None,
) -> TaskRecord:
    """starting/running → queued for a run that goes on from its transcript: a stop of the
    daemon, not a failure of the task, so it spends no attempt (docs/durability.md).
    `waiting`: the approval request it was parked on and until when it waits (wall clock); the
    scheduler leaves it queued while that request is pending, at most until then."""
    if waiting is None:
        return _queue_to_resume(conn, task_id, root, now, "", ())
    return _queue_to_resume(conn, task_id, root, now, ", parked_call = ?, parked_until = ?", waiting)


def requeue_after_crash(
    conn: sqlite3.Connection, task_id: str, *, root: NodeEnd | None, now: float
) -> TaskRecord:
    """starting/running → queued for a new attempt that goes on from its transcript: its
    subagent crashed, and its retry policy allows another attempt (docs/durability.md)."""
    return _queue_to_resume(conn, task_id, root, now, ", attempts = attempts + 1", ())


def _queue_to_resume(
    conn: sqlite3.Connection,
    task_id: str,
    root: NodeEnd | None,
    now: float,
    more: str,
    params: Sequence[object],
) -> TaskRecord:
    """starting/running → queued to go on from its transcript (`resumes + 1`), the root node's
    end committed with it; `more` sets further columns (with `params`)."""
    if root is not None:
        _end_root(conn, task_id, root, now)
    return _transition(
        conn,
        task_id,
        allowed=("starting", "running"),
        wanted="queued",
        assignments="resumes = resumes + 1, pid = NULL, pid_start_time = NULL, started_at = NULL" + more,
        params=params,
    )


# ---- reads (either connection) -----------------------------------------------------------------


def get_task(conn: sqlite3.Connection, task_id: str) -> TaskRecord | None:
    rows = conn.execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,)).fetchall()
    return task_from_row(rows[0]) if rows else None


def get_tasks(conn: sqlite3.Connection, task_ids: Sequence[str]) -> tuple[TaskRecord, ...]:
    """The tasks of `task_ids` that exist, in no particular order (at most 500 ids a call)."""
    marks = ",".join("?" * len(task_ids))
    rows = conn.execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE task_id IN ({marks})", tuple(task_ids))
    return tuple(task_from_row(row) for row in rows.fetchall())


# A listing carries each task's summary in place of its spec, and no result (`summary_sql`).
_SUMMARY_COLUMNS = _TASK_COLUMNS.replace("spec,", "summary AS spec,").replace(
    ", result,", ", NULL AS result,"
)


def list_tasks(
    conn: sqlite3.Connection,
    *,
    owner_uid: int | None,
    state: TaskState | None,
    limit: int,
    before: str | None = None,
    schedule_id: str | None = None,
    trigger: str | None = None,
) -> tuple[TaskRecord, ...]:
    """Summaries (`summary_sql`) of tasks newest first, after the cursor `before`
    (a task id: only tasks submitted before it)."""
    clauses: list[str] = []
    params: dict[str, object] = {"limit": limit}
    if owner_uid is not None:
        clauses.append("owner_uid = :owner")
        params["owner"] = owner_uid
    if state is not None:
        clauses.append("state = :state")
        params["state"] = state
    if schedule_id is not None:
        clauses.append("schedule_id = :schedule")
        params["schedule"] = schedule_id
    if trigger is not None:
        clauses.append("trigger = :trigger")
        params["trigger"] = trigger
    if before is not None:
        # A cursor the caller may not see is a missing one: its answer must not tell another
        # user's task id from an unknown one.
        seen = " AND owner_uid = :owner" if owner_uid is not None else ""
        clauses.append(f"seq < coalesce((SELECT seq FROM tasks WHERE task_id = :before{seen}), -1)")
        params["before"] = before
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM tasks{where} ORDER BY seq DESC LIMIT :limit", params
    ).fetchall()
    return tuple(task_from_row(row) for row in rows)


def next_queued(
    conn: sqlite3.Connection, per_owner: int, now: float, day_now: float | None = None
) -> tuple[TaskRecord, ...]:
    """Each owner's oldest `per_owner` queued tasks, in submission order (the scheduler's pick);
    a task paused for budget waits for `extend`, one parked on an approval for its decision
    (or its `parked_until`), and one a daily cap deferred for its `deferred_until` (compared
    with `day_now`, the daily caps' clock, `now` without one), not for a slot."""
    rows = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM (SELECT *, row_number() OVER (PARTITION BY owner_uid ORDER BY seq)"
        " AS owner_rank FROM tasks WHERE state = 'queued' AND paused_at IS NULL"
        " AND NOT (parked_call IS NOT NULL AND parked_until > ? AND EXISTS (SELECT 1 FROM approvals a"
        " WHERE a.call_id = tasks.parked_call AND a.state = 'pending'))"
        " AND (deferred_until IS NULL OR deferred_until <= ?))"
        " WHERE owner_rank <= ? ORDER BY seq",
        (now, now if day_now is None else day_now, per_owner),
    ).fetchall()
    return tuple(task_from_row(row) for row in rows)


def unfinished(conn: sqlite3.Connection) -> tuple[TaskRecord, ...]:
    rows = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks WHERE state IN ('starting', 'running') ORDER BY seq"
    ).fetchall()
    return tuple(task_from_row(row) for row in rows)


def count_unfinished(conn: sqlite3.Connection, owner_uid: int | None = None) -> dict[TaskState, int]:
    """Tasks queued, starting and running. Finished ones are not counted: no caller wants them,
    and counting them read the state index's entry of every task the journal ever held."""
    counts: dict[TaskState, int] = {state: 0 for state in TASK_STATES if state != "terminal"}
    where, params = ("AND owner_uid = ?", (owner_uid,)) if owner_uid is not None else ("", ())
    query = (
        "SELECT state, count(*) FROM tasks WHERE state IN ('queued', 'starting', 'running')"
        f" {where} GROUP BY state"
    )
    for row in conn.execute(query, params).fetchall():
        counts[row[0]] = int(row[1])
    return counts
