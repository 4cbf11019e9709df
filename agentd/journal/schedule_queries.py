"""The journal's SQL for schedules (docs/design.md §11): one synchronous function per operation.

Writes run on the writer thread inside the group-commit transaction. Every change to a schedule
the scheduler makes names what it expects to find (`expect_next`: the occurrence it acted on), so
a pause, resume or delete that committed first wins and the scheduler's stale decision raises
`ScheduleNotFound` instead of overwriting it. A fire inserts its task in the same transaction as
it advances the schedule: either both commit or neither does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from agentd.errors import IdempotencyConflict, QuotaExceeded, ScheduleNotFound
from agentd.journal.queries import insert_task, pending_bytes, schedule_holdings
from agentd.journal.quota import Quota, schedule_quota_problem
from agentd.journal.records import ScheduleRecord, TaskRecord
from agentd.journal.schema import summary_sql
from protocol.api import ScheduleSpec, ScheduleState, TaskSpec, TaskState
from protocol.result import TerminalStatus

# The listing summary of a schedule's spec, bound as the insert's seventh parameter.
_SUMMARY_OF_7 = summary_sql("?7", task=False)
_COLUMNS = (
    "schedule_id, owner_uid, idempotency_key, name, trigger_spec, spec, state, note, next_fire_at, runs, "
    "failures, skipped, tokens_used, pause_s, last_task_id, last_status, last_error, last_fire_at, created_at"
)


def schedule_from_row(row: sqlite3.Row) -> ScheduleRecord:
    status = row["last_status"]
    return ScheduleRecord(
        schedule_id=row["schedule_id"],
        owner_uid=row["owner_uid"],
        idempotency_key=row["idempotency_key"],
        name=row["name"],
        trigger=ScheduleSpec.model_validate_json(row["trigger_spec"]),
        spec=TaskSpec.model_validate_json(row["spec"]),
        state=row["state"],
        note=row["note"],
        next_fire_at=row["next_fire_at"],
        runs=row["runs"],
        failures=row["failures"],
        skipped=row["skipped"],
        tokens_used=row["tokens_used"],
        pause_s=row["pause_s"],
        last_task_id=row["last_task_id"],
        last_status=TerminalStatus(status) if status is not None else None,
        last_error=row["last_error"],
        last_fire_at=row["last_fire_at"],
        created_at=row["created_at"],
    )


# ---- writes (writer thread) -------------------------------------------------------------------


def insert_schedule(
    conn: sqlite3.Connection,
    *,
    schedule_id: str,
    owner_uid: int,
    idempotency_key: str | None,
    name: str | None,
    trigger: ScheduleSpec,
    spec: TaskSpec,
    next_fire_at: float | None,
    now: float,
    quota: Quota,
) -> tuple[ScheduleRecord, bool]:
    """Insert an active schedule, or return the one this owner created under the same key.

    Raises:
        IdempotencyConflict: the key names this owner's schedule with another trigger or spec.
        QuotaExceeded: the owner is at a cap of `quota` (checked in the writer's transaction, so
            concurrent creates cannot overshoot it); a resend under an existing key is not.
    """
    if idempotency_key is not None:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM schedules WHERE owner_uid = ? AND idempotency_key = ?",
            (owner_uid, idempotency_key),
        ).fetchall()
        if rows:
            existing = schedule_from_row(rows[0])
            if existing.trigger != trigger or existing.spec != spec:
                raise IdempotencyConflict(idempotency_key, existing.schedule_id, what="schedule")
            return existing, False
    spec_json = spec.model_dump_json()
    spec_bytes = len(spec_json.encode())
    _check_schedule_quota(conn, owner_uid, spec_bytes, quota)
    rows = conn.execute(
        "INSERT INTO schedules (schedule_id, owner_uid, idempotency_key, name, kind, trigger_spec, spec,"
        " spec_bytes, next_fire_at, created_at, summary)"
        f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {_SUMMARY_OF_7})"
        f" RETURNING {_COLUMNS}",
        (
            schedule_id,
            owner_uid,
            idempotency_key,
            name,
            trigger.kind,
            trigger.model_dump_json(),
            spec_json,
            spec_bytes,
            next_fire_at,
            now,
        ),
    ).fetchall()
    return schedule_from_row(rows[0]), True


def _check_schedule_quota(conn: sqlite3.Connection, owner_uid: int, spec_bytes: int, quota: Quota) -> None:
    if quota.max_schedules is None and quota.max_pending_bytes is None:
        return
    schedules, held = schedule_holdings(conn, owner_uid)
    problem = schedule_quota_problem(
        quota, schedules=schedules, pending_bytes=held + pending_bytes(conn, owner_uid), spec_bytes=spec_bytes
    )
    if problem is not None:
        raise QuotaExceeded(problem)


def _update(
    conn: sqlite3.Connection,
    schedule_id: str,
    assignments: str,
    params: Sequence[object],
    *,
    where: str = "",
    where_params: Sequence[object] = (),
) -> ScheduleRecord:
    rows = conn.execute(
        f"UPDATE schedules SET {assignments} WHERE schedule_id = ?{where} RETURNING {_COLUMNS}",
        (*params, schedule_id, *where_params),
    ).fetchall()
    if not rows:
        raise ScheduleNotFound(schedule_id)
    return schedule_from_row(rows[0])


def _expecting(expect_next: float | None) -> tuple[str, tuple[object, ...]]:
    if expect_next is None:
        return " AND state = 'active' AND next_fire_at IS NULL", ()
    return " AND state = 'active' AND next_fire_at = ?", (expect_next,)


def fire(
    conn: sqlite3.Connection,
    *,
    schedule_id: str,
    expect_next: float,
    next_at: float | None,
    skipped: int,
    task_id: str,
    run_id: str,
    spec: TaskSpec,
    now: float,
    quota: Quota,
) -> tuple[ScheduleRecord, TaskRecord]:
    """Fire the occurrence `expect_next`: insert its task and move the schedule on, in one commit.
    A fire counts against its owner's per-uid caps like a submit (`QuotaExceeded`, nothing written)."""
    where, where_params = _expecting(expect_next)
    schedule = _update(
        conn,
        schedule_id,
        "next_fire_at = ?, runs = runs + 1, skipped = skipped + ?, last_task_id = ?, last_fire_at = ?,"
        " last_status = NULL",
        (next_at, skipped, task_id, expect_next),
        where=where,
        where_params=where_params,
    )
    spec_json = spec.model_dump_json()
    task, _ = insert_task(
        conn,
        task_id=task_id,
        run_id=run_id,
        spec=spec,
        spec_json=spec_json,
        owner_uid=schedule.owner_uid,
        idempotency_key=None,
        quota=quota,
        now=now,
        schedule_id=schedule_id,
        fire_at=expect_next,
    )
    return schedule, task


def skip(
    conn: sqlite3.Connection, *, schedule_id: str, expect_next: float, next_at: float | None, skipped: int
) -> ScheduleRecord:
    """Pass over the occurrence `expect_next` (and `skipped - 1` more) without firing."""
    where, where_params = _expecting(expect_next)
    return _update(
        conn,
        schedule_id,
        "next_fire_at = ?, skipped = skipped + ?",
        (next_at, skipped),
        where=where,
        where_params=where_params,
    )


def account_run(
    conn: sqlite3.Connection,
    *,
    schedule_id: str,
    task_id: str,
    status: TerminalStatus,
    error: str | None,
    failures: int,
    tokens_used: int,
    pause_s: float | None,
    next_at: float | None,
    state: ScheduleState,
    note: str | None,
    set_next: bool,
) -> ScheduleRecord:
    """Record a finished fire on its schedule (only if it is still that schedule's last fire, so a
    run accounted once is never accounted again); `set_next` moves a loop to its next run."""
    assignments = (
        "last_status = ?, last_error = ?, failures = ?, tokens_used = ?, pause_s = ?, state = ?, note = ?,"
        " next_fire_at = CASE WHEN ? THEN ? WHEN ? != 'active' THEN NULL ELSE next_fire_at END"
    )
    return _update(
        conn,
        schedule_id,
        assignments,
        (status.value, error, failures, tokens_used, pause_s, state, note, set_next, next_at, state),
        where=" AND last_task_id = ? AND last_status IS NULL AND state != 'ended'",
        where_params=(task_id,),
    )


def set_state(
    conn: sqlite3.Connection,
    *,
    schedule_id: str,
    state: ScheduleState,
    note: str | None,
    next_fire_at: float | None,
    allowed: Sequence[ScheduleState],
) -> ScheduleRecord:
    """Pause, resume or end a schedule that is in one of the `allowed` states."""
    marks = ", ".join("?" for _ in allowed)
    return _update(
        conn,
        schedule_id,
        "state = ?, note = ?, next_fire_at = ?",
        (state, note, next_fire_at),
        where=f" AND state IN ({marks})",
        where_params=tuple(allowed),
    )


def delete(conn: sqlite3.Connection, *, schedule_id: str) -> ScheduleRecord:
    """Remove a schedule; its fires keep their `schedule_id` (and stay listable by it)."""
    rows = conn.execute(
        f"DELETE FROM schedules WHERE schedule_id = ? RETURNING {_COLUMNS}", (schedule_id,)
    ).fetchall()
    if not rows:
        raise ScheduleNotFound(schedule_id)
    return schedule_from_row(rows[0])


# ---- reads (either connection) -----------------------------------------------------------------


def get(conn: sqlite3.Connection, *, schedule_id: str) -> ScheduleRecord | None:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM schedules WHERE schedule_id = ?", (schedule_id,)).fetchall()
    return schedule_from_row(rows[0]) if rows else None


_QUALIFIED = ", ".join(f"s.{column.strip()}" for column in _COLUMNS.split(","))


def get_for_fire(
    conn: sqlite3.Connection, *, schedule_id: str
) -> tuple[ScheduleRecord | None, TaskState | None]:
    """The schedule and the state of its last fire's task (None: no fire yet), in one read."""
    rows = conn.execute(
        f"SELECT {_QUALIFIED}, t.state AS last_state FROM schedules AS s"
        " LEFT JOIN tasks AS t ON t.task_id = s.last_task_id WHERE s.schedule_id = ?",
        (schedule_id,),
    ).fetchall()
    if not rows:
        return None, None
    return schedule_from_row(rows[0]), rows[0]["last_state"]


# A listing carries each schedule's summary in place of its spec (`summary_sql`).
_SUMMARY_COLUMNS = _COLUMNS.replace(" spec,", " summary AS spec,")


def list_schedules(
    conn: sqlite3.Connection,
    *,
    owner_uid: int | None,
    state: ScheduleState | None,
    limit: int,
    after: str | None = None,
) -> tuple[ScheduleRecord, ...]:
    """Summaries of schedules oldest first, optionally one owner's and/or one state's, after the
    cursor `after` (a schedule id: only schedules created after it). Each record's spec holds
    only the instruction, cut to `LIST_INSTRUCTION_CHARS` characters."""
    clauses: list[str] = []
    params: dict[str, object] = {"limit": limit}
    if owner_uid is not None:
        clauses.append("owner_uid = :owner")
        params["owner"] = owner_uid
    if state is not None:
        clauses.append("state = :state")
        params["state"] = state
    if after is not None:
        # A cursor the caller may not see is a missing one (an empty page), so another user's
        # schedule id cannot be told from an unknown one.
        seen = " AND owner_uid = :owner" if owner_uid is not None else ""
        cursor = f"(SELECT seq FROM schedules WHERE schedule_id = :after{seen})"
        clauses.append(f"seq > coalesce({cursor}, 9223372036854775807)")  # missing: past every seq
        params["after"] = after
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM schedules{where} ORDER BY seq LIMIT :limit", params
    ).fetchall()
    return tuple(schedule_from_row(row) for row in rows)


def active(conn: sqlite3.Connection) -> tuple[ScheduleRecord, ...]:
    """Every active schedule (the scheduler loads them at start)."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM schedules WHERE state = 'active' ORDER BY seq").fetchall()
    return tuple(schedule_from_row(row) for row in rows)


def state_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """How many schedules are in each state (every state present, zero if none)."""
    counts = {"active": 0, "paused": 0, "ended": 0}
    for state, count in conn.execute("SELECT state, COUNT(*) FROM schedules GROUP BY state"):
        counts[state] = count
    return counts


def by_name(conn: sqlite3.Connection, *, owner_uid: int) -> dict[str, ScheduleRecord]:
    """The owner's named schedules (those from `[[schedule]]` tables), by name."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM schedules WHERE owner_uid = ? AND name IS NOT NULL", (owner_uid,)
    ).fetchall()
    return {row["name"]: schedule_from_row(row) for row in rows}
