"""The on-disk format: which SQLite failures count as "journal unavailable", and migrations."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentd.journal.queries import QUOTA_SUM, list_tasks
from agentd.journal.schema import (
    _MIGRATIONS,
    LIST_INSTRUCTION_CHARS,
    SCHEMA_VERSION,
    _statements,
    connect_writer,
    unavailable_reason,
)

SQLITE_IOERR_WRITE = sqlite3.SQLITE_IOERR | (3 << 8)  # an extended code keeps its primary low byte

ONE_TASK = "INSERT INTO tasks (task_id, run_id, owner_uid, spec, created_at) VALUES ('t1', 'r1', 7, '{}', 0)"


def journal_at(
    tmp_path: Path, version: int, task_row: str = ONE_TASK, params: tuple[object, ...] = ()
) -> Path:
    """A journal written by schema `version`, holding the one task `task_row` inserts."""
    db = tmp_path / "agentd.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for script in _MIGRATIONS[:version]:
        for statement in _statements(script):
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute(task_row, params)
    conn.close()
    return db


def sqlite_error(cls: type[sqlite3.Error], message: str, code: int) -> sqlite3.Error:
    exc = cls(message)
    exc.sqlite_errorcode = code
    return exc


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        pytest.param(
            sqlite_error(sqlite3.OperationalError, "database or disk is full", sqlite3.SQLITE_FULL),
            "database or disk is full",
            id="disk-full",
        ),
        pytest.param(
            sqlite_error(sqlite3.OperationalError, "disk I/O error", SQLITE_IOERR_WRITE),
            "disk I/O error",
            id="io-error-extended-code",
        ),
        pytest.param(
            sqlite_error(sqlite3.OperationalError, "", sqlite3.SQLITE_READONLY),
            "database is read-only",
            id="read-only-without-message",
        ),
        pytest.param(
            sqlite_error(sqlite3.OperationalError, "database is locked", sqlite3.SQLITE_BUSY),
            "database is locked",
            id="locked",
        ),
        pytest.param(
            sqlite_error(sqlite3.IntegrityError, "UNIQUE constraint failed", sqlite3.SQLITE_CONSTRAINT),
            None,
            id="constraint-is-the-operation's-fault",
        ),
        pytest.param(
            sqlite_error(sqlite3.OperationalError, "no such table: x", sqlite3.SQLITE_ERROR),
            None,
            id="sql-error-is-a-bug",
        ),
    ],
)
def test_only_environmental_failures_make_the_journal_unavailable(
    exc: sqlite3.Error, reason: str | None
) -> None:
    assert unavailable_reason(exc) == reason


def test_migrating_a_current_database_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "agentd.db"
    connect_writer(db).close()
    conn = connect_writer(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {
            *("tasks", "nodes", "events", "schedules", "approvals", "trigger_state", "steps", "spend")
        }
    finally:
        conn.close()


def test_a_v11_journal_migrates_with_its_ended_tasks_spend_counted_for_the_daily_caps(tmp_path: Path) -> None:
    usage = '{"tokens_in": 100, "tokens_out": 20, "cost_usd": 0.5}'
    row = (
        "INSERT INTO tasks (task_id, run_id, owner_uid, spec, created_at, state, status, usage, ended_at,"
        " trigger) VALUES ('t1', 'r1', 7, '{\"instruction\":\"x\"}', 0, 'terminal', 'completed', ?, 1000.0,"
        " 'inbox')"
    )
    migrated = connect_writer(journal_at(tmp_path, 11, row, (usage,)))
    try:
        rows = migrated.execute("SELECT scope, bucket, cost_usd, tokens FROM spend ORDER BY scope").fetchall()
        assert [tuple(r) for r in rows] == [("trigger:inbox", 900, 0.5, 120), ("uid:7", 900, 0.5, 120)]
    finally:
        migrated.close()


def test_a_v12_journal_migrates_with_each_listing_summary_cut_from_the_stored_spec(tmp_path: Path) -> None:
    long_spec = json.dumps({"instruction": "é" * 300, "model": "m", "mcp": ["fs"]})
    row = "INSERT INTO tasks (task_id, run_id, owner_uid, spec, created_at) VALUES ('t1', 'r1', 7, ?, 0)"
    migrated = connect_writer(journal_at(tmp_path, 12, row, (long_spec,)))
    try:
        (listed,) = list_tasks(migrated, owner_uid=None, state=None, limit=10)
        assert listed.spec.instruction == "é" * LIST_INSTRUCTION_CHARS + "…"
        assert listed.spec.model == "m"
        assert listed.spec.mcp == ["fs"]
        assert listed.result is None
    finally:
        migrated.close()


def test_a_v1_journal_migrates_to_v2_with_the_spec_sizes_filled_in(tmp_path: Path) -> None:
    row = "INSERT INTO tasks (task_id, run_id, owner_uid, spec, created_at) VALUES ('t1', 'r1', 7, ?, 0)"
    migrated = connect_writer(journal_at(tmp_path, 1, row, ('{"instruction":"héllo"}',)))
    try:
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        (size,) = migrated.execute("SELECT spec_bytes FROM tasks WHERE task_id = 't1'").fetchone()
        assert size == len('{"instruction":"héllo"}'.encode())
    finally:
        migrated.close()


def test_a_v2_journal_migrates_to_the_current_schema_keeping_its_tasks_as_plain_tasks(tmp_path: Path) -> None:
    migrated = connect_writer(journal_at(tmp_path, 2))
    try:
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 13
        row = migrated.execute(
            "SELECT schedule_id, fire_at, idle, trigger, uri, executor, worker FROM tasks WHERE task_id = 't1'"
        ).fetchone()
        assert tuple(row) == (None, None, 0, None, None, None, None)
        assert migrated.execute("SELECT count(*) FROM trigger_state").fetchone()[0] == 0
        assert migrated.execute("SELECT count(*) FROM schedules").fetchone()[0] == 0
    finally:
        migrated.close()


def test_a_v3_journal_migrates_to_v4_with_an_empty_approvals_table(tmp_path: Path) -> None:
    migrated = connect_writer(journal_at(tmp_path, 3))
    try:
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert migrated.execute("SELECT count(*) FROM approvals").fetchone()[0] == 0
        assert migrated.execute("SELECT count(*) FROM tasks").fetchone()[0] == 1
    finally:
        migrated.close()


def test_a_v5_journal_migrates_to_v6_with_no_executor_recorded_yet(tmp_path: Path) -> None:
    migrated = connect_writer(journal_at(tmp_path, 5))
    try:
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        row = migrated.execute("SELECT executor, worker FROM tasks WHERE task_id = 't1'").fetchone()
        assert tuple(row) == (None, None)
    finally:
        migrated.close()


def test_a_v6_journal_migrates_to_v7_where_the_quota_sum_reads_only_the_index(tmp_path: Path) -> None:
    row = (
        "INSERT INTO tasks (task_id, run_id, owner_uid, spec, spec_bytes, created_at)"
        " VALUES ('t1', 'r1', 7, '{}', 2, 0)"
    )
    migrated = connect_writer(journal_at(tmp_path, 6, row))
    try:
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        migrated.execute("ANALYZE")  # statistics must not turn it into a scan of the table
        plan = " ".join(
            row[3] for row in migrated.execute("EXPLAIN QUERY PLAN " + QUOTA_SUM, (7,)).fetchall()
        )
        assert "COVERING INDEX tasks_by_state_owner" in plan
        assert tuple(migrated.execute(QUOTA_SUM, (7,)).fetchone()) == (1, 2)
    finally:
        migrated.close()


def test_a_v7_journal_migrates_to_v8_with_no_transcripts_and_no_resumes(tmp_path: Path) -> None:
    row = "INSERT INTO tasks (task_id, run_id, owner_uid, spec, created_at) VALUES ('t1', 'r1', 7, '{}', 0)"
    migrated = connect_writer(journal_at(tmp_path, 7, row))
    try:
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        row = migrated.execute("SELECT resumes, first_started_at FROM tasks WHERE task_id = 't1'").fetchone()
        assert tuple(row) == (0, None)
        assert migrated.execute("SELECT count(*) FROM steps").fetchone()[0] == 0
    finally:
        migrated.close()
