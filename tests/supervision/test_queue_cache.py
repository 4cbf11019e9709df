"""The scheduler's copy of the queue: served from what it was told, read again whenever it may lie.

Pure tests of `QueueCache`, then the supervisor with a real journal: it starts acknowledged tasks
in order without a journal read per task, and still finds a task it was not told about.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentd.journal.records import TaskRecord, new_run_id, new_task_id
from agentd.journal.store import Journal
from agentd.spawning.spawner import ExecSpawner
from agentd.supervision.queue_cache import QueueCache
from agentd.supervision.supervisor import Supervisor, SupervisorOptions
from protocol.api import TaskSpec
from tests.support.fake_executor import FakeExecutor, placeholder_payload, wait_run_started

BOUND_S = 10.0


def rec(owner: int = 1) -> TaskRecord:
    return TaskRecord(
        task_id=new_task_id(),
        run_id=new_run_id(),
        owner_uid=owner,
        idempotency_key=None,
        spec=TaskSpec(instruction="x"),
        state="queued",
        created_at=0.0,
    )


def read(cache: QueueCache, records: list[TaskRecord], size: int) -> None:
    cache.begin_read()
    cache.end_read(tuple(records), size)


def test_nothing_is_served_before_the_first_read() -> None:
    assert QueueCache().pick(4) is None


def test_acknowledged_tasks_are_appended_and_started_ones_removed() -> None:
    cache = QueueCache()
    a1, b1 = rec(1), rec(2)
    read(cache, [a1, b1], size=64)
    a2 = rec(1)
    cache.submitted(a2)
    cache.submitted(a2)  # told twice (or already read): listed once
    assert cache.pick(4) == (a1, b1, a2)
    assert cache.pick(1) == (a1, b1)
    cache.taken(a1)
    assert cache.pick(4) == (b1, a2)


def test_owners_interleaved_keep_submission_order_through_starts_from_the_middle() -> None:
    cache = QueueCache()
    records = [rec(owner) for owner in (1, 2, 3, 1, 2, 3, 1, 2, 3)]
    read(cache, records[:4], size=64)
    for record in records[4:]:
        cache.submitted(record)
    cache.taken(records[4])  # owner 2's second, while its first still waits
    cache.taken(records[2])  # owner 3's first
    assert cache.pick(2) == (records[0], records[1], records[3], records[5], records[7], records[8])
    for record in records:
        cache.taken(record)  # a record taken twice or never listed is ignored
    assert cache.pick(2) == ()


def test_an_owner_cut_by_the_read_is_read_again_when_its_copy_runs_short() -> None:
    cache = QueueCache()
    first, second = rec(1), rec(1)
    read(cache, [first, second], size=2)  # owner 1 filled the read: the journal may hold more
    cache.submitted(rec(1))  # newer than the ones not read: not listed ahead of them
    assert cache.pick(2) == (first, second)
    cache.taken(first)
    assert cache.pick(2) is None


def test_anything_unseen_makes_it_read_again_even_during_a_read() -> None:
    cache = QueueCache()
    read(cache, [rec()], size=64)
    cache.stale()
    assert cache.pick(4) is None
    cache.begin_read()
    cache.stale()  # e.g. a schedule fired while the read was in flight
    assert not cache.end_read((rec(),), 64)  # nothing is started from what it listed
    assert cache.pick(4) is None


def test_a_submit_acknowledged_during_a_read_is_kept_and_a_failed_read_keeps_nothing() -> None:
    cache = QueueCache()
    old, new = rec(), rec()
    cache.begin_read()
    cache.submitted(new)  # committed after the read's snapshot
    assert cache.end_read((old,), 64)
    assert cache.pick(4) == (old, new)
    cache.begin_read()
    cache.end_read(None, 64)
    assert cache.pick(4) is None


pytestmark_anyio = pytest.mark.anyio


async def submit(journal: Journal, supervisor: Supervisor, owner_uid: int) -> TaskRecord:
    """As the API's submit does: the id held back while it is committed and announced."""
    supervisor.accepting.add(task_id := new_task_id())
    try:
        record, _ = await journal.tasks.submit(
            TaskSpec(instruction="x"), owner_uid=owner_uid, task_id=task_id
        )
        supervisor.notify_submitted(record)
    finally:
        supervisor.accepting.discard(task_id)
    return record


def one_task_at_a_time(journal: Journal) -> tuple[Supervisor, FakeExecutor]:
    """A supervisor that runs one task at a time on a fake executor the test drives."""
    executor = FakeExecutor()
    options = SupervisorOptions(max_concurrent_tasks=1)
    return Supervisor(journal, placeholder_payload, ExecSpawner(), options, executor=executor), executor


async def the_next_task_starts_and_not(
    held_id: str, journal: Journal, supervisor: Supervisor, executor: FakeExecutor
) -> None:
    """A task submitted now starts and ends, `held_id` never started; then the supervisor drains."""
    after = await submit(journal, supervisor, owner_uid=1)
    (await wait_run_started(executor, after.task_id)).finish.set()
    with anyio.fail_after(BOUND_S):
        await supervisor.terminal_event(after.task_id).wait()
    assert held_id not in executor.runs
    supervisor.drain()
    with anyio.fail_after(BOUND_S):
        await supervisor.wait_drained()


def count_reads(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    real = journal.tasks.next_queued

    async def counted(per_owner: int, day_now: float | None = None) -> Any:
        reads.append(per_owner)
        return await real(per_owner, day_now)

    monkeypatch.setattr(journal.tasks, "next_queued", counted)
    return reads


@pytestmark_anyio
async def test_acknowledged_tasks_start_in_order_without_a_read_each(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = count_reads(journal, monkeypatch)
    supervisor, executor = one_task_at_a_time(journal)
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.serve)
        ids = []
        for _ in range(6):
            ids.append((await submit(journal, supervisor, owner_uid=1)).task_id)
        for task_id in ids:  # one at a time, in submission order
            run = await wait_run_started(executor, task_id)
            assert set(executor.runs) == set(ids[: ids.index(task_id) + 1])
            run.finish.set()
            with anyio.fail_after(BOUND_S):
                await supervisor.terminal_event(task_id).wait()
        supervisor.drain()
        with anyio.fail_after(BOUND_S):
            await supervisor.wait_drained()
        tg.cancel_scope.cancel()
    assert len(reads) <= 2  # the first pass, and perhaps one racing the first submit


@pytestmark_anyio
async def test_a_task_queued_unannounced_or_cancelled_while_cached_is_handled(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor, executor = one_task_at_a_time(journal)
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.serve)
        first = await submit(journal, supervisor, owner_uid=1)
        first_run = await wait_run_started(executor, first.task_id)
        cancelled = await submit(journal, supervisor, owner_uid=1)
        await supervisor.cancel(cancelled.task_id, "changed my mind")
        second = await submit(journal, supervisor, owner_uid=1)
        first_run.finish.set()
        second_run = await wait_run_started(executor, second.task_id)
        with anyio.fail_after(BOUND_S):
            await supervisor.terminal_event(first.task_id).wait()
        supervisor.notify_submitted(first)  # announced late (not held back): never listed again
        # Queued behind the scheduler's back (no notify at all) while its copy is trusted: found
        # by the read after a wake nothing caused, within about a second, as before the copy.
        unannounced, _ = await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=2)
        second_run.finish.set()
        (await wait_run_started(executor, unannounced.task_id)).finish.set()
        with anyio.fail_after(BOUND_S):
            await supervisor.terminal_event(unannounced.task_id).wait()
        assert cancelled.task_id not in executor.runs
        assert len(executor.runs) == 3 and executor.runs[first.task_id] is first_run  # none twice
        supervisor.drain()
        with anyio.fail_after(BOUND_S):
            await supervisor.wait_drained()
        tg.cancel_scope.cancel()
    ended = await journal.tasks.get(cancelled.task_id)
    assert ended is not None and ended.state == "terminal"


@pytestmark_anyio
async def test_a_task_forgotten_while_held_back_is_not_started_from_the_copy(journal: Journal) -> None:
    supervisor, executor = one_task_at_a_time(journal)
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.serve)
        blocker = await submit(journal, supervisor, owner_uid=1)
        blocker_run = await wait_run_started(executor, blocker.task_id)
        # As the API's submit whose executor refused the task: committed, held back, forgotten.
        supervisor.accepting.add(held_id := new_task_id())
        await journal.tasks.submit(TaskSpec(instruction="held"), owner_uid=1, task_id=held_id)
        supervisor.notify_submitted()  # some other path: the scheduler reads, and sees it held
        blocker_run.finish.set()
        with anyio.fail_after(BOUND_S):
            await supervisor.terminal_event(blocker.task_id).wait()
        assert await journal.tasks.forget_queued(held_id)
        supervisor.queue_changed()
        supervisor.accepting.discard(held_id)
        await the_next_task_starts_and_not(held_id, journal, supervisor, executor)
        tg.cancel_scope.cancel()


@pytestmark_anyio
async def test_a_read_that_went_stale_in_flight_is_not_started_from(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read lists a held-back task; while it is in flight the task is forgotten and let go.
    The read's result is then a copy of a queue that no longer exists: nothing starts from it."""
    real = journal.tasks.next_queued
    reading, release = anyio.Event(), anyio.Event()

    async def slow(per_owner: int, day_now: float | None = None) -> Any:
        read = await real(per_owner, day_now)
        if not release.is_set():
            reading.set()
            await release.wait()
        return read

    supervisor, executor = one_task_at_a_time(journal)
    supervisor.accepting.add(held_id := new_task_id())
    await journal.tasks.submit(TaskSpec(instruction="held"), owner_uid=1, task_id=held_id)
    monkeypatch.setattr(journal.tasks, "next_queued", slow)
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.serve)
        with anyio.fail_after(BOUND_S):
            await reading.wait()  # the scheduler's read has listed the held-back task
        assert await journal.tasks.forget_queued(held_id)
        supervisor.queue_changed()
        supervisor.accepting.discard(held_id)
        release.set()
        await the_next_task_starts_and_not(held_id, journal, supervisor, executor)
        tg.cancel_scope.cancel()
