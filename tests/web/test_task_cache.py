"""The task pages of one dashboard share their reads of the daemon: a summary asked again while
fresh is served again, pages asking at once wait for one read, and the events of a later read are
only those after the last one seen."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest

from agentd.api.async_port import DaemonPort
from dashboard.task_cache import TaskSummaries
from protocol.api import EventView, GetRequest, NodeView, TaskView, TreeRequest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingPort:
    """Stands in for the daemon: a running task whose events grow by two per read."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.asked_after: list[int] = []
        self.seq = 0

    async def call(self, request: Any) -> Any:
        self.calls.append(request.method)
        await anyio.sleep(0.01)  # a read that takes a while: others arrive meanwhile
        if isinstance(request, GetRequest):
            return TaskView(task_id=request.params.task_id, run_id="r", owner_uid=0, state="running")
        assert isinstance(request, TreeRequest)
        return [NodeView(handle="0", parent=None, depth=0)]

    async def events(self, task_id: str, after_seq: int = 0) -> tuple[list[EventView], TaskView]:
        self.asked_after.append(after_seq)
        new = [EventView(seq=self.seq + k, ts=float(self.seq + k), event="loop.step") for k in (1, 2)]
        self.seq += 2
        return new, TaskView(task_id=task_id, run_id="r", owner_uid=0, state="running")


async def test_pages_asking_at_once_share_one_read_and_a_fresh_summary_is_served_again() -> None:
    port = CountingPort()
    now = [0.0]
    summaries = TaskSummaries(cast(DaemonPort, port), fresh_s=0.25, clock=lambda: now[0])
    seen: list[object] = []

    async def page() -> None:
        seen.append((await summaries.summary("t_1"))["last_seq"])

    async with anyio.create_task_group() as group:
        for _ in range(10):
            group.start_soon(page)
    assert seen == [2] * 10
    assert port.calls == ["task.get", "task.tree"]
    now[0] = 0.2
    assert (await summaries.summary("t_1"))["last_seq"] == 2  # still fresh: no read
    now[0] = 0.3
    assert (await summaries.summary("t_1"))["last_seq"] == 4
    assert port.asked_after == [0, 2]  # only the newer events were read


class EndedPort(CountingPort):
    """An ended task with two events."""

    async def call(self, request: Any) -> Any:
        view = await super().call(request)
        return view.model_copy(update={"state": "terminal"}) if isinstance(view, TaskView) else view

    async def events(self, task_id: str, after_seq: int = 0) -> tuple[list[EventView], TaskView]:
        self.asked_after.append(after_seq)
        held = [EventView(seq=s, ts=float(s), event="loop.step") for s in (1, 2) if s > after_seq]
        return held, TaskView(task_id=task_id, run_id="r", owner_uid=0, state="terminal")


async def test_an_ended_tasks_summary_and_events_are_read_until_they_settle_then_served() -> None:
    port = EndedPort()
    now = [0.0]
    summaries = TaskSummaries(cast(DaemonPort, port), fresh_s=0.25, clock=lambda: now[0])
    await summaries.summary("t_1")
    now[0] = 1.5  # past the settling time: one more read, which is then final
    await summaries.summary("t_1")
    reads = len(port.calls)
    now[0] = 100.0
    assert (await summaries.summary("t_1"))["last_seq"] == 2
    events, view = await summaries.backlog("t_1", 1)
    assert [e.seq for e in events] == [2] and view is not None and view.state == "terminal"
    assert len(port.calls) == reads  # neither the summary nor the events were read again
    assert port.asked_after == [0, 2]
