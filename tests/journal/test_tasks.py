"""Tasks in the journal: submit, idempotency, listing and ownership, the lifecycle, the queue."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import anyio
import pytest

from agentd.errors import IdempotencyConflict, InvalidTransition, TaskNotFound
from agentd.journal.store import Journal, TaskRecord, new_run_id, new_task_id, open_journal
from protocol.api import RetryPolicy, TaskSpec
from protocol.result import RunError, RunUsage, TerminalStatus
from tests.journal.conftest import FAST, writer_held

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


def spec(text: str = "do the thing", **extra: object) -> TaskSpec:
    return TaskSpec.model_validate({"instruction": text, **extra})


def test_ids_are_url_safe_and_sort_by_creation_time() -> None:
    ids = [new_task_id() for _ in range(3)]
    assert all(re.fullmatch(r"t_[0-9A-HJKMNP-TV-Z]{26}", i) for i in ids)
    assert re.fullmatch(r"r_[0-9A-HJKMNP-TV-Z]{26}", new_run_id())
    # The first 10 characters encode milliseconds: later ids never sort before earlier ones.
    assert [i[:12] for i in ids] == sorted(i[:12] for i in ids)
    assert len(set(ids)) == 3


async def test_a_submitted_task_is_queued_and_readable(journal: Journal) -> None:
    record, created = await journal.tasks.submit(spec("hello", model="m1", mcp=["fs"]), owner_uid=1000)

    assert created
    assert record.state == "queued"
    assert record.attempts == 0 and record.status is None
    assert await journal.tasks.get(record.task_id) == record
    view = record.to_view()
    assert (view.task_id, view.owner_uid, view.instruction, view.model, view.mcp) == (
        record.task_id,
        1000,
        "hello",
        "m1",
        ["fs"],
    )


async def test_get_of_an_unknown_task_is_none(journal: Journal) -> None:
    assert await journal.tasks.get("t_nope") is None


async def test_list_is_newest_first_and_filters_by_owner_and_state(journal: Journal) -> None:
    a, _ = await journal.tasks.submit(spec("a"), owner_uid=1)
    b, _ = await journal.tasks.submit(spec("b"), owner_uid=2)
    c, _ = await journal.tasks.submit(spec("c"), owner_uid=1)
    await journal.tasks.mark_starting(a.task_id)

    assert [t.task_id for t in await journal.tasks.list()] == [c.task_id, b.task_id, a.task_id]
    assert [t.task_id for t in await journal.tasks.list(owner_uid=1)] == [c.task_id, a.task_id]
    assert [t.task_id for t in await journal.tasks.list(owner_uid=2)] == [b.task_id]
    assert [t.task_id for t in await journal.tasks.list(state="queued")] == [c.task_id, b.task_id]
    assert [t.task_id for t in await journal.tasks.list(owner_uid=1, state="starting")] == [a.task_id]
    assert [t.task_id for t in await journal.tasks.list(limit=1)] == [c.task_id]
    assert await journal.tasks.list(owner_uid=3) == ()


async def test_list_filters_by_trigger_within_the_owners_tasks(journal: Journal) -> None:
    inbox, _ = await journal.tasks.submit(spec("a delivery"), owner_uid=1, trigger="inbox", uri="note://1")
    theirs, _ = await journal.tasks.submit(spec("theirs"), owner_uid=2, trigger="inbox", uri="note://2")
    await journal.tasks.submit(spec("another trigger's"), owner_uid=1, trigger="alerts", uri="note://3")
    await journal.tasks.submit(spec("by hand"), owner_uid=1)

    def ids(records: tuple[TaskRecord, ...]) -> list[str]:
        return [t.task_id for t in records]

    assert ids(await journal.tasks.list(owner_uid=1, trigger="inbox")) == [inbox.task_id]
    # Another owner's deliveries of the same trigger never show; an admin (no owner) sees both.
    assert ids(await journal.tasks.list(owner_uid=2, trigger="inbox")) == [theirs.task_id]
    assert ids(await journal.tasks.list(trigger="inbox")) == [theirs.task_id, inbox.task_id]
    assert ids(await journal.tasks.list(owner_uid=1, trigger="inbox", state="running")) == []
    assert ids(await journal.tasks.list(owner_uid=1, trigger="nothing")) == []
    # A page of one trigger's tasks goes on from its last task.
    assert ids(await journal.tasks.list(trigger="inbox", limit=1, before=theirs.task_id)) == [inbox.task_id]


async def test_a_before_cursor_of_another_users_task_is_a_missing_one(journal: Journal) -> None:
    mine, _ = await journal.tasks.submit(spec("mine"), owner_uid=1)
    theirs, _ = await journal.tasks.submit(spec("theirs"), owner_uid=2)
    # The answer must not tell another user's task id from an unknown one.
    assert await journal.tasks.list(owner_uid=1, before=theirs.task_id) == ()
    assert await journal.tasks.list(owner_uid=1, before="t_unknown") == ()
    assert [t.task_id for t in await journal.tasks.list(owner_uid=2, before=theirs.task_id)] == []
    # An admin's cursor (no owner filter) may be anyone's.
    assert [t.task_id for t in await journal.tasks.list(before=theirs.task_id)] == [mine.task_id]


async def test_the_same_key_from_the_same_uid_returns_the_existing_task(journal: Journal) -> None:
    first, created = await journal.tasks.submit(spec("one"), owner_uid=7, idempotency_key="k1")
    again, created_again = await journal.tasks.submit(spec("one"), owner_uid=7, idempotency_key="k1")

    assert created and not created_again
    assert again == first
    assert len(await journal.tasks.list()) == 1


async def test_the_same_key_with_a_different_spec_is_a_conflict_naming_the_key(journal: Journal) -> None:
    first, _ = await journal.tasks.submit(spec("one"), owner_uid=7, idempotency_key="k1")
    with pytest.raises(IdempotencyConflict) as caught:
        await journal.tasks.submit(spec("two"), owner_uid=7, idempotency_key="k1")

    assert (caught.value.key, caught.value.task_id) == ("k1", first.task_id)
    assert str(caught.value) == (
        f"idempotency key 'k1' was already used for task {first.task_id} with a different spec; "
        "use a new key for a different task"
    )
    assert [t.task_id for t in await journal.tasks.list()] == [first.task_id]
    # The original spec under the same key still returns the original task.
    again, created = await journal.tasks.submit(spec("one"), owner_uid=7, idempotency_key="k1")
    assert again.task_id == first.task_id and not created


async def test_the_same_key_from_another_uid_is_a_different_task(journal: Journal) -> None:
    mine, _ = await journal.tasks.submit(spec(), owner_uid=7, idempotency_key="k1")
    theirs, created = await journal.tasks.submit(spec(), owner_uid=8, idempotency_key="k1")

    assert created
    assert theirs.task_id != mine.task_id


async def test_submits_without_a_key_always_create_tasks(journal: Journal) -> None:
    first, _ = await journal.tasks.submit(spec(), owner_uid=7)
    second, created = await journal.tasks.submit(spec(), owner_uid=7)
    assert created and second.task_id != first.task_id


async def test_concurrent_duplicate_submits_in_one_batch_create_one_task(journal: Journal) -> None:
    results: list[tuple[TaskRecord, bool]] = []

    async def submit() -> None:
        results.append(await journal.tasks.submit(spec(), owner_uid=5, idempotency_key="same"))

    commits_before = journal.stats.commits
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg, writer_held(journal):
            for _ in range(10):
                tg.start_soon(submit)
            await anyio.wait_all_tasks_blocked()

    assert sum(created for _, created in results) == 1
    assert len({record.task_id for record, _ in results}) == 1
    # The parked batch plus exactly one batch holding all ten duplicates.
    assert journal.stats.commits - commits_before == 2


async def test_the_lifecycle_records_each_transition(journal: Journal) -> None:
    record, _ = await journal.tasks.submit(spec(), owner_uid=1)

    starting = await journal.tasks.mark_starting(record.task_id)
    assert starting.state == "starting" and starting.started_at is not None
    running = await journal.tasks.mark_running(record.task_id, pid=4242, pid_start_time=123.5)
    assert (running.state, running.pid, running.pid_start_time) == ("running", 4242, 123.5)
    assert running.executor == "local" and running.worker  # this host's name
    usage = RunUsage(tokens_in=10, tokens_out=5, steps=2, model_calls=2)
    ended = await journal.tasks.mark_terminal(
        record.task_id,
        TerminalStatus.EXHAUSTED_STEPS,
        exit_code=3,
        result={"answer": [1, 2]},
        partial=True,
        usage=usage,
        error=RunError(kind="max_steps", message="ran out of steps"),
    )

    assert ended.state == "terminal"
    assert ended.status is TerminalStatus.EXHAUSTED_STEPS
    assert (ended.exit_code, ended.result, ended.partial, ended.usage) == (3, {"answer": [1, 2]}, True, usage)
    assert ended.error == RunError(kind="max_steps", message="ran out of steps")
    assert ended.ended_at is not None and ended.run_id == record.run_id
    assert await journal.tasks.get(record.task_id) == ended
    assert ended.to_view().status is TerminalStatus.EXHAUSTED_STEPS


async def test_a_queued_task_can_end_without_starting(journal: Journal) -> None:
    record, _ = await journal.tasks.submit(spec(), owner_uid=1)
    ended = await journal.tasks.mark_terminal(record.task_id, TerminalStatus.CANCELLED, exit_code=1)
    assert (ended.state, ended.status, ended.started_at) == ("terminal", TerminalStatus.CANCELLED, None)


async def test_transitions_out_of_order_are_refused(journal: Journal) -> None:
    record, _ = await journal.tasks.submit(spec(), owner_uid=1)

    with pytest.raises(InvalidTransition, match="is queued; cannot move it to running"):
        await journal.tasks.mark_running(record.task_id, pid=1, pid_start_time=1.0)
    await journal.tasks.mark_terminal(record.task_id, TerminalStatus.CANCELLED)
    with pytest.raises(InvalidTransition, match="is terminal"):
        await journal.tasks.mark_terminal(record.task_id, TerminalStatus.COMPLETED)
    with pytest.raises(InvalidTransition):
        await journal.tasks.requeue(record.task_id)
    with pytest.raises(TaskNotFound):
        await journal.tasks.mark_starting("t_missing")
    assert (await journal.tasks.get(record.task_id)) is not None


async def test_a_refused_operation_does_not_fail_the_rest_of_its_batch(journal: Journal) -> None:
    done, _ = await journal.tasks.submit(spec(), owner_uid=1)
    await journal.tasks.mark_terminal(done.task_id, TerminalStatus.COMPLETED)
    outcomes: dict[str, object] = {}

    async def refused() -> None:
        try:
            await journal.tasks.mark_starting(done.task_id)
        except InvalidTransition as exc:
            outcomes["refused"] = exc

    async def accepted(name: str) -> None:
        outcomes[name] = await journal.tasks.submit(spec(name), owner_uid=1)

    commits_before = journal.stats.commits
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg, writer_held(journal):
            tg.start_soon(accepted, "before")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(refused)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(accepted, "after")
            await anyio.wait_all_tasks_blocked()

    assert isinstance(outcomes["refused"], InvalidTransition)
    assert journal.stats.commits - commits_before == 2
    assert {t.spec.instruction for t in await journal.tasks.list()} == {"do the thing", "before", "after"}


async def test_a_bug_in_one_operation_reaches_its_caller_only(journal: Journal) -> None:
    def broken(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO tasks (task_id, run_id, owner_uid, spec, created_at) VALUES ('x', 'r', 1, '{}', 0)"
        )
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        await journal.run_on_writer(broken)
    # The op's partial write was rolled back with its savepoint.
    assert await journal.tasks.get("x") is None
    record, _ = await journal.tasks.submit(spec(), owner_uid=1)
    assert await journal.tasks.get(record.task_id) == record
    assert journal.healthy


async def test_requeue_keeps_the_run_id_and_counts_the_attempt(journal: Journal) -> None:
    record, _ = await journal.tasks.submit(spec(retry=RetryPolicy(max_attempts=2)), owner_uid=1)
    await journal.tasks.mark_starting(record.task_id)
    await journal.tasks.mark_running(record.task_id, pid=99, pid_start_time=5.0)
    assert record.may_requeue

    requeued = await journal.tasks.requeue(record.task_id)

    assert (requeued.state, requeued.run_id, requeued.attempts) == ("queued", record.run_id, 1)
    assert requeued.pid is None and requeued.pid_start_time is None
    assert not requeued.may_requeue


async def test_a_task_requeued_after_its_root_node_ended_starts_again_keeping_its_ended_children(
    journal: Journal,
) -> None:
    # A kill -9 between the root's end and the task's: the task is still `running`, its nodes ended.
    record, _ = await journal.tasks.submit(spec(retry=RetryPolicy(max_attempts=2)), owner_uid=1)
    await journal.tasks.mark_starting(record.task_id)
    await journal.tasks.mark_running(record.task_id, pid=99, pid_start_time=5.0)
    await journal.tasks.upsert_node(record.task_id, "0.1", parent="0", depth=1, grant_steps=5)
    await journal.tasks.end_node(record.task_id, "0.1", TerminalStatus.COMPLETED)
    await journal.tasks.end_node(record.task_id, "0", TerminalStatus.COMPLETED)

    await journal.tasks.requeue(record.task_id)

    assert len(await journal.tasks.nodes(record.task_id)) == 2  # the last run's tree, until the next starts
    started = await journal.tasks.mark_starting(record.task_id)  # the ended root must not block it
    assert started.state == "starting"
    # The root starts again; the nested node that ended stays (its usage is the task's) ...
    assert [(n.handle, n.state) for n in await journal.tasks.nodes(record.task_id)] == [
        ("0", "starting"),
        ("0.1", "terminal"),
    ]
    # ... and starts again only when the resumed run resumes it.
    await journal.tasks.upsert_node(record.task_id, "0.1", parent="0", depth=1, grant_steps=5, revive=True)
    assert [(n.handle, n.state) for n in await journal.tasks.nodes(record.task_id)] == [
        ("0", "starting"),
        ("0.1", "starting"),
    ]


async def test_next_queued_is_fifo_and_unfinished_lists_started_tasks(journal: Journal) -> None:
    tasks = [(await journal.tasks.submit(spec(str(i)), owner_uid=1))[0] for i in range(5)]
    await journal.tasks.mark_starting(tasks[0].task_id)
    await journal.tasks.mark_starting(tasks[2].task_id)
    await journal.tasks.mark_running(tasks[2].task_id, pid=1, pid_start_time=1.0)
    await journal.tasks.mark_starting(tasks[3].task_id)
    await journal.tasks.mark_terminal(tasks[3].task_id, TerminalStatus.CRASHED)

    assert [t.task_id for t in await journal.tasks.next_queued(10)] == [tasks[1].task_id, tasks[4].task_id]
    assert [t.task_id for t in await journal.tasks.next_queued(1)] == [tasks[1].task_id]
    assert [t.task_id for t in await journal.tasks.unfinished()] == [tasks[0].task_id, tasks[2].task_id]
    assert await journal.tasks.counts() == {
        "queued": 2,
        "starting": 1,
        "running": 1,
    }  # finished ones: not counted

    # A requeued task is older than the ones still waiting, so it goes first.
    await journal.tasks.requeue(tasks[0].task_id)
    assert (await journal.tasks.next_queued(1))[0].task_id == tasks[0].task_id


async def test_an_empty_journal_counts_zero_in_every_unfinished_state(journal: Journal) -> None:
    assert await journal.tasks.counts() == {"queued": 0, "starting": 0, "running": 0}


async def test_tasks_survive_a_clean_reopen(state_dir: Path) -> None:
    async with open_journal(state_dir, FAST) as journal:
        record, _ = await journal.tasks.submit(spec(), owner_uid=3, idempotency_key="k")
        running = await journal.tasks.mark_starting(record.task_id)

    async with open_journal(state_dir, FAST) as journal:
        assert await journal.tasks.get(record.task_id) == running
        again, created = await journal.tasks.submit(spec(), owner_uid=3, idempotency_key="k")
        assert not created and again.task_id == record.task_id


async def test_a_remote_run_records_its_executor_and_each_worker_and_no_local_pid(journal: Journal) -> None:
    record, _ = await journal.tasks.submit(spec(), owner_uid=1)
    await journal.tasks.mark_starting(record.task_id)
    running = await journal.tasks.mark_remote_running(record.task_id, executor="temporal", worker="w1@hostA")
    assert (running.state, running.pid, running.executor, running.worker) == (
        "running",
        None,
        "temporal",
        "w1@hostA",
    )
    # A retry of the activity on another worker: still running, now there.
    again = await journal.tasks.mark_remote_running(
        record.task_id, executor="temporal", worker="w2@hostB", resumes=1
    )
    assert (again.worker, again.resumes) == ("w2@hostB", 1)
    # A late heartbeat of the first attempt never takes the count back.
    late = await journal.tasks.mark_remote_running(record.task_id, executor="temporal", worker="w2@hostB")
    assert late.resumes == 1
    assert (await journal.tasks.nodes(record.task_id))[0].state == "running"
    view = again.to_view()
    assert (view.executor, view.worker) == ("temporal", "w2@hostB")


async def test_forget_queued_deletes_only_a_task_no_run_has_claimed(journal: Journal) -> None:
    queued, _ = await journal.tasks.submit(spec(), owner_uid=1, idempotency_key="k")
    journal.append_event(queued.task_id, "task.submitted", {})
    assert await journal.tasks.forget_queued(queued.task_id) is True
    assert await journal.tasks.get(queued.task_id) is None
    # The key is free again: a resubmit creates a new task.
    again, created = await journal.tasks.submit(spec(), owner_uid=1, idempotency_key="k")
    assert created and again.task_id != queued.task_id
    await journal.tasks.mark_starting(again.task_id)
    assert await journal.tasks.forget_queued(again.task_id) is False
    assert (await journal.tasks.get(again.task_id)) is not None
    assert await journal.tasks.forget_queued("no-such-task") is False
