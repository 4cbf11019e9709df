"""`agentd top`'s snapshot, pure: tree order and guides, sorting, totals, human figures."""

from __future__ import annotations

import pytest

from agentd.cli.display import human_age, human_bytes, human_count
from agentd.cli.top_model import (
    LastEvent,
    ProcStats,
    TopNode,
    TopTask,
    health_line,
    sort_tasks,
    top_task,
    totals,
    tree_prefixes,
)
from protocol.api import DaemonStatus, NodeView, TaskView
from protocol.result import RunUsage


def _node(handle: str, state: str = "running", pid: int | None = 100) -> NodeView:
    parent = handle.rpartition(".")[0] or None
    return NodeView(
        handle=handle,
        parent=parent,
        depth=handle.count("."),
        state=state,
        pid=pid,
        usage=RunUsage(tokens_in=10, tokens_out=5, steps=1),
        grant_steps=20,
        grant_tokens=1000,
    )


def test_nodes_come_in_tree_order_with_their_guides() -> None:
    view = TaskView(task_id="t_1", run_id="r_1", owner_uid=0, state="running", started_at=90.0)
    nodes = [_node(h) for h in ("0.10", "0", "0.2.1", "0.2", "0.1")]
    task = top_task(view, nodes, {100: ProcStats(cpu_percent=5.0, rss_bytes=1 << 20)}, {}, now=100.0)
    assert [n.handle for n in task.nodes] == ["0", "0.1", "0.2", "0.2.1", "0.10"]
    assert tree_prefixes(task.nodes) == {
        "0": "",
        "0.1": "├─ ",
        "0.2": "├─ ",
        "0.2.1": "│  └─ ",
        "0.10": "└─ ",
    }
    assert task.age_s == 10.0
    assert task.cpu_percent == 25.0


def test_an_ended_node_shows_no_process_figures() -> None:
    view = TaskView(task_id="t_1", run_id="r_1", owner_uid=0, state="running")
    last = {"0.1": LastEvent(event="subagent.exit", ts=1.0)}
    task = top_task(
        view,
        [_node("0"), _node("0.1", state="terminal", pid=101)],
        {101: ProcStats(cpu_percent=9.0)},
        last,
        now=0,
    )
    ended = task.nodes[1]
    assert (ended.pid, ended.cpu_percent, ended.rss_bytes) == (None, None, None)
    assert ended.last_event == LastEvent(event="subagent.exit", ts=1.0)
    assert totals([task]).subagents == 1


def _task(task_id: str, age: float, cpu: float, tokens: int) -> TopTask:
    node = TopNode(
        handle="0",
        parent=None,
        depth=0,
        state="running",
        status=None,
        pid=1,
        steps=0,
        grant_steps=1,
        tokens=tokens,
        grant_tokens=1,
        cpu_percent=cpu,
        rss_bytes=1,
    )
    return TopTask(task_id=task_id, state="running", instruction="", model=None, age_s=age, nodes=[node])


@pytest.mark.parametrize(
    ("key", "order"),
    [("age", ["old", "mid", "new"]), ("cpu", ["new", "old", "mid"]), ("tokens", ["mid", "new", "old"])],
)
def test_sorting(key: str, order: list[str]) -> None:
    tasks = [_task("new", 1, 50.0, 200), _task("old", 100, 10.0, 1), _task("mid", 10, 5.0, 900)]
    assert [t.task_id for t in sort_tasks(tasks, key)] == order  # type: ignore[arg-type]


def test_human_figures() -> None:
    assert [human_age(s) for s in (None, 5, 75, 7300)] == ["-", "5s", "1m15s", "2h01m"]
    assert [human_bytes(b) for b in (None, 512, 3 << 20, 5 << 30)] == ["-", "512B", "3.0M", "5.0G"]
    assert [human_count(n) for n in (None, 999, 1500, 200_000, 2_500_000)] == [
        "-",
        "999",
        "1.5k",
        "200k",
        "2.5M",
    ]


def test_the_health_line_says_whether_the_zygote_is_warm() -> None:
    status = DaemonStatus(
        pid=7,
        version="1",
        uptime_s=3,
        draining=False,
        queued=0,
        running=0,
        max_concurrent_tasks=8,
        journal_ok=True,
        zygote="starting",
    )
    assert "zygote starting" in health_line(status)
    assert "zygote" not in health_line(status.model_copy(update={"zygote": "off"}))


def test_a_node_awaiting_approval_is_shown_as_such_and_stays_live() -> None:
    # The approval gate's view state: the waiting node's process lives and counts.
    view = TaskView(task_id="t_1", run_id="r_1", owner_uid=0, state="awaiting_approval", started_at=90.0)
    nodes = [_node("0"), _node("0.1", state="awaiting_approval", pid=101)]
    stats = {
        100: ProcStats(cpu_percent=1.0, rss_bytes=1 << 20),
        101: ProcStats(cpu_percent=0.0, rss_bytes=1 << 20),
    }
    task = top_task(view, nodes, stats, {}, now=100.0)
    assert task.state == "awaiting_approval"
    assert [(n.handle, n.state, n.pid) for n in task.nodes] == [
        ("0", "running", 100),
        ("0.1", "awaiting_approval", 101),
    ]
    assert totals([task]).subagents == 2
