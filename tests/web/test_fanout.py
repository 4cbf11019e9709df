"""Pages watching one task share one follow of the daemon: each gets its backlog, then every live
event once and the task's summary as it changes (pushed, never asked for), then the task's end;
the follow stops when the last page leaves."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import pytest

from agentd.api.async_port import DaemonPort
from dashboard.fanout import Push, TaskStreams
from protocol.api import EventView, GetRequest, NodeView, TaskView, TreeRequest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _event(seq: int) -> EventView:
    return EventView(seq=seq, ts=float(seq), event="loop.step")


def _task(state: str) -> TaskView:
    return TaskView.model_validate({"task_id": "t_1", "run_id": "r", "owner_uid": 0, "state": state})


class LivePort:
    """A running task: events 1–3 journaled, 4–6 come live once `go` is set, then the end."""

    def __init__(self) -> None:
        self.follows: list[int] = []
        self.calls: list[str] = []
        self.reads: list[int] = []
        self.followed = anyio.Event()
        self.go = anyio.Event()
        self.left = anyio.Event()

    async def events(self, task_id: str, after_seq: int = 0) -> tuple[list[EventView], TaskView]:
        self.reads.append(after_seq)
        return [_event(s) for s in (1, 2, 3) if s > after_seq], _task("running")

    async def call(self, request: Any) -> Any:
        self.calls.append(request.method)
        if isinstance(request, GetRequest):
            return _task("terminal" if self.go.is_set() else "running")
        assert isinstance(request, TreeRequest)
        return [NodeView(handle="0", parent=None, depth=0)]

    @asynccontextmanager
    async def open_follow(self, task_id: str, after_seq: int = 0) -> AsyncIterator[Any]:
        self.follows.append(after_seq)
        self.followed.set()
        send, receive = anyio.create_memory_object_stream[Any](10)

        async def feed() -> None:
            await self.go.wait()
            for seq in (3, 4, 5, 6):  # 3 again: a follow may overlap what a page has seen
                await send.send(_event(seq))
            await send.send(_task("terminal"))

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(feed)
                yield receive
                group.cancel_scope.cancel()
        finally:
            self.left.set()


def _seen(push: Push) -> object:
    if push.seq:
        return push.seq
    if push.text.startswith("event: summary"):
        return ("summary", json.loads(push.text.split("data: ", 1)[1])["last_seq"])
    return "end" if push.last else push.text


async def test_pages_of_one_task_share_one_follow_and_see_each_event_once() -> None:
    port = LivePort()
    streams = TaskStreams(cast(DaemonPort, port))
    seen: dict[str, list[object]] = {"a": [], "b": []}

    async def page(name: str, after: int) -> None:
        async for push in streams.follow("t_1", after):
            seen[name].append(_seen(push))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            streams.attach(group)
            async with anyio.create_task_group() as pages:
                pages.start_soon(page, "a", 0)
                pages.start_soon(page, "b", 2)
                await anyio.sleep(0.05)
                port.go.set()
            group.cancel_scope.cancel()
    # Each page: its backlog, the live events once, a summary of all six, then the end.
    for name, first in (("a", [1, 2, 3]), ("b", [3])):
        events = [item for item in seen[name] if isinstance(item, int)]
        assert events == [*first, 4, 5, 6], name
        assert seen[name][-2:] == [("summary", 6), "end"], name
    assert port.follows == [3]  # one follow, from the newest event the first page had seen
    # The events were read from the start once; the second page took them from the cache (and
    # read only newer ones, if it came before the follow did).
    assert port.reads in ([0], [0, 3])
    # Summaries (at most one every half second while events arrive, and the last) read only the
    # task and its tree: the follow brought the events.
    assert port.calls.count("task.get") == port.calls.count("task.tree") <= 3


async def test_the_follow_stops_when_the_last_page_leaves() -> None:
    port = LivePort()
    streams = TaskStreams(cast(DaemonPort, port))

    async def page() -> None:
        async for _ in streams.follow("t_1", 0):
            pass

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            streams.attach(group)
            async with anyio.create_task_group() as pages:
                pages.start_soon(page)
                await port.followed.wait()
                pages.cancel_scope.cancel()  # the page closes before anything is live
            await port.left.wait()
            group.cancel_scope.cancel()
