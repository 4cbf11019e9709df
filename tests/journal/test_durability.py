"""Durability and failure: acknowledged writes survive SIGKILL, concurrent submits share commits,
a full disk fails writes without acknowledging them (and the journal recovers), a stalled writer
turns into a bounded, retryable error."""

from __future__ import annotations

import signal
import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from agentd.errors import JournalUnavailable
from agentd.journal.store import Journal, JournalOptions, open_journal
from protocol.api import TaskSpec
from tests.journal.conftest import CHILD, FAST, writer_held

pytestmark = pytest.mark.anyio

BOUND_S = 20.0
ACKS_BEFORE_KILL = 100


def spec(text: str = "x") -> TaskSpec:
    return TaskSpec(instruction=text)


@pytest.mark.processes
async def test_every_acknowledged_submit_survives_sigkill(state_dir: Path, tmp_path: Path) -> None:
    output = bytearray()
    with (tmp_path / "child.err").open("wb") as stderr, anyio.fail_after(BOUND_S):
        process = await anyio.open_process([*CHILD, "submit", str(state_dir)], stderr=stderr)
        async with process:
            assert process.stdout is not None
            try:
                async for chunk in process.stdout:
                    output += chunk
                    if output.count(b"\n") >= ACKS_BEFORE_KILL:
                        break
            finally:
                process.kill()
            # Lines still in the pipe were printed after their COMMIT too: they count.
            async for chunk in process.stdout:
                output += chunk
            returncode = await process.wait()

    acked = [line.split()[1].decode() for line in output.splitlines(keepends=True) if line.endswith(b"\n")]
    assert len(acked) >= ACKS_BEFORE_KILL, (tmp_path / "child.err").read_text()
    assert returncode == -signal.SIGKILL

    # The dead process's lock went with it; every acknowledged task is there.
    async with open_journal(state_dir, FAST) as journal:
        missing = [task_id for task_id in acked if await journal.tasks.get(task_id) is None]
        assert missing == []
        assert len(await journal.tasks.list(limit=10_000)) >= len(acked)


async def test_concurrent_submits_share_one_commit(journal: Journal) -> None:
    submits = 200
    before = journal.stats

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg, writer_held(journal):
            for i in range(submits):
                tg.start_soon(journal.tasks.submit, spec(str(i)), 1)
            await anyio.wait_all_tasks_blocked()

    after = journal.stats
    assert after.operations - before.operations == submits + 1  # + the parked op
    assert after.commits - before.commits == 2
    assert (await journal.tasks.counts())["queued"] == submits


async def test_unsynchronised_concurrent_submits_need_far_fewer_commits_than_submits(
    journal: Journal,
) -> None:
    submits = 256
    before = journal.stats.commits
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            for i in range(submits):
                tg.start_soon(journal.tasks.submit, spec(str(i)), 1)
    assert journal.stats.commits - before <= submits // 4


async def test_a_full_disk_fails_writes_unacknowledged_and_the_journal_recovers(journal: Journal) -> None:
    kept, _ = await journal.tasks.submit(spec("kept"), owner_uid=1)
    big = "x" * 200_000  # needs new overflow pages, which the cap forbids

    def cap_at_current_size(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    await journal.run_on_writer(cap_at_current_size)
    failures: list[JournalUnavailable] = []

    async def submit_expecting_failure(text: str) -> None:
        with pytest.raises(JournalUnavailable) as caught:
            await journal.tasks.submit(spec(text), owner_uid=1, idempotency_key=text[:8])
        failures.append(caught.value)

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg, writer_held(journal):
            tg.start_soon(submit_expecting_failure, big)
            tg.start_soon(submit_expecting_failure, "small, but in the failed batch")
            await anyio.wait_all_tasks_blocked()

    assert len(failures) == 2
    assert all("journal write failed: database or disk is full" in str(exc) for exc in failures)
    assert not journal.healthy
    assert journal.last_error is not None and "database or disk is full" in journal.last_error
    # Nothing of the failed batch is visible; reads keep working.
    assert [t.task_id for t in await journal.tasks.list()] == [kept.task_id]
    assert await journal.tasks.get(kept.task_id) == kept

    def lift_cap(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA max_page_count = 1073741823")

    await journal.run_on_writer(lift_cap)
    recovered, created = await journal.tasks.submit(spec(big), owner_uid=1, idempotency_key=big[:8])
    assert created and await journal.tasks.get(recovered.task_id) == recovered
    assert journal.healthy
    assert journal.health.last_error_at is not None  # the last failure stays on record


async def test_events_that_hit_a_full_disk_are_written_after_recovery(journal: Journal) -> None:
    task, _ = await journal.tasks.submit(spec(), owner_uid=1)

    def cap(conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")

    await journal.run_on_writer(cap)
    journal.append_event(task.task_id, "loop.step", {"blob": "y" * 100_000})
    with pytest.raises(JournalUnavailable):
        await journal.flush_events()

    await journal.run_on_writer(lambda conn: conn.execute("PRAGMA max_page_count = 1073741823"))
    await journal.flush_events()
    events = await journal.events_after(task.task_id)
    assert [(e.seq, e.event) for e in events] == [(1, "loop.step")]


async def test_a_write_the_writer_cannot_commit_in_time_is_unavailable(state_dir: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    def stall(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(BOUND_S)

    async with open_journal(state_dir, JournalOptions(write_timeout_s=0.05)) as journal:
        try:
            with pytest.raises(JournalUnavailable, match=r"not committed within 0.05 s"):
                await journal.run_on_writer(stall)
            assert entered.is_set()
            with pytest.raises(JournalUnavailable, match=r"writer stalled"):
                await journal.tasks.submit(spec(), owner_uid=1)
        finally:
            release.set()


async def test_each_write_waiting_behind_a_stall_gets_its_own_bound_and_the_journal_recovers(
    state_dir: Path,
) -> None:
    entered, release = threading.Event(), threading.Event()
    timeout_s = 0.3

    def stall(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(BOUND_S)

    async def late_submit(gave_up: list[float]) -> None:
        await anyio.sleep(timeout_s / 2)
        submitted = anyio.current_time()
        with pytest.raises(JournalUnavailable, match="writer stalled"):
            await journal.tasks.submit(spec("late"), owner_uid=1)
        gave_up.append(anyio.current_time() - submitted)

    async with open_journal(state_dir, JournalOptions(write_timeout_s=timeout_s)) as journal:
        gave_up: list[float] = []
        try:
            with anyio.fail_after(BOUND_S):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(late_submit, gave_up)
                    started = anyio.current_time()
                    with pytest.raises(JournalUnavailable, match="writer stalled"):
                        await journal.run_on_writer(stall)
                    gave_up.append(anyio.current_time() - started)
        finally:
            release.set()
        # The stalled op, then the write queued behind it: each waited its own bound, not less.
        assert entered.is_set() and len(gave_up) == 2
        assert all(timeout_s <= waited < BOUND_S for waited in gave_up)
        with anyio.fail_after(BOUND_S):
            record, created = await journal.tasks.submit(spec("after"), owner_uid=1)
        assert created and record.state == "queued"
