"""Reads the pages of one dashboard repeat are shared: a node's transcript is extended with only
the steps after the last one held, and a page of the task list is read once for every page that
shows it within a second."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import pytest

from agentd.api.async_port import DaemonPort
from dashboard.shared_reads import TaskLists, Transcripts
from protocol.api import ListParams, TaskView, TranscriptParams, TranscriptStep, TranscriptView

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _step(seq: int) -> TranscriptStep:
    return TranscriptStep.model_validate(
        {"seq": seq, "ts": float(seq), "item": {"kind": "start", "call_id": f"c{seq}", "name": "x"}}
    )


class TranscriptPort:
    """A live node whose transcript grows by two steps per read (it ends at the third)."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []

    async def call(self, request: Any) -> Any:
        params = request.params
        self.asked.append((params.after_seq, params.limit))
        await anyio.sleep(0.01)
        first = params.after_seq + 1
        steps = [_step(seq) for seq in (first, first + 1)][: params.limit]
        state = "terminal" if len(self.asked) >= 3 else "running"
        return TranscriptView(
            task_id=params.task_id, handle=params.handle, state=state, instruction="i",
            handles=["0"], steps=steps, next_seq=steps[-1].seq, more=False,
        )  # fmt: skip


async def test_a_transcript_is_read_once_for_pages_asking_together_then_only_newer_steps() -> None:
    port = TranscriptPort()
    now = [0.0]
    transcripts = Transcripts(cast(DaemonPort, port), fresh_s=1.0, clock=lambda: now[0])
    params = TranscriptParams(task_id="t_1", limit=10)
    seen: list[list[int]] = []

    async def page() -> None:
        seen.append([step.seq for step in (await transcripts.page(params)).steps])

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(page)
    assert seen == [[1, 2]] * 5 and port.asked == [(0, 10)]
    now[0] = 2.0
    assert [s.seq for s in (await transcripts.page(params)).steps] == [1, 2, 3, 4]
    now[0] = 4.0
    ended = await transcripts.page(params)
    assert [s.seq for s in ended.steps] == [1, 2, 3, 4, 5, 6] and ended.next_seq == 6
    assert port.asked == [(0, 10), (2, 8), (4, 6)]
    now[0] = 100.0
    await transcripts.page(params)  # ended and all read: never read again
    assert len(port.asked) == 3
    # A later page is asked of the daemon as given.
    await transcripts.page(params.model_copy(update={"after_seq": 4}))
    assert port.asked[-1] == (4, 10)


class ListPort:
    """The daemon's list, and its watch of the caller's tasks (fed by `change`)."""

    def __init__(self) -> None:
        self.asked: list[ListParams] = []
        self.send, self.changes = anyio.create_memory_object_stream[Any](10)
        self.watching = anyio.Event()

    async def call(self, request: Any) -> Any:
        self.asked.append(request.params)
        await anyio.sleep(0.01)
        return [TaskView(task_id="t_1", run_id="r", owner_uid=0, state="running", trigger="inbox")]

    @asynccontextmanager
    async def open_watch(self, task_ids: list[str]) -> AsyncIterator[Any]:
        self.watching.set()
        yield self.changes


async def test_a_page_of_the_list_is_read_once_for_every_page_showing_it_until_a_task_changes() -> None:
    port = ListPort()
    now = [0.0]
    lists = TaskLists(cast(DaemonPort, port), fresh_s=1.0, clock=lambda: now[0])
    inbox = ListParams(trigger="inbox")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as server:
            lists.attach(server)
            await lists.page(inbox)  # the first read starts the watch, from the tasks it found
            await port.watching.wait()
            await lists.page(inbox)  # the watch has not answered yet: nothing is kept
            assert len(port.asked) == 2
            await port.send.send(TaskView(task_id="t_1", run_id="r", owner_uid=0, state="running"))
            await anyio.wait_all_tasks_blocked()
            async with anyio.create_task_group() as group:
                for _ in range(10):
                    group.start_soon(lists.page, inbox)
            await lists.page(ListParams(state="running"))  # another filter: a read of its own
            assert port.asked == [inbox, inbox, inbox, ListParams(state="running")]
            now[0] = 1.5  # too old: its steps and tokens may have changed
            await lists.page(inbox)
            assert len(port.asked) == 5
            await port.send.send(TaskView(task_id="t_2", run_id="r", owner_uid=0, state="queued"))
            await anyio.wait_all_tasks_blocked()
            await lists.page(inbox)  # fresh, but a task changed since: read again
            assert len(port.asked) == 6
            await lists.page(inbox)
            assert len(port.asked) == 6
            server.cancel_scope.cancel()


async def test_without_the_servers_task_group_each_list_is_read_as_asked() -> None:
    port = ListPort()
    lists = TaskLists(cast(DaemonPort, port))
    await lists.page(ListParams())
    await lists.page(ListParams())
    assert len(port.asked) == 2 and not port.watching.is_set()
