"""`TaskWatch`: the server's one `task.watch` stream, however many tasks its clients subscribed
to, each view handed to the listeners of its task.

The stream holds a single daemon connection for the whole server. It is opened when the server
starts and opened again `RETRY_S` after it ends (the daemon restarted, or is away), naming the
watched tasks so that their state at the reopening is told first.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from agentd.api.async_port import DaemonPort
from agentd.errors import ApiClientError
from protocol.api import TaskView

RETRY_S = 1.0
# The most tasks a reopened stream names (the API's bound); the newest ids are named.
NAMED_AT_REOPEN = 1000

Listener = Callable[[TaskView], None]


class TaskWatch:
    """The subscribed tasks of every client of this server, followed on one stream."""

    def __init__(self, port: DaemonPort) -> None:
        self._port = port
        # Invariant: a task id is a key exactly while it has a listener.
        self._listeners: dict[str, set[Listener]] = {}

    def add(self, task_id: str, listener: Listener) -> None:
        """Call `listener` (on the event loop, without awaiting) with each change of the task."""
        self._listeners.setdefault(task_id, set()).add(listener)

    def discard(self, task_id: str, listener: Listener) -> None:
        listeners = self._listeners.get(task_id)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._listeners[task_id]

    async def run(self) -> None:
        """Follow the stream for as long as the server runs (cancel to end)."""
        while True:
            await self._watch_once()
            await anyio.sleep(RETRY_S)

    async def _watch_once(self) -> None:
        named = sorted(self._listeners)[-NAMED_AT_REOPEN:]
        async with self._port.open_watch(named) as views:
            async for view in views:
                if isinstance(view, ApiClientError):
                    return
                for listener in list(self._listeners.get(view.task_id, ())):
                    listener(view)
