"""Nodes: a task's tree is recorded as it grows and stays readable after the task ends."""

from __future__ import annotations

import pytest

from agentd.errors import InvalidTransition, NodeNotFound, TaskNotFound
from agentd.journal.records import NodeEnd
from agentd.journal.store import Journal
from protocol.api import NodeView, TaskSpec
from protocol.result import RunUsage, TerminalStatus

pytestmark = pytest.mark.anyio


async def new_task(journal: Journal) -> str:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=1)
    return record.task_id


async def test_a_tree_is_recorded_and_outlives_its_task(journal: Journal) -> None:
    task = await new_task(journal)
    await journal.tasks.upsert_node(task, "0", parent=None, depth=0, grant_steps=50, grant_tokens=10_000)
    await journal.tasks.upsert_node(task, "0.1", parent="0", depth=1, grant_steps=10)
    running = await journal.tasks.upsert_node(
        task, "0", parent=None, depth=0, state="running", pid=77, pid_start_time=9.5
    )
    assert (running.state, running.pid, running.grant_steps) == ("running", 77, 50)

    usage = RunUsage(tokens_in=3, tokens_out=4, steps=1)
    child = await journal.tasks.end_node(task, "0.1", TerminalStatus.COMPLETED, usage)
    assert (child.state, child.status, child.usage) == ("terminal", TerminalStatus.COMPLETED, usage)
    assert child.ended_at is not None
    await journal.tasks.end_node(task, "0", TerminalStatus.COMPLETED)
    await journal.tasks.mark_terminal(task, TerminalStatus.COMPLETED)

    tree = await journal.tasks.nodes(task)
    assert [(n.handle, n.parent, n.depth, n.state) for n in tree] == [
        ("0", None, 0, "terminal"),
        ("0.1", "0", 1, "terminal"),
    ]
    assert tree[0].pid == 77
    assert tree[1].to_view() == NodeView(
        handle="0.1",
        parent="0",
        depth=1,
        status=TerminalStatus.COMPLETED,
        state="terminal",
        usage=usage,
        grant_steps=10,
    )


async def test_the_root_can_end_in_the_same_commit_as_its_task(journal: Journal) -> None:
    task = await new_task(journal)
    await journal.tasks.mark_starting(task)
    await journal.tasks.mark_running(task, pid=77, pid_start_time=9.5)
    own = RunUsage(tokens_in=3, tokens_out=4, steps=1)
    ended = await journal.tasks.mark_terminal(
        task,
        TerminalStatus.EXHAUSTED_STEPS,
        usage=own + own,
        root=NodeEnd(TerminalStatus.EXHAUSTED_STEPS, own),
    )
    (root,) = await journal.tasks.nodes(task)
    # One write: the node ended at the task's own instant, with its own usage (not the tree's).
    assert (root.state, root.status, root.usage, root.pid) == (
        "terminal",
        TerminalStatus.EXHAUSTED_STEPS,
        own,
        77,
    )
    assert root.ended_at == ended.ended_at and ended.usage == own + own


async def test_a_root_already_ended_keeps_its_own_end_when_the_task_ends(journal: Journal) -> None:
    task = await new_task(journal)
    await journal.tasks.mark_starting(task)
    first = await journal.tasks.end_node(task, "0", TerminalStatus.CRASHED)
    await journal.tasks.mark_terminal(
        task, TerminalStatus.CANCELLED, root=NodeEnd(TerminalStatus.CANCELLED, RunUsage())
    )
    (root,) = await journal.tasks.nodes(task)
    assert (root.status, root.ended_at) == (TerminalStatus.CRASHED, first.ended_at)


async def test_an_ended_node_is_not_revived_or_ended_twice(journal: Journal) -> None:
    task = await new_task(journal)
    await journal.tasks.upsert_node(task, "0", parent=None, depth=0)
    await journal.tasks.end_node(task, "0", TerminalStatus.CRASHED)

    with pytest.raises(InvalidTransition):
        await journal.tasks.upsert_node(task, "0", parent=None, depth=0, state="running")
    with pytest.raises(InvalidTransition):
        await journal.tasks.end_node(task, "0", TerminalStatus.COMPLETED)
    assert (await journal.tasks.nodes(task))[0].status is TerminalStatus.CRASHED


async def test_nodes_of_unknown_tasks_or_handles_are_refused(journal: Journal) -> None:
    task = await new_task(journal)
    with pytest.raises(TaskNotFound):
        await journal.tasks.upsert_node("t_unknown", "0", parent=None, depth=0)
    with pytest.raises(NodeNotFound):
        await journal.tasks.end_node(task, "9", TerminalStatus.COMPLETED)
    assert await journal.tasks.nodes(task) == ()
