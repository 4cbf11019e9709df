"""Opening and closing a journal: one agentd per state dir, private files, the schema version,
and a close that always flushes and releases the lock, whatever ends the `async with` body."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import anyio
import pytest

from agentd.errors import JournalError, JournalLocked, JournalUnavailable
from agentd.journal.schema import SCHEMA_VERSION
from agentd.journal.store import Journal, open_journal
from protocol.api import TaskSpec
from tests.journal.conftest import CHILD, FAST

pytestmark = pytest.mark.anyio

BOUND_S = 20.0


@pytest.mark.processes
async def test_a_second_opener_in_another_process_is_refused_with_the_holder(
    journal: Journal, state_dir: Path
) -> None:
    with anyio.fail_after(BOUND_S):
        refused = await anyio.run_process([*CHILD, "open", str(state_dir)], check=False)

    assert refused.returncode == 3, refused.stderr.decode()
    assert refused.stdout.decode().strip() == f"another agentd (pid {os.getpid()}) is using {state_dir}"


@pytest.mark.processes
async def test_the_state_dir_lock_is_released_on_close(state_dir: Path) -> None:
    async with open_journal(state_dir, FAST):
        with pytest.raises(JournalLocked, match="is using"):
            async with open_journal(state_dir, FAST):
                pass
    with anyio.fail_after(BOUND_S):
        opened = await anyio.run_process([*CHILD, "open", str(state_dir)], check=False)
    assert (opened.returncode, opened.stdout.strip()) == (0, b"opened"), opened.stderr.decode()


async def test_the_state_dir_and_database_are_private(journal: Journal, state_dir: Path) -> None:
    await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=1)
    assert stat.S_IMODE((await anyio.Path(state_dir).stat()).st_mode) == 0o700
    for name in ("agentd.db", "agentd.db-wal", "agentd.lock"):
        assert stat.S_IMODE((await anyio.Path(state_dir / name).stat()).st_mode) == 0o600, name


async def test_the_database_is_wal_with_full_sync_and_the_current_schema_version(journal: Journal) -> None:
    def settings(conn: sqlite3.Connection) -> tuple[str, int, int, int]:
        return (
            conn.execute("PRAGMA journal_mode").fetchone()[0],
            conn.execute("PRAGMA synchronous").fetchone()[0],
            conn.execute("PRAGMA foreign_keys").fetchone()[0],
            conn.execute("PRAGMA user_version").fetchone()[0],
        )

    assert await journal.run_on_writer(settings) == ("wal", 2, 1, SCHEMA_VERSION)  # synchronous 2 = FULL


def write_schema_version(state_dir: Path, version: int) -> None:
    state_dir.mkdir(mode=0o700)
    conn = sqlite3.connect(state_dir / "agentd.db")
    try:
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        conn.close()


async def test_a_database_from_a_newer_agentd_is_refused(state_dir: Path) -> None:
    write_schema_version(state_dir, 99)

    with pytest.raises(JournalError, match=f"schema v99, newer than this agentd's v{SCHEMA_VERSION}"):
        async with open_journal(state_dir, FAST):
            pass
    # The failed open released the lock.
    with pytest.raises(JournalError, match="schema v99"):
        async with open_journal(state_dir, FAST):
            pass


async def test_an_error_in_the_body_propagates_unwrapped_and_the_lock_is_released(state_dir: Path) -> None:
    with pytest.raises(KeyError, match="boom"):
        async with open_journal(state_dir, FAST):
            raise KeyError("boom")
    async with open_journal(state_dir, FAST):
        pass


async def test_a_cancelled_body_still_flushes_and_releases_the_lock(state_dir: Path) -> None:
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:

            async def run_until_cancelled() -> None:
                async with open_journal(state_dir, FAST) as journal:
                    record, _ = await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=1)
                    journal.append_event(record.task_id, "loop.step")
                    tg.cancel_scope.cancel()
                    await anyio.sleep_forever()

            tg.start_soon(run_until_cancelled)

    async with open_journal(state_dir, FAST) as journal:
        (record,) = await journal.tasks.list()
        assert [e.event for e in await journal.events_after(record.task_id)] == ["loop.step"]


async def test_a_closed_journal_refuses_reads_and_writes_as_unavailable(state_dir: Path) -> None:
    async with open_journal(state_dir, FAST) as journal:
        pass
    with pytest.raises(JournalUnavailable, match="journal is closed"):
        await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=1)
    with pytest.raises(JournalUnavailable, match="journal is closed"):
        await journal.tasks.get("t_x")
