"""Retention of ended tasks (docs/durability.md, "Retention"): a transcript goes after
`transcript_retention`, the task with everything it owns after `task_retention`; unfinished
tasks stay however old, and the journal file gives the freed pages back."""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from agentd.journal.retention import BATCH, Retention, prune_now
from agentd.journal.store import Journal, open_journal
from protocol.api import TaskSpec
from protocol.result import TerminalStatus
from protocol.transcript import ReplyItem, ResultItem
from tests.journal.conftest import FAST

pytestmark = pytest.mark.anyio

DAY_S = 86400.0


async def _ended(journal: Journal, text: str, *, days_ago: float, body: str = "x") -> str:
    record, _ = await journal.tasks.submit(TaskSpec(instruction=text), owner_uid=1)
    await journal.tasks.mark_starting(record.task_id)
    await journal.transcripts.append(
        record.task_id, "0", [ReplyItem(text=body), ResultItem(call_id="c", name="t", text=body)]
    )
    journal.append_event(record.task_id, "task.started", {})
    await journal.tasks.mark_terminal(record.task_id, TerminalStatus.COMPLETED)
    ended_at = time.time() - days_ago * DAY_S
    await journal.run_on_writer(
        lambda conn: conn.execute(
            "UPDATE tasks SET ended_at = ? WHERE task_id = ?", (ended_at, record.task_id)
        )
    )
    return record.task_id


async def test_transcripts_then_tasks_are_pruned_past_their_retention_and_running_ones_stay(
    journal: Journal,
) -> None:
    fresh = await _ended(journal, "fresh", days_ago=1)
    middle = await _ended(journal, "middle", days_ago=10)
    old = await _ended(journal, "old", days_ago=40)
    running, _ = await journal.tasks.submit(TaskSpec(instruction="running"), owner_uid=1)
    await journal.tasks.mark_starting(running.task_id)
    await journal.transcripts.append(running.task_id, "0", [ReplyItem(text="still going")])

    pruned = await prune_now(journal, Retention(task_s=30 * DAY_S, transcript_s=7 * DAY_S))

    assert (pruned.tasks, pruned.transcripts) == (1, 2)
    assert await journal.tasks.get(old) is None
    assert await journal.events_after(old) == ()
    # The middle task keeps its status and result, not its steps.
    assert (await journal.tasks.get(middle)) is not None
    assert await journal.transcripts.items(middle) == []
    assert len(await journal.transcripts.items(fresh)) == 2
    assert len(await journal.transcripts.items(running.task_id)) == 1


async def test_a_backlog_is_pruned_in_batches_and_the_file_shrinks(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    async with open_journal(state, FAST) as journal:
        body = "y" * 4000
        for i in range(BATCH + 20):
            await _ended(journal, f"t{i}", days_ago=60, body=body)
        await journal.flush_events()
        before = await journal.run_on_writer(_pages)

        pruned = await prune_now(journal, Retention())
        after = await journal.run_on_writer(_pages)

    assert pruned.tasks == BATCH + 20
    # The database's pages, free ones included: given back, not kept on a free list.
    assert after < before / 2, (before, after)


def _pages(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA page_count").fetchone()[0])


async def test_a_transcript_past_its_cap_keeps_digests_of_its_oldest_tool_results(tmp_path: Path) -> None:
    options = dataclasses.replace(FAST, max_transcript_bytes=12_000)
    async with open_journal(tmp_path, options) as journal:
        record, _ = await journal.tasks.submit(TaskSpec(instruction="big results"), owner_uid=1)
        await journal.tasks.mark_starting(record.task_id)
        bodies = [f"{i}" * 5000 for i in range(4)]
        for i, body in enumerate(bodies):
            handle = "0.1" if i == 1 else "0"  # the cap is the task's, across its nodes
            await journal.transcripts.append(
                record.task_id,
                handle,
                [ReplyItem(text=f"step {i}"), ResultItem(call_id=f"c{i}", name="t", text=body)],
            )
        items = [s.item for h in ("0", "0.1") for s in await journal.transcripts.items(record.task_id, h)]
        results = {item.call_id: item.text for item in items if isinstance(item, ResultItem)}
        # The two oldest bodies gave way to their size and digest; the newest are kept whole.
        digest = hashlib.sha256(bodies[0].encode()).hexdigest()[:16]
        assert results["c0"] == (
            f"[not kept: a 5,000-byte result (sha256 {digest}…);"
            " this task's transcript is over [journal] max_transcript_bytes]"
        )
        assert results["c1"].startswith("[not kept: ")
        assert (results["c2"], results["c3"]) == (bodies[2], bodies[3])
        # Replies are never digested, and the task's accounted size is within the cap.
        assert [i.text for i in items if isinstance(i, ReplyItem)] == ["step 0", "step 2", "step 3", "step 1"]
        total = await journal.run_on_writer(
            lambda conn: conn.execute(
                "SELECT transcript_bytes, (SELECT SUM(bytes) FROM steps WHERE task_id = ?) FROM tasks"
                " WHERE task_id = ?",
                (record.task_id, record.task_id),
            ).fetchone()
        )
        assert total[0] == total[1] <= 12_000
