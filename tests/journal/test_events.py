"""Events: buffered appends, per-task numbering, retention, paging, and waiting for new ones."""

from __future__ import annotations

import functools
from pathlib import Path

import anyio
import pytest

from agentd.journal.store import Journal, JournalOptions, open_journal
from protocol.api import TaskSpec
from protocol.result import TerminalStatus
from tests.journal.conftest import FAST

pytestmark = pytest.mark.anyio

BOUND_S = 10.0
# Events then reach the database only through a write, a full batch, or close.
NEVER_BY_TIME = JournalOptions(event_flush_interval_s=3600.0, close_timeout_s=5.0)


async def new_task(journal: Journal) -> str:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=1)
    return record.task_id


async def test_each_task_numbers_its_events_from_one_without_gaps(journal: Journal) -> None:
    a, b = await new_task(journal), await new_task(journal)
    for i in range(3):
        journal.append_event(a, "loop.step", {"i": i})
        journal.append_event(b, "tool.call", {"i": i})
    await journal.flush_events()

    events_a = await journal.events_after(a)
    assert [(e.seq, e.event, e.fields) for e in events_a] == [
        (1, "loop.step", {"i": 0}),
        (2, "loop.step", {"i": 1}),
        (3, "loop.step", {"i": 2}),
    ]
    assert [e.seq for e in await journal.events_after(b)] == [1, 2, 3]
    assert events_a[0].ts <= events_a[2].ts
    assert events_a[1].to_view().model_dump() == {
        "seq": 2,
        "ts": events_a[1].ts,
        "event": "loop.step",
        "fields": {"i": 1},
    }


async def test_numbering_continues_across_a_reopen(state_dir: Path) -> None:
    async with open_journal(state_dir, FAST) as journal:
        task = await new_task(journal)
        journal.append_event(task, "loop.step")
        journal.append_event(task, "loop.step")
    async with open_journal(state_dir, FAST) as journal:
        journal.append_event(task, "loop.final")
        await journal.flush_events()
        assert [(e.seq, e.event) for e in await journal.events_after(task)] == [
            (1, "loop.step"),
            (2, "loop.step"),
            (3, "loop.final"),
        ]


async def test_events_after_pages_by_seq(journal: Journal) -> None:
    task = await new_task(journal)
    for i in range(10):
        journal.append_event(task, "loop.step", {"i": i})
    await journal.flush_events()

    assert [e.seq for e in await journal.events_after(task, after_seq=4, limit=3)] == [5, 6, 7]
    assert [e.seq for e in await journal.events_after(task, after_seq=8)] == [9, 10]
    assert await journal.events_after(task, after_seq=10) == ()
    assert await journal.events_after("t_unknown") == ()


async def test_only_the_newest_events_of_a_task_are_kept(state_dir: Path) -> None:
    async with open_journal(state_dir, JournalOptions(events_per_task=10)) as journal:
        task, other = await new_task(journal), await new_task(journal)
        for i in range(25):
            journal.append_event(task, "loop.step", {"i": i})
            if i % 8 == 0:
                await journal.flush_events()
        journal.append_event(other, "loop.step")
        await journal.flush_events()

        kept = await journal.events_after(task)
        assert [e.seq for e in kept] == list(range(16, 26))
        assert kept[0].fields == {"i": 15}
        assert [e.seq for e in await journal.events_after(other)] == [1]


async def test_a_durable_write_commits_the_events_appended_before_it(state_dir: Path) -> None:
    async with open_journal(state_dir, NEVER_BY_TIME) as journal:
        task = await new_task(journal)
        journal.append_event(task, "loop.final", {"ok": True})
        await journal.tasks.mark_terminal(task, TerminalStatus.COMPLETED, exit_code=0)
        assert [e.event for e in await journal.events_after(task)] == ["loop.final"]


async def test_a_full_batch_of_events_is_flushed_without_waiting_for_the_interval(state_dir: Path) -> None:
    options = JournalOptions(event_flush_interval_s=3600.0, event_flush_batch=5)
    async with open_journal(state_dir, options) as journal:
        task = await new_task(journal)
        for i in range(5):
            journal.append_event(task, "loop.step", {"i": i})
        with anyio.fail_after(BOUND_S):
            assert await journal.wait_events(task, 0, timeout_s=BOUND_S)
        assert len(await journal.events_after(task)) == 5


async def test_closing_flushes_buffered_events(state_dir: Path) -> None:
    async with open_journal(state_dir, NEVER_BY_TIME) as journal:
        task = await new_task(journal)
        journal.append_event(task, "loop.step")
    async with open_journal(state_dir, FAST) as journal:
        assert [e.event for e in await journal.events_after(task)] == ["loop.step"]


async def test_a_follower_wakes_when_new_events_are_flushed(journal: Journal) -> None:
    task = await new_task(journal)
    woke: list[bool] = []

    async def follow() -> None:
        woke.append(await journal.wait_events(task, 0, timeout_s=BOUND_S))

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
            journal.append_event(task, "loop.step")
    assert woke == [True]


async def test_a_follower_behind_returns_at_once(journal: Journal) -> None:
    task = await new_task(journal)
    journal.append_event(task, "loop.step")
    await journal.flush_events()
    with anyio.fail_after(BOUND_S):
        assert await journal.wait_events(task, 0, timeout_s=BOUND_S)


async def test_a_follower_wakes_when_its_task_ends_with_nothing_new(journal: Journal) -> None:
    task = await new_task(journal)
    woke: list[bool] = []

    async def follow() -> None:
        woke.append(await journal.wait_events(task, 0, timeout_s=BOUND_S))

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
            await journal.tasks.mark_terminal(task, TerminalStatus.CANCELLED)
    assert woke == [False]


async def test_a_follower_gives_up_after_its_timeout(journal: Journal) -> None:
    task = await new_task(journal)
    with anyio.fail_after(BOUND_S):
        assert not await journal.wait_events(task, 0, timeout_s=0.01)


async def test_a_cancelled_follower_leaves_no_waiter_behind(journal: Journal) -> None:
    task = await new_task(journal)
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(journal.wait_events, task, 0, timeout_s=BOUND_S))
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    assert journal._followers == {}


async def test_fields_that_are_not_json_are_refused_at_append(journal: Journal) -> None:
    task = await new_task(journal)
    with pytest.raises(TypeError):
        journal.append_event(task, "loop.step", {"bad": object()})  # type: ignore[dict-item]


async def test_events_of_an_unknown_task_are_dropped_without_losing_others(journal: Journal) -> None:
    task = await new_task(journal)
    journal.append_event("t_unknown", "loop.step")
    journal.append_event(task, "loop.step")
    await journal.flush_events()

    assert [e.seq for e in await journal.events_after(task)] == [1]
    assert journal.stats.events_dropped == 1
    assert journal.healthy


async def test_closing_wakes_followers_and_drops_later_events(state_dir: Path) -> None:
    woke: list[bool] = []
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg, open_journal(state_dir, NEVER_BY_TIME) as journal:
            task = await new_task(journal)

            async def follow() -> None:
                woke.append(await journal.wait_events(task, 0, timeout_s=BOUND_S))

            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
    assert woke == [False]

    journal.append_event(task, "loop.step")
    assert journal.stats.events_dropped == 1


async def test_a_followed_tasks_events_are_committed_without_waiting_for_the_interval(
    state_dir: Path,
) -> None:
    async with open_journal(state_dir, NEVER_BY_TIME) as journal:
        followed, other = await new_task(journal), await new_task(journal)
        woke: list[bool] = []

        async def follow() -> None:
            woke.append(await journal.wait_events(followed, 0, timeout_s=BOUND_S))

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await anyio.wait_all_tasks_blocked()
                journal.append_event(other, "loop.step")  # nobody follows it: the interval holds
                journal.append_event(followed, "loop.step")
        assert woke == [True]
        # One commit took what was buffered, the unfollowed task's event with it.
        assert len(await journal.events_after(other)) == 1
