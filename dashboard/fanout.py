"""One follow of the daemon per live task, however many pages watch it, pushing to every page both
the task's events and its summary.

A page first takes the events it has not seen from the task's shared cache (`task_cache.py`, read
from the daemon only past what it holds), then the live ones from a pump shared by every page of
the task, skipping what its backlog already held. The pump feeds the cache, formats each event once
for all pages, and pushes a new summary (view, tree, timeline) at most every `SUMMARY_EVERY_S`
while events arrive, so no page asks the daemon anything while it watches. The pump starts with the
first page done reading its backlog, and stops when the task ends or its last page leaves.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentd.api.async_port import DaemonPort
from agentd.errors import ApiClientError
from dashboard.shared_reads import TaskLists
from dashboard.task_cache import TaskSummaries
from protocol.api import EventView, TaskView

SUMMARY_EVERY_S = 0.5  # while events arrive, the pages' summary is pushed at most this often


@dataclass(frozen=True, slots=True)
class Push:
    """One server-sent message for the pages: an event (`seq` > 0), a summary, or the last one."""

    text: str
    seq: int = 0
    last: bool = False


def event_push(event: EventView) -> Push:
    return Push(f"id: {event.seq}\ndata: {event.model_dump_json()}\n\n", seq=event.seq)


def summary_push(summary_json: str) -> Push:
    return Push(f"event: summary\ndata: {summary_json}\n\n")


def end_push(view: TaskView) -> Push:
    return Push(f"event: end\ndata: {view.model_dump_json()}\n\n", last=True)


def failed_push(exc: ApiClientError) -> Push:
    return Push(f"event: failed\ndata: {json.dumps({'error': exc.message})}\n\n", last=True)


@dataclass(slots=True)
class _Shared:
    task_id: str
    pages: set[MemoryObjectSendStream[Push]] = field(default_factory=set)
    pump: anyio.CancelScope | None = None
    changed: anyio.Event = field(default_factory=anyio.Event)  # events since the last summary


class TaskStreams:
    """The live streams of the tasks the pages show, over the daemon at `port`.

    `attach` gives it the task group its pumps run in (the server's); without one, each page
    follows the daemon by itself (and gets no summaries: it asks for them).
    """

    def __init__(self, port: DaemonPort, summaries: TaskSummaries | None = None) -> None:
        self._port = port
        self.summaries = summaries or TaskSummaries(port)
        self.lists = TaskLists(port)
        self._group: anyio.abc.TaskGroup | None = None
        self._shared: dict[str, _Shared] = {}

    def attach(self, group: anyio.abc.TaskGroup) -> None:
        self._group = group
        self.lists.attach(group)

    async def follow(self, task_id: str, after_seq: int) -> AsyncIterator[Push]:
        """The task's events after `after_seq` and its summaries as they change, then the task as
        it ended (or the daemon's error)."""
        if self._group is None:
            async for push in self._follow_alone(task_id, after_seq):
                yield push
            return
        async with self._page(task_id) as (shared, live):
            backlog, view = await self.summaries.backlog(task_id, after_seq)
            last = after_seq
            for event in backlog:
                last = event.seq
                yield event_push(event)
            if view is not None and view.state == "terminal":
                yield end_push(view)
                return
            if shared.pump is None:
                shared.pump = anyio.CancelScope()
                self.summaries.following(task_id, True)  # before any await: the pump feeds it now
                self._group.start_soon(self._pump, shared, self.summaries.last_seq(task_id))
            async for push in live:
                if push.seq and push.seq <= last:
                    continue
                last = max(last, push.seq)
                yield push
                if push.last:
                    return

    async def _follow_alone(self, task_id: str, after_seq: int) -> AsyncIterator[Push]:
        async with self._port.open_follow(task_id, after_seq) as followed:
            async for item in followed:
                if isinstance(item, EventView):
                    yield event_push(item)
                    continue
                yield end_push(item) if isinstance(item, TaskView) else failed_push(item)
                return

    @asynccontextmanager
    async def _page(self, task_id: str) -> AsyncIterator[tuple[_Shared, MemoryObjectReceiveStream[Push]]]:
        shared = self._shared.setdefault(task_id, _Shared(task_id))
        send, receive = anyio.create_memory_object_stream[Push](max_buffer_size=math.inf)
        shared.pages.add(send)
        try:
            with receive:
                yield shared, receive
        finally:
            shared.pages.discard(send)
            send.close()
            if not shared.pages:
                if shared.pump is not None:
                    shared.pump.cancel()
                if self._shared.get(task_id) is shared:
                    del self._shared[task_id]

    async def _pump(self, shared: _Shared, after_seq: int) -> None:
        assert shared.pump is not None
        task_id = shared.task_id
        with shared.pump:
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._push_summaries, shared)
                    await self._relay(shared, after_seq)
                    group.cancel_scope.cancel()
            except ApiClientError as exc:
                self._hand(shared, failed_push(exc))
            finally:
                self.summaries.following(task_id, False)
                if self._shared.get(task_id) is shared:
                    del self._shared[task_id]  # the next page starts a pump of its own

    async def _relay(self, shared: _Shared, after_seq: int) -> None:
        """Hand the follow's events to the pages until the task ends (with its last summary)."""
        task_id = shared.task_id
        async with self._port.open_follow(task_id, after_seq) as followed:
            async for item in followed:
                if isinstance(item, EventView):
                    for event in self.summaries.add_live(task_id, (item,)):
                        self._hand(shared, event_push(event))
                    shared.changed.set()
                    continue
                if isinstance(item, ApiClientError):
                    raise item
                with anyio.move_on_after(SUMMARY_EVERY_S * 4):
                    try:
                        self._hand(shared, summary_push(await self.summaries.refreshed(task_id)))
                    except ApiClientError:
                        pass  # the pages read it again on their own after the end
                self._hand(shared, end_push(item))
                return

    async def _push_summaries(self, shared: _Shared) -> None:
        """While events arrive, a new summary for the pages at most every `SUMMARY_EVERY_S`."""
        while True:
            await shared.changed.wait()
            shared.changed = anyio.Event()
            try:
                self._hand(shared, summary_push(await self.summaries.refreshed(shared.task_id)))
            except ApiClientError:
                pass  # the follow says what became of the daemon
            await anyio.sleep(SUMMARY_EVERY_S)

    @staticmethod
    def _hand(shared: _Shared, push: Push) -> None:
        for page in list(shared.pages):
            try:
                page.send_nowait(push)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                shared.pages.discard(page)
