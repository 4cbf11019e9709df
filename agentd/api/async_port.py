"""The daemon's socket API, for an event loop: agentd's synchronous client run in worker threads.

Each call opens its own connection (as the user who started the server: the daemon reads our uid
with `SO_PEERCRED`), so calls never wait on each other. Following a task's events runs in a
thread of its own that re-opens the stream from the last event it saw every `FOLLOW_POLL_S`, so a
follower that is no longer wanted ends within that bound. Watching every task's state
(`task.watch`) holds one connection in a thread that blocks on it, woken by a shutdown of the
socket when the watch is no longer wanted.
"""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentd.api.client import CONNECTION_LOST, TIMED_OUT, ApiClient
from agentd.errors import ApiClientError
from protocol.api import EventsParams, EventsRequest, EventView, Request, TaskView, WatchParams, WatchRequest

ResultT = TypeVar("ResultT")

CALL_TIMEOUT_S = 30.0
# How long a follower's read waits before it looks whether it is still wanted.
FOLLOW_POLL_S = 1.0

Followed = EventView | TaskView | ApiClientError
Watched = TaskView | ApiClientError


class DaemonPort:
    """The daemon at one socket path."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    async def call(self, request: Request[ResultT]) -> ResultT:
        """One request's result.

        Raises:
            ApiClientError: the daemon refused it, or cannot be reached (its message says how to
                start it).
        """
        return await anyio.to_thread.run_sync(self._call, request, abandon_on_cancel=True)

    def _call(self, request: Request[ResultT]) -> ResultT:
        with ApiClient(self.socket_path, timeout_s=CALL_TIMEOUT_S) as client:
            return client.call(request)

    async def events(self, task_id: str, after_seq: int = 0) -> tuple[list[EventView], TaskView]:
        """The task's events after `after_seq`, and the task as it stands after them.

        Raises:
            ApiClientError: as for `call`.
        """
        return await anyio.to_thread.run_sync(self._events, task_id, after_seq, abandon_on_cancel=True)

    def _events(self, task_id: str, after_seq: int) -> tuple[list[EventView], TaskView]:
        events: list[EventView] = []
        request = EventsRequest(params=EventsParams(task_id=task_id, after_seq=after_seq))
        with ApiClient(self.socket_path, timeout_s=CALL_TIMEOUT_S) as client:
            for item in client.stream(request, idle_timeout_s=CALL_TIMEOUT_S):
                if isinstance(item, EventView):
                    events.append(item)
                else:
                    return events, item
        raise ApiClientError(TIMED_OUT, f"the events of {task_id} ended without the task")

    @asynccontextmanager
    async def open_follow(
        self, task_id: str, after_seq: int = 0
    ) -> AsyncIterator[MemoryObjectReceiveStream[Followed]]:
        """A stream of the task's events after `after_seq`, then the task as it ended (or an
        `ApiClientError`)."""
        send, receive = anyio.create_memory_object_stream[Followed](max_buffer_size=math.inf)
        stop = threading.Event()
        token = anyio.lowlevel.current_token()
        follower = _Follower(self.socket_path, task_id, send, stop, token, after_seq)
        thread = threading.Thread(target=follower.run, name=f"follow-{task_id}", daemon=True)
        thread.start()
        try:
            with receive:
                yield receive
        finally:
            stop.set()

    @asynccontextmanager
    async def open_watch(self, task_ids: list[str]) -> AsyncIterator[MemoryObjectReceiveStream[Watched]]:
        """A stream of the caller's tasks as each changes (first those of `task_ids`); it ends
        with an `ApiClientError` if the daemon ends it or cannot be reached."""
        send, receive = anyio.create_memory_object_stream[Watched](max_buffer_size=math.inf)
        watcher = _Watcher(self.socket_path, task_ids, send, anyio.lowlevel.current_token())
        thread = threading.Thread(target=watcher.run, name="watch", daemon=True)
        thread.start()
        try:
            with receive:
                yield receive
        finally:
            watcher.stop()


class _Watcher:
    """The thread that reads one `task.watch` stream and hands each view to the event loop."""

    def __init__(
        self,
        path: str,
        task_ids: list[str],
        send: MemoryObjectSendStream[Watched],
        token: anyio.lowlevel.EventLoopToken,
    ) -> None:
        self._client = ApiClient(path, timeout_s=CALL_TIMEOUT_S)
        self._request = WatchRequest(params=WatchParams(task_ids=task_ids))
        self._send = send
        self._token = token
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        self._client.shutdown()

    def run(self) -> None:
        with self._send, self._client:
            try:
                for view in self._client.watch(self._request):
                    self._hand(view)
                self._hand(ApiClientError(CONNECTION_LOST, "agentd stopped watching (is it stopping?)"))
            except ApiClientError as exc:
                if not self._stopped.is_set():
                    self._hand(exc)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
                pass  # nobody listens any more (the stream closed, or the loop ended)

    def _hand(self, item: Watched) -> None:
        if not self._stopped.is_set():
            anyio.from_thread.run_sync(self._send.send_nowait, item, token=self._token)


class _Follower:
    """The thread that reads one task's event stream and hands each item to the event loop."""

    def __init__(
        self,
        path: str,
        task_id: str,
        send: MemoryObjectSendStream[Followed],
        stop: threading.Event,
        token: anyio.lowlevel.EventLoopToken,
        after_seq: int = 0,
    ) -> None:
        self._path = path
        self._task_id = task_id
        self._send = send
        self._stop = stop
        self._token = token
        self._after_seq = after_seq

    def run(self) -> None:
        with self._send:
            while not self._stop.is_set():
                try:
                    if self._read_until_end():
                        return
                except ApiClientError as exc:
                    if exc.code != TIMED_OUT:
                        self._hand(exc)
                        return
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
                    return  # nobody listens any more (the stream closed, or the loop ended)

    def _read_until_end(self) -> bool:
        request = EventsRequest(
            params=EventsParams(task_id=self._task_id, after_seq=self._after_seq, follow=True)
        )
        with ApiClient(self._path, timeout_s=CALL_TIMEOUT_S) as client:
            for item in client.stream(request, idle_timeout_s=FOLLOW_POLL_S):
                if self._stop.is_set():
                    return True
                if isinstance(item, EventView):
                    self._after_seq = item.seq
                self._hand(item)
                if isinstance(item, TaskView):
                    return True
        return False

    def _hand(self, item: Followed) -> None:
        anyio.from_thread.run_sync(self._send.send_nowait, item, token=self._token)
