"""What tasks spent, per scope and quarter hour, for the daily caps: a task's end adds its usage to
its owner's and its trigger's spend in the same commit; a day's range reads it back, also after the
journal is opened again; a deferred task is left out of the pick until its day, and starting it
clears the deferral."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentd.journal.store import Journal, open_journal
from protocol.api import TaskSpec
from protocol.result import RunUsage, TerminalStatus
from tests.journal.conftest import FAST

pytestmark = pytest.mark.anyio

USAGE = RunUsage(tokens_in=100, tokens_out=20, cost_usd=0.25)


async def _ended(journal: Journal, *, trigger: str | None = None) -> str:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="work"), owner_uid=7, trigger=trigger)
    await journal.tasks.mark_starting(record.task_id)
    await journal.tasks.mark_terminal(record.task_id, TerminalStatus.COMPLETED, usage=USAGE)
    return record.task_id


async def test_a_tasks_end_counts_its_spend_for_its_owner_and_its_trigger(journal: Journal) -> None:
    await _ended(journal, trigger="inbox")
    await _ended(journal)
    now = time.time()
    day = (now - 86400, now + 86400)
    assert await journal.spending.spent("uid:7", *day) == (0.5, 240)
    assert await journal.spending.spent("trigger:inbox", *day) == (0.25, 120)
    assert await journal.spending.spent("uid:8", *day) == (0.0, 0)
    assert await journal.spending.spent("uid:7", now + 3600, now + 7200) == (0.0, 0)  # another day
    assert await journal.spending.scopes("uid:", *day) == [("uid:7", 0.5, 240)]


async def test_the_spend_is_read_back_after_the_journal_is_opened_again(tmp_path: Path) -> None:
    async with open_journal(tmp_path, FAST) as journal:
        await _ended(journal)
    now = time.time()
    async with open_journal(tmp_path, FAST) as reopened:
        assert await reopened.spending.spent("uid:7", now - 3600, now + 3600) == (0.25, 120)


async def test_a_deferred_task_waits_out_of_the_pick_until_its_day_and_starting_it_clears_it(
    journal: Journal,
) -> None:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="later"), owner_uid=7)
    until = time.time() + 3600
    assert await journal.spending.defer(record.task_id, until, "the daily cost cap of uid 7 is spent")
    view = (await journal.tasks.get(record.task_id)).to_view()  # type: ignore[union-attr]
    assert view.state == "queued" and view.deferred is not None and view.deferred.until == until
    assert await journal.tasks.next_queued(10) == ()
    assert [t.task_id for t in await journal.tasks.next_queued(10, day_now=until)] == [record.task_id]
    (listed,) = await journal.spending.deferred(7)
    assert listed.task_id == record.task_id and listed.reason.startswith("the daily cost cap")
    started = await journal.tasks.mark_starting(record.task_id)
    assert (started.deferred_until, started.deferred_reason) == (None, None)
    assert await journal.spending.deferred(None) == []
    assert not await journal.spending.defer(record.task_id, until, "too late: it started")
