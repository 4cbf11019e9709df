"""A task parked on an approval request: queued, shown `awaiting_approval`, and left out of the
scheduler's pick while the request is pending, until its decision or its `parked_until`."""

from __future__ import annotations

import time

import pytest

from agentd.journal.store import Journal, TaskRecord
from protocol.api import TaskSpec

pytestmark = pytest.mark.anyio


async def _parked_on_a_request(journal: Journal, *, until: float) -> tuple[TaskRecord, str]:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="merge it"), owner_uid=1)
    await journal.tasks.mark_starting(record.task_id)
    await journal.tasks.mark_running(record.task_id, pid=1, pid_start_time=1.0)
    request, _ = await journal.approvals.open(
        task_id=record.task_id,
        run_id=record.run_id,
        handle="0",
        owner_uid=1,
        tool_call_id="c1",
        server="gh",
        tool="merge",
        arguments={"pr": 7},
        instruction="merge it",
        timeout_s=3600,
        busy=frozenset(),
    )
    parked = await journal.tasks.park(record.task_id, waiting=(request.call_id, until))
    return parked, request.call_id


async def _picked(journal: Journal) -> list[str]:
    return [t.task_id for t in await journal.tasks.next_queued(10)]


async def test_a_parked_task_waits_for_its_decision_not_for_a_slot(journal: Journal) -> None:
    parked, call_id = await _parked_on_a_request(journal, until=time.time() + 3600)
    assert parked.state == "queued" and parked.resumes == 1
    assert parked.to_view().state == "awaiting_approval"
    other, _ = await journal.tasks.submit(TaskSpec(instruction="something else"), owner_uid=1)
    assert await _picked(journal) == [other.task_id]
    await journal.approvals.decide(call_id, "approved", decided_by=1)
    assert await _picked(journal) == [parked.task_id, other.task_id]
    started = await journal.tasks.mark_starting(parked.task_id)
    assert (started.parked_call, started.parked_until) == (None, None)
    assert started.to_view().state == "starting"


async def test_a_parked_task_is_picked_once_its_wait_is_over_even_if_nobody_decided(journal: Journal) -> None:
    parked, _ = await _parked_on_a_request(journal, until=time.time() - 1)
    assert await _picked(journal) == [parked.task_id]  # it resumes, and its run settles the request


async def test_a_park_without_a_request_is_the_stop_of_the_daemon(journal: Journal) -> None:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="work"), owner_uid=1)
    await journal.tasks.mark_starting(record.task_id)
    parked = await journal.tasks.park(record.task_id)
    assert parked.parked_call is None and parked.to_view().state == "queued"
    assert await _picked(journal) == [record.task_id]
