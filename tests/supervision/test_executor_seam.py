"""The `Executor` seam in the supervisor, with a stand-in remote executor (no processes): the
supervisor runs what the executor starts and records its one result; a run that detaches (a
front door's drain) leaves the task unrecorded for the next daemon; recovery asks the executor;
a task whose submit the executor has not accepted yet is not taken from the queue."""

from __future__ import annotations

import anyio
import pytest

from agentd.journal.records import new_task_id
from agentd.journal.store import Journal
from agentd.spawning.spawner import ExecSpawner
from agentd.supervision.executor import LocalExecutor
from agentd.supervision.supervisor import Supervisor, SupervisorOptions
from protocol.api import TaskSpec
from protocol.result import TerminalStatus
from tests.support.fake_executor import BOUND_S, FakeExecutor, placeholder_payload, wait_run_started

pytestmark = pytest.mark.anyio


async def test_the_supervisor_records_the_result_of_the_run_its_executor_started(journal: Journal) -> None:
    executor = FakeExecutor()
    supervisor = Supervisor(journal, placeholder_payload, ExecSpawner(), executor=executor)
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.serve)
        record, _ = await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=1)
        supervisor.notify_submitted()
        (await wait_run_started(executor, record.task_id)).finish.set()
        with anyio.fail_after(BOUND_S):
            await supervisor.terminal_event(record.task_id).wait()
        supervisor.drain()
        await supervisor.wait_drained()
        tg.cancel_scope.cancel()
    ended = await journal.tasks.get(record.task_id)
    assert ended is not None and (ended.status, ended.result) == (TerminalStatus.COMPLETED, "remote")


async def test_a_run_that_detaches_at_the_drain_is_left_for_recovery_which_asks_the_executor(
    journal: Journal,
) -> None:
    executor = FakeExecutor()
    supervisor = Supervisor(journal, placeholder_payload, ExecSpawner(), executor=executor)
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.serve)
        record, _ = await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=1)
        supervisor.notify_submitted()
        await wait_run_started(executor, record.task_id)
        await journal.tasks.mark_starting(record.task_id)  # what a real remote run does first
        supervisor.drain()
        with anyio.fail_after(BOUND_S):
            await supervisor.wait_drained()
        tg.cancel_scope.cancel()
    assert executor.runs[record.task_id].cancels == [("agentd is shutting down", "drain")]
    left = await journal.tasks.get(record.task_id)
    assert left is not None and left.state == "starting"  # not recorded: it goes on elsewhere
    # The next front door requeues it (a retry policy of 1 would have ended a local task crashed).
    again = Supervisor(journal, placeholder_payload, ExecSpawner(), executor=FakeExecutor())
    assert await again.recover() == [record.task_id]
    requeued = await journal.tasks.get(record.task_id)
    assert requeued is not None and requeued.state == "queued"


async def test_a_worker_never_requeues_what_its_previous_process_left(journal: Journal) -> None:
    spec = TaskSpec.model_validate({"instruction": "x", "retry": {"max_attempts": 3}})
    record, _ = await journal.tasks.submit(spec, owner_uid=1)
    await journal.tasks.mark_starting(record.task_id)
    worker = Supervisor(journal, placeholder_payload, ExecSpawner(), executor=LocalExecutor(requeue=False))
    await worker.recover()
    ended = await journal.tasks.get(record.task_id)
    assert ended is not None and ended.status is TerminalStatus.CRASHED
    local = Supervisor(journal, placeholder_payload, ExecSpawner())
    assert local.executor.requeue_on_recovery(record)  # the default: today's behaviour


async def test_a_task_not_yet_accepted_by_its_executor_is_not_taken_from_the_queue(journal: Journal) -> None:
    executor = FakeExecutor()
    supervisor = Supervisor(
        journal,
        placeholder_payload,
        ExecSpawner(),
        SupervisorOptions(max_concurrent_tasks=2),
        executor=executor,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.serve)
        # As the API's submit does: the id is named, and held back, before the task is committed.
        supervisor.accepting.add(held_id := new_task_id())
        held, _ = await journal.tasks.submit(TaskSpec(instruction="held"), owner_uid=1, task_id=held_id)
        assert held.task_id == held_id
        other, _ = await journal.tasks.submit(TaskSpec(instruction="other"), owner_uid=1)
        supervisor.notify_submitted()
        await wait_run_started(executor, other.task_id)
        # The same pass of the scheduler that took `other` saw `held` first and left it.
        assert held.task_id not in executor.runs
        supervisor.accepting.discard(held.task_id)
        supervisor.notify_submitted()
        await wait_run_started(executor, held.task_id)
        for run in executor.runs.values():
            run.finish.set()
        supervisor.drain()
        with anyio.fail_after(BOUND_S):
            await supervisor.wait_drained()
        tg.cancel_scope.cancel()
