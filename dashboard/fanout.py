"""One follow of the daemon per task, however many pages watch it: each page reads the events it
has not seen once (its backlog), then takes the live ones from a pump shared by every page of the
task, skipping what its backlog already held. The pump starts with the first page done reading its
backlog, from the newest event that page saw, and stops when the task ends or its last page leaves.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentd.api.async_port import DaemonPort, Followed
from agentd.errors import ApiClientError
from protocol.api import EventView, TaskView


@dataclass(slots=True)
class _Shared:
    task_id: str
    pages: set[MemoryObjectSendStream[Followed]] = field(default_factory=set)
    pump: anyio.CancelScope | None = None


class TaskStreams:
    """The live event streams of the tasks the pages show, over the daemon at `port`.

    `attach` gives it the task group its pumps run in (the server's); without one, each page
    follows the daemon by itself.
    """

    def __init__(self, port: DaemonPort) -> None:
        self._port = port
        self._group: anyio.abc.TaskGroup | None = None
        self._shared: dict[str, _Shared] = {}

    def attach(self, group: anyio.abc.TaskGroup) -> None:
        self._group = group

    async def follow(self, task_id: str, after_seq: int) -> AsyncIterator[Followed]:
        """The task's events after `after_seq`, then the task as it ended (or the daemon's error)."""
        if self._group is None:
            async with self._port.open_follow(task_id, after_seq) as followed:
                async for item in followed:
                    yield item
            return
        async with self._page(task_id) as (shared, live):
            backlog, view = await self._port.events(task_id, after_seq)
            last = after_seq
            for event in backlog:
                last = event.seq
                yield event
            if view.state == "terminal":
                yield view
                return
            if shared.pump is None:
                shared.pump = anyio.CancelScope()
                self._group.start_soon(self._pump, shared, last)
            async for item in live:
                if isinstance(item, EventView):
                    if item.seq > last:
                        last = item.seq
                        yield item
                    continue
                yield item
                return

    @asynccontextmanager
    async def _page(self, task_id: str) -> AsyncIterator[tuple[_Shared, MemoryObjectReceiveStream[Followed]]]:
        shared = self._shared.setdefault(task_id, _Shared(task_id))
        send, receive = anyio.create_memory_object_stream[Followed](max_buffer_size=math.inf)
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
        with shared.pump:
            try:
                async with self._port.open_follow(shared.task_id, after_seq) as followed:
                    async for item in followed:
                        self._hand(shared, item)
                        if not isinstance(item, EventView):
                            return
            except ApiClientError as exc:
                self._hand(shared, exc)
            finally:
                if self._shared.get(shared.task_id) is shared:
                    del self._shared[shared.task_id]  # the next page starts a pump of its own

    @staticmethod
    def _hand(shared: _Shared, item: Followed | TaskView) -> None:
        for page in list(shared.pages):
            try:
                page.send_nowait(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                shared.pages.discard(page)
